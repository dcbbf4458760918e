"""A reasoning model's thinking in the response objects: `reasoning_content`, never `content`."""

from __future__ import annotations

from cascade_cli.engine.reasoning import Thought
from cascade_cli.prompts.types import Result
from cascade_cli.server.responses import Shape


def test_thinking_is_reasoning_content_in_chunks_and_whole_replies() -> None:
    shape = Shape(chat=True, model="m")
    assert shape.chunk(Thought("hmm"))["choices"][0]["delta"] == {"reasoning_content": "hmm"}
    assert shape.chunk("42")["choices"][0]["delta"] == {"content": "42"}
    message = shape.whole("42", Result(), "hmm")["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "42", "reasoning_content": "hmm"}
    assert "reasoning_content" not in shape.whole("42", Result())["choices"][0]["message"]
