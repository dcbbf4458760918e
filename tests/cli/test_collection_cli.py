"""`cascade ingest DIR` makes a collection: skips said in one line, incremental re-ingest, resume
after a kill; `ask` across a collection's files (and `--doc`) pages in and cites each file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.ingest_helpers import ask_json, assert_error_last, cli
from tests.documents.helpers import (
    SMALL,
    env_for,
    kill_after_chunks,
    popen_cli,
    query,
    sample_text,
)

pytestmark = pytest.mark.subprocess


def _tree(root: Path, files: int = 4, chars: int = 1200) -> Path:
    """A small project: text files from the sample, a code file, ignored and binary ones."""
    for i in range(files):
        (root / "notes").mkdir(parents=True, exist_ok=True)
        (root / "notes" / f"part{i}.md").write_text(
            f"# Part {i}\n\n" + sample_text(chars, start=i * chars), encoding="utf-8"
        )
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "vault.py").write_text(
        'def vault_code() -> int:\n    """The vault code."""\n    return 4417\n', encoding="utf-8"
    )
    (root / ".gitignore").write_text("*.log\n", encoding="utf-8")
    (root / "debug.log").write_text("noise\n", encoding="utf-8")
    (root / "node_modules" / "x").mkdir(parents=True)
    (root / "node_modules" / "x" / "index.js").write_text("x\n", encoding="utf-8")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    return root


def _ready(home: Path) -> dict[str, int]:
    rows = query(home, "SELECT name, version FROM documents WHERE status = 'ready'")
    return {name: version for name, version in rows}


def test_a_folder_is_a_collection_and_ingesting_it_again_reads_only_what_changed(
    home: Path, tmp_path: Path
) -> None:
    root = _tree(tmp_path / "proj")
    first = cli(["ingest", str(root), *SMALL], home)
    assert first.returncode == 0, first.stderr
    assert "ingested collection proj: 6 files (6 added)" in first.stdout, first.stdout
    assert "skipped 1 ignored, 1 binary; --verbose lists them" in first.stderr, first.stderr
    names = {"proj/.gitignore", "proj/src/vault.py", *(f"proj/notes/part{i}.md" for i in range(4))}
    assert _ready(home) == dict.fromkeys(names, 1)
    other = tmp_path / "elsewhere" / "proj"  # another folder of the same name
    other.mkdir(parents=True)
    (other / "a.txt").write_text("hello there\n", encoding="utf-8")
    clash = cli(["ingest", str(other), *SMALL], home)
    assert_error_last(clash, "the collection 'proj' holds")
    assert _ready(home) == dict.fromkeys(names, 1)  # nothing of the first one dropped

    again = cli(["ingest", str(root), *SMALL, "--verbose"], home)
    assert again.returncode == 0, again.stderr
    assert "(6 kept)" in again.stdout and "ignored: debug.log" in again.stderr
    assert _ready(home) == dict.fromkeys(names, 1)  # nothing re-read

    (root / "notes" / "part1.md").write_text("# Part 1\n\nRewritten entirely.\n", encoding="utf-8")
    (root / "notes" / "part2.md").unlink()
    (root / "src" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    third = cli(["ingest", str(root), *SMALL], home)
    assert third.returncode == 0, third.stderr
    assert "(1 added, 1 changed, 4 kept, 1 dropped)" in third.stdout, third.stdout
    ready = _ready(home)
    assert ready["proj/notes/part1.md"] == 2 and "proj/notes/part2.md" not in ready
    assert ready["proj/src/extra.py"] == 1
    owners = {
        o for (o,) in query(home, "SELECT DISTINCT owner FROM chunks WHERE owner LIKE 'doc:%'")
    }
    ids = {f"doc:{i}" for (i,) in query(home, "SELECT id FROM documents")}
    assert owners == ids  # the dropped file's and the replaced version's chunks are gone
    checked = cli(["verify"], home)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = cli(["docs"], home)
    assert "proj/ " in listed.stdout and "proj/src" not in listed.stdout  # one row
    removed = cli(["rm", "proj"], home)
    assert removed.returncode == 0, removed.stderr
    assert not _ready(home) and not query(home, "SELECT 1 FROM chunks WHERE owner LIKE 'doc:%'")
    assert not query(home, "SELECT 1 FROM collections")


def test_a_killed_folder_ingest_resumes(home: Path, tmp_path: Path) -> None:
    root = _tree(tmp_path / "big", files=4, chars=3000)
    proc = popen_cli(["ingest", str(root), *SMALL], home)
    kill_after_chunks(proc, home, 6)
    again = cli(["ingest", str(root), *SMALL], home)
    assert again.returncode == 0, again.stderr
    assert len(_ready(home)) == 6
    for doc_id, chunks in query(home, "SELECT id, chunks FROM documents"):
        (n,) = query(home, "SELECT COUNT(*) FROM chunks WHERE owner = ?", (f"doc:{doc_id}",))[0]
        assert n == chunks
    checked = cli(["verify"], home)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ask_across_a_collection_and_another_document_cites_each_file(
    home: Path, tmp_path: Path
) -> None:
    root = tmp_path / "vault"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "code.txt").write_text(
        sample_text(1500) + "\nThe vault code is 4417.\n", encoding="utf-8"
    )
    (root / "place.md").write_text(
        "# Where\n\n" + sample_text(1500, start=6000) + "\nThe vault is hidden in Lisbon.\n",
        encoding="utf-8",
    )
    other = tmp_path / "keeper.txt"
    other.write_text(
        sample_text(1500, start=12000) + "\nThe brass key is kept by Mr. Hargreaves.\n"
    )
    assert cli(["ingest", str(root), *SMALL], home).returncode == 0
    assert cli(["ingest", str(other), "--name", "keeper", *SMALL], home).returncode == 0

    data = ask_json(home, "vault", "What is the vault code, and in which city is the vault hidden?")
    assert data["doc"] == "vault"
    paged = {c["doc"] for c in data["chunks"]}
    assert paged == {"vault/docs/code.txt", "vault/place.md"}, data["chunks"]
    cited = {s["doc"]: s for s in data["sources"]}
    assert set(cited) == paged
    for name, source in cited.items():
        lines = Path(source["path"]).read_text(encoding="utf-8").splitlines()
        first, last = source["lines"]
        assert 1 <= first <= last <= len(lines), (name, source["lines"], len(lines))

    more = ask_json(home, "vault", "Who keeps the brass key?", "--doc", "keeper")
    assert "keeper" in {c["doc"] for c in more["chunks"]}, more["chunks"]
    assert {c["doc"] for c in more["chunks"]} <= paged | {"keeper"}
    shown = cli(["ask", "vault", "What is the vault code?", "--gpu-cache-size", "512"], home)
    assert shown.returncode == 0, shown.stderr
    assert "docs/code.txt" in shown.stderr  # a file of a collection is cited by its path
    chat = subprocess.run(
        [sys.executable, "-m", "cascade_cli", "chat", "--doc", "vault", "--gpu-cache-size", "1024",
         "--temperature", "0", "--max-tokens", "8"],
        input="What is the vault code?\n/sources\n", capture_output=True, text=True,
        timeout=600, env=env_for(home), check=False,
    )  # fmt: skip
    assert chat.returncode == 0 and "Traceback" not in chat.stderr, chat.stderr
    lines = [x for x in chat.stdout.splitlines() if x.startswith("sources: ")]
    assert lines and ("docs/code.txt" in lines[0] or "place.md" in lines[0]), chat.stdout
