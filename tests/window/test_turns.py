"""Templates split per message: llama.cpp's Mistral v7 format, whose past replies open with a
space the reply header lacks (refused as "merges messages" before), chats like ChatML."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascade_cli.engine import Model
from cascade_cli.window.turns import template
from tests.cli.helpers import run_cli
from tests.engine.retemplate import retemplate

pytestmark = pytest.mark.subprocess

MISTRAL_V7 = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}[SYSTEM_PROMPT] "
    "{{ m['content'] }}[/SYSTEM_PROMPT]{% elif m['role'] == 'user' %}[INST] {{ m['content'] }}"
    "[/INST]{% else %} {{ m['content'] }}</s>{% endif %}{% endfor %}"
)


@pytest.mark.slow
def test_a_mistral_v7_template_pages_message_by_message(
    model_path: Path, home: Path, tmp_path: Path
) -> None:
    path = retemplate(model_path, home / "models" / "mistral.gguf", MISTRAL_V7)
    with Model(path) as m:
        tpl = template(m)
        assert (tpl.user_open, tpl.user_close, tpl.header) == ("[INST] ", "[/INST]", "")
        assert tpl.reply_close == "</s>"
        # a past reply opens with a space: its own first token's, or added to a trimmed one
        assert tpl.reply("Hi.") == tpl.reply(" Hi.") == tpl.plain(" Hi.")
    chat = ["chat", "--session", "m", "--model", str(path), "--temperature", "0"]
    first = run_cli(chat, home, stdin="Hello there.\nAnd again.\n")
    assert first.returncode == 0, first.stderr
    shown = run_cli(chat, home, stdin="/history\n")
    assert shown.stdout.count("user:") == 2 and "And again." in shown.stdout
