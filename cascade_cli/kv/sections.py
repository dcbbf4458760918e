"""State blobs of models whose memory has several parts, and their payloads.

llama.cpp (0.3.36) writes a sequence's state as ``u32 magic, i32 seq_id`` followed by one section
per memory the model keeps, in this order:

- ``kv``: one attention cache (llama_kv_cache): ``u32 n_stream``, ``u32 cell_count``, cells, K/V
  per layer — the whole of a plain model's blob (see kv.blob);
- ``iswa``: two attention sections, the full-attention layers' cache, then the sliding-window
  layers' cache (Gemma 2/3, gpt-oss, …). The SWA section holds only the cells within n_swa of
  the sequence's last position, so a chunk of at most n_swa tokens carries all of its cells;
- ``hybrid``: an attention section, then a recurrent one (Granite 4, LFM2, Falcon-H1, …);
- ``recurrent``: one recurrent section (Mamba, RWKV): ``u32 cell_count``, cells, R and S state
  rows per recurrent layer — a summary of everything decoded so far, with no positions to move.

Each attention section is handled as a stand-alone unified blob (the 8-byte prefix put in front
of it), so the one-cache codec quantizes it unchanged (per section, V layout as today). A
recurrent section is kept verbatim: it is small and fixed-size, and quantizing a running state
would compound its error at every later token.

Payload of a several-section blob (little-endian)::

    4s magic b"CKVS", u8 version 1, u8 layout id (see LAYOUT_IDS), u8 n_sections, u8 padding,
    u64 length per section, then each section's payload: a CKVP payload (kv.codec) for an
    attention section, the raw bytes for a recurrent one.

A plain model's payload stays a bare CKVP payload, so stores written before this format read on.
"""

from __future__ import annotations

import struct

import numpy as np

from cascade_cli.errors import CodecError
from cascade_cli.kv import blob as kvblob

MAGIC = b"CKVS"
VERSION = 1
#: the section kinds of each layout, in blob order
LAYOUTS: dict[str, tuple[str, ...]] = {
    "kv": ("kv",),
    "iswa": ("kv", "kv"),
    "hybrid": ("kv", "rs"),
    "recurrent": ("rs",),
}
LAYOUT_IDS = {"kv": 0, "iswa": 1, "hybrid": 2, "recurrent": 3}
_LAYOUT_NAMES = {v: k for k, v in LAYOUT_IDS.items()}
_HEAD = struct.Struct("<4sBBBx")
_PREFIX = 8  # u32 magic, i32 seq_id


def check_layout(layout: str) -> tuple[str, ...]:
    """The section kinds of a layout name; CodecError for an unknown one."""
    kinds = LAYOUTS.get(layout)
    if kinds is None:
        raise CodecError(f"unknown KV layout {layout!r}; cascade knows {', '.join(LAYOUTS)}")
    return kinds


def split(blob: kvblob.BlobLike, layout: str) -> list[kvblob.U8]:
    """A state blob → its sections, each as a stand-alone blob (the 8-byte prefix in front);
    a recurrent section is always the last one and runs to the end."""
    kinds = check_layout(layout)
    buf = kvblob.as_u8(blob)
    if buf.nbytes < _PREFIX:
        raise CodecError("KV blob truncated")
    parts: list[kvblob.U8] = []
    off = _PREFIX
    for i, kind in enumerate(kinds):
        if kind == "rs":
            if i != len(kinds) - 1:
                raise CodecError("a recurrent section must be the last one")
            parts.append(buf if i == 0 else np.concatenate([buf[:_PREFIX], buf[off:]]))
            off = buf.nbytes
            break
        size = kvblob.section_size(buf, off)
        if off + size > buf.nbytes:
            raise CodecError(f"KV blob truncated in section {i + 1} of {len(kinds)}")
        if i == 0:
            parts.append(buf[: off + size])
        else:
            parts.append(np.concatenate([buf[:_PREFIX], buf[off : off + size]]))
        off += size
    if off != buf.nbytes:
        raise CodecError(
            f"KV blob has {buf.nbytes - off} bytes after its {len(kinds)} {layout} section(s)",
            "The model's cache layout is not the one the store was made with.",
        )
    return parts


def join(parts: list[kvblob.U8], out: kvblob.U8 | None = None) -> kvblob.U8:
    """Inverse of `split`: the first part whole, the others without their prefix."""
    if not parts:
        raise CodecError("no sections to join")
    size = parts[0].nbytes + sum(p.nbytes - _PREFIX for p in parts[1:])
    if out is None:
        out = np.empty(size, dtype=np.uint8)
    if out.nbytes < size:
        raise CodecError(f"output buffer too small: {out.nbytes} < {size}")
    off = parts[0].nbytes
    out[:off] = parts[0]
    for p in parts[1:]:
        n = p.nbytes - _PREFIX
        out[off : off + n] = p[_PREFIX:]
        off += n
    return out[:size]


def empty_like(part: kvblob.U8) -> kvblob.U8:
    """A stand-alone attention section holding no cells (n_stream 1, cell_count 0), with the
    prefix of `part`: restoring it leaves that cache as it is."""
    return np.concatenate([part[:_PREFIX], np.frombuffer(struct.pack("<II", 1, 0), np.uint8)])


def is_sectioned(payload: kvblob.BlobLike) -> bool:
    """Whether a payload is a several-section container (not a bare CKVP payload)."""
    buf = kvblob.as_u8(payload)
    return buf.nbytes >= 4 and bytes(buf[:4]) == MAGIC


def pack(layout: str, payloads: list[bytes]) -> bytes:
    """The container for one payload per section."""
    head = _HEAD.pack(MAGIC, VERSION, LAYOUT_IDS[layout], len(payloads))
    lengths = struct.pack(f"<{len(payloads)}Q", *(len(p) for p in payloads))
    return b"".join([head, lengths, *payloads])


def unpack(payload: kvblob.BlobLike) -> tuple[str, list[kvblob.U8]]:
    """A container → (layout, the sections' payloads as views)."""
    buf = kvblob.as_u8(payload)
    if buf.nbytes < _HEAD.size:
        raise CodecError("KV payload truncated")
    magic, ver, lid, n = _HEAD.unpack_from(buf.data)
    if magic != MAGIC:
        raise CodecError("not a sectioned cascade KV payload")
    if ver != VERSION:
        raise CodecError(f"sectioned KV payload version {ver} is not supported (this reads 1)")
    layout = _LAYOUT_NAMES.get(lid)
    if layout is None or len(LAYOUTS[layout]) != n:
        raise CodecError(f"KV payload has an unknown layout {lid} with {n} sections")
    off = _HEAD.size + 8 * n
    if buf.nbytes < off:
        raise CodecError("KV payload truncated")
    lengths = struct.unpack_from(f"<{n}Q", buf.data, _HEAD.size)
    parts = []
    for length in lengths:
        if off + length > buf.nbytes:
            raise CodecError("KV payload truncated")
        parts.append(buf[off : off + length])
        off += length
    if off != buf.nbytes:
        raise CodecError("KV payload size does not match its header")
    return layout, parts
