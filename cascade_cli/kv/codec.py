"""Encode a KV blob into a compact payload and decode it straight back into a blob buffer.

Recipe (KIVI): keys are quantized per channel (groups run along the token axis, i.e. rows of
K^T), values per token (groups run along channels). Optional extras per scheme: a 64-point
Hadamard rotation of channels before quantizing (spreads outlier channels), and per-channel key
centering (the f16 mean over the chunk's tokens is stored and subtracted).

Payload format (little-endian), version 2 (version 1: the same without flag 8)::

    offset 0  4s   magic b"CKVP"
              u8   version (2 when flag 8 is set, else 1)
              u8   scheme id (0 none, 1 q8, 2 q4, 3 q2)
              u8   K format id, u8 V format id  (see FORMAT_IDS; 0 = raw f16)
              u8   flags: 1 = Hadamard-rotated K, 2 = Hadamard-rotated V, 4 = centered K,
                   8 = tiled K (see below)
              3x   padding
              u32  meta_len, u32 n_cells, u32 n_layer, u32 n_embd_k, u32 n_embd_v, u32 v_trans
    40        meta_len bytes: the blob's bytes before the first K section, verbatim
              (magic, seq id, stream count, per-cell positions and sequence ids, v_trans, n_layer)
    scheme none: the rest of the blob verbatim (so decode is byte-identical)
    otherwise, per layer: [n_embd_k f16 channel means if flag 4] K blocks, then per layer V blocks.
      K blocks: K^T (n_embd_k, n_cells) edge-padded along tokens to a multiple of the format's
      group, flattened, zero-padded to a whole number of blocks; with flag 8 (formats whose
      block is one group: q8_0, q5_0, q4_0) K is edge-padded along tokens to whole blocks and
      cut into tiles of one block of tokens, stored (tile, channel, token): the same groups,
      ordered so that decoding transposes cache-sized tiles (measured 0.4 ms instead of 3.4 ms
      for one layer of 4,096 tokens). V blocks: V (n_cells, n_embd_v) edge-padded along channels
      likewise. Block layouts are ggml's (kv.quant).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from cascade_cli.errors import CodecError
from cascade_cli.kv import blob as kvblob
from cascade_cli.kv import native
from cascade_cli.kv.pool import pmap
from cascade_cli.kv.quant import FORMATS, Format
from cascade_cli.kv.rope import Move, Rope

PAYLOAD_MAGIC = b"CKVP"
VERSION = 2  # written when K is tiled (flag 8); version-1 payloads (no tiles) still decode
VERSIONS = (1, 2)
_HEAD = struct.Struct("<4sBBBBB3xIIIIII")
FORMAT_IDS = {"f16": 0, "q8_0": 1, "q4_0": 2, "q4_1": 3, "q2_K": 4, "q3_K": 5, "q5_0": 6}
_FORMAT_NAMES = {v: k for k, v in FORMAT_IDS.items()}
ROT_K, ROT_V, CENTER_K, TILED_K = 1, 2, 4, 8
FLAGS = ROT_K | ROT_V | CENTER_K | TILED_K
HADAMARD = 64

F32 = npt.NDArray[np.float32]
F16 = npt.NDArray[np.float16]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Spec:
    """How one scheme quantizes: block formats for K and V plus preconditioning flags."""

    k_fmt: str
    v_fmt: str
    flags: int = 0


SCHEMES: dict[str, tuple[int, Spec | None]] = {
    "none": (0, None),
    "q8": (1, Spec("q8_0", "q8_0", CENTER_K | TILED_K)),
    "q4": (2, Spec("q5_0", "q4_0", ROT_V | CENTER_K | TILED_K)),
    "q2": (3, Spec("q3_K", "q2_K", ROT_K | ROT_V | CENTER_K)),
}


def _hadamard(n: int) -> F32:
    h = np.ones((1, 1), dtype=np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(np.float32(n))).astype(np.float32)


_H = _hadamard(HADAMARD)


def _rotate(x: F32) -> F32:
    """Apply the (self-inverse) block Hadamard to the last axis of a (rows, width) array."""
    rows, width = x.shape
    return (x.reshape(rows, width // HADAMARD, HADAMARD) @ _H).reshape(rows, width)


def _padded(length: int, fmt: Format) -> int:
    return -(-length // fmt.group) * fmt.group


def _section_values(rows: int, length: int, fmt: Format) -> int:
    total = rows * _padded(length, fmt)
    return -(-total // fmt.block) * fmt.block


def _flatten(x: F32, fmt: Format) -> F32:
    """Edge-pad the last axis to a group multiple, flatten, zero-pad to whole blocks."""
    rows, length = x.shape
    pad = _padded(length, fmt) - length
    if pad:
        x = np.pad(x, ((0, 0), (0, pad)), mode="edge")
    flat = x.reshape(-1)
    extra = _section_values(rows, length, fmt) - flat.size
    return np.concatenate([flat, np.zeros(extra, dtype=np.float32)]) if extra else flat


def _tiles(k: F32, t: int) -> F32:
    """(n, width) → (tiles, width, t): tokens edge-padded to whole tiles, each tile transposed."""
    n, width = k.shape
    pad = -n % t
    if pad:
        k = np.pad(k, ((0, pad), (0, 0)), mode="edge")
    return np.ascontiguousarray(k.reshape(-1, t, width).transpose(0, 2, 1))


def _untile(tiles: npt.NDArray[np.floating], out: npt.NDArray[np.floating]) -> None:
    """Inverse of _tiles into `out` (n, width), dropping the padding."""
    _, width, t = tiles.shape
    full = out.shape[0] // t
    out[: full * t].reshape(full, t, width)[...] = tiles[:full].transpose(0, 2, 1)
    rest = out.shape[0] - full * t
    if rest:
        out[full * t :] = tiles[full, :, :rest].T


def _unflatten(flat: F32, rows: int, length: int, fmt: Format) -> F32:
    return flat[: rows * _padded(length, fmt)].reshape(rows, -1)[:, :length]


def _spec_flags(spec: Spec, hdr: kvblob.BlobHeader) -> int:
    flags = spec.flags
    kf = FORMATS[spec.k_fmt]
    if kf.block != kf.group:
        flags &= ~TILED_K
    if hdr.n_embd_k % HADAMARD:
        flags &= ~ROT_K
    if hdr.n_embd_v % HADAMARD:
        flags &= ~ROT_V
    return flags


def encode(blob: kvblob.BlobLike, scheme: str = "q8", native_kernels: bool = True) -> bytes:
    """Compress a state blob with a named scheme ('none', 'q8', 'q4', 'q2')."""
    if scheme not in SCHEMES:
        raise CodecError(f"unknown KV scheme {scheme!r}; pick one of {', '.join(SCHEMES)}")
    sid, spec = SCHEMES[scheme]
    return encode_spec(blob, spec, sid, native_kernels)


def encode_spec(
    blob: kvblob.BlobLike, spec: Spec | None, scheme_id: int = 255, native_kernels: bool = True
) -> bytes:
    """Compress with an explicit Spec (None = verbatim f16)."""
    buf = kvblob.as_u8(blob)
    kv = kvblob.parse(buf)
    hdr = kv.header
    if spec is None or hdr.n_layer == 0:
        head = _pack_head(0 if spec is None else scheme_id, "f16", "f16", 0, hdr)
        return head + bytes(buf[len(hdr.meta) :])
    kf, vf = FORMATS[spec.k_fmt], FORMATS[spec.v_fmt]
    flags = _spec_flags(spec, hdr)
    nat = native_kernels

    def enc_k(layer: int) -> bytes:
        k = native.to_f32(kv.k[layer], nat)
        if flags & ROT_K:
            k = _rotate(k)
        head = b""
        if flags & CENTER_K:
            mean = k.mean(axis=0).astype(np.float16)
            k = k - mean.astype(np.float32)
            head = mean.tobytes()
        if flags & TILED_K:
            flat = _tiles(k, kf.block).reshape(-1)
        else:
            flat = _flatten(np.ascontiguousarray(k.T), kf)
        return head + native.quantize(kf.name, flat, nat).tobytes()

    def enc_v(layer: int) -> bytes:
        v = kv.v[layer]
        v32 = native.to_f32(v, nat)
        if hdr.v_trans:
            v32 = np.ascontiguousarray(v32.T)
        if flags & ROT_V:
            v32 = _rotate(v32)
        return native.quantize(vf.name, _flatten(v32, vf), nat).tobytes()

    parts = pmap(enc_k, hdr.n_layer) + pmap(enc_v, hdr.n_layer)
    head = _pack_head(scheme_id, spec.k_fmt, spec.v_fmt, flags, hdr)
    return b"".join([head, *parts])


def _pack_head(sid: int, kf: str, vf: str, flags: int, hdr: kvblob.BlobHeader) -> bytes:
    fields = (len(hdr.meta), hdr.n_cells, hdr.n_layer, hdr.n_embd_k, hdr.n_embd_v)
    ver = VERSION if flags & TILED_K else 1  # older readers refuse tiles instead of misreading
    head = _HEAD.pack(
        PAYLOAD_MAGIC, ver, sid, FORMAT_IDS[kf], FORMAT_IDS[vf], flags, *fields, hdr.v_trans
    )
    return head + hdr.meta


@dataclass(frozen=True)
class PayloadInfo:
    """A parsed payload header."""

    scheme_id: int
    k_fmt: str
    v_fmt: str
    flags: int
    header: kvblob.BlobHeader
    body: int  # offset of the first byte after the metadata


def info(payload: kvblob.BlobLike) -> PayloadInfo:
    """Parse a payload's header (cheap)."""
    buf = kvblob.as_u8(payload)
    if buf.nbytes < _HEAD.size:
        raise CodecError("KV payload truncated")
    magic, ver, sid, kid, vid, flags, meta_len, _, n_layer, ek, ev, vt = _HEAD.unpack_from(buf.data)
    if magic != PAYLOAD_MAGIC:
        raise CodecError("not a cascade KV payload")
    if ver not in VERSIONS:
        raise CodecError(f"KV payload version {ver} is not supported (this cascade reads 1–2)")
    if kid not in _FORMAT_NAMES or vid not in _FORMAT_NAMES:
        raise CodecError(f"KV payload uses unknown formats {kid}/{vid}")
    kf = FORMATS.get(_FORMAT_NAMES[kid])
    tiles_ok = ver >= 2 and kf is not None and kf.block == kf.group
    if flags & ~FLAGS or (flags & TILED_K and not tiles_ok):
        raise CodecError(f"KV payload has flags {flags:#x} this cascade does not understand")
    body = _HEAD.size + meta_len
    if buf.nbytes < body:
        raise CodecError("KV payload truncated")
    meta = buf[_HEAD.size : body]
    seq_id, positions, seqs = kvblob.read_meta(kvblob.Reader(meta))
    hdr = kvblob.BlobHeader(seq_id, positions, seqs, bytes(meta), bool(vt), n_layer, ek, ev)
    return PayloadInfo(sid, _FORMAT_NAMES[kid], _FORMAT_NAMES[vid], flags, hdr, body)


