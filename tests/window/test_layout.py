"""The planner's layout under chat and serve: recalled turns recomputed into a gap, documents whose
chunks the disk budget evicted, a damaged document chunk recomputed in its ingest context."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from cascade_cli.config import Settings
from cascade_cli.documents.catalog import Document
from cascade_cli.documents.ingest import ingest
from cascade_cli.documents.library import Library
from cascade_cli.documents.verify import check
from cascade_cli.engine import Context, Model
from cascade_cli.kv import blob as kvblob
from cascade_cli.prompts.completions import PromptService
from cascade_cli.prompts.types import Message, Params
from cascade_cli.session.chat import ChatSession
from cascade_cli.store.stats import snapshot
from cascade_cli.window.page import Page
from tests.documents.helpers import (
    NEEDLE,
    chunk_text,
    file_of,
    flip,
    kv_of,
    rel_err,
    v_after_neighbour,
    write_text,
)

WINDOW = 1024
GREEDY = {"temperature": 0.0, "max_tokens": 16}


@pytest.fixture()
def ctx(model: object) -> Iterator[Context]:
    with Context(cast(Model, model), WINDOW + 256, 4, 256, 1) as c:
        yield c


def _lib(home: Path, ctx: Context) -> Library:
    cfg = Settings(gpu_cache_size=WINDOW, block_size=128, disk_cache_path=home / "store", threads=1)
    return Library(cfg, ctx, any_model=True)


def _say(chat: ChatSession, text: str) -> str:
    reply = "".join(chat.send(text))
    chat.sync()
    return reply


def test_a_recalled_turn_recomputed_into_a_gap_is_saved_where_verify_expects_it(
    home: Path, ctx: Context
) -> None:
    """A recalled chunk the store lost is recomputed at the window's end and moved into the gap
    before the recent turns; it used to be saved as if computed at the gap (pos = the gap's
    start), so `verify` called it damaged and `--repair` deleted a healthy chunk."""
    with _lib(home, ctx) as lib:
        chat = ChatSession(ctx, lib, "gap", overrides=GREEDY)
        _say(chat, "My locker code is 4417. Please remember it.")
        text = write_text(home / "sample.txt", 9000).read_text(encoding="utf-8")
        paras = [p.replace("\n", " ") for p in text.split("\n\n") if len(p) > 300]
        for p in paras[:7]:
            _say(chat, f"Here is a paragraph: {p[:600]} Summarize it in one sentence.")
        key = chat.s.key(1)
        assert key not in chat.pages.keys  # turn 1 left the window
        lib.disk.delete(key)  # the store lost it: recall must recompute it
        _say(chat, "What is my locker code? Answer with the number only.")
        assert "turn 1" in chat.last.recalled and key in chat.pages.keys
        assert chat.pages.at[key] < chat.pages.win.end - chat.pages.layout[-1].n  # in a gap
        lib.pager.flush()
        assert lib.disk.exists(key)  # saved back
        report = check(lib.disk)
        assert not report.damaged, report.damaged
        chat.close()


def test_chat_with_a_document_skips_a_chunk_the_disk_budget_evicted(
    home: Path, ctx: Context, tmp_path: Path
) -> None:
    """`chat --doc` whose recall hits an evicted chunk answers, with a note, instead of failing
    every message with "no chunk 'doc:…' in store"."""
    notes: list[str] = []
    with _lib(home, ctx) as lib:
        src = write_text(tmp_path / "needle.txt", 6000, needle=NEEDLE)
        doc = ingest(ctx, lib, src, "needle", "utf-8", lambda s: None)
        lib.pager.flush()
        rows = lib.conn.execute(
            "SELECT p.chunk FROM recall_passages p JOIN recall_corpora c ON c.id = p.corpus"
            " WHERE c.owner = ? AND p.text LIKE '%48213%'",
            (doc.owner,),
        ).fetchall()
        (hit,) = {r[0] for r in rows}
        lib.disk._delete("key = ?", (doc.chunk_key(hit),), evicting=True)  # as the budget does
        assert doc.chunk_key(hit) in lib.disk.evicted(doc.owner)
        chat = ChatSession(
            ctx, lib, "reader", overrides=GREEDY, documents=[doc], notify=notes.append
        )
        assert _say(chat, "What is the pass key?").strip()
        assert doc.chunk_key(hit) not in chat.pages.keys
        assert any("evicted by the disk budget" in n and "'needle'" in n for n in notes), notes
        assert any(k.startswith(f"{doc.owner}:") for k in chat.pages.keys)  # others recalled
        chat.close()


def test_a_chat_turn_over_a_document_looks_up_only_stored_pages(
    home: Path, ctx: Context, tmp_path: Path
) -> None:
    """The excerpts' frame and the quote note are decoded where they are placed: neither is
    looked up in the store (each once counted a disk miss per turn in `cascade stats`)."""
    with _lib(home, ctx) as lib:
        src = write_text(tmp_path / "needle.txt", 6000, needle=NEEDLE)
        doc = ingest(ctx, lib, src, "needle", "utf-8", lambda s: None)
        lib.pager.flush()
        chat = ChatSession(ctx, lib, "reader", overrides=GREEDY, documents=[doc])
        missed = snapshot(lib.disk)["tiers"]["disk"]["misses"]
        assert _say(chat, "What is the pass key?").strip()
        assert any(k.startswith("frame:") for k in chat.pages.keys)  # the frame was placed
        assert snapshot(lib.disk)["tiers"]["disk"]["misses"] == missed
        chat.close()


def test_a_quote_copies_its_passage_cells_from_the_recalled_turn(home: Path, ctx: Context) -> None:
    """The note quoting a recalled turn is made of that turn's own cells, copied and moved to
    the note's positions (only its frame is decoded); the model still answers from it."""
    with _lib(home, ctx) as lib:
        chat = ChatSession(ctx, lib, "copy", overrides=GREEDY)
        _say(chat, "My locker code is 4417. Please remember it.")
        text = write_text(home / "sample.txt", 9000).read_text(encoding="utf-8")
        paras = [p.replace("\n", " ") for p in text.split("\n\n") if len(p) > 300]
        for p in paras[:7]:
            _say(chat, f"Here is a paragraph: {p[:600]} Summarize it in one sentence.")
        assert chat.s.key(1) not in chat.pages.keys  # turn 1 left the window
        win = chat.pages.win
        seen: list[tuple[Page, bytes, bytes]] = []
        apply = chat.pages.apply

        def watch(*args: Any, **kwargs: Any) -> Any:  # look at the note before the reply
            done = apply(*args, **kwargs)
            for p in chat.pages.layout:
                if p.transient and p.copy is not None:
                    key, offset, to, n = p.copy
                    src, dst = chat.pages.at[key] + offset, chat.pages.at[p.key] + to
                    seen.append((p, bytes(win.save(src, src + n)), bytes(win.save(dst, dst + n))))
            return done

        chat.pages.apply = watch  # type: ignore[method-assign]
        reply = _say(chat, "What is my locker code? Answer with the number only.")
        assert "turn 1" in chat.last.recalled
        assert len(seen) == 1, "the turn's passage was not copied into the note"
        note, src, dst = seen[0]
        key, offset, to, n = note.copy or ("", 0, 0, 0)
        assert key == chat.s.key(1) and n >= 8
        page = next(p for p in chat.pages.layout if p.key == key)
        assert note.tokens[to : to + n] == page.tokens[offset : offset + n]
        a, b = kvblob.parse(src), kvblob.parse(dst)
        start = int(b.header.positions[0])
        assert list(b.header.positions) == list(range(start, start + n))  # moved, in order
        assert start > int(a.header.positions[-1])
        for layer in range(len(a.v)):  # the very cells (V is not rotated), not a new decode
            assert np.array_equal(a.v_rows(layer), b.v_rows(layer))
        assert "4417" in reply, reply
        chat.close()


