"""Shared fixtures: the real default model, loaded once per session."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.suite_model import TEST_MODEL

ROOT = Path(__file__).resolve().parent.parent
#: Models are pulled once into this home (CASCADE_TEST_HOME overrides); tests never re-download.
MODEL_HOME = Path(os.environ.get("CASCADE_TEST_HOME", ROOT / ".cascade-test"))

# A suite started with SIGINT ignored (nohup, `cmd &` in a script) would hand that on to every
# process it starts, and the tests that press Ctrl-C need children that hear it (an ignored
# signal stays ignored across exec; a handled one is reset to the default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: The fixtures that pull a real model file; every test that uses one (directly or through
#: another fixture: model, gemma, home, ctx, …) loads a real GGUF and is marked `model`.
MODEL_FIXTURES = frozenset({"model_path", "embed_model_path", "gemma_path"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `model` the tests that need a real model (see pyproject.toml's markers)."""
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


def _pulled(name: str) -> Path:
    """A registry model's file, pulled into MODEL_HOME on first use."""
    from cascade_cli.registry import resolve_model

    old = os.environ.get("CASCADE_HOME")
    os.environ["CASCADE_HOME"] = str(MODEL_HOME)
    try:
        return resolve_model(name)
    finally:
        if old is None:
            os.environ.pop("CASCADE_HOME", None)
        else:
            os.environ["CASCADE_HOME"] = old


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The suite's model file (tests/suite_model.py), pulled into MODEL_HOME on first use."""
    return _pulled(TEST_MODEL)


@pytest.fixture(scope="session")
def embed_model_path() -> Path:
    """The default sentence-embedding model (recall), pulled into MODEL_HOME on first use."""
    from cascade_cli.registry import DEFAULT_EMBED

    return _pulled(DEFAULT_EMBED)


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma 3 270M (sliding-window attention, iSWA cache): the second architecture."""
    return _pulled("gemma3-270m")


@pytest.fixture(scope="session")
def gemma(gemma_path: Path) -> Iterator[object]:
    """Gemma 3 270M, loaded once."""
    from cascade_cli.engine import Model

    with Model(gemma_path) as m:
        yield m


@pytest.fixture(scope="session")
def model(model_path: Path) -> Iterator[object]:
    """The suite's model, loaded once."""
    from cascade_cli.engine import Model

    with Model(model_path) as m:
        yield m


@pytest.fixture()
def home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_path: Path, embed_model_path: Path
) -> Path:
    """An isolated CASCADE_HOME whose models/ already holds the suite's model and the default
    embedding model (symlinks); CASCADE_MODEL names the suite's model."""
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    for key in list(os.environ):
        if key.startswith("CASCADE_") and key != "CASCADE_HOME":
            monkeypatch.delenv(key)
    monkeypatch.setenv("CASCADE_MODEL", TEST_MODEL)
    (tmp_path / "models").mkdir()
    for path in (model_path, embed_model_path):
        (tmp_path / "models" / path.name).symlink_to(path)
    return tmp_path
