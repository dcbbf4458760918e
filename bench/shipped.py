"""What `ask` ships for a model file: the settings its registry entry sets for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cascade_cli.registry import registry


def shipped(model: Path) -> dict[str, Any]:
    """The settings a model's registry entry sets for it (`[models.NAME.defaults]`, found by
    the model's file name; {} for a file it does not list)."""
    spec = next((s for s in registry()[1].values() if s.file == model.name), None)
    return dict(spec.defaults) if spec else {}
