"""Two API conversations that open with the same exchange share one recall corpus: each one's
recall must rank only its own turns (scoped before the rankings are fused)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from cascade_cli.config import Settings
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context, Model
from cascade_cli.prompts.completions import PromptService
from cascade_cli.prompts.render import Block, chain, segments
from cascade_cli.prompts.types import Message, Params

WINDOW = 512
GREEDY = Params(temperature=0.0, max_tokens=8)
OPENING = [
    ("system", "You are a helpful assistant."),
    ("user", "Hello! I have a few things to tell you today."),
    ("assistant", "Hello! Go ahead, I am listening."),
]
TOPICS = ["rivers", "bread", "chess", "glass", "winter", "trains", "tea", "birds"]


@pytest.fixture()
def ctx(model: object) -> Iterator[Context]:
    with Context(cast(Model, model), WINDOW + 256, 4, 256, 1) as c:
        yield c


def _conversation(fact: tuple[str, str]) -> list[Message]:
    convo = [*OPENING, fact]
    for topic in TOPICS * 2:
        convo += [
            ("user", f"Tell me something about {topic}, in two or three sentences."),
            ("assistant", f"Here is something about {topic}. " * 6),
        ]
    convo.append(("user", "What is my locker code? Answer with the number only."))
    return [Message(r, c) for r, c in convo]


def test_a_conversation_sharing_the_first_exchange_recalls_only_its_own_turns(
    home: Path, ctx: Context
) -> None:
    cfg = Settings(gpu_cache_size=WINDOW, disk_cache_path=home / "store", threads=1)
    with Library(cfg, ctx) as lib:
        svc = PromptService(ctx, lib, window=WINDOW)
        # the other conversation says "locker code" more often: it outranks ours in BM25
        theirs = _conversation(
            ("user", "My locker code is 9051. My locker code, the locker code: 9051, locker code.")
        )
        svc.chat([*theirs[:-1], Message("user", "Thanks.")], GREEDY).text()
        ours = _conversation(("user", "My locker code is 4417. Please remember it."))
        reply = svc.chat(ours, GREEDY)
        reply.text()
        owner = {p.meta.owner for p in svc.pages.layout if p.meta is not None and p.meta.index}
        assert len(owner) == 1  # one shared corpus
        mine = svc.blocks.pages(_blocks(svc, ours))
        keys = {p.key for p in mine}
        assert reply.result.recalled and set(reply.result.recalled) <= keys
        note = next(p for p in svc.pages.layout if p.key.startswith("quote:"))
        said = svc.model.detokenize(note.tokens)
        assert "4417" in said and "9051" not in said, said


def _blocks(svc: PromptService, messages: list[Message]) -> list[Block]:
    finished, open_turn, _ = segments(svc.tpl, messages, svc.system)
    blocks, _ = chain(svc.fingerprint, finished, open_turn, svc.block, svc.model.detokenize)
    return blocks
