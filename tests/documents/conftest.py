"""A small context and a library over a fresh store, for the in-process paging tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from cascade_cli.config import Settings
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context, Model
from tests.documents.helpers import BLOCK, WINDOW


@pytest.fixture()
def ctx(model: object) -> Iterator[Context]:
    with Context(
        cast(Model, model), n_ctx=WINDOW + BLOCK + 256, n_seq_max=4, n_batch=BLOCK, n_threads=1
    ) as c:
        yield c


@pytest.fixture()
def lib(home: Path, ctx: Context) -> Iterator[Library]:
    cfg = Settings(
        gpu_cache_size=WINDOW, block_size=BLOCK, disk_cache_path=home / "store", threads=1
    )
    with Library(cfg, ctx) as library:
        yield library
