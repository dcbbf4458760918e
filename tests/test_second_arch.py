"""A second architecture end to end: Gemma 3 270M (sliding-window attention, iSWA cache) through
ingest, ask, verify, chat resume and serve reuse across a restart — real model, real processes."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import cli
from tests.cli.test_chat_cli import chat
from tests.documents.helpers import NEEDLE, write_text
from tests.server.helpers import Server
from tests.server.test_lifecycle import HISTORY

pytestmark = pytest.mark.subprocess

GEMMA = ["--model", "gemma3-270m"]
WINDOW = ["--gpu-cache-size", "512", "--block-size", "128"]


@pytest.fixture(scope="module")
def ghome(
    tmp_path_factory: pytest.TempPathFactory,
    gemma_path: Path,
    model_path: Path,
    embed_model_path: Path,
) -> Path:
    """A home whose models/ links Gemma, the default model and the embedder."""
    root = tmp_path_factory.mktemp("gemma")
    (root / "models").mkdir()
    for path in (gemma_path, model_path, embed_model_path):
        (root / "models" / path.name).symlink_to(path)
    return root


@pytest.fixture(scope="module")
def ingested(ghome: Path) -> Iterator[Path]:
    """A ~3,000-token text with a needle, ingested with Gemma into 128-token chunks."""
    text = write_text(ghome / "book.txt", 12000, NEEDLE)
    proc = cli(["ingest", str(text), "--name", "book", *GEMMA, *WINDOW], ghome)
    assert proc.returncode == 0, proc.stderr
    yield ghome


@pytest.mark.slow
def test_ingest_ask_and_verify_on_a_sliding_window_model(ingested: Path) -> None:
    home = ingested
    docs = json.loads(cli(["docs", "--json"], home).stdout)["documents"]
    assert docs[0]["chunks"] >= 20
    proc = cli(
        [
            "ask",
            "book",
            "What is the pass key?",
            "--json",
            *GEMMA,
            *WINDOW[:2],
            "--max-tokens",
            "12",
        ],
        home,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    assert {c["tier"] for c in data["chunks"]} <= {"disk", "ram"}  # restored, not recomputed
    assert data["timings"]["prefill_tokens"] < 200  # the question (and quotes), not the chunks
    # the needle's chunk was paged in and its sentence quoted before the question
    assert any("48213" in p for p in data["passages"]), data
    check = cli(["verify", "--json"], home)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["clean"] is True


def test_the_other_model_is_refused_in_one_line(ingested: Path) -> None:
    proc = cli(["ask", "book", "What is the pass key?", "--model", "smollm2-135m"], ingested)
    assert_one_line_error(proc, "another model")


def _chat(home: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = chat(home, stdin, *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_chat_resumes_from_the_store_on_a_sliding_window_model(ghome: Path) -> None:
    small = ["--gpu-cache-size", "1024", "--temperature", "0", "--max-tokens", "12"]
    _chat(ghome, "My name is Ada.\nWhat is 2+2?\n", "-s", "g", *GEMMA, *small)
    again = _chat(ghome, "Thanks!\n/stats\n", "-s", "g", *GEMMA)
    # the system prompt and both turns came back from the store, nothing recomputed
    assert re.search(r"chunk hits: window \d+ · ram \d+ · disk 3 · recomputed 0", again.stdout)


def test_serve_reuses_a_prompt_before_and_after_a_restart(ghome: Path) -> None:
    body = {"model": "gemma3-270m", "messages": HISTORY, "max_tokens": 4, "temperature": 0}
    first = Server(ghome, *GEMMA)
    try:
        cold = first.post("/v1/chat/completions", body, key=None).json()
        again = first.post("/v1/chat/completions", body, key=None).json()
    finally:
        assert first.stop() == 0, first.stderr()
    prompt = cold["usage"]["prompt_tokens"]
    assert prompt > 128 and cold["timings"]["prompt_n"] == prompt
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt - 16
    assert again["choices"][0]["message"] == cold["choices"][0]["message"]
    second = Server(ghome, *GEMMA)
    try:
        warm = second.post("/v1/chat/completions", body, key=None).json()
    finally:
        assert second.stop() == 0, second.stderr()
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt - 16, warm
    assert warm["choices"][0]["message"] == cold["choices"][0]["message"]


def test_a_model_whose_state_cascade_cannot_store_is_refused_before_any_work(
    ghome: Path, embed_model_path: Path, tmp_path: Path
) -> None:
    text = write_text(tmp_path / "t.txt", 3000)
    args = ["--model", str(embed_model_path), "--gpu-cache-size", "512", "--block-size", "128"]
    proc = cli(["ingest", str(text), "--name", "enc", *args], ghome)
    assert_one_line_error(proc, "(bert) keeps no KV cache")
    assert "enc" not in cli(["docs"], ghome).stdout  # nothing was started
