"""Damaged chunks: resume gets past them, and a recomputed chunk is the chunk ingest made."""

from __future__ import annotations

from pathlib import Path

from cascade_cli.config import Settings
from cascade_cli.documents import catalog
from cascade_cli.documents.ingest import ingest
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context
from cascade_cli.window.ask import AskResult, ask
from tests.documents.helpers import (
    BLOCK,
    WINDOW,
    chunk_text,
    file_of,
    flip,
    kv_of,
    rel_err,
    v_after_neighbour,
    write_text,
)


def _ingest(ctx: Context, lib: Library, path: Path, name: str) -> catalog.Document:
    return ingest(ctx, lib, path, name, "utf-8", lambda s: None)


def test_resume_gets_past_a_damaged_chunk(ctx: Context, lib: Library, tmp_path: Path) -> None:
    """An ingest killed after 4 chunks whose last committed chunk was then damaged: the rerun
    recomputes that chunk (same position, same tokens) and finishes; before, every rerun failed
    on it with a CorruptChunkError."""
    src = write_text(tmp_path / "r.txt", 4000)
    doc = _ingest(ctx, lib, src, "r")
    total = doc.chunks
    with lib.disk.transaction() as conn:  # as a kill after chunk 3 committed leaves it
        conn.execute("UPDATE documents SET status = 'ingesting' WHERE id = ?", (doc.id,))
    for i in range(4, total):
        lib.disk.delete(doc.chunk_key(i))
    victim = lib.disk.meta(doc.chunk_key(3))
    flip(file_of(lib, victim.key))
    lib.ram.clear()

    again = _ingest(ctx, lib, src, "r")
    assert (again.id, again.status, again.chunks) == (doc.id, "ready", total)
    redone = lib.disk.meta(victim.key)
    assert redone.pos == victim.pos and redone.tokens.tolist() == victim.tokens.tolist()
    assert redone.checksum != victim.checksum  # a new, verified file
    assert len(lib.disk.get(victim.key)) == redone.nbytes


def test_recomputed_chunk_is_made_in_its_own_context(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    """`ask` recomputes a damaged chunk where ingest made it (after the sink and the chunks that
    preceded it in the ingest window, at its stored position), not after the chunks `ask`
    placed before it: the replacement's KV matches the original up to quantization noise."""
    src = write_text(tmp_path / "c.txt", 4000)
    doc = _ingest(ctx, lib, src, "c")
    idx = 4
    before = lib.disk.meta(doc.chunk_key(idx))
    k0, v0 = kv_of(lib.disk.get(before.key))
    flip(file_of(lib, before.key))
    lib.ram.clear()
    words = [
        sorted(set(chunk_text(lib, doc.owner, i).split()), key=len)[-3:] for i in (idx - 1, idx)
    ]
    question = " ".join(w for ws in words for w in ws)  # the longest words of both chunks
    result = AskResult(doc="c")
    list(ask(ctx, lib, doc, question, result, window=WINDOW, max_tokens=4, order="document"))
    tiers = {c["index"]: c["tier"] for c in result.chunks}
    assert tiers[idx] == "recomputed" and idx - 1 in tiers, tiers  # placed before it
    lib.pager.flush()

    after = lib.disk.meta(before.key)
    assert after.pos == before.pos
    k1, v1 = kv_of(lib.disk.get(after.key))
    own = rel_err(v1, v0)
    v_other = v_after_neighbour(ctx, lib, doc, idx, WINDOW)  # another context: further off
    assert own < 0.7 * rel_err(v_other, v0), (own, rel_err(v_other, v0))
    assert rel_err(k1, k0) < 0.1


def test_disk_budget_evicts_finished_documents(home: Path, ctx: Context, tmp_path: Path) -> None:
    """With a budget, a finished document's chunks are evictable (LRU) and a new ingest stays
    within it; before, every chunk stayed pinned and the store grew past the budget."""
    cfg = Settings(
        gpu_cache_size=WINDOW, block_size=BLOCK, disk_cache_path=home / "budget", threads=1
    )
    with Library(cfg, ctx) as lib:
        a = _ingest(ctx, lib, write_text(tmp_path / "a.txt", 3000), "a")
        size_a = lib.disk.total_bytes()
    budget = int(size_a * 1.5)
    with Library(cfg.__class__(**{**cfg.__dict__, "disk_cache_budget": budget}), ctx) as lib:
        b = _ingest(ctx, lib, write_text(tmp_path / "b.txt", 3000, start=20000), "b")
        lib.pager.flush()
        assert lib.disk.total_bytes() <= budget
        assert len(lib.disk.chunks(b.owner)) == b.chunks  # the new one whole
        assert len(lib.disk.chunks(a.owner)) < a.chunks  # the old one partly evicted
        rows = lib.conn.execute("SELECT DISTINCT pinned FROM chunks WHERE owner = ?", (b.owner,))
        assert [r[0] for r in rows] == [0]
        gone = sorted(lib.disk.evicted(a.owner))
        assert gone and all(not lib.disk.exists(k) for k in gone)
        idx = int(gone[0].rsplit(":", 1)[1])
        text = chunk_text(lib, a.owner, idx)
        question = " ".join(sorted(set(text.split()), key=len)[-6:])
        notes: list[str] = []  # the evicted chunk is skipped with a note, never a failure
        result = AskResult(doc="a")
        list(ask(ctx, lib, a, question, result, window=WINDOW, max_tokens=4, notice=notes.append))
        assert any("evicted by the disk budget" in n for n in notes), notes
        assert idx not in [c["index"] for c in result.chunks] and result.chunks
