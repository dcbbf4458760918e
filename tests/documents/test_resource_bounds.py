"""100 consecutive asks in one process: resident memory and open file descriptors stay flat."""

from __future__ import annotations

import gc
import os
import resource
from pathlib import Path

import pytest

from cascade_cli.documents.ingest import ingest
from cascade_cli.documents.library import Library
from cascade_cli.engine import Context
from cascade_cli.window.ask import AskResult, ask
from tests.documents.helpers import WINDOW, write_text

QUESTIONS = ("Who is Sir Walter Elliot?", "What did Lady Russell advise?", "Where is Kellynch?")


def rss_bytes() -> int:
    """Resident set size now (Linux), else the peak so far (a flat peak is flat too)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if os.uname().sysname == "Darwin" else peak * 1024


def open_fds() -> int:
    for where in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(where):
            return len(os.listdir(where))
    raise RuntimeError("cannot list open file descriptors here")


@pytest.mark.slow
def test_hundred_asks_keep_memory_and_descriptors_flat(
    ctx: Context, lib: Library, tmp_path: Path
) -> None:
    doc = ingest(ctx, lib, write_text(tmp_path / "m.txt", 6000), "m", "utf-8", lambda s: None)
    samples: list[tuple[int, int]] = []
    for i in range(100):
        result = AskResult(doc="m")
        list(ask(ctx, lib, doc, QUESTIONS[i % 3], result, window=WINDOW, max_tokens=2))
        assert result.chunks
        if i % 10 == 9:
            gc.collect()
            samples.append((rss_bytes(), open_fds()))
    warm = samples[1:]  # from the 20th ask on: caches, pools and the RAM tier are filled
    fds = {f for _, f in warm}
    assert len(fds) == 1, f"open descriptors changed over the asks: {[f for _, f in samples]}"
    growth = warm[-1][0] - warm[0][0]
    per_ask = growth / 80
    assert per_ask < 64 * 1024, f"RSS grew {growth / 2**20:.1f} MiB over 80 asks"
    assert max(r for r, _ in warm) - min(r for r, _ in warm) < 16 * 2**20, samples
