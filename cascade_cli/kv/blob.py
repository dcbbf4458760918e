"""Parse and rebuild llama.cpp per-sequence state blobs (llama_state_seq_get_data).

Layout (llama-cpp-python 0.3.36, little-endian)::

    u32 magic 0xaf143cd8, i32 seq_id, u32 n_stream (must be 1)
    u32 cell_count
    per cell: i32 pos, u32 n_seq_id, i32 seq_id * n_seq_id
    (if cell_count > 0:)
    u32 v_trans, u32 n_layer
    per layer K: i32 type, u64 row_size, cell_count * row_size bytes
    per layer V, v_trans == 0: i32 type, u64 row_size, cell_count * row_size bytes
    per layer V, v_trans == 1: i32 type, u32 el_size, u32 n_embd_v, n_embd_v * cell_count elems

Only f16 K/V are supported; anything else raises CodecError. K/V arrays are zero-copy views.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cascade_cli.errors import CodecError

MAGIC = 0xAF143CD8
GGML_TYPE_F16 = 1
F16_SIZE = 2
_EMPTY_TAIL = 16  # magic, seq_id, n_stream, cell_count

BlobLike = bytes | bytearray | memoryview | npt.NDArray[np.uint8]
U8 = npt.NDArray[np.uint8]
F16 = npt.NDArray[np.float16]


def as_u8(data: BlobLike) -> U8:
    """A flat uint8 view of bytes-like data (no copy)."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise CodecError("a KV blob must be a flat uint8 array")
        return data
    return np.frombuffer(data, dtype=np.uint8)


@dataclass(frozen=True)
class BlobHeader:
    """The non-KV part of a blob: cell metadata plus the KV dimensions."""

    seq_id: int
    positions: npt.NDArray[np.int32]
    cell_seqs: tuple[tuple[int, ...], ...]
    meta: bytes  # every byte before the first layer's K section, verbatim
    v_trans: bool
    n_layer: int
    n_embd_k: int
    n_embd_v: int

    @property
    def n_cells(self) -> int:
        return int(self.positions.shape[0])


@dataclass(frozen=True)
class KVBlob:
    """A parsed blob: header plus per-layer K (n_cells, n_embd_k) and V views (f16).

    v[i] is V as stored: (n_cells, n_embd_v) when not v_trans, else V^T (n_embd_v, n_cells).
    """

    header: BlobHeader
    k: tuple[F16, ...]
    v: tuple[F16, ...]

    def v_rows(self, layer: int) -> F16:
        """Layer V as (n_cells, n_embd_v), a (possibly strided) view."""
        return self.v[layer].T if self.header.v_trans else self.v[layer]


class Reader:
    def __init__(self, buf: U8) -> None:
        self.buf = buf
        self.off = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self.off + size > self.buf.nbytes:
            raise CodecError(f"KV blob truncated at byte {self.off} of {self.buf.nbytes}")
        vals = struct.unpack_from(fmt, self.buf.data, self.off)
        self.off += size
        return vals

    def array(self, nbytes: int) -> U8:
        if self.off + nbytes > self.buf.nbytes:
            raise CodecError(f"KV blob truncated at byte {self.off} of {self.buf.nbytes}")
        out = self.buf[self.off : self.off + nbytes]
        self.off += nbytes
        return out


def read_meta(r: Reader) -> tuple[int, npt.NDArray[np.int32], tuple[tuple[int, ...], ...]]:
    magic, seq_id, n_stream = r.take("<IiI")
    if magic != MAGIC:
        raise CodecError(f"not a llama.cpp sequence state (magic {magic:#x})")
    if n_stream != 1:
        raise CodecError(f"KV blobs with {n_stream} streams are not supported (need 1)")
    (n_cells,) = r.take("<I")
    positions = np.empty(n_cells, dtype=np.int32)
    seqs: list[tuple[int, ...]] = []
    simple = r.buf.nbytes - r.off >= 12 * n_cells
    if simple and n_cells:
        # Fast path: every cell holds exactly one sequence id (the common case).
        cells = r.buf[r.off : r.off + 12 * n_cells].view("<i4").reshape(n_cells, 3)
        if bool(np.all(cells[:, 1] == 1)):
            positions[:] = cells[:, 0]
            seqs = [(int(s),) for s in cells[:, 2]]
            r.off += 12 * n_cells
            return seq_id, positions, tuple(seqs)
    for i in range(n_cells):
        pos, n_seq = r.take("<iI")
        positions[i] = pos
        seqs.append(r.take(f"<{n_seq}i") if n_seq else ())
    return seq_id, positions, tuple(seqs)


