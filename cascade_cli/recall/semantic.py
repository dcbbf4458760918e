"""Semantic recall: cosine between the question's sentence embedding and each passage's."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cascade_cli.recall import stackfile, tables, vectors
from cascade_cli.recall.contextual import in_context, top
from cascade_cli.recall.lexical import PassageHit
from cascade_cli.store.address import address

F32 = npt.NDArray[np.float32]
IDS = npt.NDArray[np.int32]
#: Bytes of vectors the cache keeps (a book of 220k tokens is ~9k passages, 14 MB as f32; a
#: 10,000-file code base of 528k passages 540 MB: f16 vectors and their projections).
BUDGET = 1 << 30
#: Above this many passages a search first scores every passage on the stack's DIMS principal
#: directions and then only the CANDIDATES best (with their neighbours) on the whole vector:
#: a scan of every whole vector of a 10,000-file code base reads 811 MB per question, the
#: projections 135 MB. (Each chunk's mean vector instead lost a one-sentence needle among its
#: chunk's other passages.)
SCAN_ALL = 1 << 16
DIMS = 64
CANDIDATES = 4096


@dataclass(frozen=True)
class Stack:
    """The passage vectors of an owner set as one f32 matrix: rows grouped by owner, each
    owner's rows in document order."""

    owners: tuple[str, ...]
    versions: tuple[tuple[str, int] | None, ...]
    #: the store's recall generation when the versions were last checked
    seen: int
    #: row where owner i's rows begin (one more entry: the end)
    starts: npt.NDArray[np.int64]
    #: owner number of each row
    group: IDS
    ids: IDS
    #: the vectors: f32, or f16 in a stack of more than SCAN_ALL rows (searched through `proj`)
    mat: npt.NDArray[np.float32] | npt.NDArray[np.float16]
    #: over SCAN_ALL rows: the DIMS principal directions of the vectors (dim, DIMS), and each
    #: row's coordinates on them (centred on `centre`)
    basis: F32 | None = None
    centre: F32 | None = None
    proj: F32 | None = None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.proj is None else self.proj.nbytes
        return int(self.mat.nbytes + self.ids.nbytes + self.group.nbytes + extra)

    def rows(self, i: int) -> tuple[IDS, npt.NDArray[np.floating[Any]]]:
        a, b = int(self.starts[i]), int(self.starts[i + 1])
        return self.ids[a:b], self.mat[a:b]

    def candidates(self, qvec: F32) -> npt.NDArray[np.int64]:
        """The rows a search scores whole, in row order: the CANDIDATES best on the principal
        directions, and the rows beside each (their scores give context)."""
        assert self.proj is not None and self.basis is not None
        near = self.proj @ (qvec @ self.basis)
        k = min(CANDIDATES, len(near))
        best = np.argpartition(-near, k - 1)[:k]
        rows = np.concatenate([best - 1, best, best + 1])
        return np.unique(rows[(rows >= 0) & (rows < len(near))])


