"""Tiny random-weight recurrent (Mamba) and hybrid (Jamba: attention + Mamba) GGUFs, written
with the `gguf` package and the default model's tokenizer — no hub. They generate noise, but
their state layouts are the real ones llama.cpp keeps for such models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD = 64
D_STATE, D_CONV, DT_RANK = 16, 4, 4
N_HEAD, HEAD = 4, 16


def _copy_tokenizer(w: GGUFWriter, r: GGUFReader) -> int:
    """The reader's tokenizer.* keys into the writer; returns the vocabulary size."""
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = f.types[0]
        if kind == GGUFValueType.ARRAY:
            sub = f.types[1]
            vals: Any = (
                [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
                if sub == GGUFValueType.STRING
                else [f.parts[i][0].item() for i in f.data]
            )
            w.add_key_value(name, vals, kind, sub_type=sub)
        elif kind == GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]).decode(), kind)
        else:
            w.add_key_value(name, f.parts[f.data[0]][0].item(), kind)
    return len(r.fields["tokenizer.ggml.tokens"].data)


def write(path: Path, tokenizer_from: Path, arch: str = "mamba", n_layer: int = 2) -> Path:
    """`arch` 'mamba' (every layer recurrent) or 'jamba' (layer 0 attention, the rest Mamba)."""
    attn = {0} if arch == "jamba" else set()
    w = GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    n_vocab = _copy_tokenizer(w, GGUFReader(str(tokenizer_from)))
    d_inner = 2 * N_EMBD
    w.add_context_length(8192)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(n_layer)
    w.add_ssm_conv_kernel(D_CONV)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(D_STATE)
    w.add_ssm_time_step_rank(DT_RANK)
    w.add_layer_norm_rms_eps(1e-5)
    if arch == "jamba":
        heads = [N_HEAD if i in attn else 0 for i in range(n_layer)]
        w.add_head_count(heads)
        w.add_head_count_kv(heads)
        w.add_feed_forward_length([4 * N_EMBD] * n_layer)
        w.add_key_length(HEAD)
        w.add_value_length(HEAD)
    else:
        w.add_head_count(0)
        w.add_head_count_kv(0)
        w.add_feed_forward_length(0)
    w.add_file_type(0)
    rng = np.random.default_rng(0)

    def rand(name: str, *ne: int) -> None:  # ggml's ne order (innermost first)
        w.add_tensor(name, (rng.standard_normal(tuple(reversed(ne))) * 0.02).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, np.float32))

    rand("token_embd.weight", N_EMBD, n_vocab)
    ones("output_norm.weight", N_EMBD)
    for i in range(n_layer):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", N_EMBD)
        if i in attn:
            for t in ("attn_q", "attn_k", "attn_v"):
                rand(p + t + ".weight", N_EMBD, N_HEAD * HEAD)
            rand(p + "attn_output.weight", N_HEAD * HEAD, N_EMBD)
        else:
            rand(p + "ssm_in.weight", N_EMBD, 2 * d_inner)
            rand(p + "ssm_conv1d.weight", D_CONV, d_inner)
            rand(p + "ssm_conv1d.bias", d_inner)
            rand(p + "ssm_x.weight", d_inner, DT_RANK + 2 * D_STATE)
            rand(p + "ssm_dt.weight", DT_RANK, d_inner)
            rand(p + "ssm_dt.bias", d_inner)
            a = -np.tile(np.arange(1, D_STATE + 1, dtype=np.float32), (d_inner, 1))
            w.add_tensor(p + "ssm_a", a)
            ones(p + "ssm_d", d_inner)
            rand(p + "ssm_out.weight", d_inner, N_EMBD)
            if arch == "jamba":
                ones(p + "ssm_dt_norm.weight", DT_RANK)
                ones(p + "ssm_b_norm.weight", D_STATE)
                ones(p + "ssm_c_norm.weight", D_STATE)
        if arch == "jamba":
            ones(p + "ffn_norm.weight", N_EMBD)
            rand(p + "ffn_gate.weight", N_EMBD, 4 * N_EMBD)
            rand(p + "ffn_up.weight", N_EMBD, 4 * N_EMBD)
            rand(p + "ffn_down.weight", 4 * N_EMBD, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
