"""`cascade models list` fits 80 columns; `cascade models show NAME` prints a whole entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascade_cli.registry import DEFAULT_EMBED, registry
from tests.cli.helpers import assert_one_line_error, run_cli

pytestmark = pytest.mark.subprocess


def test_models_list_is_one_line_per_model(tmp_path: Path) -> None:
    proc = run_cli(["models", "list"], tmp_path, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    default, specs = registry()
    lines = proc.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in ([n] for n in specs)}
    assert sorted(rows) == sorted(specs), proc.stdout
    # a header, its rule, one row per model and the models directory: nothing wrapped
    assert len(lines) == 2 + len(specs) + 1, proc.stdout
    for name, line in rows.items():
        assert len(line.rstrip()) <= 80, line
        assert line.split()[4] == "no"  # ("98 MB"): nothing is pulled into a fresh home
        assert line.rstrip().endswith("default") == (name in (default, DEFAULT_EMBED))


def test_models_show_prints_every_field(tmp_path: Path) -> None:
    _, specs = registry()
    spec = specs["smollm2-135m"]
    proc = run_cli(["models", "show", spec.name], tmp_path)
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(":", 1) for line in proc.stdout.splitlines())
    for key in ("description", "file", "size", "sha256", "source", "path", "pulled"):
        assert key in fields, proc.stdout
    assert fields["sha256"].strip() == spec.sha256
    assert fields["pulled"].strip() == "no"
    assert fields["path"].strip() == str(tmp_path / "models" / spec.file)
    shown = json.loads(run_cli(["models", "show", spec.name, "--json"], tmp_path).stdout)
    assert shown["sha256"] == spec.sha256 and shown["pulled"] is False


def test_models_show_unknown_name(tmp_path: Path) -> None:
    proc = run_cli(["models", "show", "gpt-17"], tmp_path)
    assert_one_line_error(proc, "unknown model 'gpt-17'")
    assert "cascade models list" in proc.stderr
    assert proc.returncode == 3