def add_positions(blob: U8, delta: int) -> None:
    """Add `delta` to every cell position of a blob, in place."""
    r = Reader(blob)
    r.take("<IiI")
    (n_cells,) = r.take("<I")
    cells = blob[r.off : r.off + 12 * n_cells]
    if cells.nbytes == 12 * n_cells and n_cells:
        view = cells.view("<i4").reshape(n_cells, 3)
        if bool(np.all(view[:, 1] == 1)):
            view[:, 0] += delta
            return
    for _ in range(n_cells):
        pos, n_seq = struct.unpack_from("<iI", blob.data, r.off)
        struct.pack_into("<i", blob.data, r.off, pos + delta)
        r.off += 8 + 4 * n_seq


def _read_dims(r: Reader, n_cells: int) -> tuple[bool, int]:
    if n_cells == 0:
        return False, 0
    v_trans, n_layer = r.take("<II")
    if v_trans not in (0, 1):
        raise CodecError(f"KV blob has an unknown v_trans flag {v_trans}")
    return bool(v_trans), n_layer


def header(blob: BlobLike) -> BlobHeader:
    """Parse only the metadata (positions, sequences, dimensions); K/V bytes are not read."""
    return _parse(as_u8(blob), with_kv=False)[0]


def parse(blob: BlobLike) -> KVBlob:
    """Parse a whole blob into zero-copy f16 views; raises CodecError on unsupported layouts."""
    hdr, k, v = _parse(as_u8(blob), with_kv=True)
    return KVBlob(hdr, tuple(k), tuple(v))


def _layer_k(r: Reader, n_cells: int) -> tuple[int, U8]:
    ktype, row_size = r.take("<iQ")
    if ktype != GGML_TYPE_F16:
        raise CodecError(f"KV blobs with K type {ktype} are not supported (need f16)")
    if row_size % F16_SIZE or row_size == 0:
        raise CodecError(f"odd K row size {row_size}")
    return row_size // F16_SIZE, r.array(row_size * n_cells)


def _layer_v(r: Reader, n_cells: int, v_trans: bool) -> tuple[int, U8]:
    if v_trans:
        vtype, el_size, n_embd = r.take("<iII")
        if vtype != GGML_TYPE_F16 or el_size != F16_SIZE:
            raise CodecError(f"KV blobs with V type {vtype} are not supported (need f16)")
        return n_embd, r.array(n_embd * n_cells * F16_SIZE)
    vtype, row_size = r.take("<iQ")
    if vtype != GGML_TYPE_F16:
        raise CodecError(f"KV blobs with V type {vtype} are not supported (need f16)")
    if row_size % F16_SIZE or row_size == 0:
        raise CodecError(f"odd V row size {row_size}")
    return row_size // F16_SIZE, r.array(row_size * n_cells)


def _parse(buf: U8, with_kv: bool) -> tuple[BlobHeader, list[F16], list[F16]]:
    r = Reader(buf)
    seq_id, positions, seqs = read_meta(r)
    n_cells = positions.shape[0]
    v_trans, n_layer = _read_dims(r, n_cells)
    meta = bytes(buf[: r.off])
    ks: list[F16] = []
    vs: list[F16] = []
    n_embd_k = n_embd_v = 0
    if n_layer and not with_kv:
        # Cheap path: read the first K and first V section headers only.
        n_embd_k, _ = _layer_k(Reader(buf[r.off : r.off + 12]), 0)
        v_off = r.off + n_layer * (12 + n_cells * n_embd_k * F16_SIZE)
        n_embd_v, _ = _layer_v(Reader(buf[v_off : v_off + 12]), 0, v_trans)
    for i in range(n_layer if with_kv else 0):
        width, raw = _layer_k(r, n_cells)
        n_embd_k = width if i == 0 else n_embd_k
        if width != n_embd_k:
            raise CodecError("KV blobs with per-layer K widths are not supported")
        ks.append(raw.view(np.float16).reshape(n_cells, width))
    for i in range(n_layer if with_kv else 0):
        width, raw = _layer_v(r, n_cells, v_trans)
        n_embd_v = width if i == 0 else n_embd_v
        if width != n_embd_v:
            raise CodecError("KV blobs with per-layer V widths are not supported")
        shape = (width, n_cells) if v_trans else (n_cells, width)
        vs.append(raw.view(np.float16).reshape(shape))
    if with_kv and r.off != buf.nbytes:
        raise CodecError(f"KV blob has {buf.nbytes - r.off} trailing bytes")
    hdr = BlobHeader(seq_id, positions, seqs, meta, v_trans, n_layer, n_embd_k, n_embd_v)
    return hdr, ks, vs


