"""Opening a session: restore its stored window, or rebuild its chunks from the transcript.

A session's KV is usable only by the model (and KV layout) that made it, for the system prompt it
was made with; otherwise every chunk's token ids are rebuilt from the transcript's text with this
model's template, the old KV is deleted, and the window is recomputed — saying so. Chunks that are
missing or fail their checksum are recomputed one by one when placed (see pages.py).
"""

from __future__ import annotations

import time

from cascade_cli.recall.plan import staying
from cascade_cli.session import transcripts
from cascade_cli.session.state import SessionState
from cascade_cli.session.transcripts import Chunk
from cascade_cli.store import SNAP


def open_window(chat: SessionState, fp: str) -> None:
    """Restore the stored window, or rebuild the session's chunks from its text."""
    system = chat.tpl.system(str(chat.settings["system"]))
    head = chat.chunks.get(0)
    rebuilt = True
    if chat.created or head is None:
        rechunk(chat, system, None)
    elif chat.s.fingerprint != fp:
        rechunk(chat, system, f"it was made with {chat.s.model} (another model or KV layout)")
    elif head.tokens != system:
        rechunk(chat, system, "its system prompt changed")
    else:
        rebuilt = False
        drop_unfinished(chat)
    index_missing(chat)
    layout = [chat.page(k) for k in chat.s.layout if chat.idx_of(k) in chat.chunks]
    if not layout or layout[0].key != chat.s.key(0):
        layout = [chat.page(chat.s.key(0))]
    t0 = time.perf_counter()
    while sum(p.n for p in layout) > chat.window - chat.reserve and len(layout) > 1:
        del layout[1]  # a smaller window than last time: the oldest leave
    placed = chat.pages.apply(layout, room=chat.reserve)
    chat.count(placed)
    chat.totals.restore_s += time.perf_counter() - t0
    chat.totals.restored_tokens += sum(p.n for p in layout) - placed.recomputed_tokens
    if placed.tiers["recomputed"] and not rebuilt:
        chat.notify(
            f"{placed.tiers['recomputed']} chunk(s) of session {chat.s.name!r} could not be "
            f"restored and were recomputed from their text ({placed.recomputed_tokens} tokens)"
        )


def drop_unfinished(chat: SessionState) -> None:
    """Forget chunks of a turn that never finished (a long message cut short by a kill)."""
    stale = [c.idx for c in chat.chunks.values() if c.turn > chat.s.turns]
    if not stale:
        return
    chat.lib.pager.flush()  # no write-back of theirs may land after the delete
    chat.recall.drop_from(chat.s.owner, min(stale))
    with chat.lib.disk.transaction() as conn:
        conn.executemany(
            "DELETE FROM session_chunks WHERE session_id = ? AND idx = ?",
            [(chat.s.id, i) for i in stale],
        )
    for i in stale:
        if chat.pages.saving:
            chat.lib.disk.delete(chat.s.key(i))
        del chat.chunks[i]


def rechunk(chat: SessionState, system: list[int], reason: str | None) -> None:
    """(Re)build every chunk's token ids from the transcript with this model's template."""
    with chat.lib.disk.lock:
        turns = transcripts.turns(chat.lib.conn, chat.s)
    chunks = [Chunk(0, 0, system, "")]
    for turn, user, reply in turns:
        chunks += turn_chunks(chat, len(chunks), turn, user, reply)
    total = sum(len(c.tokens) for c in chunks)
    if reason:
        chat.notify(
            f"session {chat.s.name!r} is rebuilt from its text because {reason}: "
            f"{len(chunks) - 1} chunk(s), {total} tokens"
        )
    chat.lib.ram.discard_prefix(chat.s.owner + ":")
    chat.recall.forget(chat.s.owner)
    if chat.pages.saving:  # else left for a writer: their tokens no longer match, never served
        chat.lib.disk.delete_owner(chat.s.owner)
        chat.lib.disk.delete_owner(SNAP + chat.s.owner)
    chat.s.fingerprint = chat.pages.fingerprint
    chat.s.model = chat.model.path.name
    chat.s.scheme = chat.lib.settings.compression
    chat.s.tokens = total - len(system)
    n = staying([len(c.tokens) for c in chunks[1:]], chat.window, len(system), chat.reserve)
    recent = [chat.s.key(c.idx) for c in chunks[len(chunks) - n :]] if n else []
    chat.s.layout = [chat.s.key(0), *recent]
    with chat.lib.disk.transaction() as conn:
        transcripts.forget_chunks(conn, chat.s)
        for c in chunks:
            transcripts.put_chunk(conn, chat.s, c)
        transcripts.update(conn, chat.s)
    chat.chunks = {c.idx: c for c in chunks}


def turn_chunks(chat: SessionState, first: int, turn: int, user: str, reply: str) -> list[Chunk]:
    """A finished turn's chunk(s) from its text (one, or several for a long message)."""
    tokens = chat.tpl.user(user) + chat.tpl.reply(reply) + chat.tpl.close()
    text = f"User: {user}\nAssistant: {reply}"
    pieces = chat.split(tokens)
    if len(pieces) == 1:
        return [Chunk(first, turn, tokens, text)]
    return [
        Chunk(first + i, turn, piece, chat.model.detokenize(piece))
        for i, piece in enumerate(pieces)
    ]


def index_missing(chat: SessionState) -> None:
    """Index chunks whose recall rows a crash (or a rebuild) left out."""
    todo = [c for c in chat.chunks.values() if c.idx and not c.indexed]
    for c in todo:
        chat.recall.index(chat.s.owner, c.idx, c.text)
    if todo:
        with chat.lib.disk.transaction() as conn:
            transcripts.mark_indexed(conn, chat.s, [c.idx for c in todo])
        for c in todo:
            c.indexed = True
