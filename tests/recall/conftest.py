"""The recall tests' store: a real DiskStore with the real embedding model (no KV: recall reads
only the index)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_cli.engine.embed import Embedder
from cascade_cli.recall import Recall
from cascade_cli.store import DiskStore


class Lib:
    """What Recall needs of a Library: the disk store and the embedding model's factory."""

    def __init__(self, disk: DiskStore, embed: Path | None) -> None:
        self.disk = disk
        self.embedder_factory = (lambda: Embedder(embed)) if embed else None


@pytest.fixture()
def recall(tmp_path: Path, embed_model_path: Path) -> Iterator[Recall]:
    with DiskStore.open(tmp_path / "store", "recall-test") as disk:
        r = Recall(Lib(disk, embed_model_path))
        try:
            yield r
        finally:
            r.close()