def section_size(buf: U8, off: int) -> int:
    """Bytes of the attention section that starts at `off` of a several-section blob (after
    its u32 magic and i32 seq_id), read from its headers alone."""
    r = Reader(buf)
    r.off = off
    (n_stream,) = r.take("<I")
    if n_stream != 1:
        raise CodecError(f"KV blobs with {n_stream} streams are not supported (need 1)")
    (n_cells,) = r.take("<I")
    cells = buf[r.off : r.off + 12 * n_cells]
    if n_cells and cells.nbytes == 12 * n_cells and np.all(cells.view("<i4")[1::3] == 1):
        r.off += 12 * n_cells  # one sequence id a cell: the common case
    else:
        for _ in range(n_cells):
            _, n_seq = r.take("<iI")
            r.off += 4 * n_seq
    v_trans, n_layer = _read_dims(r, n_cells)
    if n_layer == 0:
        return r.off - off
    n_embd_k, _ = _layer_k(Reader(buf[r.off : r.off + 12]), 0)
    r.off += n_layer * (12 + n_cells * n_embd_k * F16_SIZE)
    n_embd_v, _ = _layer_v(Reader(buf[r.off : r.off + 12]), 0, v_trans)
    return r.off + n_layer * (12 + n_cells * n_embd_v * F16_SIZE) - off


def blob_size(hdr: BlobHeader) -> int:
    """Exact serialized size of a blob with this header."""
    if hdr.n_layer == 0:
        return len(hdr.meta)
    n = hdr.n_cells
    k_bytes = hdr.n_layer * (12 + n * hdr.n_embd_k * F16_SIZE)
    v_bytes = hdr.n_layer * (12 + n * hdr.n_embd_v * F16_SIZE)
    return len(hdr.meta) + k_bytes + v_bytes


def layout(hdr: BlobHeader, out: U8) -> tuple[list[F16], list[F16]]:
    """Write the header and per-layer section headers into `out`; return writable K/V views.

    V views are in stored orientation (V^T when v_trans).
    """
    size = blob_size(hdr)
    if out.nbytes < size:
        raise CodecError(f"output buffer too small: {out.nbytes} < {size}")
    m = len(hdr.meta)
    out[:m] = np.frombuffer(hdr.meta, dtype=np.uint8)
    off = m
    n = hdr.n_cells
    ks: list[F16] = []
    vs: list[F16] = []
    mv = out.data
    for _ in range(hdr.n_layer):
        struct.pack_into("<iQ", mv, off, GGML_TYPE_F16, hdr.n_embd_k * F16_SIZE)
        off += 12
        nb = n * hdr.n_embd_k * F16_SIZE
        ks.append(out[off : off + nb].view(np.float16).reshape(n, hdr.n_embd_k))
        off += nb
    for _ in range(hdr.n_layer):
        if hdr.v_trans:
            struct.pack_into("<iII", mv, off, GGML_TYPE_F16, F16_SIZE, hdr.n_embd_v)
            shape = (hdr.n_embd_v, n)
        else:
            struct.pack_into("<iQ", mv, off, GGML_TYPE_F16, hdr.n_embd_v * F16_SIZE)
            shape = (n, hdr.n_embd_v)
        off += 12
        nb = n * hdr.n_embd_v * F16_SIZE
        vs.append(out[off : off + nb].view(np.float16).reshape(shape))
        off += nb
    return ks, vs


def serialize(blob: KVBlob, out: U8 | None = None) -> U8:
    """Rebuild the exact blob bytes (into `out` if given); returns the filled view."""
    size = blob_size(blob.header)
    if out is None:
        out = np.empty(size, dtype=np.uint8)
    ks, vs = layout(blob.header, out)
    for dst, src in zip(ks, blob.k, strict=True):
        dst[...] = src
    for dst, src in zip(vs, blob.v, strict=True):
        dst[...] = src
    return out[:size]