def decoded_size(payload: kvblob.BlobLike) -> int:
    """Bytes of the blob `decode` will produce."""
    return kvblob.blob_size(info(payload).header)


def with_v_trans(hdr: kvblob.BlobHeader, v_trans: bool) -> kvblob.BlobHeader:
    """The header of the same chunk with V stored transposed (flash attention off) or not."""
    if hdr.n_cells == 0 or hdr.v_trans == v_trans:
        return hdr
    meta = hdr.meta[:-8] + struct.pack("<II", int(v_trans), hdr.n_layer)
    return replace(hdr, meta=meta, v_trans=v_trans)


def _convert_v(src: U8, hdr: kvblob.BlobHeader, out: U8) -> None:
    """Rewrite the blob `src` into `out` with `hdr`'s V layout (a transpose per layer)."""
    blob = kvblob.parse(src)
    vs = [blob.v_rows(i).T if hdr.v_trans else blob.v_rows(i) for i in range(hdr.n_layer)]
    kvblob.serialize(kvblob.KVBlob(hdr, blob.k, tuple(vs)), out)


def decode(
    payload: kvblob.BlobLike,
    out: U8 | None = None,
    native_kernels: bool = True,
    at: int | None = None,
    rope: Rope | None = None,
    v_trans: bool | None = None,
) -> U8:
    """Rebuild a ready-to-restore blob into `out` (or a new array); returns the filled view.

    With `at`, the chunk is rebuilt already moved so that its lowest position becomes `at`
    (keys re-roped with `rope` while they are still f32 — cheaper than shifting afterwards).
    With `v_trans`, V comes out in that layout whatever layout it was saved from (llama.cpp
    stores V transposed unless flash attention is on): quantized payloads hold V by token rows
    either way, so only verbatim (`none`) payloads pay for a transpose.
    """
    buf = kvblob.as_u8(payload)
    pi = info(buf)
    saved = pi.header
    if v_trans is not None:
        pi = replace(pi, header=with_v_trans(saved, v_trans))
    hdr = pi.header
    size = kvblob.blob_size(hdr)
    if out is None:
        out = np.empty(size, dtype=np.uint8)
    if out.nbytes < size:
        raise CodecError(f"output buffer too small: {out.nbytes} < {size}")
    delta = 0 if at is None or hdr.n_cells == 0 else at - int(hdr.positions.min())
    move: Move | None = None
    if delta:
        if rope is None or hdr.n_embd_k % rope.head_dim:
            raise CodecError("moving a chunk while decoding needs the model's RoPE parameters")
        move = Move.of(rope, delta)
    if pi.k_fmt == "f16":
        rest = buf[pi.body :]
        if len(hdr.meta) + rest.nbytes != size:
            raise CodecError("KV payload truncated")
        if hdr is saved:
            out[: len(hdr.meta)] = np.frombuffer(hdr.meta, dtype=np.uint8)
            out[len(hdr.meta) : size] = rest
        else:
            src = np.empty(size, dtype=np.uint8)
            src[: len(saved.meta)] = np.frombuffer(saved.meta, dtype=np.uint8)
            src[len(saved.meta) :] = rest
            _convert_v(src, hdr, out)
        if move is not None:
            ks, _ = kvblob.layout(hdr, out)
            pmap(lambda i: move.apply_f16(ks[i], ks[i], native_kernels), hdr.n_layer)
    else:
        _decode_kv(buf, pi, out, native_kernels, move)
    if delta:
        kvblob.add_positions(out[:size], delta)
    return out[:size]


