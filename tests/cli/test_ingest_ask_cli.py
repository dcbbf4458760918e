"""`cascade ingest / ask / docs / rm / stats` end to end: real model, real store, subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import (
    ASK_SMALL,
    ask_json,
    check_answer_shape,
    cli,
    docs_json,
    ingest,
    stats_json,
)
from tests.documents.helpers import (
    NEEDLE,
    SMALL,
    chunk_rows,
    committed_chunks,
    data_bytes,
    doc_id,
    doc_rows,
    env_for,
    indexed_bytes,
    kill_after_chunks,
    passage_rows,
    popen_cli,
    query,
    wait_for_chunks,
    write_text,
)

pytestmark = pytest.mark.subprocess

# ---- 1. ingest → ask --------------------------------------------------------------------------


def test_ingest_then_ask_json(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "gpl.txt", 6000)
    proc = ingest(home, src, "x")
    ((_, name, version, status, tokens, n_chunks),) = doc_rows(home)
    assert (name, version, status) == ("x", 1, "ready")
    assert f"ingested x v1: {tokens} tokens, {n_chunks} chunks, q4" in proc.stdout
    assert n_chunks == -(-tokens // 128) and n_chunks >= 8

    data = ask_json(home, "x", "Who can change the GNU General Public License?")
    check_answer_shape(data, home, "x")
    assert {c["tier"] for c in data["chunks"]} <= {"ram", "disk"}
    assert data["timings"]["restored_tokens"] > 0

    by_path = ask_json(home, str(src.resolve()), "What is free software?")
    check_answer_shape(by_path, home, "x")


def test_ask_by_relative_path(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "gpl.txt", 3000)
    ingest(home, src, "x")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cascade_cli",
            "ask",
            "gpl.txt",
            "What is this?",
            "--json",
            *ASK_SMALL,
        ],
        cwd=tmp_path,
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["doc"] == "x"


# ---- 2. resume after SIGKILL ------------------------------------------------------------------


@pytest.mark.parametrize("block", [128, 256])  # 256: the window holds no previous chunk
@pytest.mark.slow
def test_resume_after_sigkill_matches_clean_ingest(
    home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, block: int
) -> None:
    src = write_text(tmp_path / "gpl.txt", 9000)
    args = [
        "ingest",
        str(src),
        "--name",
        "g",
        "--gpu-cache-size",
        "512",
        "--block-size",
        str(block),
    ]

    proc = popen_cli(args, home)
    before = kill_after_chunks(proc, home, 3)
    ((did, _, _, status, _, _),) = doc_rows(home)
    assert status == "ingesting"
    early = {r["key"]: (r["created"], r["file"]) for r in chunk_rows(home, f"doc:{did}")}
    assert len(early) >= before >= 3

    resumed = cli(args, home)
    assert resumed.returncode == 0, resumed.stderr
    rows = doc_rows(home)
    assert [r[:4] for r in rows] == [(did, "g", 1, "ready")], "resume must reuse the version"

    clean_home = tmp_path_factory.mktemp("clean")
    (clean_home / "models").mkdir()
    for m in (home / "models").iterdir():
        (clean_home / "models" / m.name).symlink_to(m.resolve())
    clean = cli(args, clean_home)
    assert clean.returncode == 0, clean.stderr
    ((cdid, _, _, _, ctokens, cchunks),) = doc_rows(clean_home)
    assert rows[0][4:] == (ctokens, cchunks)

    got = chunk_rows(home, f"doc:{did}")
    want = chunk_rows(clean_home, f"doc:{cdid}")
    assert len(got) == len(want) == cchunks
    for g, w in zip(got, want, strict=True):
        assert (g["idx"], g["start"], g["end"], g["pos"]) == (
            w["idx"],
            w["start"],
            w["end"],
            w["pos"],
        )
        assert g["tokens"] == w["tokens"]
    # recall passages and their character offsets are the same as a clean run's, none missing
    assert passage_rows(home, did) == passage_rows(clean_home, cdid)
    # the chunks committed before the kill were kept, not recomputed
    for r in got:
        if r["key"] in early:
            assert (r["created"], r["file"]) == early[r["key"]]
    assert ask_json(home, "g", "What does copyleft mean?")["chunks"]


# ---- 5. corrupted chunk -----------------------------------------------------------------------


def test_corrupt_chunk_is_recomputed_not_served(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "gpl.txt", 6000)
    ingest(home, src, "x")
    question = "What does the word Program mean in this License?"
    first = ask_json(home, "x", question, "--recall", "bm25")
    owner = f"doc:{doc_id(home, 'x')}"
    rows = {r["idx"]: r for r in chunk_rows(home, owner)}
    victim = first["chunks"][0]["index"]
    path = home / "store" / "data" / rows[victim]["file"]
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    os.chmod(path, 0o644)
    path.write_bytes(bytes(raw))

    second = ask_json(home, "x", question, "--recall", "bm25")
    check_answer_shape(second, home, "x")
    tiers = {c["index"]: c["tier"] for c in second["chunks"]}
    assert [c["index"] for c in second["chunks"]] == [c["index"] for c in first["chunks"]]
    assert tiers[victim] == "recomputed"
    assert all(t == "disk" for i, t in tiers.items() if i != victim)
    assert second["timings"]["restored_tokens"] == first["timings"]["restored_tokens"] - len(
        rows[victim]["tokens"]
    )

    # re-saved: a new verified file, same token ids; the bad file is gone
    after = {r["idx"]: r for r in chunk_rows(home, owner)}
    assert after[victim]["file"] != rows[victim]["file"]
    assert after[victim]["tokens"] == rows[victim]["tokens"]
    assert not path.exists()
    from cascade_cli.store import DiskStore

    with DiskStore.open(home / "store", None, readonly=True) as store:
        assert len(store.get(after[victim]["key"])) == after[victim]["nbytes"]
    third = ask_json(home, "x", question, "--recall", "bm25")
    assert {c["index"]: c["tier"] for c in third["chunks"]}[victim] == "disk"


# ---- 6. rm ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rm_frees_space_and_unlists(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "a.txt", 3000), "a")
    ingest(home, write_text(tmp_path / "b.txt", 3000, start=9000), "b")
    a_bytes = sum(r["nbytes"] for r in chunk_rows(home, f"doc:{doc_id(home, 'a')}"))
    total = data_bytes(home)
    assert a_bytes > 0 and total > a_bytes

    proc = cli(["rm", "a"], home)
    assert proc.returncode == 0, proc.stderr
    assert "removed a: 1 version(s)" in proc.stdout
    assert data_bytes(home) == total - a_bytes
    assert [d["name"] for d in docs_json(home)] == ["b"]
    assert query(
        home,
        "SELECT COUNT(*) FROM recall_corpora WHERE owner NOT IN"
        " (SELECT 'doc:' || id FROM documents)",
    ) == [(0,)]

    assert cli(["rm", "b"], home).returncode == 0
    assert docs_json(home) == []
    assert committed_chunks(home) == 0
    # what is left is only shared, non-document state (the prompt's sink), all of it indexed
    assert data_bytes(home) == indexed_bytes(home, "owner NOT LIKE 'doc:%'") < total // 10

    assert_one_line_error(cli(["rm", "b"], home), "no ingested document named 'b'")
    assert_one_line_error(cli(["rm", "zzz"], home), "no ingested document named 'zzz'")


def test_rm_without_store_is_one_line_error(home: Path) -> None:
    proc = cli(["rm", "nothing"], home)
    assert_one_line_error(proc, "no ingested document named 'nothing'")
    assert proc.returncode == 6


# ---- 7. versions ------------------------------------------------------------------------------


@pytest.mark.slow
def test_reingest_versions(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "doc.txt", 3000)
    ingest(home, src, "d")
    ((v1, *_),) = doc_rows(home)
    v1_chunks = chunk_rows(home, f"doc:{v1}")

    same = ingest(home, src, "d")
    assert "ingested d v1:" in same.stdout
    assert [r[:4] for r in doc_rows(home)] == [(v1, "d", 1, "ready")]
    assert chunk_rows(home, f"doc:{v1}") == v1_chunks, "an unchanged file was re-ingested"

    # a changed file: a killed ingest of version 2 leaves version 1 whole and askable
    write_text(src, 9000)
    proc = popen_cli(["ingest", str(src), "--name", "d", *SMALL], home)
    kill_after_chunks(proc, home, len(v1_chunks) + 2)
    rows = doc_rows(home)
    assert [r[1:4] for r in rows] == [("d", 1, "ready"), ("d", 2, "ingesting")]
    assert chunk_rows(home, f"doc:{v1}") == v1_chunks
    assert ask_json(home, "d", "What is this License about?")["chunks"]
    assert {(d["version"], d["status"]) for d in docs_json(home)} == {
        (1, "ready"),
        (2, "ingesting"),
    }

    done = ingest(home, src, "d")
    assert "ingested d v2:" in done.stdout
    ((v2, _, version, status, _, _),) = doc_rows(home)
    assert (version, status) == (2, "ready") and v2 != v1
    assert chunk_rows(home, f"doc:{v1}") == []
    assert passage_rows(home, v1) == []
    assert sum(r["nbytes"] for r in chunk_rows(home, f"doc:{v2}")) == indexed_bytes(
        home, "owner LIKE 'doc:%'"
    )
    assert indexed_bytes(home) == data_bytes(home)
    assert ask_json(home, "d", "What is this License about?")["doc"] == "d"


# ---- 9. stats ---------------------------------------------------------------------------------


def test_stats_after_ingest_and_asks(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "s.txt", 4000), "s")
    s0 = stats_json(home)
    for tier in ("window", "ram", "disk"):
        assert {"hits", "misses", "bytes_read", "bytes_written"} <= set(s0["tiers"][tier])
    rows = chunk_rows(home, f"doc:{doc_id(home, 's')}")
    stored = sum(r["nbytes"] for r in rows)
    assert s0["tiers"]["disk"]["bytes_written"] >= stored > 0
    (d,) = s0["documents"]
    assert {"name", "tokens", "chunks", "bytes", "compression"} <= set(d)
    assert (d["name"], d["chunks"], d["bytes"], d["compression"]) == ("s", len(rows), stored, "q4")
    assert d["tokens"] == sum(len(r["tokens"]) for r in rows)
    assert indexed_bytes(home) == data_bytes(home)

    snaps = [s0]
    for _ in range(2):
        a = ask_json(home, "s", "What are the conditions for conveying?")
        snaps.append(stats_json(home))
        prev, cur = snaps[-2]["tiers"], snaps[-1]["tiers"]
        n = len(a["chunks"])
        assert cur["disk"]["hits"] >= prev["disk"]["hits"] + n  # + the sink, when stored
        assert cur["disk"]["bytes_read"] > prev["disk"]["bytes_read"]
        assert cur["ram"]["bytes_written"] > prev["ram"]["bytes_written"]
        # every page placed missed the window: the chunks and the sink (as in chat and serve)
        assert cur["window"]["misses"] == prev["window"]["misses"] + n + 1
        assert cur["disk"]["bytes_written"] == prev["disk"]["bytes_written"]


# ---- 10. two writers --------------------------------------------------------------------------


def test_second_ingest_waits_then_fails_naming_pid(home: Path, tmp_path: Path) -> None:
    big = write_text(tmp_path / "big.txt", 40000)
    other = write_text(tmp_path / "other.txt", 2000)
    first = popen_cli(["ingest", str(big), "--name", "big", *SMALL], home)
    try:
        wait_for_chunks(first, home, 1)
        t0 = time.monotonic()
        second = cli(["ingest", str(other), "--name", "other", *SMALL], home)
        waited = time.monotonic() - t0
        assert first.poll() is None, "the first ingest finished before the second gave up"
        assert_one_line_error(second, f"in use by process {first.pid}")
        assert second.returncode == 5
        assert waited >= 5.0
    finally:
        first.kill()
        first.wait(30)
    assert [r[1] for r in doc_rows(home)] == ["big"]


# ---- 4. needle via the CLI --------------------------------------------------------------------


def test_ask_finds_needle(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "n.txt", 6000, needle=NEEDLE), "n")
    did = doc_id(home, "n")
    (needle_idx,) = {c for c, _, _, t, _ in passage_rows(home, did) if "48213" in t}
    data = ask_json(home, "n", "What is the pass key?", "--max-tokens", "24")
    assert "48213" in data["answer"], data["answer"]
    idx = [c["index"] for c in data["chunks"]]  # default: the budget filled, best hit last
    assert idx[-1] == needle_idx and len(set(idx)) == len(idx) > 1
    alone = ask_json(
        home,
        "n",
        "What is the pass key?",
        "--top-k",
        "1",
        "--neighbors",
        "0",
        "--repeat-penalty",
        "1.3",
    )
    assert [c["index"] for c in alone["chunks"]] == [needle_idx]


# ---- 11. stores from before passage recall ------------------------------------------------------


def _drop_recall_rows(home: Path, owner: str, vectors_only: bool = False) -> None:
    """Make the store look as one written before passage recall (or before embeddings)."""
    import sqlite3

    from cascade_cli.recall import tables

    conn = sqlite3.connect(home / "store" / "index.sqlite")
    try:
        (cid,) = conn.execute("SELECT id FROM recall_corpora WHERE owner = ?", (owner,)).fetchone()
        if vectors_only:
            conn.execute("UPDATE recall_passages SET vec = NULL WHERE corpus = ?", (cid,))
        else:
            conn.execute("DELETE FROM recall_fts WHERE rowid BETWEEN ? AND ?", tables.span(cid))
            conn.execute("DELETE FROM recall_passages WHERE corpus = ?", (cid,))
            conn.execute("DELETE FROM recall_corpora WHERE id = ?", (cid,))
        conn.commit()
    finally:
        conn.close()


@pytest.mark.slow
def test_old_store_gets_passages_on_first_ask_or_reingest(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "n.txt", 6000, needle=NEEDLE)
    ingest(home, src, "n")
    did = doc_id(home, "n")
    before = passage_rows(home, did)
    _drop_recall_rows(home, f"doc:{did}")
    assert passage_rows(home, did) == []

    proc = cli(["ask", "n", "What is the pass key?", "--json", *ASK_SMALL], home)
    assert proc.returncode == 0, proc.stderr
    assert "for passage recall" in proc.stderr and "ingested before" in proc.stderr
    assert "48213" in json.loads(proc.stdout)["answer"]
    assert passage_rows(home, did) == before  # same passages, offsets and vectors present
    again = cli(["ask", "n", "What is the pass key?", "--json", *ASK_SMALL], home)
    assert again.returncode == 0 and "passage recall" not in again.stderr

    _drop_recall_rows(home, f"doc:{did}")
    redo = ingest(home, src, "n")  # unchanged file: nothing decoded, passages indexed
    assert "for passage recall" in redo.stderr
    assert passage_rows(home, did) == before

    _drop_recall_rows(home, f"doc:{did}", vectors_only=True)
    proc = cli(["ask", "n", "What secret number was I asked to remember?", *ASK_SMALL], home)
    assert proc.returncode == 0, proc.stderr
    assert "for semantic recall (once)" in proc.stderr
    assert all(r[4] for r in passage_rows(home, did))