def test_rerank_llm_picks_the_note_from_the_recalled_turns_cells(home: Path, ctx: Context) -> None:
    """With the rerank setting 'llm' the note is the passage (of the recalled turns) after which
    the generator finds the message likeliest, scored from the turns' cells in the window, and
    it is that passage's cells the note copies."""
    cfg = Settings(
        gpu_cache_size=WINDOW, block_size=128, disk_cache_path=home / "store", threads=1,
        rerank="llm",
    )  # fmt: skip
    with Library(cfg, ctx, any_model=True) as lib:
        chat = ChatSession(ctx, lib, "rerank", overrides=GREEDY)
        _say(chat, "My locker code is 4417. Please remember it.")
        _say(chat, "My bike lock code is 9021, not the locker one.")
        text = write_text(home / "sample.txt", 9000).read_text(encoding="utf-8")
        paras = [p.replace("\n", " ") for p in text.split("\n\n") if len(p) > 300]
        for p in paras[:7]:
            _say(chat, f"Here is a paragraph: {p[:600]} Summarize it in one sentence.")
        assert chat.s.key(1) not in chat.pages.keys and chat.s.key(2) not in chat.pages.keys
        layouts: list[Any] = []
        import cascade_cli.session.chat as chat_mod

        lay_out = chat_mod.lay_out

        def watch(*args: Any, **kwargs: Any) -> Any:
            layouts.append(lay_out(*args, **kwargs))
            return layouts[-1]

        chat_mod.lay_out = watch
        try:
            _say(chat, "What is my locker code or my lock code? Answer with the numbers only.")
        finally:
            chat_mod.lay_out = lay_out
        laid = layouts[-1]
        assert len(laid.scored) >= 2, laid.scored  # both turns' passages were scored
        quoted = [s for s in laid.scored if s["quoted"]]
        assert len(quoted) == 1 and quoted[0]["score"] == max(s["score"] for s in laid.scored)
        assert all(np.isfinite(s["score"]) and s["score"] < 0 for s in laid.scored)
        assert laid.rerank_s > 0 and chat.last.rerank_s == laid.rerank_s
        shown = {label: (score, q) for label, score, q in chat.last.scored}  # chat's /stats
        turn = f"turn {quoted[0]['chunk']}"  # each of these turns is one chunk
        assert len(shown) == len(laid.scored) and shown[turn] == (quoted[0]["score"], True)
        note = next(p for p in chat.pages.layout if p.transient)
        key, _, to, n = note.copy or ("", 0, 0, 0)
        src = next(p for p in chat.pages.layout if p.key == key)
        assert src.key == chat.s.key(int(quoted[0]["chunk"])) and quoted[0]["chunk"] in (1, 2)
        said = ctx.model.detokenize(note.tokens[to : to + n])
        assert said.strip() and said.strip() in quoted[0]["text"]
        chat.close()


