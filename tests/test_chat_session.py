from collections.abc import Iterator
from typing import cast

import pytest

from cascade_cli.chat import WINDOW_SEQ, ChatSession
from cascade_cli.engine import Context, Model, SamplerSettings


@pytest.fixture()
def session(model: object) -> Iterator[ChatSession]:
    with Context(cast(Model, model), n_ctx=1024, n_seq_max=2, n_batch=256, n_threads=2) as ctx:
        chat = ChatSession(ctx, SamplerSettings(temperature=0), max_tokens=40)
        yield chat
        chat.close()


def test_interrupted_reply_leaves_a_consistent_window(session: ChatSession) -> None:
    stream = session.send("Tell me about ships.")
    for _ in range(3):
        next(stream)
    stream.close()  # what Ctrl-C does to the reply
    ctx = session.ctx
    assert ctx.pos_max(WINDOW_SEQ) == len(session.tokens) - 1
    reply = "".join(session.send("And about trains?"))
    assert reply.strip()
    assert ctx.pos_max(WINDOW_SEQ) == len(session.tokens) - 1
    assert [r for r, _ in session.messages] == ["user", "assistant", "user", "assistant"]


def test_reset_empties_the_window(session: ChatSession) -> None:
    "".join(session.send("Hi"))
    assert session.used > 0
    session.reset()
    assert session.used == 0 and session.ctx.pos_max(WINDOW_SEQ) == -1
