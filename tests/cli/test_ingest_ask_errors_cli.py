"""Bad input to ingest/ask: one-line errors, non-zero exits, nothing stored lost."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import (
    ask_json,
    assert_error_last,
    check_answer_shape,
    cli,
    ingest,
)
from tests.documents.helpers import (
    SMALL,
    chunk_rows,
    data_bytes,
    doc_id,
    doc_rows,
    passage_rows,
    write_text,
)

pytestmark = pytest.mark.subprocess

# ---- 8. bad input -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Path]:
    """One store holding document `x`, shared by the bad-input cases (none may change it)."""
    home = tmp_path_factory.mktemp("shared")
    (home / "models").mkdir()
    (home / "models" / model_path.name).symlink_to(model_path)
    src = write_text(home / "x.txt", 3000)
    proc = cli(["ingest", str(src), "--name", "x", *SMALL], home)
    assert proc.returncode == 0, proc.stderr
    yield home


def _bad_file(home: Path, name: str, data: bytes) -> str:
    path = home / name
    path.write_bytes(data)
    return str(path)


BAD: list[tuple[str, Any, int, str]] = [
    ("binary", lambda h: ["ingest", _bad_file(h, "b.bin", b"text\x00\x01\x02 more"), *SMALL], 2, "looks like a binary file"),
    ("latin1", lambda h: ["ingest", _bad_file(h, "l.txt", "café crème\n".encode("latin-1")), *SMALL], 2, "--encoding"),
    ("missing", lambda h: ["ingest", str(h / "nope.txt"), *SMALL], 2, "nope.txt"),
    ("empty", lambda h: ["ingest", _bad_file(h, "e.txt", b""), *SMALL], 2, "empty"),
    ("blank", lambda h: ["ingest", _bad_file(h, "w.txt", b"  \n\n\t\n"), *SMALL], 2, "empty"),
    ("block-too-big", lambda h: ["ingest", _bad_file(h, "k.txt", b"hello there\n"), "--gpu-cache-size", "512", "--block-size", "1024"], 2, "does not fit"),
    ("ask-unknown", lambda h: ["ask", "nosuchdoc", "What?"], 6, "no ingested document named 'nosuchdoc'"),
    ("recall", lambda h: ["ask", "x", "What?", "--recall", "nonsense"], 2, "unknown recall 'nonsense'"),
    ("empty-question", lambda h: ["ask", "x", "   "], 2, "the question is empty"),
    ("semantic-without-embedder", lambda h: ["ask", "x", "What?", "--recall", "semantic", "--embed-model", "none"], 2, "semantic recall needs an embedding model"),
    ("bad-quote", lambda h: ["ask", "x", "What?", "--quote", "all"], 2, "unknown quote 'all'"),
    ("embed-model-missing", lambda h: ["ask", "x", "What?", "--embed-model", str(h / "no.gguf")], 3, "no.gguf"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "code", "fragment"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_fails_cleanly_and_loses_nothing(
    shared_home: Path, case: str, args: Any, code: int, fragment: str
) -> None:
    home = shared_home
    did = doc_id(home, "x")
    before = (doc_rows(home), chunk_rows(home, f"doc:{did}"), data_bytes(home))
    proc = cli(args(home), home)
    assert_error_last(proc, fragment)
    assert proc.returncode == code
    assert_one_line_error(proc, fragment)
    assert (doc_rows(home), chunk_rows(home, f"doc:{did}"), data_bytes(home)) == before
    data = ask_json(home, "x", "Who wrote this License?")
    check_answer_shape(data, home, "x")


@pytest.mark.parametrize("case", ["binary", "empty"])
def test_ingest_input_error_is_one_line(shared_home: Path, case: str) -> None:
    (_, args, _, fragment) = next(b for b in BAD if b[0] == case)
    assert_one_line_error(cli(args(shared_home), shared_home), fragment)


def test_latin1_with_encoding_flag(home: Path) -> None:
    text = "Le café de la crème brûlée. " * 40 + "\n"
    path = home / "fr.txt"
    path.write_bytes(text.encode("latin-1"))
    assert_error_last(cli(["ingest", str(path), *SMALL], home), "--encoding latin-1")
    ingest(home, path, "fr", "--encoding", "latin-1")
    ((did, *_),) = doc_rows(home)
    rows = passage_rows(home, did)
    assert rows and all(text[s : s + len(t)] == t for _, _, s, t, _ in rows)
    assert ask_json(home, "fr", "What is this about?")["doc"] == "fr"


def test_store_made_without_flash_attention_serves_a_context_with_it(shared_home: Path) -> None:
    """V is stored transposed without flash attention; the pager converts it on decode, so a
    store built on a CPU serves a GPU build (here: flash attention forced on)."""
    data = ask_json(shared_home, "x", "Who wrote this?", "--flash-attn", "on")
    check_answer_shape(data, shared_home, "x")
    assert {c["tier"] for c in data["chunks"]} <= {"ram", "disk"}


def test_fingerprint_error_names_the_difference(home: Path) -> None:
    ingest(home, write_text(home / "f.txt", 1500), "f")
    conn = sqlite3.connect(home / "store" / "index.sqlite")
    with conn:
        conn.execute("UPDATE store_meta SET value = 'another-model' WHERE key = 'fingerprint'")
    conn.close()
    proc = cli(["ask", "f", "What?", "--gpu-cache-size", "512"], home)
    assert_one_line_error(proc, "holds KV states made with another model")
    assert proc.returncode == 5 and "stored another-model, loaded" in proc.stderr


def test_llama_cpp_upgrade_asks_for_a_rebuild(home: Path) -> None:
    ingest(home, write_text(home / "v.txt", 1500), "v")
    conn = sqlite3.connect(home / "store" / "index.sqlite")
    with conn:
        conn.execute("UPDATE store_meta SET value = '0.0.1' WHERE key = 'llama_cpp'")
    conn.close()
    proc = cli(["ask", "v", "What?", "--gpu-cache-size", "512"], home)
    assert_one_line_error(proc, "was built with llama.cpp 0.0.1")
    assert proc.returncode == 5 and "Rebuild it" in proc.stderr


@pytest.mark.slow
def test_lost_chunk_files_are_recomputed_or_named(home: Path) -> None:
    """Data files deleted behind the store's back. While their rows remain, `ask` recomputes the
    chunks it needs (in their own context) and answers. Once a writer's repair has dropped the
    rows, `ask` names the document and the fix (exit 6), and a new ingest restores them."""
    src = write_text(home / "lost.txt", 3000)
    ingest(home, src, "lost")
    for f in (home / "store" / "data").rglob("*.kv"):
        f.unlink()
    data = ask_json(home, "lost", "What is this?")
    check_answer_shape(data, home, "lost")
    assert {c["tier"] for c in data["chunks"]} == {"recomputed"}
    assert data["sink"]["tier"] == "recomputed"
    for f in (home / "store" / "data").rglob("*.kv"):
        f.unlink()
    ingest(home, write_text(home / "other.txt", 800), "other")  # its open repairs the store
    proc = cli(["ask", "lost", "What is this?", "--gpu-cache-size", "512"], home)
    assert_one_line_error(proc, "'lost' is missing chunks in the store")
    assert proc.returncode == 6 and "cascade ingest" in proc.stderr
    ingest(home, src, "lost")
    check_answer_shape(ask_json(home, "lost", "What is this?"), home, "lost")
