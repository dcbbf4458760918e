"""`cascade verify [DOC] [--repair] [--json]` end to end on a real store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import ask_json, check_answer_shape, cli, ingest
from tests.documents.helpers import chunk_rows, doc_id, write_text

pytestmark = pytest.mark.subprocess


def verify(home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    proc = cli(["verify", "--json", *args], home)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def kinds(report: dict[str, Any]) -> list[str]:
    return sorted(f["kind"] for f in report["damaged"])


@pytest.mark.slow
def test_verify_finds_and_repairs_damage(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "v.txt", 5000), "v")
    rc, clean = verify(home)
    assert rc == 0 and clean["clean"] and clean["checked"]["chunks"] > 8
    assert clean["checked"]["documents"] == 1 and clean["checked"]["files"] > 8

    owner = f"doc:{doc_id(home, 'v')}"
    rows = chunk_rows(home, owner)
    data = home / "store" / "data"
    flipped = data / rows[2]["file"]
    raw = bytearray(flipped.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    flipped.write_bytes(bytes(raw))
    short = data / rows[4]["file"]
    short.write_bytes(short.read_bytes()[:-7])
    (data / rows[6]["file"]).unlink()
    (data / "zz").mkdir()
    (data / "zz" / "stray.kv").write_bytes(b"junk")
    conn = sqlite3.connect(home / "store" / "index.sqlite")
    with conn:  # a garbage row: unknown owner, no file
        conn.execute(
            "INSERT INTO chunks SELECT 'doc:999:0', 'doc:999', idx, tok_start, tok_end, tokens,"
            " pos, scheme, nbytes, checksum, version, created, accessed, pinned, fingerprint,"
            " 'zz/none.kv' FROM chunks WHERE key = ?",
            (rows[0]["key"],),
        )
        conn.execute(  # and a malformed one in the document: 3 bytes of token ids
            "INSERT INTO chunks SELECT ?, owner, 99, tok_start, tok_end, X'010203', pos, scheme,"
            " nbytes, checksum, version, created, accessed, pinned, fingerprint, 'zz/bad.kv'"
            " FROM chunks WHERE key = ?",
            (f"{owner}:99", rows[0]["key"]),
        )
    conn.close()

    rc, found = verify(home)
    assert rc == 1 and not found["clean"]
    assert kinds(found) == [
        "checksum", "missing", "missing", "orphan_chunks", "orphan_file", "row", "truncated",
    ]  # fmt: skip
    text = cli(["verify"], home)
    assert text.returncode == 1 and "7 problem(s) found" in text.stdout
    assert f"chunk {rows[2]['key']} of 'v': its checksum does not match" in text.stdout

    rc, fixed = verify(home, "--repair")
    assert rc == 1, "damage was found (and repaired): exit 1, like fsck"
    actions = {(f["kind"], f["key"] or f["file"]): f["action"] for f in fixed["damaged"]}
    for r in (rows[2], rows[4], rows[6]):
        assert any(a == "recomputed" and k == r["key"] for (_, k), a in actions.items()), actions
    assert actions[("orphan_chunks", "doc:999")] == "dropped"
    assert actions[("row", f"{owner}:99")] == "dropped"
    assert actions[("orphan_file", "zz/stray.kv")] == "deleted"

    rc, again = verify(home)
    assert rc == 0 and again["clean"], again
    after = chunk_rows(home, owner)
    for before, now in zip(rows, after, strict=True):
        assert (now["idx"], now["pos"], now["tokens"]) == (before["idx"], before["pos"], before["tokens"])  # fmt: skip
    data_tiers = {c["tier"] for c in ask_json(home, "v", "Who is Sir Walter Elliot?")["chunks"]}
    assert data_tiers <= {"ram", "disk"}


def test_verify_rebuilds_a_document_that_lost_rows(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "w.txt", 3000)
    ingest(home, src, "w")
    owner = f"doc:{doc_id(home, 'w')}"
    rows = chunk_rows(home, owner)
    conn = sqlite3.connect(home / "store" / "index.sqlite")
    with conn:
        conn.execute("DELETE FROM chunks WHERE key = ?", (rows[1]["key"],))
        conn.execute(
            "DELETE FROM recall_passages WHERE chunk = 3 AND corpus ="
            " (SELECT id FROM recall_corpora WHERE owner = ?)",
            (owner,),
        )
    conn.close()
    rc, found = verify(home, "w")
    assert rc == 1 and kinds(found) == ["doc_chunks", "doc_text"]
    rc, fixed = verify(home, "w", "--repair")
    assert {f["action"] for f in fixed["damaged"]} == {"reingested from its source"}
    rc, again = verify(home)
    assert rc == 0, again
    assert [r["tokens"] for r in chunk_rows(home, owner)] == [r["tokens"] for r in rows]
    check_answer_shape(ask_json(home, "w", "What is this?"), home, "w")


def test_verify_unknown_document_is_not_found(home: Path, tmp_path: Path) -> None:
    proc = cli(["verify", "nosuch"], home)
    assert_one_line_error(proc, "no ingested document named 'nosuch'")
    assert proc.returncode == 6
    ingest(home, write_text(tmp_path / "u.txt", 800), "u")
    proc = cli(["verify", "nosuch", "--repair"], home)
    assert_one_line_error(proc, "no ingested document named 'nosuch'")
    assert proc.returncode == 6
