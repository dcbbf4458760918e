"""Shared pieces of the ingest/ask CLI tests."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.cli.helpers import run_cli
from tests.documents.helpers import (
    SMALL,
    chunk_rows,
    doc_id,
    env_for,
    write_text,
)

ASK_SMALL = ["--gpu-cache-size", "512", "--max-tokens", "16"]


def cli(args: list[str], home: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """run_cli with one llama.cpp thread (see env_for)."""
    return run_cli(args, home, stdin=stdin, env=env_for(home))


def assert_error_last(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    """Non-zero exit, no traceback, and the last stderr line is the error naming `fragment`."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and fragment in lines[-1], proc.stderr


def ingest(home: Path, path: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = cli(["ingest", str(path), "--name", name, *SMALL, *extra], home)
    assert proc.returncode == 0, proc.stderr
    return proc


def ask_json(home: Path, doc: str, question: str, *extra: str) -> dict[str, Any]:
    proc = cli(["ask", doc, question, "--json", *ASK_SMALL, *extra], home)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def stats_json(home: Path) -> dict[str, Any]:
    proc = cli(["stats", "--json"], home)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def docs_json(home: Path) -> list[dict[str, Any]]:
    proc = cli(["docs", "--json"], home)
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)["documents"]
    return rows


def check_answer_shape(data: dict[str, Any], home: Path, name: str) -> None:
    """The --json document of `ask` and its figures against the store."""
    assert {"answer", "doc", "chunks", "timings"} <= set(data)
    assert data["doc"] == name
    assert isinstance(data["answer"], str) and data["answer"].strip()
    timings = data["timings"]
    assert set(timings) >= {
        "ttft_s",
        "recall_s",
        "restore_s",
        "restored_tokens",
        "prefill_tokens",
        "gen_tokens",
        "tokens_per_s",
    }
    rows = {r["idx"]: r for r in chunk_rows(home, f"doc:{doc_id(home, name)}")}
    chunks = data["chunks"]
    assert chunks, "no chunk was paged in"
    idx = [c["index"] for c in chunks]
    assert len(idx) == len(set(idx))  # distinct; runs of adjacent chunks in document order
    for a, b in itertools.pairwise(idx):
        assert b != a - 1
    for c in chunks:
        assert {"index", "tokens", "tier"} <= set(c)
        assert c["tier"] in ("ram", "disk", "recomputed")
        assert c["tokens"] == len(rows[c["index"]]["tokens"])
    restored = sum(c["tokens"] for c in chunks if c["tier"] in ("ram", "disk"))
    assert timings["restored_tokens"] == restored
    assert 0 < timings["gen_tokens"] <= 16
    assert timings["prefill_tokens"] > 0
    assert 0 < timings["restore_s"] <= timings["ttft_s"]
    assert 0 <= timings["recall_s"] <= timings["ttft_s"]
    assert timings["tokens_per_s"] >= 0


def store_with_x(home: Path, model_path: Path, chars: int) -> Path:
    """A home whose store holds one document, `x` (`chars` characters of the sample): what a
    hostile input must leave untouched."""
    (home / "models").mkdir()
    (home / "models" / model_path.name).symlink_to(model_path)
    proc = cli(["ingest", str(write_text(home / "x.txt", chars)), "--name", "x", *SMALL], home)
    assert proc.returncode == 0, proc.stderr
    return home
