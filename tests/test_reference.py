"""The reference pages (docs/commands.md, docs/settings.md) match what scripts/reference.py
writes, and name every option and every setting."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer

from cascade_cli.cli.app import app
from cascade_cli.config import Settings, resolve
from cascade_cli.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference", ROOT / "scripts" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(command: Any, path: str = "cascade") -> list[tuple[str, Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, f"{path} {name}")
    return found


def test_reference_pages_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert _reference().main(["--check"]) == 0, capsys.readouterr().err


def test_check_names_a_stale_page_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = _reference()
    monkeypatch.setattr(reference, "DOCS", tmp_path / "docs")
    assert reference.main([]) == 0
    assert reference.main(["--check"]) == 0
    page = tmp_path / "docs" / "settings.md"
    page.write_text(page.read_text(encoding="utf-8") + "edited by hand\n", encoding="utf-8")
    capsys.readouterr()
    assert reference.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "docs/settings.md" in err and "commands.md" not in err
    assert "python scripts/reference.py" in err


def test_pages_name_every_option_and_setting() -> None:
    commands = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    settings = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    for path, command in _commands(typer.main.get_command(app)):
        assert f"## {path}\n" in commands
        for param in command.params:
            for name in (*param.opts, *param.secondary_opts):
                shown = f"`{name.upper()}`" if param.param_type_name == "argument" else f"`{name}`"
                assert shown in commands.split(f"## {path}\n")[1].split("\n## ")[0], (path, name)
    for field in dataclasses.fields(Settings):
        assert f"| `{field.name}` |" in settings
        assert f"`CASCADE_{field.name.upper()}`" in settings


def test_sizes_are_the_settings_that_take_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    takes_units = set()
    for field in dataclasses.fields(Settings):
        if field.type != "int":
            continue
        try:
            if getattr(resolve({field.name: "1KiB"}), field.name) == 1024:
                takes_units.add(field.name)
        except ConfigError:
            pass
    assert takes_units == set(_reference().SIZES)
