"""The server's stored conversations are a cache with a budget of their own: least recently used
conversations go with their rows and recall tables, documents never do, `rm --api` removes them
all, `stats` shows bytes per owner kind and `verify` checks the server's data."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.ingest_helpers import cli
from tests.documents.helpers import SMALL as INGEST_SMALL
from tests.documents.helpers import index_path, ro
from tests.server.helpers import MODEL, Server, make_home
from tests.server.test_hostile import _long_history
from tests.server.test_lifecycle import HISTORY

pytestmark = pytest.mark.subprocess


def _conversation(i: int) -> list[dict[str, str]]:
    """HISTORY with a first message of its own (another conversation, several blocks)."""
    first = dict(HISTORY[1], content=f"Week {i}. " + HISTORY[1]["content"])
    return [HISTORY[0], first, *HISTORY[2:]]


def _api(home: Path) -> tuple[set[str], int, int]:
    """The server's owners with block rows, its recall corpora, and its chunks' bytes."""
    with ro(home) as conn:
        owners = {o for (o,) in conn.execute("SELECT DISTINCT owner FROM api_blocks")}
        corpora = conn.execute(
            "SELECT COUNT(*) FROM recall_corpora WHERE owner GLOB 'api:*'"
        ).fetchone()[0]
        nbytes = conn.execute(
            "SELECT COALESCE(SUM(nbytes), 0) FROM chunks WHERE owner GLOB 'api:*'"
        ).fetchone()[0]
    return owners, int(corpora), int(nbytes)


def _by_kind(home: Path) -> dict[str, int]:
    proc = cli(["stats", "--json"], home)
    assert proc.returncode == 0, proc.stderr
    kinds: dict[str, int] = json.loads(proc.stdout)["disk"]["by_kind"]
    return kinds


@pytest.mark.slow
def test_conversations_are_a_cache_that_never_evicts_documents(
    tmp_path: Path, model_path: Path, embed_model_path: Path
) -> None:
    home = make_home(tmp_path / "home", model_path, embed_model_path)
    text = tmp_path / "note.txt"
    text.write_text("The keeper painted the lighthouse door blue every spring. " * 60)
    assert cli(["ingest", str(text), "--name", "note", *INGEST_SMALL], home).returncode == 0
    doc_bytes = _by_kind(home)["documents"]
    assert doc_bytes > 0
    # a disk budget the document alone nearly fills, and room for about one conversation
    budget = ["--disk-cache-budget", str(doc_bytes + 2 * 2**20), "--api-cache-budget", "1MiB"]
    server = Server(home, *budget)
    try:
        long = {"model": MODEL, "messages": _long_history(12), "max_tokens": 2}
        assert server.post("/v1/chat/completions", long, key=None).status_code == 200
        owners, corpora, _ = _api(home)
        assert corpora >= 1  # the long conversation's turns were indexed for recall
        seen = [set(owners)]
        for i in range(3):
            body = {"model": MODEL, "messages": _conversation(i), "max_tokens": 2}
            assert server.post("/v1/chat/completions", body, key=None).status_code == 200
            now = _api(home)[0]
            seen.append(now - set().union(*seen))  # the owners this conversation added
        owners, corpora, nbytes = _api(home)
        # the long conversation and the first short one went (least recently used), the long
        # one with its recall tables; the window's (the last one's) stayed
        assert corpora == 0 and not seen[0] & owners, (seen, owners)
        assert len(seen[1] & owners) <= 1, (seen, owners)  # only the shared system prompt
        assert seen[3] and seen[3] <= owners
        kinds = _by_kind(home)
        assert kinds["documents"] == doc_bytes and kinds["server"] == nbytes, kinds
        docs = json.loads(cli(["docs", "--json"], home).stdout)["documents"]
        assert [(d["name"], d["bytes"]) for d in docs] == [("note", doc_bytes)]
        # rm --api beside the idle server: everything the server stored goes
        removed = cli(["rm", "--api"], home)
        assert removed.returncode == 0 and "removed the server's conversations" in removed.stdout
        assert _api(home) == (set(), 0, 0)
        assert _by_kind(home)["documents"] == doc_bytes
        again = server.post("/v1/chat/completions", long, key=None)  # and it serves on
        assert again.status_code == 200, again.text
        assert again.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    finally:
        assert server.stop() == 0, server.stderr()
    assert "Traceback" not in server.stderr()
    assert cli(["verify"], home).returncode == 0


def test_verify_finds_chunks_of_a_conversation_whose_rows_are_gone(
    tmp_path: Path, model_path: Path, embed_model_path: Path
) -> None:
    home = make_home(tmp_path, model_path, embed_model_path)
    server = Server(home)
    try:
        body = {"model": MODEL, "messages": HISTORY, "max_tokens": 2}
        assert server.post("/v1/chat/completions", body, key=None).status_code == 200
    finally:
        assert server.stop() == 0, server.stderr()
    owners, _, nbytes = _api(home)
    assert owners and nbytes > 0
    with sqlite3.connect(index_path(home)) as conn:  # a removal cut short after its rows
        conn.execute("DELETE FROM api_blocks")
    found = cli(["verify"], home)
    assert found.returncode == 1 and "removed server conversation" in found.stdout, found.stdout
    assert cli(["verify", "--repair"], home).returncode == 1
    assert cli(["verify"], home).returncode == 0
    assert _api(home)[2] == 0
