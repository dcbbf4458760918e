"""Readers beside a writer: `ask` and `stats` work while an `ingest` runs, and see its counters."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cli.ingest_helpers import ask_json, check_answer_shape, cli, ingest, stats_json
from tests.paging.helpers import SMALL, committed_chunks, popen_cli, write_text


def test_ask_and_stats_beside_a_running_ingest(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "x.txt", 3000), "x")
    written0 = stats_json(home)["tiers"]["disk"]["bytes_written"]
    big = write_text(tmp_path / "big.txt", 40000)
    writer = popen_cli(["ingest", str(big), "--name", "big", *SMALL], home)
    try:
        base = committed_chunks(home)
        deadline = time.monotonic() + 120
        while committed_chunks(home) < base + 3:
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        t0 = time.monotonic()
        data = ask_json(home, "x", "Who is Sir Walter Elliot?")  # exit 0, not 'in use'
        check_answer_shape(data, home, "x")
        assert time.monotonic() - t0 < 60
        chat = cli(["chat", "--max-tokens", "4", "--temperature", "0"], home, stdin="Hello\n")
        assert chat.returncode == 0 and chat.stdout.strip(), chat.stderr
        time.sleep(2.5)  # the writer merges its counters every 2 s
        running = stats_json(home)["tiers"]["disk"]["bytes_written"]
        assert writer.poll() is None, "the ingest finished too early to test beside it"
        assert running > written0, "a running ingest's counters are not in the index"
    finally:
        writer.kill()
        writer.wait(30)
    assert writer.returncode == -9
    assert stats_json(home)["tiers"]["disk"]["bytes_written"] >= running  # kept after a kill
