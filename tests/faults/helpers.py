"""Shared pieces of the fault-injection suite: CLI runs with a crash point, verify --repair."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cascade_cli.store.files import CRASH_ENV
from tests.documents.helpers import SMALL, chunk_rows, env_for, query, write_text

QUESTION = "Who is Sir Walter Elliot?"
LEFTOVERS = {"temp_file", "orphan_file"}


def run(
    args: list[str],
    home: Path,
    crash: str | None = None,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m cascade_cli ARGS` (killed at `crash` when given)."""
    env = {**env_for(home), **(env or {})}
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run(
        [sys.executable, "-m", "cascade_cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=preexec,
    )


def rows_of(home: Path, name: str) -> dict[str, tuple[str, float]]:
    """key -> (file, created) of the newest version of `name` (any status)."""
    ids = query(home, "SELECT id FROM documents WHERE name = ? ORDER BY version DESC", (name,))
    if not ids:
        return {}
    return {r["key"]: (r["file"], r["created"]) for r in chunk_rows(home, f"doc:{ids[0][0]}")}


def settle(home: Path, allowed: set[str]) -> dict[str, Any]:
    """`verify --repair`: only `allowed` kinds of damage, all fixed; then `verify` is clean."""
    proc = run(["verify", "--repair", "--json"], home)
    assert "Traceback" not in proc.stderr, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    assert {f["kind"] for f in report["damaged"]} <= allowed, report
    assert all(f["action"] for f in report["damaged"]), report
    assert proc.returncode == (1 if report["damaged"] else 0)
    again = run(["verify"], home)
    assert again.returncode == 0, again.stdout
    return report


def new_doc(home: Path) -> list[str]:
    """The command that ingests a new document `f` (about 5 chunks)."""
    return ["ingest", str(write_text(home / "f.txt", 2500, start=3000)), "--name", "f", *SMALL]


def ask_args(doc: str) -> list[str]:
    return ["ask", doc, QUESTION, "--json", "--gpu-cache-size", "512", "--max-tokens", "8"]
