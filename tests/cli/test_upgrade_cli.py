"""A store made by the previous release opens and serves with this one: the one content address
(store/address.py) renamed the sink keys (a migration) and kept the prompt blocks' digest."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from cascade_cli.prompts.render import block_address
from tests.cli.ingest_helpers import ASK_SMALL, cli
from tests.documents.helpers import ROOT, SMALL, env_for, query, write_text

#: The last commit before the one content address (stop 35's main).
RELEASE = "7e97164"


@pytest.fixture()
def release(tmp_path: Path) -> Path:
    """The previous release's package, unpacked from this checkout's history."""
    try:
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", RELEASE, "cascade_cli", "models"],
            capture_output=True, check=True, timeout=120,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"commit {RELEASE} is not in this checkout (a shallow clone)")
    dest = tmp_path / "release"
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(dest, filter="tar")
    return dest


def old_cli(args: list[str], home: Path, release: Path) -> subprocess.CompletedProcess[str]:
    env = {**env_for(home), "PYTHONPATH": str(release)}
    return subprocess.run(
        [sys.executable, "-m", "cascade_cli", *args],
        capture_output=True, text=True, timeout=600, env=env, check=False, cwd=release,
    )  # fmt: skip


@pytest.mark.subprocess
def test_a_store_made_by_the_previous_release_opens_and_serves(
    home: Path, release: Path, tmp_path: Path
) -> None:
    src = write_text(tmp_path / "book.txt", 3000)
    made = old_cli(["ingest", str(src), "--name", "book", *SMALL], home, release)
    assert made.returncode == 0, made.stderr
    (old_key,) = [k for (k,) in query(home, "SELECT key FROM chunks WHERE owner = 'sink'")]
    assert len(old_key) == len("sink:") + 20  # the old width: this is the old release's store
    # a writer (chat) applies the migration: the sink keeps its state under its full key
    chat = subprocess.run(
        [sys.executable, "-m", "cascade_cli", "chat", "--doc", "book", "--gpu-cache-size", "512",
         "--temperature", "0", "--max-tokens", "8"],
        input="Who is Sir Walter?\n", capture_output=True, text=True, timeout=600,
        env=env_for(home), check=False,
    )  # fmt: skip
    assert chat.returncode == 0 and "Traceback" not in chat.stderr, chat.stderr
    (new_key,) = [k for (k,) in query(home, "SELECT key FROM chunks WHERE owner = 'sink'")]
    assert new_key.startswith(old_key) and len(new_key) == len("sink:") + 64
    asked = cli(["ask", "book", "Who is Sir Walter Elliot?", "--json", *ASK_SMALL], home)
    assert asked.returncode == 0, asked.stderr
    data = json.loads(asked.stdout)
    assert data["sink"]["tier"] in ("disk", "ram"), data["sink"]  # served, not recomputed
    assert all(c["tier"] != "recomputed" for c in data["chunks"]), data["chunks"]
    checked = cli(["verify"], home)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_prompt_blocks_address_is_the_digest_earlier_releases_stored() -> None:
    """Stored server blocks are found by their address: the one content address gives the
    same digest the blocks of earlier releases were stored under."""
    fp, parent, tokens = "fingerprint", "parent", [1, 2, 300000]
    h = hashlib.sha256()
    h.update(fp.encode())
    h.update(b"\0" + parent.encode() + b"\0")
    h.update(np.asarray(tokens, dtype="<i4").tobytes())
    assert block_address(fp, parent, tokens) == h.hexdigest()
