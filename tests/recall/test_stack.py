"""Semantic recall over a large owner set: the projected first pass, and the stack kept in the
store for the next process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascade_cli.recall import Recall, semantic
from tests.recall.test_recall import SECRET, haystack


def test_a_large_stack_scores_the_nearest_chunks_passages_only(
    recall: Recall, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over SCAN_ALL passages, semantic recall scores every passage on the stack's principal
    directions first and then only the CANDIDATES best (and their neighbours) whole (kept as
    f16): the needle is still found, and only those passages are ranked."""
    monkeypatch.setattr(semantic, "SCAN_ALL", 20)
    monkeypatch.setattr(semantic, "DIMS", 16)
    monkeypatch.setattr(semantic, "CANDIDATES", 3)
    owners = ["doc:1", "doc:2", "doc:3"]
    for n, owner in enumerate(owners):
        for i, c in enumerate(haystack(3)):
            recall.index(owner, i, c if (n, i) != (1, 1) else c + " " + SECRET)
    recall.flush()
    emb = recall.embedder()
    assert emb is not None
    qvec = emb.embed(["What secret number was I asked to remember?"])[0]
    stack = recall.cache.get(recall.disk.conn, owners)
    assert stack.proj is not None and stack.mat.dtype == np.float16 and len(stack.ids) > 20
    found = semantic.search(recall.disk.conn, recall.cache, owners, qvec, 1000)
    assert (found[0].owner, found[0].chunk) == ("doc:2", 1)
    assert len(found) <= 9  # three candidates and their neighbours
    # kept in the store: another process maps it instead of reading every vector again
    kept = recall.cache.home
    assert kept is not None and len(list(kept.glob("*.stack"))) == 1
    other = semantic.VectorCache(home=kept)
    again = other.get(recall.disk.conn, owners)
    assert isinstance(again.proj, np.memmap) and np.array_equal(again.ids, stack.ids)
    assert semantic.rank(again, qvec, 1000) == found
    path = next(kept.glob("*.stack"))
    with path.open("r+b") as fh:  # a torn write is not read: the stack is made again
        fh.truncate(path.stat().st_size - 1)
    third = semantic.VectorCache(home=kept).get(recall.disk.conn, owners)
    assert not isinstance(third.proj, np.memmap) and semantic.rank(third, qvec, 1000) == found


def test_stack_files_keep_the_most_recently_used(tmp_path: Path) -> None:
    """A store keeps only the last stackfile.KEEP stacks (older owner sets are garbage), and a
    file read is the last to go."""
    import os

    from cascade_cli.recall import stackfile

    arrays = {"a": np.arange(10, dtype=np.float32), "b": np.zeros((0, 3), dtype=np.int32)}
    for i in range(stackfile.KEEP + 2):
        stackfile.save(tmp_path / f"{i}.stack", {"i": i}, arrays)
        os.utime(tmp_path / f"{i}.stack", (1000 + i, 1000 + i))
    stackfile.prune(tmp_path)
    left = sorted(p.name for p in tmp_path.glob("*.stack"))
    assert left == [f"{i}.stack" for i in range(2, stackfile.KEEP + 2)]
    found = stackfile.load(tmp_path / "2.stack")  # the oldest left, read: now the newest
    assert found is not None and found[0] == {"i": 2} and np.array_equal(found[1]["a"], arrays["a"])
    stackfile.save(tmp_path / "new.stack", {}, arrays)
    assert (tmp_path / "2.stack").exists() and not (tmp_path / "3.stack").exists()