#: a question to the document `doc`: (the answer, the keys of the pages it laid out)
Asker = Callable[[Library, Document, str], tuple[str, set[str]]]


def _recomputed_in_its_ingest_context(home: Path, ctx: Context, tmp_path: Path, ask: Asker) -> None:
    """A question whose recall hits a chunk whose file is damaged: the chunk is recomputed where
    ingest made it (after the sink and the chunks before it in the ingest window, at its stored
    position), saved back, and the question answered; `verify` is clean afterwards."""
    with _lib(home, ctx) as lib:
        src = write_text(tmp_path / "c.txt", 6000)
        doc = ingest(ctx, lib, src, "c", "utf-8", lambda s: None)
        lib.pager.flush()
        idx = 4
        before = lib.disk.meta(doc.chunk_key(idx))
        k0, v0 = kv_of(lib.disk.get(before.key))
        flip(file_of(lib, before.key))
        lib.ram.clear()
        text = chunk_text(lib, doc.owner, idx)
        question = " ".join(sorted(set(text.split()), key=len)[-6:])  # its rarest long words
        answer, keys = ask(lib, doc, question)
        assert answer.strip() and before.key in keys
        lib.pager.flush()
        after = lib.disk.meta(before.key)
        assert after.pos == before.pos and after.checksum != before.checksum
        k1, v1 = kv_of(lib.disk.get(after.key))
        report = check(lib.disk)
        assert not report.damaged, report.damaged
        v_other = v_after_neighbour(ctx, lib, doc, idx, WINDOW)  # another context: further off
    assert rel_err(v1, v0) < 0.7 * rel_err(v_other, v0), (rel_err(v1, v0), rel_err(v_other, v0))
    assert rel_err(k1, k0) < 0.1


def test_chat_recomputes_a_damaged_document_chunk_in_its_ingest_context(
    home: Path, ctx: Context, tmp_path: Path
) -> None:
    """`chat --doc`: it used to decode the chunk at the window's end, after the conversation,
    and never save it."""

    def ask(lib: Library, doc: Document, question: str) -> tuple[str, set[str]]:
        chat = ChatSession(ctx, lib, "reader", overrides=GREEDY, documents=[doc])
        try:
            answer = _say(chat, question)
            assert chat.totals.tiers["recomputed"] >= 1
            return answer, set(chat.pages.keys)
        finally:
            chat.close()

    _recomputed_in_its_ingest_context(home, ctx, tmp_path, ask)


def test_a_served_request_recomputes_a_damaged_document_chunk_in_its_ingest_context(
    home: Path, ctx: Context, tmp_path: Path
) -> None:
    """A served chat completion naming the document (`documents`), through the prompt service."""

    def ask(lib: Library, doc: Document, question: str) -> tuple[str, set[str]]:
        svc = PromptService(ctx, lib, window=WINDOW)
        try:
            params = Params(temperature=0.0, max_tokens=16, documents=[doc.name])
            reply = svc.chat([Message("user", question)], params)
            return reply.text(), set(svc.pages.keys)
        finally:
            svc.close()

    _recomputed_in_its_ingest_context(home, ctx, tmp_path, ask)