def _stack(
    owners: tuple[str, ...],
    versions: tuple[tuple[str, int] | None, ...],
    seen: int,
    parts: Sequence[tuple[IDS, npt.NDArray[np.floating[Any]]]],
) -> Stack:
    """The stack of `parts` (each owner's ids and vectors, f16 or f32 holding f16 values)."""
    sizes = [len(ids) for ids, _ in parts]
    dim = next((m.shape[1] for _, m in parts if len(m)), 0)
    starts = np.zeros(len(parts) + 1, dtype=np.int64)
    starts[1:] = np.cumsum(sizes)
    full = [(i, m) for i, m in parts if len(i)]
    ids = np.concatenate([i for i, _ in full]) if full else np.zeros((0, 2), np.int32)
    mat = (
        np.concatenate([m for _, m in full], dtype=np.float16)  # as stored: nothing lost
        if full
        else np.zeros((0, dim), np.float16)
    )
    group = np.repeat(np.arange(len(parts), dtype=np.int32), sizes)
    if len(ids) <= SCAN_ALL:
        return Stack(owners, versions, seen, starts, group, ids, mat.astype(np.float32))
    sample = mat[:: max(1, len(mat) // 20_000)].astype(np.float32)
    centre = sample.mean(axis=0)
    _, axes = np.linalg.eigh(np.cov(sample - centre, rowvar=False))
    basis = np.ascontiguousarray(axes[:, ::-1][:, : min(DIMS, axes.shape[1])], dtype=np.float32)
    proj = np.empty((len(mat), basis.shape[1]), dtype=np.float32)
    for a in range(0, len(mat), 65536):  # a block at a time: no f32 copy of the stack
        proj[a : a + 65536] = (mat[a : a + 65536].astype(np.float32) - centre) @ basis
    return Stack(owners, versions, seen, starts, group, ids, mat, basis, centre, proj)


#: The arrays of a stack its file keeps.
_SAVED = ("starts", "group", "ids", "mat", "basis", "centre", "proj")


def _save(path: Path, stack: Stack) -> None:
    meta = {
        "owners": list(stack.owners),
        "versions": [list(v) if v else None for v in stack.versions],
    }
    with contextlib.suppress(OSError):  # a read-only store, a full disk: made again next time
        stackfile.save(path, meta, {k: getattr(stack, k) for k in _SAVED})


def _load(
    path: Path, owners: tuple[str, ...], versions: tuple[tuple[str, int] | None, ...], seen: int
) -> Stack | None:
    found = stackfile.load(path)
    if found is None:
        return None
    meta, arrays = found
    kept = tuple(tuple(v) if v else None for v in meta.get("versions", []))
    if tuple(meta.get("owners", [])) != owners or kept != versions:
        return None
    return Stack(owners, versions, seen, **{k: arrays[k] for k in _SAVED})


class VectorCache:
    """Stacks of passage vectors by owner set, made again when an owner's corpus generation
    changes (this or another process indexed or embedded since, or the corpus was dropped and
    made again: its uid differs) — only that owner's rows are read again; the most recently
    used stacks stay within `budget` bytes (the newest always)."""

    def __init__(self, budget: int = BUDGET, home: Path | None = None) -> None:
        self._stacks: OrderedDict[tuple[str, ...], Stack] = OrderedDict()
        self._lock = threading.Lock()
        self.budget = budget
        #: where stacks over SCAN_ALL passages are kept between processes (recall.stackfile)
        self.home = home

    def get(self, conn: sqlite3.Connection, owners: Sequence[str]) -> Stack:
        key = tuple(owners)
        seen = tables.store_generation(conn)
        with self._lock:
            old = self._stacks.pop(key, None)
            if old is not None and old.seen == seen:  # nothing changed anywhere since
                self._stacks[key] = old  # most recent last
                return old
        known = tables.generations(conn, key)
        versions = tuple(known.get(o) for o in key)
        with self._lock:
            if old is not None and old.versions == versions:
                old = replace(old, seen=seen)
                self._stacks[key] = old
                return old
            kept = self._kept(versions, key, old)
        path = None if self.home is None else self.home / f"{address(*key)[:32]}.stack"
        stack = _load(path, key, versions, seen) if path is not None and not kept else None
        if stack is None:
            stack = self._build(conn, key, versions, seen, kept)
            if path is not None and stack.proj is not None:
                _save(path, stack)
        with self._lock:
            self._stacks[key] = stack
            while len(self._stacks) > 1 and self._bytes() > self.budget:
                self._stacks.popitem(last=False)
        return stack

    def _build(
        self,
        conn: sqlite3.Connection,
        key: tuple[str, ...],
        versions: tuple[tuple[str, int] | None, ...],
        seen: int,
        kept: Mapping[str, tuple[IDS, npt.NDArray[np.floating[Any]]]],
    ) -> Stack:
        """The stack of `key`: the rows `kept` holds, the others read from the index."""
        missing = [o for o, v in zip(key, versions, strict=True) if v is not None and o not in kept]
        loaded = vectors.vectors(conn, missing) if missing else {}
        empty = (np.zeros((0, 2), np.int32), np.zeros((0, 0), np.float16))
        parts = [kept[o] if o in kept else loaded.get(o, empty) for o in key]
        return _stack(key, versions, seen, parts)

    def _kept(
        self,
        versions: tuple[tuple[str, int] | None, ...],
        owners: tuple[str, ...],
        old: Stack | None,
    ) -> dict[str, tuple[IDS, npt.NDArray[np.floating[Any]]]]:
        """Rows of `owners` some cached stack holds at the wanted version."""
        want = dict(zip(owners, versions, strict=True))
        out: dict[str, tuple[IDS, npt.NDArray[np.floating[Any]]]] = {}
        for stack in [*([old] if old is not None else []), *reversed(self._stacks.values())]:
            for i, o in enumerate(stack.owners):
                if o not in out and want.get(o) is not None and stack.versions[i] == want[o]:
                    out[o] = stack.rows(i)
        return out

    def _bytes(self) -> int:
        return sum(s.nbytes for s in self._stacks.values())

    def drop(self, owner: str) -> None:
        with self._lock:
            for key in [k for k in self._stacks if owner in k]:
                del self._stacks[key]


def search(
    conn: sqlite3.Connection,
    cache: VectorCache,
    owners: Sequence[str],
    qvec: F32,
    limit: int = 64,
    scope: Mapping[str, Container[int]] | None = None,
) -> list[PassageHit]:
    """Best passages of `owners` by cosine similarity to `qvec` (unit length): `rank` over
    their stack."""
    return rank(cache.get(conn, owners), qvec, limit, scope)


def rank(
    st: Stack, qvec: F32, limit: int = 64, scope: Mapping[str, Container[int]] | None = None
) -> list[PassageHit]:
    """The stack's best passages by cosine similarity to `qvec` (unit length), in context (see
    recall.contextual), best first, one ranking across its owners (over SCAN_ALL passages, among
    the candidates of Stack.candidates); an owner in `scope` answers only with the chunks it
    lists. Reads nothing from the store (it can run beside a lexical search)."""
    if not len(st.ids):
        return []
    if st.proj is None:  # every row, as stored (f32)
        group, ids, mat = st.group, st.ids, st.mat
        scores = in_context(ids, mat @ qvec, group)
    else:
        rows = st.candidates(qvec)
        group, ids, mat = st.group[rows], st.ids[rows], st.mat[rows].astype(np.float32)
        scores = in_context(ids, mat @ qvec, group, rows)
    if scope:  # an owner in scope answers only with the chunks it lists
        keep = np.ones(len(ids), dtype=bool)
        where = {o: i for i, o in enumerate(st.owners)}
        for o, allowed in scope.items():
            if o in where:
                mine = np.flatnonzero(group == where[o])
                keep[mine] = np.fromiter((int(c) in allowed for c in ids[mine, 0]), bool, len(mine))
        kept = np.flatnonzero(keep)
        group, ids, scores = group[kept], ids[kept], scores[kept]
    return top(st.owners, group, ids, scores, limit)
