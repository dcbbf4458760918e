"""Run the real `cascade` CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.suite_model import TEST_MODEL


def run_cli(
    args: list[str],
    home: Path,
    stdin: str = "",
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m cascade_cli ARGS` with CASCADE_HOME=home (CASCADE_MODEL: the suite's model
    unless the environment or `env` names one)."""
    full_env = {
        "CASCADE_MODEL": TEST_MODEL,
        **os.environ,
        "CASCADE_HOME": str(home),
        "CASCADE_THREADS": "2",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "cascade_cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    """Non-zero exit, no traceback, one error line mentioning `fragment`."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0], lines[0]
