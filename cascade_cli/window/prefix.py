"""Paging for recurrent and hybrid models: exact prefix snapshots instead of moved chunks.

A recurrent state (Mamba, RWKV; the recurrent layers of Jamba, Granite 4, LFM2, Falcon-H1) sums
up everything decoded so far: a chunk's state cannot be cut out, moved to other positions or put
after other text. What can be reused exactly is the whole state after a *prefix* — the same
pages, with the same tokens, in the same order. A window of such a model is laid out so:

- the pages the window holds stay, from the first, while they match the new layout — when the
  window's end, or a snapshot it keeps in memory (Window.marks), sits right after them;
- else the longest prefix of the new layout with a stored snapshot is restored (the RAM tier,
  then the disk; its key digests the model fingerprint and the prefix's token ids, so a
  snapshot only ever serves exactly the tokens it was made from);
- everything after it is decoded: recalled chunks, quotes and turns come in by prefill (the
  `prefill` tier in `--json` and `stats`).

Snapshots are saved after each finished turn or API block (Pages.append) and after a layout
whose snapshot is not stored yet, write-back like chunks, under the owner ``snap:<owner>`` so that removing the
owner removes them; only the newest KEEP of an owner stay on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cascade_cli.documents.library import Library
from cascade_cli.engine.context import Buffer
from cascade_cli.engine.live import Window
from cascade_cli.errors import Cancelled, NotFoundError, StoreError
from cascade_cli.store import SNAP, ChunkMeta
from cascade_cli.store.address import address

#: Snapshots kept on disk per owner (a session resumes from its newest).
KEEP = 4


class Piece(Protocol):
    """What the window is laid out from (window.page.Page)."""

    key: str
    tokens: list[int]
    meta: ChunkMeta | None
    transient: bool
    whole: str | None


@dataclass
class Prefilled:
    """What one layout did: pages kept in the window, restored from a snapshot, decoded."""

    kept: int = 0
    restored: int = 0
    tier: str = ""  # where the snapshot came from: ram / disk
    prefilled: int = 0  # pages decoded (transient ones included)
    decoded: int = 0  # tokens decoded


def chain(fingerprint: str, pages: Sequence[Piece]) -> list[str]:
    """The snapshot key after each prefix of `pages`: a digest of the model fingerprint, the
    prefix's token ids — all a recurrent state depends on — and each page's owner, so that
    conversations (and an API request's `cache_salt`, part of its blocks' owner) never share a
    snapshot. Page keys are left out: an API block's row may be made again under a new index."""
    key = address(fingerprint)
    out = []
    for p in pages:
        key = address(key, _owner(p), list(p.tokens))
        out.append(SNAP + key)
    return out


def _owner(p: Piece) -> str:
    return p.meta.owner if p.meta is not None else ""


def _same(a: Piece, b: Piece) -> bool:
    if a.transient or b.transient or _owner(a) != _owner(b):
        return False
    return list(a.tokens) == list(b.tokens)


def place(
    win: Window,
    lib: Library,
    fingerprint: str,
    held: Sequence[Piece],
    target: Sequence[Piece],
    stop: Callable[[], bool] | None = None,
) -> Prefilled:
    """Make the window hold exactly `target` (it holds `held`, then maybe more)."""
    done = Prefilled()
    keys = chain(fingerprint, target)
    ends = np.cumsum([len(p.tokens) for p in target]).tolist()
    same = 0
    while same < min(len(held), len(target)) and _same(held[same], target[same]):
        same += 1
    start = 0
    for k in range(len(target), 0, -1):
        if k <= same and (ends[k - 1] == win.end or ends[k - 1] in win.marks):
            win.truncate(ends[k - 1])
            start, done.kept = k, k
            break
        got = None if target[k - 1].transient else _stored(lib, keys[k - 1], target[k - 1].whole)
        if got is None:
            continue  # none stored, damaged or gone: a shorter prefix, or decode
        win.restore(got[0], [t for p in target[:k] for t in p.tokens])
        start, done.restored = k, k
        done.tier = got[1]
        break
    else:
        if same:  # back to the last shared page (from a mark, decoding the rest)
            win.truncate(ends[same - 1])
            start, done.kept = same, same
        else:
            win.reset()
    for p in target[start:]:
        if stop is not None and stop():
            raise Cancelled("the request was cancelled while its prompt was decoded")
        win.append(p.tokens)
        done.prefilled += 1
        done.decoded += len(p.tokens)
    if target and not target[-1].transient:
        win.mark()
        if not (keys[-1] in lib.ram or lib.disk.exists(keys[-1])):
            save(win, lib, keys[-1], target[-1])
    return done


def _stored(lib: Library, *keys: str | None) -> tuple[Buffer, str] | None:
    """The first of `keys` the store serves: (its state, the tier it came from)."""
    for key in keys:
        if key is None or not (key in lib.ram or lib.disk.exists(key)):
            continue
        warm = key in lib.ram
        try:
            return lib.pager.get(key), lib.pager.tier(key, warm)
        except (NotFoundError, StoreError):
            continue
    return None


def save(win: Window, lib: Library, key: str, last: Piece) -> None:
    """Keep the window's whole state as the snapshot `key` (RAM, and disk when this process
    writes the store and the last page has an owner); older snapshots of the owner go."""
    if last.meta is None or lib.disk.mode != "write":
        return
    owner = SNAP + last.meta.owner
    tokens = np.asarray(win.history, dtype=np.int32)
    meta = ChunkMeta(
        key=key, owner=owner, index=0, start=0, end=len(tokens), tokens=tokens, pos=0,
        scheme=last.meta.scheme, pinned=False,
    )  # fmt: skip
    blob = win.marks.get(win.end)  # the callers marked the end: no second copy of the state
    lib.pager.save(meta, blob if blob is not None else win.save(0, win.end), cache=True)
    old = [m for m in lib.disk.chunks(owner) if m.key != key]
    for stale in sorted(old, key=lambda m: m.created, reverse=True)[KEEP - 1 :]:
        lib.disk.delete(stale.key)
