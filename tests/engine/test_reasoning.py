"""Reasoning models: the format read from the template, replies opened without thinking, and
thinking split from the answer as the reply streams (the default model in a reasoning model's
template, tests/engine/retemplate.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_cli.documents.frame import frame
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.engine.reasoning import Splitter, Thought, opening, thought_tokens
from cascade_cli.window.turns import template
from tests.engine.retemplate import THINK, retemplate

HARMONY = THINK.replace("<think>", "<|channel|>analysis<|message|>")
#: llama.cpp reads gpt-oss's format from `<|channel|>` and renders its own version of it
GPT_OSS = (
    "{% for m in messages %}<|start|>{{ m['role'] }}<|channel|>final<|message|>"
    "{{ m['content'] }}<|end|>{% endfor %}"
)


@pytest.fixture(scope="module")
def thinker(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    path = retemplate(model_path, tmp_path_factory.mktemp("think") / "think.gguf", THINK)
    with Model(path) as m:
        yield m


def split(fmt: str, text: str, step: int) -> tuple[str, str]:
    s = Splitter(fmt)
    out: list[str] = []
    for i in range(0, len(text), step):
        out += s.push(text[i : i + step])
    out += s.flush()
    return (
        "".join(p for p in out if isinstance(p, Thought)),
        "".join(p for p in out if not isinstance(p, Thought)),
    )


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_thinking_is_split_from_the_answer_however_the_text_arrives(step: int) -> None:
    # a think reply opened with thinking on starts inside its reasoning
    think = "\n\nThe user wants 6*7.\n</think>\n\nIt is 42."
    assert split("think", think, step) == ("The user wants 6*7.\n", "It is 42.")
    assert split("think", "still going", step) == ("still going", "")  # cut off: no answer
    harmony = (
        "<|channel|>analysis<|message|>Easy sum.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>It is 42."
    )
    assert split("harmony", harmony, step) == ("Easy sum.", "It is 42.")
    # a gpt-oss reply that opens no channel is all answer, markup-like text included
    assert split("harmony", "x < 5 and <| y", step) == ("", "x < 5 and <| y")
    # channels are named exactly; a header may follow a message without an end marker
    tool = "<|channel|>commentary to=functions.finalize<|message|>{}<|call|>"
    assert split("harmony", tool, step) == ("{}", "")
    two = "<|channel|>analysis<|message|>a<|channel|>final<|message|>b"
    assert split("harmony", two, step) == ("a", "b")
    assert split("", "<think>a</think>b", step) == ("", "<think>a</think>b")


def test_an_answer_the_prompt_began_is_all_answer() -> None:
    for fmt in ("think", "harmony"):
        s = Splitter(fmt, answering=True)
        pieces = s.push(" 42, because") + s.push(" it is.") + s.flush()
        assert pieces == [" 42, because", " it is."]
        assert not any(isinstance(p, Thought) for p in pieces)


def test_the_format_is_read_from_the_template(
    model: Model, thinker: Model, model_path: Path, tmp_path: Path
) -> None:
    assert model.reasoning == ""
    assert thinker.reasoning == "think"
    with Model(retemplate(model_path, tmp_path / "harmony.gguf", HARMONY)) as gpt:
        assert gpt.reasoning == "harmony"


def test_with_thinking_off_every_reply_opens_without_it(model: Model, thinker: Model) -> None:
    plain = template(model).header
    off = opening("think", think=False)
    assert off == "<think>\n\n</think>\n\n"
    assert template(thinker).header == plain + off
    assert frame(thinker).after_question == frame(model).after_question + off
    assert template(thinker).reply("Hi.") == template(thinker).plain("Hi.")
    assert frame(thinker).cue == frame(model).cue == "Answer: "
    thinker.think = True
    try:
        assert template(thinker).header == plain + "<think>"
        assert frame(thinker).after_question == frame(model).after_question + "<think>"
        assert frame(thinker).cue == ""  # the reply opens with its reasoning, not an answer
        # a past reply: its answer after an empty block, as with thinking off
        tpl = template(thinker)
        past = tpl.special(tpl.header) + tpl.reply("Hi.")
        assert thinker.detokenize(past).endswith("<think>\n\n</think>\n\nHi.")
        for text in ("\nhm\n</think>\n\nYes.", "hm</think> Yes.", "\nstill thinking"):
            reply = thinker.tokenize(text)
            kept = thinker.detokenize(reply[thought_tokens(thinker, reply) :])
            assert kept.strip() == text.partition("</think>")[2].strip()
    finally:
        thinker.think = False
    assert model.reply_opening == ""  # other models are untouched


def _reply(m: Model, prompt: str) -> list[str]:
    with Context(m, 512, 1, 256, 2) as ctx:
        tokens = m.tokenize(prompt, add_special=True)
        ctx.decode(tokens, 0, 0)
        gen = Generation(pos=len(tokens))
        with Sampler(SamplerSettings(temperature=0.0, guard="off"), m) as s:
            return list(generate(ctx, s, 0, gen, 16))


def test_a_thinking_reply_streams_its_reasoning_apart(thinker: Model) -> None:
    # the pattern makes the greedy reply close its think block as the lines before it do
    lines = "".join(f"Q{i}: <think>add one</think> {i + 1}\n" for i in range(1, 6))
    prompt = lines + "Q6: <think>"
    thinker.think = True
    try:
        pieces = _reply(thinker, prompt)
    finally:
        thinker.think = False
    assert "".join(p for p in pieces if isinstance(p, Thought)) == "add one"
    assert "".join(p for p in pieces if not isinstance(p, Thought)).startswith("7")
    # thinking off: the reply is text as the model wrote it (nothing split)
    off = _reply(thinker, prompt)
    assert not any(isinstance(p, Thought) for p in off)
    assert "".join(off).lstrip().startswith("add one</think>")


def test_a_gpt_oss_template_is_paged_message_by_message(model_path: Path, tmp_path: Path) -> None:
    # llama.cpp renders a past reply as `<|start|>assistant<|message|>…<|return|>` after a
    # `<|start|>assistant` header; this was refused as "merges messages" before
    with Model(retemplate(model_path, tmp_path / "gpt.gguf", GPT_OSS)) as gpt:
        assert gpt.reasoning == "harmony"
        tpl = template(gpt)
        assert tpl.header == "<|start|>assistant<|channel|>final<|message|>"  # thinking off
        assert tpl.reply_close == "<|return|>"
        assert tpl.reply("Hi.") == tpl.plain("Hi.")
        gpt.think = True
        thinking = template(gpt)
        assert thinking.header == "<|start|>assistant"  # the model opens its channel
        # a past reply is its answer in the final channel, however it was reached
        assert gpt.detokenize(thinking.reply("Hi.")) == "<|channel|>final<|message|>Hi."
