"""Semantic recall: cosine between the question's sentence embedding and each passage's."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Container

import numpy as np
import numpy.typing as npt

from cascade_cli.recall import index
from cascade_cli.recall.context import in_context, top
from cascade_cli.recall.lexical import PassageHit

F32 = npt.NDArray[np.float32]
IDS = npt.NDArray[np.int32]


class VectorCache:
    """Each owner's passage vectors as one f32 matrix (rows in document order), reloaded when the
    corpus's generation changes (this or another process indexed or embedded since, or the
    owner's corpus was dropped and made again: its uid differs); the `keep` most recently used
    owners stay (a book of 220k tokens is ~9k passages, 14 MB)."""

    def __init__(self, keep: int = 8) -> None:
        self._mats: dict[str, tuple[tuple[str, int], IDS, F32]] = {}
        self._lock = threading.Lock()
        self.keep = keep

    def get(self, conn: sqlite3.Connection, owner: str) -> tuple[IDS, F32]:
        version = index.generation(conn, owner)
        if version is None:
            return np.zeros((0, 2), dtype=np.int32), np.zeros((0, 0), dtype=np.float32)
        with self._lock:
            cached = self._mats.pop(owner, None)
            if cached is not None and cached[0] == version:
                self._mats[owner] = cached  # most recent last
                return cached[1], cached[2]
        ids, vecs = index.vectors(conn, owner)
        mat = vecs.astype(np.float32)
        with self._lock:
            self._mats[owner] = (version, ids, mat)
            while len(self._mats) > self.keep:
                self._mats.pop(next(iter(self._mats)))
        return ids, mat

    def drop(self, owner: str) -> None:
        with self._lock:
            self._mats.pop(owner, None)


def search(
    conn: sqlite3.Connection,
    cache: VectorCache,
    owner: str,
    qvec: F32,
    limit: int = 64,
    allowed: Container[int] | None = None,
) -> list[PassageHit]:
    """Best passages of `owner` by cosine similarity to `qvec` (unit length), in context (see
    recall.context), best first; only passages of `allowed` chunks when it is given."""
    ids, mat = cache.get(conn, owner)
    if not len(ids):
        return []
    scores = in_context(ids, mat @ qvec)
    if allowed is not None:
        keep = np.fromiter((int(c) in allowed for c in ids[:, 0]), bool, len(ids))
        ids, scores = ids[keep], scores[keep]
    return top(owner, ids, scores, limit)
