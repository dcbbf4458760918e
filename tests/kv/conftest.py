"""Real KV blobs from the default model (flash attention off → V transposed, on → not)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from cascade_cli import kv
from cascade_cli.samples import PERSUASION

TEXT = PERSUASION
N_TOKENS = 70  # not a multiple of any block size


@pytest.fixture(scope="session", autouse=True)
def ggml_kernels() -> Iterator[None]:
    """Load the ggml kernels for the whole kv suite (tests pass native=False for numpy)."""
    from cascade_cli.engine import library_dir

    kv.configure(library_dir())
    yield
    kv.configure(None)


@pytest.fixture(scope="session")
def tokens(model: object) -> list[int]:
    text = TEXT.read_text()
    text = text[text.find("Sir Walter Elliot") :]  # prose, past the title page's blank lines
    return model.tokenize(text)  # type: ignore[attr-defined]


@pytest.fixture(scope="session", params=["off", "on"])
def real_blob(request: pytest.FixtureRequest, model: object, tokens: list[int]) -> np.ndarray:
    from cascade_cli.engine import Context

    with Context(model, 256, n_seq_max=2, flash_attn=request.param) as ctx:  # type: ignore[arg-type]
        ctx.decode(tokens[:N_TOKENS], 5, seq_id=1, logits="none")
        return ctx.state_get(1).copy()
