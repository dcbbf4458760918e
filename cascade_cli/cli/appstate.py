"""Process-wide CLI state set by the top-level callback."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from cascade_cli.config import Settings, resolve
from cascade_cli.engine.reasoning import Thought
from cascade_cli.registry import model_defaults


@dataclass
class CliState:
    debug: bool = False
    config: Path | None = None


STATE = CliState()
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def shown(value: object) -> str:
    """User-supplied text (a name, a path, an error naming them) made safe inside Rich markup."""
    return escape(str(value))


def settings(flags: dict[str, Any]) -> Settings:
    """Resolve settings with this invocation's --config and flags."""
    return resolve(flags, STATE.config, model_defaults)


class Answer:
    """Writes a reply's pieces as they stream: the answer to stdout, a reasoning model's
    thinking (engine.reasoning.Thought) dimmed to `aside`, a line of its own."""

    def __init__(self, aside: Console) -> None:
        self.aside = aside
        self.thinking = False

    def write(self, piece: str) -> None:
        if isinstance(piece, Thought):
            self.aside.print(piece, style="dim italic", end="", markup=False, highlight=False)
            self.thinking = True
            return
        if self.thinking:
            self.aside.print()
            self.thinking = False
        sys.stdout.write(piece)
        sys.stdout.flush()
