"""Two homes against one real redis-server: a book ingested on one is asked on the other with
no prefill, survives a corrupted value and a killed Redis; two servers share prompts."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.cli.ingest_helpers import ask_json, cli, docs_json, ingest, stats_json
from tests.documents.helpers import NEEDLE, write_text
from tests.remote.redis_proc import REDIS, SKIP_REASON, RedisProc
from tests.server.helpers import MODEL, Server, make_home

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.redis,
    pytest.mark.skipif(REDIS is None, reason=SKIP_REASON),
]

QUESTION = "What is the pass key?"


@pytest.fixture()
def homes(tmp_path: Path, model_path: Path, embed_model_path: Path) -> tuple[Path, Path]:
    """Two CASCADE_HOMEs (two machines) with the test models."""
    return (
        make_home(tmp_path / "a", model_path, embed_model_path),
        make_home(tmp_path / "b", model_path, embed_model_path),
    )


def test_a_book_ingested_on_one_home_is_asked_on_another(
    tmp_path: Path, homes: tuple[Path, Path], redis_server: RedisProc
) -> None:
    a, b = homes
    url = redis_server.url
    book = write_text(tmp_path / "book.txt", 3000, NEEDLE)
    done = ingest(a, book, "book", "--remote", url)
    assert "published book" in done.stdout, done.stdout
    local = ask_json(a, "book", QUESTION)

    remote = ask_json(b, "book", QUESTION, "--remote", url)  # B never saw the file
    assert remote["chunks"] and {c["tier"] for c in remote["chunks"]} == {"remote"}
    assert remote["sink"]["tier"] == "remote"
    assert remote["timings"]["restored_tokens"] == sum(c["tokens"] for c in remote["chunks"])
    assert remote["answer"] == local["answer"]  # the same KV, bit for bit
    assert [c["index"] for c in remote["chunks"]] == [c["index"] for c in local["chunks"]]
    tiers = stats_json(b)["tiers"]["remote"]
    assert tiers["hits"] >= len(remote["chunks"]) and tiers["corrupt"] == 0

    again = ask_json(b, "book", QUESTION, "--remote", url)  # filled on the way back
    assert "disk" in {c["tier"] for c in again["chunks"]}
    assert again["answer"] == local["answer"]
    checked = cli(["verify", "book", "--remote", url, "--json"], b)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert any("chunks held and readable" in n for n in json.loads(checked.stdout)["notes"])

    raw = redis_server.client()
    raw.delete(*raw.keys("cascade:v1:*:kv"))  # Redis lost the values (flushed, say)
    lost = cli(["verify", "book", "--remote", url, "--repair", "--json"], a)
    assert lost.returncode == 1, lost.stdout + lost.stderr
    found = json.loads(lost.stdout)["damaged"]
    assert [f["kind"] for f in found] == ["remote_missing"]
    n = docs_json(a)[0]["chunks"]
    assert found[0]["action"] == f"published again ({n} uploaded)"  # from A's disk
    assert cli(["verify", "book", "--remote", url], a).returncode == 0


def test_a_corrupted_value_is_never_served(
    tmp_path: Path,
    homes: tuple[Path, Path],
    redis_server: RedisProc,
    model_path: Path,
    embed_model_path: Path,
) -> None:
    a, b = homes
    url = redis_server.url
    ingest(a, write_text(tmp_path / "book.txt", 2000, NEEDLE), "book", "--remote", url)
    raw = redis_server.client()
    values = raw.keys("cascade:v1:*:kv")
    assert values
    for key in values:  # one byte of every payload changed
        raw.setrange(key, 64, b"\xaa")
    data = ask_json(b, "book", QUESTION, "--remote", url)
    tiers = [c["tier"] for c in data["chunks"]]
    # each chunk is recomputed, or (a chunk B recomputed and published again earlier in this
    # ask, as another chunk's context) read back from Redis after passing its checksum
    assert set(tiers) <= {"recomputed", "remote"} and "recomputed" in tiers, tiers
    assert data["sink"]["tier"] == "recomputed"
    assert data["answer"].strip()
    assert stats_json(b)["tiers"]["remote"]["corrupt"] >= tiers.count("recomputed") + 1
    # what failed was dropped, recomputed in its own context on B and published again: a
    # third machine asking the same finds them all in Redis
    c = make_home(tmp_path / "c", model_path, embed_model_path)
    third = ask_json(c, "book", QUESTION, "--remote", url)
    assert [x["index"] for x in third["chunks"]] == [x["index"] for x in data["chunks"]]
    assert {x["tier"] for x in third["chunks"]} == {"remote"}
    assert third["sink"]["tier"] == "remote"


def test_a_wrong_password_is_one_warning_and_local_tiers(
    tmp_path: Path, homes: tuple[Path, Path]
) -> None:
    a, _ = homes
    secure = RedisProc(tmp_path / "secure", password="right-pass")
    try:
        url = f"redis://default:wrong-pass@127.0.0.1:{secure.port}/0"
        proc = cli(["ingest", str(write_text(tmp_path / "t.txt", 1200)), "--name", "t",
                    "--gpu-cache-size", "512", "--block-size", "128", "--remote", url], a)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "ingested t" in proc.stdout
        said = proc.stdout + proc.stderr
        assert said.count("using the local tiers only") == 1, said
        assert "wrong-pass" not in said and "***" in said
        stats = cli(["stats", "--json"], a).stdout
        assert "wrong-pass" not in stats and json.loads(stats)["tiers"]["remote"]["errors"] > 0
    finally:
        secure.stop()


def test_two_servers_share_a_conversation(
    homes: tuple[Path, Path], redis_server: RedisProc
) -> None:
    from tests.server.test_lifecycle import HISTORY

    a, b = homes
    body = {"model": MODEL, "messages": HISTORY, "max_tokens": 4, "temperature": 0}
    first = Server(a, "--remote", redis_server.url)
    try:
        cold = first.post("/v1/chat/completions", body, key=None)
        assert cold.status_code == 200, cold.text
    finally:
        assert first.stop(signal.SIGTERM) == 0, first.stderr()  # flushed: published
    second = Server(b, "--remote", redis_server.url)
    try:
        warm = second.post("/v1/chat/completions", body, key=None)
        assert warm.status_code == 200, warm.text
    finally:
        assert second.stop(signal.SIGTERM) == 0, second.stderr()
    usage = warm.json()["usage"]
    assert usage["prompt_tokens"] == cold.json()["usage"]["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 0.8 * usage["prompt_tokens"]
    assert warm.json()["choices"][0]["message"] == cold.json()["choices"][0]["message"]
    assert stats_json(b)["tiers"]["remote"]["hits"] >= 2