def _decode_kv(buf: U8, pi: PayloadInfo, out: U8, nat: bool, move: Move | None) -> None:
    hdr = pi.header
    n, ek, ev, flags = hdr.n_cells, hdr.n_embd_k, hdr.n_embd_v, pi.flags
    kf, vf = FORMATS[pi.k_fmt], FORMATS[pi.v_fmt]
    mean_bytes = ek * 2 if flags & CENTER_K else 0
    k_bytes = mean_bytes + kf.size(_section_values(ek, n, kf))
    v_bytes = vf.size(_section_values(n, ev, vf))
    if buf.nbytes != pi.body + hdr.n_layer * (k_bytes + v_bytes):
        raise CodecError("KV payload size does not match its header")
    ks, vs = kvblob.layout(hdr, out)
    v0 = pi.body + hdr.n_layer * k_bytes

    def finish_k(k32: F32, layer: int) -> None:
        """(n, ek) f32 keys in token order: undo the Hadamard, move, store as f16."""
        if flags & ROT_K:
            k32 = _rotate(k32)
        if move is not None:
            k32 = move.apply(k32)
        native.to_f16(np.ascontiguousarray(k32), ks[layer], nat)

    def dec_k(layer: int) -> None:
        off = pi.body + layer * k_bytes
        raw = native.dequantize(kf.name, buf[off + mean_bytes : off + k_bytes], None, nat)
        mean = buf[off : off + mean_bytes].view(np.float16).astype(np.float32)
        if flags & TILED_K:
            t = raw.reshape(-1, ek, kf.block)
            if mean_bytes:
                t += mean[None, :, None]
            if flags & ROT_K or move is not None:
                k32 = np.empty((n, ek), dtype=np.float32)
                _untile(t, k32)
                finish_k(k32, layer)
                return
            t16 = np.empty(t.shape, dtype=np.float16)
            native.to_f16(t, t16, nat)
            _untile(t16, ks[layer])
            return
        kt = _unflatten(raw, ek, n, kf)
        if mean_bytes:
            kt = kt + mean[:, None]
        if flags & ROT_K or move is not None:
            finish_k(kt.T, layer)
            return
        # cast while still channel-major, then transpose the half-size f16 copy
        tmp = np.empty(kt.shape, dtype=np.float16)
        native.to_f16(np.ascontiguousarray(kt), tmp, nat)
        ks[layer][...] = tmp.T

    def dec_v(layer: int) -> None:
        off = v0 + layer * v_bytes
        v = _unflatten(native.dequantize(vf.name, buf[off : off + v_bytes], None, nat), n, ev, vf)
        if hdr.v_trans and flags & ROT_V:
            # (X H)^T = H X^T (H symmetric): BLAS writes the transposed layout directly
            vt = np.empty((ev, n), dtype=np.float32)
            for b in range(0, ev, HADAMARD):
                np.matmul(_H, v[:, b : b + HADAMARD].T, out=vt[b : b + HADAMARD])
            native.to_f16(vt, vs[layer], nat)
            return
        if flags & ROT_V:
            v = _rotate(np.ascontiguousarray(v))
        v = np.ascontiguousarray(v.T if hdr.v_trans else v)
        native.to_f16(v, vs[layer], nat)

    n_layer = hdr.n_layer
    pmap(lambda i: dec_k(i) if i < n_layer else dec_v(i - n_layer), 2 * n_layer)
