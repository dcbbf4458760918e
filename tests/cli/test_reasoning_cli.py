"""`--think` end to end: the default model in a reasoning model's template, through `ask` and
`chat` (real processes, real store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import ask_json, cli, ingest
from tests.documents.helpers import write_text
from tests.engine.retemplate import THINK, retemplate

pytestmark = pytest.mark.subprocess


def test_think_off_answers_at_once_and_on_reports_reasoning(
    home: Path, tmp_path: Path, model_path: Path
) -> None:
    thinker = retemplate(model_path, home / "models" / "think.gguf", THINK)
    src = write_text(tmp_path / "doc.txt", 3000)
    ingest(home, src, "doc", "--model", str(thinker))
    off = ask_json(home, "doc", "What is free software?", "--model", str(thinker))
    assert off["answer"].strip() and "<think>" not in off["answer"]
    assert off["reasoning"] == ""
    on = ask_json(home, "doc", "What is free software?", "--model", str(thinker), "--think", "on")
    assert "<think>" not in on["answer"] and isinstance(on["reasoning"], str)
    # thinking off decodes the empty think block the template's own no-thinking mode adds
    assert off["timings"]["prefill_tokens"] > on["timings"]["prefill_tokens"]

    greedy = ["chat", "--session", "t", "--model", str(thinker), "--temperature", "0"]
    chat = cli(greedy, home, stdin="Hi there.\n")
    assert chat.returncode == 0, chat.stderr
    shown = cli(greedy, home, stdin="/history\n")
    # the transcript holds the reply's text, not the empty think block decoded before it
    assert "Hi there." in shown.stdout and "</think>" not in shown.stdout

    bad = cli(["ask", "doc", "Why?", "--model", str(thinker), "--think", "maybe"], home)
    assert_one_line_error(bad, "think")
