"""A message longer than the window: paged through block by block, like an ingested text.

Each block is decoded after the system prompt and the message's previous blocks that still fit
(a sliding window, as `ingest` does), saved as a chunk of the turn and indexed for recall, so
later messages can recall any part of it. What is left — the last block, the end of the user
message and the reply header — is returned for the turn to decode as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cascade_cli.errors import ContextFullError
from cascade_cli.session import catalog
from cascade_cli.session.catalog import Chunk
from cascade_cli.session.restore import index_missing

if TYPE_CHECKING:
    from cascade_cli.session.chat import ChatSession


def page_through(chat: ChatSession, text: str) -> list[int]:
    """Decode and store all but the tail of a long user message; returns the tail's tokens."""
    opening, body, closing = chat.tpl.user_parts(text)
    tokens = opening + body
    system = chat.page(chat.s.key(0))
    room = chat.window - system.n - chat.reserve - len(closing)
    block = max(16, min(chat.block, room // 2))
    if room < 2 * 16:
        raise ContextFullError(
            f"a {chat.window}-token window has no room to page a message through",
            "Raise --gpu-cache-size or lower --max-tokens.",
        )
    turn = chat.s.turns + 1
    blocks = [tokens[o : o + block] for o in range(0, len(tokens), block)]
    tail = blocks.pop()
    mine: list[int] = []  # chunk indices of this message's blocks, oldest first
    for piece in blocks:
        layout = [system]
        used = system.n + len(piece)
        for idx in reversed(mine):  # the newest previous blocks that still fit
            n = len(chat.chunks[idx].tokens)
            if used + n > chat.window - chat.reserve:
                break
            layout.insert(1, chat.page(chat.s.key(idx)))
            used += n
        chat.count(chat.pages.apply(layout, room=len(piece)))
        start = chat.pages.win.end
        chat.pages.win.append(piece)
        idx = max(chat.chunks) + 1
        chunk = Chunk(idx, turn, piece, chat.model.detokenize(piece))
        chat.chunks[idx] = chunk
        chat.pages.append(chat.page(chat.s.key(idx)), start)
        with chat.lib.disk.transaction() as conn:
            catalog.put_chunk(conn, chat.s, chunk)
        mine.append(idx)
    index_missing(chat)
    chat.notify(f"long message: {len(tokens)} tokens paged through in {len(blocks) + 1} blocks")
    return tail + closing
