"""Hostile input (issue 11): one line, non-zero exit, no traceback, nothing stored lost."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cascade_cli.documents.wrap import unwrap
from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import ask_json, check_answer_shape, cli, docs_json, store_with_x
from tests.documents.helpers import (
    SMALL,
    chunk_rows,
    data_bytes,
    doc_id,
    doc_rows,
    passage_rows,
    popen_cli,
    sample_text,
    wait_for_chunks,
    write_text,
)

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def store_home(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Path]:
    """One store holding document `x`, which no case may change."""
    yield store_with_x(tmp_path_factory.mktemp("hostile"), model_path, 3000)


def _file(home: Path, name: str, data: bytes) -> str:
    (home / name).write_bytes(data)
    return str(home / name)


def _folder(home: Path, name: str) -> str:
    (home / name).mkdir(exist_ok=True)
    return str(home / name)


def _toml(home: Path, name: str, body: str) -> str:
    (home / name).write_text(body, encoding="utf-8")
    return str(home / name)


Args = Callable[[Path], list[str]]
CASES: list[tuple[str, Args, int, str]] = [
    ("nul-late", lambda h: ["ingest", _file(h, "n.txt", b"a line of text\n" * 6000 + b"\x00end\n"), *SMALL], 2, "NUL bytes"),
    ("name-empty", lambda h: ["ingest", str(h / "x.txt"), "--name", "", *SMALL], 2, "--name is empty"),
    ("name-blank", lambda h: ["ingest", str(h / "x.txt"), "--name", "   ", *SMALL], 2, "--name is empty"),
    ("directory-empty", lambda h: ["ingest", _folder(h, "empty"), *SMALL], 2, "holds no file to ingest"),
    ("directory-among-files", lambda h: ["ingest", str(h / "x.txt"), _folder(h, "d"), *SMALL], 2, "is a folder among files"),
    ("block-0", lambda h: ["ingest", str(h / "x.txt"), "--block-size", "0"], 2, "below 16"),
    ("block-negative", lambda h: ["ingest", str(h / "x.txt"), "--block-size", "-5"], 2, "below 16"),
    ("memory-negative", lambda h: ["ask", "x", "Who?", "--memory-cache-size", "-1"], 2, "is negative"),
    ("budget-negative", lambda h: ["ingest", str(h / "x.txt"), "--disk-cache-budget", "-2GB"], 2, "is negative"),
    ("threads-negative", lambda h: ["ask", "x", "Who?", "--threads", "-3"], 2, "below 0"),
    ("window-above-training", lambda h: ["ingest", str(h / "x.txt"), "--gpu-cache-size", "1000000"], 2, "was trained on"),
    ("ask-window-above-training", lambda h: ["ask", "x", "Who?", "--gpu-cache-size", "64k"], 2, "was trained on"),
    ("config-string-for-int", lambda h: ["--config", _toml(h, "c1.toml", 'block_size = "big"\n'), "ask", "x", "Who?"], 2, "invalid block_size"),
    ("config-bool-for-path", lambda h: ["--config", _toml(h, "c2.toml", "disk_cache_path = true\n"), "ask", "x", "Who?"], 2, "disk_cache_path = True is a bool"),
    ("config-list-for-size", lambda h: ["--config", _toml(h, "c3.toml", "[cascade]\nmemory_cache_size = [1, 2]\n"), "ask", "x", "Who?"], 2, "invalid memory_cache_size"),
    ("config-not-a-table", lambda h: ["--config", _toml(h, "c4.toml", "cascade = 5\n"), "ask", "x", "Who?"], 2, "must be a table"),
    ("config-broken", lambda h: ["--config", _toml(h, "c5.toml", "block_size = \n"), "ask", "x", "Who?"], 2, "not valid TOML"),
    ("unknown-doc-before-model", lambda h: ["ask", "nosuch", "Who?", "--model", str(h / "no.gguf")], 6, "no ingested document named 'nosuch'"),
    ("rm-unknown-doc", lambda h: ["rm", "nosuch"], 6, "no ingested document named 'nosuch'"),
    ("verify-unknown-doc", lambda h: ["verify", "nosuch"], 6, "no ingested document named 'nosuch'"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_one_clean_line(
    store_home: Path, case: str, args: Args, code: int, fragment: str
) -> None:
    home = store_home
    did = doc_id(home, "x")
    before = (doc_rows(home), chunk_rows(home, f"doc:{did}"), data_bytes(home))
    proc = cli(args(home), home)
    assert_one_line_error(proc, fragment)
    assert proc.returncode == code
    assert (doc_rows(home), chunk_rows(home, f"doc:{did}"), data_bytes(home)) == before


def test_hostile_cases_leave_the_document_askable(store_home: Path) -> None:
    check_answer_shape(ask_json(store_home, "x", "Who is Sir Walter Elliot?"), store_home, "x")
    assert cli(["verify"], store_home).returncode == 0


@pytest.mark.slow
def test_names_with_spaces_slashes_and_dots(home: Path, tmp_path: Path) -> None:
    odd = tmp_path / "a dir with spaces"
    odd.mkdir()
    src = write_text(odd / "my notes.txt", 1200)
    for name in ("my notes", "a/b", "../../etc/passwd"):
        args = ["ingest", str(src), *SMALL] + ([] if name == "my notes" else ["--name", name])
        proc = cli(args, home)
        assert proc.returncode == 0, proc.stderr
        check_answer_shape(ask_json(home, name, "What is this?"), home, name)
    assert sorted(d["name"] for d in docs_json(home)) == ["../../etc/passwd", "a/b", "my notes"]
    assert not (tmp_path / "etc").exists() and not Path("/etc/passwd.kv").exists()
    assert cli(["rm", "a/b"], home).returncode == 0
    assert sorted(d["name"] for d in docs_json(home)) == ["../../etc/passwd", "my notes"]
    assert cli(["verify"], home).returncode == 0


@pytest.mark.slow
def test_file_changing_during_ingest(home: Path, tmp_path: Path) -> None:
    """The file is read once: the version stored is the text as it was when the ingest began;
    running ingest again stores the changed file as the next version."""
    src = write_text(tmp_path / "live.txt", 9000)
    original = src.read_text(encoding="utf-8")
    proc = popen_cli(["ingest", str(src), "--name", "live", *SMALL], home)
    wait_for_chunks(proc, home, 2)
    with src.open("a", encoding="utf-8") as fh:
        fh.write("\n\nA paragraph appended while the ingest ran.\n")
    src.write_text("Replaced entirely.\n" * 50, encoding="utf-8")
    assert proc.wait(300) == 0
    ((did, _, version, status, _, _),) = doc_rows(home)
    assert (version, status) == (1, "ready")
    rows = passage_rows(home, did)  # the text as read at the start, at its offsets
    read = unwrap(original)  # its hard-wrapped paragraphs joined, one character for one
    assert rows and all(read[s : s + len(t)] == t for _, _, s, t, _ in rows)
    squeeze = "".join  # chunk boundaries may cut a word: compare without whitespace
    assert squeeze(squeeze(t.split()) for *_, t, _ in rows) == squeeze(original.split())
    again = cli(["ingest", str(src), "--name", "live", *SMALL], home)
    assert again.returncode == 0 and "ingested live v2" in again.stdout
    assert [r[2:4] for r in doc_rows(home)] == [(2, "ready")]


def test_50mb_single_line_streams_and_stops_cleanly(home: Path, tmp_path: Path) -> None:
    """A 50 MB file without a single newline: chunks are committed while it runs (anything
    quadratic in the line's length before the first one would take hours on 50 MB, far past
    the wait's deadline), Ctrl-C stops it after the chunk in hand (said so) with exit 130, the
    store verifies clean."""
    words = sample_text(20000).replace("\n", " ")
    big = tmp_path / "line.txt"
    with big.open("w", encoding="utf-8") as fh:
        for _ in range(50 * 2**20 // len(words) + 1):
            fh.write(words)
    assert big.stat().st_size >= 50 * 2**20 and b"\n" not in big.read_bytes()[: 2**20]
    proc = popen_cli(["ingest", str(big), "--name", "line", *SMALL], home)
    wait_for_chunks(proc, home, 2, timeout=300)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(60) == 130
    said = "".join(p.read_text() for p in home.glob("popen-*.out"))
    assert "stopping after this chunk" in said and "Traceback" not in said, said[-2000:]
    assert cli(["verify"], home).returncode == 0
    assert [r[1:4] for r in doc_rows(home)] == [("line", 1, "ingesting")]
