"""RoPE parameters of a loaded model, for undoing rotation on stored keys."""

from __future__ import annotations

from cascade_cli.engine import Model
from cascade_cli.recall.keys import Rope

_NEOX = 2  # LLAMA_ROPE_TYPE_NEOX


def rope_of(model: Model) -> Rope:
    arch = model.meta("general.architecture") or ""
    base = float(model.meta(f"{arch}.rope.freq_base") or 10000.0)
    return Rope(
        base=base,
        head_dim=model.head_dim_k,
        n_head_kv=model.n_head_kv,
        neox=model.rope_type == _NEOX,
    )
