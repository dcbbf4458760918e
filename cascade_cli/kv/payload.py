"""Encode and decode a state blob of any layout (kv.sections): one codec call per section."""

from __future__ import annotations

import numpy as np

from cascade_cli.errors import CodecError
from cascade_cli.kv import blob as kvblob
from cascade_cli.kv import codec, sections
from cascade_cli.kv.rope import Rope


def encode(
    blob: kvblob.BlobLike, scheme: str = "q8", native_kernels: bool = True, layout: str = "kv"
) -> bytes:
    """Compress a state blob of `layout`: each attention section with `scheme`, recurrent
    state verbatim. A one-cache ('kv') blob gives a bare codec payload."""
    if layout == "kv":
        return codec.encode(blob, scheme, native_kernels)
    kinds = sections.check_layout(layout)
    parts = sections.split(blob, layout)
    payloads = [
        codec.encode(part, scheme, native_kernels) if kind == "kv" else bytes(part)
        for kind, part in zip(kinds, parts, strict=True)
    ]
    return sections.pack(layout, payloads)


def layout_of(payload: kvblob.BlobLike) -> str:
    """The layout a payload was written for."""
    if sections.is_sectioned(payload):
        return sections.unpack(payload)[0]
    return "kv"


def decode(
    payload: kvblob.BlobLike,
    out: kvblob.U8 | None = None,
    native_kernels: bool = True,
    at: int | None = None,
    rope: Rope | None = None,
    v_trans: bool | None = None,
    swa: bool = True,
) -> kvblob.U8:
    """Rebuild a ready-to-restore blob (see codec.decode; every attention section is moved to
    `at` and given `v_trans` alike; recurrent state comes back as it was saved).

    `swa=False` leaves a sliding-window model's SWA section out (decoded as an empty section,
    without dequantizing it): for a chunk that will sit more than n_swa positions before
    anything decoded after it, in a window that never slides, those cells are never seen."""
    if not sections.is_sectioned(payload):
        return codec.decode(payload, out, native_kernels, at, rope, v_trans)
    layout, payloads = sections.unpack(payload)
    if at is not None and layout in ("hybrid", "recurrent"):
        raise CodecError("recurrent state cannot be moved to another position")
    parts = []
    for i, (kind, p) in enumerate(zip(sections.LAYOUTS[layout], payloads, strict=True)):
        if kind == "rs":
            parts.append(p)
        elif i == 1 and layout == "iswa" and not swa:
            parts.append(sections.empty_like(parts[0]))
        else:
            parts.append(codec.decode(p, None, native_kernels, at, rope, v_trans))
    return sections.join(parts, out)


def info(payload: kvblob.BlobLike) -> codec.PayloadInfo:
    """The header of the payload's first attention section (positions, dimensions)."""
    if not sections.is_sectioned(payload):
        return codec.info(payload)
    layout, payloads = sections.unpack(payload)
    for kind, p in zip(sections.LAYOUTS[layout], payloads, strict=True):
        if kind == "kv":
            return codec.info(p)
    raise CodecError("a recurrent state has no attention cells")


def decoded_size(payload: kvblob.BlobLike) -> int:
    """Bytes of the blob `decode` will produce."""
    if not sections.is_sectioned(payload):
        return codec.decoded_size(payload)
    layout, payloads = sections.unpack(payload)
    sizes = [
        codec.decoded_size(p) if kind == "kv" else int(np.asarray(p).nbytes)
        for kind, p in zip(sections.LAYOUTS[layout], payloads, strict=True)
    ]
    return sizes[0] + sum(s - 8 for s in sizes[1:])
