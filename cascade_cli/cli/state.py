"""Process-wide CLI state set by the top-level callback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from cascade_cli.config import Settings, resolve


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
    return resolve(flags, STATE.config)
