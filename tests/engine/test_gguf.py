"""engine.gguf: tensor names through ggml's reader, and what decides Model.rope_exact."""

from __future__ import annotations

import struct
from pathlib import Path

from cascade_cli.engine.gguf import tensor_names


def _tiny_gguf(path: Path, names: list[str]) -> Path:
    """A valid GGUF v3 file with no metadata and one 32-float tensor per name."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(names), 0))
    for i, name in enumerate(names):
        raw = name.encode()
        out += struct.pack("<Q", len(raw)) + raw + struct.pack("<IQIQ", 1, 32, 0, i * 128)
    out += b"\0" * (-len(out) % 32)  # default alignment
    out += b"\0" * (128 * len(names))
    path.write_bytes(bytes(out))
    return path


def test_tensor_names_of_a_written_file(tmp_path: Path) -> None:
    path = _tiny_gguf(tmp_path / "t.gguf", ["rope_freqs.weight", "blk.0.attn_k.weight"])
    assert tensor_names(path) == {"rope_freqs.weight", "blk.0.attn_k.weight"}
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\0\0\0garbage")
    assert tensor_names(bad) is None


def test_default_model_rope_is_reproduced(model: object) -> None:
    names = tensor_names(model.path)  # type: ignore[attr-defined]
    assert names is not None and "token_embd.weight" in names
    assert not any(n.startswith("rope_") for n in names)
    assert model.rope_exact  # type: ignore[attr-defined]
    rope = model.rope()  # type: ignore[attr-defined]
    assert (rope.head_dim, rope.n_head_kv, rope.neox, rope.dims) == (64, 3, False, 64)
