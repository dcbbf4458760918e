"""Fixtures of the fault-injection suite: a template store, copied for every scenario."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.documents.helpers import SMALL, write_text
from tests.faults.helpers import run


@pytest.fixture(scope="package")
def template(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Path:
    """A store holding the ready document `base` (copied for every scenario)."""
    home = tmp_path_factory.mktemp("template")
    (home / "models").mkdir()
    (home / "models" / model_path.name).symlink_to(model_path)
    src = write_text(home / "base.txt", 1500)
    assert run(["ingest", str(src), "--name", "base", *SMALL], home).returncode == 0
    return home


@pytest.fixture()
def fresh(template: Path, tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to((template / "models").resolve())
    shutil.copytree(template / "store", home / "store")
    yield home
