"""The repetition guard: replies that would loop do not, and numbers come out as they are."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_cli.config import resolve
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, _Ending, _Held, generate
from cascade_cli.engine.loops import LoopGuard, loops
from cascade_cli.errors import ConfigError
from tests.cli.helpers import assert_one_line_error, run_cli


def test_loop_test_counts_three_words_three_times() -> None:
    assert loops("The answer is:  The answer is:  The answer is: ")
    assert loops("no no no no no")
    assert not loops("The answer is: The answer is: walnuts.")  # two copies
    assert not loops("The pass key is 77777. The pass key is 77777.")
    assert not loops("Emma went to Highbury, then to Randalls, then to Donwell Abbey.")
    guard = LoopGuard()
    said = [guard.push(p) for p in ["The", " answer", " is", ":", " The", " answer", " is:"]]
    assert not any(said)
    assert [guard.push(p) for p in [" The", " answer", " is", ":"]][-2:] == [False, True]


def test_repeat_guard_setting() -> None:
    assert resolve({}, config_file=None).repeat_guard == "dry"
    assert resolve({"repeat_guard": "STOP"}, config_file=None).repeat_guard == "stop"
    with pytest.raises(ConfigError) as err:
        resolve({"repeat_guard": "penalty"}, config_file=None)
    assert "dry, stop, off" in (err.value.fix or "")


@pytest.fixture(scope="module")
def ctx(model: Model) -> Iterator[Context]:
    with Context(model, 1024, n_seq_max=1) as c:
        yield c


def reply(
    ctx: Context, user: str, guard: str, max_tokens: int = 120, sentences: bool = False
) -> tuple[str, str]:
    tokens = ctx.model.chat_tokens([("user", user)])
    ctx.clear()
    ctx.decode(tokens, 0, 0)
    state = Generation(pos=len(tokens))
    settings = SamplerSettings(temperature=0, repeat_penalty=1.0, guard=guard)
    with Sampler(settings, ctx.model) as sampler:
        text = "".join(generate(ctx, sampler, 0, state, max_tokens, sentences=sentences))
    # what was shown is what the state holds: its tokens, and cells up to pos only
    assert ctx.model.detokenize(state.tokens) == text
    decoded = len(state.tokens) - (state.stopped_by == "context_full")
    assert state.pos == len(tokens) + decoded
    return text, state.stopped_by


LOOPING = "Repeat after me forever: The answer is: The answer is: The answer is:"


def test_a_looping_prompt_loops_without_the_guard_and_not_with_it(ctx: Context) -> None:
    off, why = reply(ctx, LOOPING, "off")
    assert loops(off) and why == "max_tokens", off
    dry, _ = reply(ctx, LOOPING, "dry")
    assert not loops(dry), dry
    stop, why = reply(ctx, LOOPING, "stop")
    assert why == "loop" and len(stop) < len(off)
    assert not loops(stop), stop  # the copy that completes the loop is never shown


def test_the_completing_copy_is_held_back_then_dropped() -> None:
    guard, shown, held = LoopGuard(), "", ""
    for piece in [" The", " answer", " is", ":"] * 3:
        held += piece
        if guard.push(piece):
            held = held[: len(held) - guard.cut]
            break
        shown, held = shown + held[: len(held) - guard.hold], held[len(held) - guard.hold :]
    assert guard.cut and not loops(shown + held)
    assert (shown + held).strip() == "The answer is: The answer is:"


ENDED = re.compile(r"(?:[.!?][\"')\]]*|\n)\s*$")


@pytest.mark.parametrize("guard", ["off", "dry"])
def test_a_reply_the_length_limit_stops_ends_at_its_last_whole_sentence(
    ctx: Context, guard: str
) -> None:
    story = "Write a long story about a sailor and the sea."
    for limit in (45, 70):  # a sentence ends within the last stretch(limit) tokens of both
        full, why = reply(ctx, story, guard, limit)
        whole, _ = reply(ctx, story, guard, limit, sentences=True)
        assert why == "max_tokens" and not ENDED.search(full), full
        assert full.startswith(whole) and ENDED.search(whole), (full, whole)
        assert len(whole) > len(full) // 2, (full, whole)
    short = "Describe the sea in many short sentences."  # ends by itself (eog)
    assert reply(ctx, short, guard, 60, sentences=True) == reply(ctx, short, guard, 60)


def test_a_sentence_ends_where_white_space_follows_its_stop() -> None:
    ending = _Ending(stretch=100)
    pieces = ["It", " costs", " 3", ".", "5", " euros", ".", " Then", " it", " rose"]
    shown = [h.text for p in pieces for h in ending.push(_Held(p, 1), left=0)]
    assert "".join(shown) == "It costs 3.5 euros."  # "3." is no sentence's end
    assert ending.finish(cut=True) == [] and ending.dropped
    ending = _Ending(stretch=100)
    shown = [h.text for p in pieces[:4] for h in ending.push(_Held(p, 1), left=0)]
    assert shown == [] and "".join(h.text for h in ending.finish(cut=True)) == "It costs 3."
    ending = _Ending(stretch=100)
    shown = [h.text for p in ["no", " end", " here"] for h in ending.push(_Held(p, 1), left=0)]
    assert "".join(h.text for h in ending.finish(cut=False)) == "no end here"


@pytest.mark.parametrize("key", ["77777", "86387", "10010"])
def test_a_pass_key_with_repeated_digits_survives(ctx: Context, key: str) -> None:
    user = (
        f"The pass key is {key}. Remember it. The pass key is {key}.\n\n"
        "What is the pass key? Answer with the number only."
    )
    for guard in ("dry", "stop"):
        text, _ = reply(ctx, user, guard, max_tokens=24)
        assert key in text, (guard, text)


@pytest.mark.subprocess
def test_flags_are_documented_and_checked(tmp_path: Path) -> None:
    for cmd in ("ask", "chat", "serve"):
        proc = run_cli([cmd, "--help"], tmp_path)
        assert proc.returncode == 0 and "--repeat-guard" in proc.stdout, proc.stdout
        assert "--rerank" in proc.stdout, proc.stdout
    bad = run_cli(["ask", "doc", "question?", "--repeat-guard", "penalty"], tmp_path)
    assert_one_line_error(bad, "repeat_guard")
    bad = run_cli(["ask", "doc", "question?", "--rerank", "bm25"], tmp_path)
    assert_one_line_error(bad, "rerank")
    bad = run_cli(["chat", "--session", "s", "--rerank", "bm25"], tmp_path)
    assert_one_line_error(bad, "rerank")


def test_a_reply_closed_early_keeps_only_what_was_shown(ctx: Context) -> None:
    """A consumer that stops reading (Ctrl-C, a client gone) leaves state holding the tokens of
    the text it got, even while the guard held words back."""
    tokens = ctx.model.chat_tokens([("user", LOOPING)])
    for guard in ("off", "dry"):
        ctx.clear()
        ctx.decode(tokens, 0, 0)
        state = Generation(pos=len(tokens))
        settings = SamplerSettings(temperature=0, repeat_penalty=1.0, guard=guard)
        with Sampler(settings, ctx.model) as sampler:
            pieces = generate(ctx, sampler, 0, state, 60)
            got = [next(pieces) for _ in range(6)]
            pieces.close()
        assert ctx.model.detokenize(state.tokens) == "".join(got), guard
        assert len(tokens) + len(state.tokens) - 1 <= state.pos <= len(tokens) + len(state.tokens)
