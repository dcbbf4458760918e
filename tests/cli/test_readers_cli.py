"""Readers beside a writer: `ask` and `stats` work while an `ingest` runs, and see its counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.ingest_helpers import ask_json, check_answer_shape, cli, ingest, stats_json
from tests.documents.helpers import SMALL, popen_cli, wait_for_chunks, write_text
from tests.wait import until

pytestmark = pytest.mark.subprocess


@pytest.mark.slow
def test_ask_and_stats_beside_a_running_ingest(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "x.txt", 3000), "x")
    written0 = stats_json(home)["tiers"]["disk"]["bytes_written"]
    big = write_text(tmp_path / "big.txt", 40000)
    writer = popen_cli(["ingest", str(big), "--name", "big", *SMALL], home)
    try:
        wait_for_chunks(writer, home, 3)
        data = ask_json(home, "x", "Who is Sir Walter Elliot?")  # exit 0, not 'in use'
        check_answer_shape(data, home, "x")
        # the ask answered while the ingest still ran: it did not wait for the writer
        assert writer.poll() is None, "the ingest finished before the ask answered"
        chat = cli(["chat", "--max-tokens", "4", "--temperature", "0"], home, stdin="Hello\n")
        assert chat.returncode == 0 and chat.stdout.strip(), chat.stderr

        def merged() -> int:
            """The disk's bytes written, once more than before the ingest, as `stats` shows
            them while the ingest still runs (it merges its counters every 2 s)."""
            written = stats_json(home)["tiers"]["disk"]["bytes_written"]
            assert writer.poll() is None, "the ingest finished too early to test beside it"
            return written if written > written0 else 0

        # (each look runs `cascade stats`: not too often, the ingest needs the cores)
        running = until(merged, what="a running ingest's counters in the index", interval=0.5)
    finally:
        writer.kill()
        writer.wait(30)
    assert writer.returncode == -9
    assert stats_json(home)["tiers"]["disk"]["bytes_written"] >= running  # kept after a kill
