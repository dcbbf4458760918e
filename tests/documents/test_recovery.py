"""Recovery paths: interrupted removals, lost chunk rows, name clashes, a window too small."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascade_cli.documents import catalog
from cascade_cli.documents.frame import frame, question_tokens
from cascade_cli.documents.ingest import ingest
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context
from cascade_cli.errors import ContextFullError, InputError
from cascade_cli.recall.plan import QUOTE, QUOTE_ROOM, QUOTE_WORDS
from cascade_cli.recall.select import to_quote
from cascade_cli.window.ask import AskResult, ask
from tests.documents.helpers import write_text


def _ingest(
    ctx: Context, lib: Library, path: Path, name: str, named: bool = True
) -> catalog.Document:
    return ingest(ctx, lib, path, name, "utf-8", lambda s: None, named=named)


def test_sweep_finishes_an_interrupted_replacement(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    v1 = _ingest(ctx, lib, write_text(tmp_path / "a.txt", 1500), "a")
    v2 = _ingest(ctx, lib, write_text(tmp_path / "a.txt", 1800), "a")
    assert v2.version == 2 and not lib.disk.chunks(v1.owner)
    # simulate a crash after v3 was marked ready but before v2 was removed, and a crash
    # between a removal's catalog commit and its chunk deletion (orphan chunks)
    orphan = v2.chunk_key(0).replace(f"doc:{v2.id}", "doc:999")
    lib.disk.put(lib.disk.meta(v2.chunk_key(0)).replace(key=orphan, owner="doc:999"), b"x" * 10)
    with lib.disk.transaction() as conn:
        v3 = catalog.create(
            conn, name="a", path=v2.path, sha256="other", scheme=v2.scheme,
            block_size=v2.block_size, window=v2.window, prefix_tokens=v2.prefix_tokens,
        )  # fmt: skip
        catalog.finish(conn, v3)
    freed = catalog.sweep(lib.disk)
    assert freed > 0
    assert not lib.disk.chunks(v2.owner) and not lib.disk.chunks("doc:999")
    assert [d.version for d in catalog.documents(lib.conn, include_partial=True)] == [3]


def test_lost_chunk_rows_are_recomputed_on_reingest(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    src = write_text(tmp_path / "b.txt", 1800)
    doc = _ingest(ctx, lib, src, "b")
    keep = {m.index: m.tokens.tolist() for m in lib.disk.chunks(doc.owner)}
    lib.disk.delete(doc.chunk_key(1))  # as store repair does for a missing data file
    again = _ingest(ctx, lib, src, "b")
    assert again.id == doc.id and again.status == "ready"
    assert {m.index: m.tokens.tolist() for m in lib.disk.chunks(doc.owner)} == keep


def test_stem_name_clash_is_refused(ctx: Context, lib: Library, tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    first = _ingest(ctx, lib, write_text(tmp_path / "x" / "notes.txt", 900), "notes", named=False)
    with pytest.raises(InputError, match="already holds"):
        _ingest(ctx, lib, write_text(tmp_path / "y" / "notes.txt", 900), "notes", named=False)
    assert lib.find("notes").id == first.id


def test_ask_refuses_a_window_without_room(ctx: Context, lib: Library, tmp_path: Path) -> None:
    doc = _ingest(ctx, lib, write_text(tmp_path / "c.txt", 900), "c")
    with pytest.raises(ContextFullError, match="no room"):
        # the answer's room is max_tokens, at most a quarter of the window (the planner's rule)
        list(ask(ctx, lib, doc, "What?", AskResult(doc="c"), window=180, max_tokens=200))


def test_quotes_are_dropped_before_they_cost_the_last_chunk(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    """A window that holds one chunk only without the quote's room answers without quotes; one
    the quote's room (QUOTE_ROOM) larger answers with the policy's passage, cut to fit; the
    rerank's quote fits the same room or is not made."""
    doc = _ingest(ctx, lib, write_text(tmp_path / "q.txt", 3000), "q")
    question = "Who wrote this License?"
    hits = lib.recall.search([doc.owner], question, subject=True)
    picked = to_quote(hits, QUOTE, lib.recall.methods("hybrid"))
    evidence = list(
        dict.fromkeys(
            lib.recall.quote_text(h, question, QUOTE_WORDS // len(picked)) for h in picked
        )
    )
    fr = frame(ctx.model)
    bare = len(question_tokens(ctx.model, fr, question))
    assert evidence
    tight = len(fr.prefix) + bare + 16 + doc.block_size
    for window, expect in ((tight, []), (tight + QUOTE_ROOM, evidence)):
        res = AskResult(doc="q")
        list(ask(ctx, lib, doc, question, res, window=window, max_tokens=16, rerank="off"))
        assert res.passages == expect
        assert len(res.chunks) == 1
        reranked = AskResult(doc="q")  # the generator's one quote takes no more room than that
        list(ask(ctx, lib, doc, question, reranked, window=window, max_tokens=16, rerank="llm"))
        assert len(reranked.chunks) == 1 and len(reranked.passages) <= 1
        assert not expect or reranked.quotes
