"""ingest and recall through the library API, in process: real model, real store, real files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cascade_cli.documents import extract
from cascade_cli.documents import ingest as ingest_mod
from cascade_cli.documents.frame import frame
from cascade_cli.documents.ingest import IngestStatus, chunks, ingest, pieces
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context
from cascade_cli.recall.focus import unmarked
from cascade_cli.recall.plan import Request
from cascade_cli.store.stats import snapshot
from cascade_cli.window.ask import AskResult, ask, plan, question_pages
from cascade_cli.window.turns import template
from tests.documents.helpers import BLOCK, NEEDLE, WINDOW, passage_rows, write_text


def run_ingest(ctx: Context, lib: Library, path: Path, name: str) -> Any:
    seen: list[IngestStatus] = []
    doc = ingest(ctx, lib, path, name, "utf-8", seen.append)
    assert seen and seen[-1].chunks == doc.chunks and seen[-1].tokens == doc.tokens
    assert seen[-1].chars_done == seen[-1].chars_total == len(path.read_text(encoding="utf-8"))
    return doc


def test_chunks_round_trip_token_ids_and_positions(
    ctx: Context, lib: Library, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # small pieces so the file is tokenized in several pieces, as a long book would be
    monkeypatch.setattr(ingest_mod, "_PIECE", 2000)
    src = write_text(tmp_path / "gpl.txt", 7000)
    text = extract(src).text  # what ingest reads: the hard-wrapped paragraphs joined
    parts = list(pieces(text))
    assert len(parts) >= 3 and "".join(p for _, p in parts) == text
    expected = [t for _, p in parts for t in ctx.model.tokenize(p)]
    blocks = [toks for toks, _ in chunks(ctx, text, BLOCK)]
    assert [t for b in blocks for t in b] == expected

    doc = run_ingest(ctx, lib, src, "gpl")
    metas = lib.disk.chunks(doc.owner)
    assert doc.tokens == len(expected) and doc.chunks == len(blocks) == len(metas)
    assert [t for m in metas for t in m.tokens.tolist()] == expected
    p0 = len(frame(ctx.model).prefix)
    assert doc.prefix_tokens == p0 and doc.window == WINDOW and doc.block_size == BLOCK
    start, end = 0, p0  # the sliding window, replayed
    live: list[int] = []
    for i, (m, toks) in enumerate(zip(metas, blocks, strict=True)):
        assert (m.index, m.key, m.owner) == (i, doc.chunk_key(i), doc.owner)
        assert m.tokens.tolist() == toks and m.n_tokens == len(toks)
        assert (m.start, m.end) == (start, start + len(toks))
        while WINDOW - end < len(toks):
            end -= live.pop(0)
        assert m.pos == end and p0 <= m.pos and m.pos + m.n_tokens <= WINDOW
        end += len(toks)
        live.append(len(toks))
        start += len(toks)
        assert len(lib.disk.get(m.key)) == m.nbytes  # verified payload
    # recall passages: every chunk has some, each is the detokenized text at its offset, all
    # embedded by the time ingest returns
    lib.recall.flush()
    rows = passage_rows(home, doc.id)
    assert sorted({r[0] for r in rows}) == list(range(doc.chunks))
    full = "".join(ctx.model.detokenize(toks) for toks in blocks)
    for _chunk, _pidx, start, passage, has_vec in rows:
        assert passage and full[start : start + len(passage)] == passage
        assert has_vec


def test_recall_includes_needle_chunk(
    ctx: Context, lib: Library, home: Path, tmp_path: Path
) -> None:
    src = write_text(tmp_path / "needle.txt", 7000, needle=NEEDLE)
    doc = run_ingest(ctx, lib, src, "needle")
    hits = {c for c, _, _, t, _ in passage_rows(home, doc.id) if "48213" in t}
    assert len(hits) == 1 and 0 < min(hits) < doc.chunks - 1
    for mode in ("bm25", "hybrid", "semantic"):
        pairs, q = plan(ctx, lib, doc, "What is the pass key?", WINDOW, mode, 2, 16)
        chosen = [i for _, i in pairs]
        assert q and len(set(chosen)) == len(chosen) and 0 < len(chosen) <= 3, (mode, chosen)
        assert all(0 <= i < doc.chunks for i in chosen)
        assert len(frame(ctx.model).prefix) + BLOCK * len(chosen) + len(q) + 16 <= WINDOW
        assert hits <= set(chosen), (mode, chosen, hits)
        assert chosen[-1] in hits, (mode, chosen)  # the best hit sits nearest the question


def test_a_whitespace_only_chunk_is_indexed_once(
    ctx: Context, lib: Library, home: Path, tmp_path: Path
) -> None:
    """A chunk whose text splits into no passages (whitespace only) is indexed as empty, once:
    it was re-indexed on every `ask` (with the "(once…)" notice) and reported by `verify`."""
    from cascade_cli.documents.verify import check
    from cascade_cli.window.ask import AskResult, ask

    text = write_text(tmp_path / "a.txt", 1500).read_text(encoding="utf-8")
    src = tmp_path / "gap.txt"
    src.write_text(text + " \n" * 400 + text, encoding="utf-8")  # a blank run of ≥ 2 blocks
    doc = run_ingest(ctx, lib, src, "gap")
    lib.recall.flush()
    have = {r[0] for r in passage_rows(home, doc.id)}
    assert len(have) < doc.chunks  # some chunk holds nothing to find
    for _ in range(2):
        notes: list[str] = []
        result = AskResult(doc="gap")
        list(ask(ctx, lib, doc, "Who is Sir Walter?", result, window=WINDOW, max_tokens=4,
                 notice=notes.append))  # fmt: skip
        assert not [n for n in notes if "once" in n], notes
    assert not check(lib.disk).damaged


def test_the_quote_is_copied_from_its_restored_chunk(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    """`ask` quotes the needle's passage with the chunk's own tokens and copies their cells
    from the restored chunk (only the frame and the question are decoded); the answer holds."""
    src = write_text(tmp_path / "needle.txt", 7000, needle=NEEDLE)
    doc = run_ingest(ctx, lib, src, "needle")
    res = AskResult(doc="needle")
    missed = snapshot(lib.disk)["tiers"]["disk"]["misses"]
    answer = "".join(ask(ctx, lib, doc, "What is the pass key?", res, window=WINDOW, max_tokens=12))
    assert any("48213" in p for p in res.passages), res.passages
    copied = res.timings["copied_tokens"]
    assert copied >= len(ctx.model.tokenize("The pass key is 48213."))
    assert "48213" in answer, answer
    # the quote is made, never looked up in the store (it once counted a disk miss per ask)
    assert snapshot(lib.disk)["tiers"]["disk"]["misses"] == missed


def test_ask_note_system_puts_the_quote_in_a_system_note_before_the_question_turn(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    """`ask_note = "system"`: the excerpts' user turn closes, the quote is a system note naming
    the document (its cells still copied from the restored chunk) and the question is a user
    turn of its own, as in chat; the answer holds."""
    src = write_text(tmp_path / "needle.txt", 7000, needle=NEEDLE)
    doc = run_ingest(ctx, lib, src, "needle")
    question = "What is the pass key?"
    res = AskResult(doc="needle")
    answer = "".join(
        ask(ctx, lib, doc, question, res, window=WINDOW, max_tokens=12, where="system")
    )
    assert res.timings["copied_tokens"] >= len(ctx.model.tokenize("The pass key is 48213."))
    assert "48213" in answer, answer
    req = Request(WINDOW, 0, 64, question, "hybrid", sources=lib.sources([doc]), fill=True)
    asked = question_pages(lib, ctx.model, [doc], question, req, where="system")
    quote, tpl = asked.layout.pages[-1], template(ctx.model)
    assert quote.transient and quote.copy is not None
    assert quote.tokens[0] == tpl.special(tpl.user_close)[0]  # the excerpts' turn closed
    assert quote.tokens[-len(tpl.special(tpl.sys_close)) :] == tpl.special(tpl.sys_close)
    assert "From needle: " in ctx.model.detokenize(quote.tokens)
    opened = tpl.special(tpl.user_open)[0]
    assert asked.message[0] == opened
    assert question in ctx.model.detokenize(asked.message)
    lines = question_pages(lib, ctx.model, [doc], question, req)  # the default: one user turn
    assert "Most relevant lines:" in ctx.model.detokenize(lines.layout.pages[-1].tokens)
    assert lines.message.count(opened) == asked.message.count(opened) - 1  # no turn of its own
    # where cells cannot be copied (a recurrent or sliding-window model) the quote stays in
    # the question's message, decoded with it
    plain = question_pages(lib, ctx.model, [doc], question, req, copies=False)
    kept = question_pages(lib, ctx.model, [doc], question, req, copies=False, where="system")
    assert kept.message == plain.message and not any(p.transient for p in kept.layout.pages)
    assert "48213" in ctx.model.detokenize(kept.message)


def test_a_quote_read_on_over_a_paragraph_break_is_still_copied(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    """The quote reads on into the passage after the needle's, the next paragraph (the quote
    joins them with a space where the text breaks the paragraph), and its cells are still
    copied from the restored chunk, not decoded (what runs on past the chunk's edge is)."""
    needle = (
        "The pass key is 48213, and the old porter at the gate asked every visitor to repeat "
        "the pass key twice before he opened the door."
    )  # over TARGET_WORDS: a passage of its own
    src = write_text(tmp_path / "needle.txt", 7000, needle=needle)
    text = src.read_text(encoding="utf-8")
    after = text[text.index(needle) + len(needle) :].split()[0]
    doc = run_ingest(ctx, lib, src, "needle")
    res = AskResult(doc="needle")
    list(ask(ctx, lib, doc, "What is the pass key?", res, window=WINDOW, max_tokens=4))
    (quote,) = res.passages
    body = unmarked(quote)[0]
    assert f"{needle} {after}" in body, quote  # joined by one space
    assert f"{needle}\n\n{after}" in text
    held = len(ctx.model.tokenize(f"{needle}\n\n{after}"))
    assert res.timings["copied_tokens"] >= held - 2, res.timings
