"""The default model end to end: Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture, ChatML
template, a third family) through ingest, ask, a chat resumed in a new process and serve reuse
across a restart — real model, real processes. The ingest names no model (the default's path);
the rest name it, as the suite's environment names its own model (tests/suite_model.py).

The model (491 MB) is pulled by scripts/test.sh into the suite's model home; where it is not
there these tests are skipped (naming the command that pulls it) rather than downloading it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cascade_cli.registry import registry
from tests.cli.ingest_helpers import cli
from tests.cli.test_chat_cli import chat
from tests.conftest import MODEL_HOME
from tests.documents.helpers import NEEDLE, env_for, write_text
from tests.server.helpers import Server
from tests.server.test_lifecycle import HISTORY

pytestmark = pytest.mark.subprocess

NAME = registry()[0]
QWEN = ["--model", NAME]
WINDOW = ["--gpu-cache-size", "512", "--block-size", "128"]


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    """The pulled Qwen file in the suite's model home, or a skip saying how to pull it
    (session-scoped, and listed first below, so a skip comes before any other model is pulled)."""
    spec = registry()[1][NAME]
    path = MODEL_HOME / "models" / spec.file
    if not path.is_file() or path.stat().st_size != spec.size:
        pytest.skip(
            f"{NAME} is not pulled into {MODEL_HOME}: run "
            f"`CASCADE_HOME={MODEL_HOME} cascade models pull {NAME}` (scripts/test.sh does)"
        )
    return path


@pytest.fixture(scope="module")
def qhome(
    tmp_path_factory: pytest.TempPathFactory,
    qwen_path: Path,
    model_path: Path,
    embed_model_path: Path,
) -> Path:
    """A home whose models/ links Qwen, the default model and the embedder."""
    root = tmp_path_factory.mktemp("qwen")
    (root / "models").mkdir()
    for path in (qwen_path, model_path, embed_model_path):
        (root / "models" / path.name).symlink_to(path)
    return root


@pytest.fixture(scope="module")
def ingested(qhome: Path) -> Iterator[Path]:
    """About 1,300 tokens of the sample with a needle, ingested into 128-token chunks by the
    default model: no --model and no CASCADE_MODEL (the store then holds Qwen's KV, which the
    asks below, naming Qwen, restore)."""
    text = write_text(qhome / "book.txt", 5000, NEEDLE)
    env = {k: v for k, v in env_for(qhome).items() if k != "CASCADE_MODEL"}
    args = ["ingest", str(text), "--name", "book", *WINDOW]
    proc = subprocess.run(
        [sys.executable, "-m", "cascade_cli", *args],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    yield qhome


@pytest.mark.slow
def test_ingest_and_ask_restore_the_chunks_from_the_store(ingested: Path) -> None:
    home = ingested
    docs = json.loads(cli(["docs", "--json"], home).stdout)["documents"]
    assert [d["name"] for d in docs] == ["book"] and docs[0]["chunks"] >= 8
    question = ["ask", "book", "What is the pass key?", "--json", *QWEN, *WINDOW[:2]]
    proc = cli([*question, "--max-tokens", "12"], home)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["answer"].strip(), data
    assert data["chunks"] and {c["tier"] for c in data["chunks"]} <= {"disk", "ram"}, data
    restored = sum(c["tokens"] for c in data["chunks"])
    assert data["timings"]["restored_tokens"] == restored > 0
    assert data["timings"]["prefill_tokens"] < 200  # the question (and quotes), not the chunks
    assert any("48213" in p for p in data["passages"]), data
    check = cli(["verify", "--json"], home)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["clean"] is True


def _chat(home: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = chat(home, stdin, *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_chat_resumes_in_a_new_process_from_the_store(qhome: Path) -> None:
    small = ["--gpu-cache-size", "1024", "--temperature", "0", "--max-tokens", "12"]
    first = _chat(qhome, "My name is Ada.\nWhat is 2+2?\n", "-s", "q", *QWEN, *small)
    assert len([line for line in first.stdout.splitlines() if line.strip()]) >= 2, first.stdout
    again = _chat(qhome, "Thanks!\n/stats\n/history\n", "-s", "q", *QWEN)
    # the system prompt and both turns came back from the store, nothing recomputed
    assert re.search(r"chunk hits: window \d+ · ram \d+ · disk 3 · recomputed 0", again.stdout)
    assert "What is 2+2?" in again.stdout and "  3 user: Thanks!" in again.stdout
    assert "rebuilt" not in again.stderr
    # ChatML's control tokens are never shown as text
    assert "<|im_start|>" not in again.stdout and "<|im_end|>" not in again.stdout


def _post(server: Server, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": NAME, "messages": messages, "max_tokens": 4, "temperature": 0}
    response = server.post("/v1/chat/completions", body, key=None)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_serve_decodes_only_the_new_part_of_a_resent_conversation(qhome: Path) -> None:
    first = Server(qhome, *QWEN)
    try:
        cold = _post(first, HISTORY)
        reply = cold["choices"][0]["message"]
        assert reply["content"].strip() and "<|im_end|>" not in reply["content"], cold
        follow = [*HISTORY, reply, {"role": "user", "content": "And on Thursday?"}]
        warm = _post(first, follow)
    finally:
        assert first.stop() == 0, first.stderr()
    prompt = cold["usage"]["prompt_tokens"]
    assert prompt > 128 and cold["timings"]["prompt_n"] == prompt
    # the resent conversation: the earlier prompt and the reply's turn are reused, only the
    # new user message (and the reply header) is decoded
    cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > prompt, warm
    assert 0 < warm["timings"]["prompt_n"] == warm["usage"]["prompt_tokens"] - cached < 24, warm
    # a new process finds the same conversation's blocks in the store
    second = Server(qhome, *QWEN)
    try:
        again = _post(second, follow)
    finally:
        assert second.stop() == 0, second.stderr()
    assert again["usage"]["prompt_tokens"] == warm["usage"]["prompt_tokens"]
    assert again["timings"]["prompt_n"] < 24, again
    assert again["choices"][0]["message"] == warm["choices"][0]["message"]
