"""Recurrent (Mamba) and hybrid (Jamba: attention + Mamba) models end to end, on tiny
random-weight GGUFs this suite writes itself (tests/engine/tiny_gguf.py): the codec's round trip,
ingest, ask paging recalled chunks in by prefill, chat resuming from a prefix snapshot and
decoding only the new message, a conversation longer than the window, serve reuse before and
after a restart, verify and rm — real models, real processes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli.ingest_helpers import cli
from tests.cli.test_chat_cli import chat
from tests.documents.helpers import NEEDLE, chunk_rows, doc_id, write_text
from tests.engine.tiny_gguf import write
from tests.server.helpers import Server
from tests.server.test_lifecycle import HISTORY

WINDOW = ["--gpu-cache-size", "512", "--block-size", "128"]
NOTICE = "cannot be moved: recalled text is paged in by prefill"


@pytest.fixture(scope="module", params=["mamba", "jamba"])
def rhome(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    model_path: Path,
    embed_model_path: Path,
) -> tuple[Path, Path]:
    """A home with the embedder and a tiny recurrent or hybrid model; (home, model path)."""
    root = tmp_path_factory.mktemp(request.param)
    (root / "models").mkdir()
    for path in (model_path, embed_model_path):
        (root / "models" / path.name).symlink_to(path)
    return root, write(root / f"tiny-{request.param}.gguf", model_path, request.param)


def _ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_state_round_trip_is_exact(rhome: tuple[Path, Path]) -> None:
    from cascade_cli import kv
    from cascade_cli.engine import Context, Model

    with Model(rhome[1]) as m, Context(m, 512, 4, 512, 1) as ctx:
        assert ctx.layout == ("recurrent" if "mamba" in rhome[1].name else "hybrid")
        toks = m.tokenize("The lighthouse keeper counted the ships that passed at night.")
        ctx.decode(toks[:-1], 0, 0, logits="none")
        blob = np.array(ctx.state_get(0), copy=True)
        want = ctx.decode(toks[-1:], len(toks) - 1, 0, logits="last").copy()
        back = kv.decode(kv.encode(blob, "none", layout=ctx.layout))
        assert np.array_equal(back, blob)
        ctx.seq_rm(0)
        ctx.state_set(0, back)
        assert np.array_equal(ctx.decode(toks[-1:], len(toks) - 1, 0, logits="last"), want)


@pytest.mark.subprocess
def test_ingest_ask_verify_page_recalled_text_in_by_prefill(rhome: tuple[Path, Path]) -> None:
    home, model = rhome
    text = write_text(home / "book.txt", 8000, NEEDLE)
    _ok(cli(["ingest", str(text), "--name", "book", "--model", str(model), *WINDOW], home))
    args = ["--model", str(model), *WINDOW[:2], "--max-tokens", "6"]
    proc = _ok(cli(["ask", "book", "What is the pass key?", "--json", *args], home))
    data: dict[str, Any] = json.loads(proc.stdout)
    tiers = [c["tier"] for c in data["chunks"]]
    assert len(tiers) >= 2 and tiers[0] in ("disk", "ram"), data["chunks"]  # after the sink
    assert set(tiers[1:]) == {"prefill"}, tiers
    fed = sum(c["tokens"] for c in data["chunks"][1:])
    assert data["timings"]["prefill_tokens"] >= fed
    assert any("48213" in p for p in data["passages"]), data["passages"]  # the needle's chunk
    assert proc.stderr.count(NOTICE) == 1, proc.stderr
    stats = json.loads(_ok(cli(["stats", "--json"], home)).stdout)
    assert stats["tiers"]["prefill"]["hits"] >= len(tiers) - 1
    check = _ok(cli(["verify", "--json"], home))
    assert json.loads(check.stdout)["clean"] is True
    # a damaged chunk is recomputed where ingest made it: after the sink alone
    row = chunk_rows(home, f"doc:{doc_id(home, 'book')}")[3]
    hurt = home / "store" / "data" / row["file"]
    raw = bytearray(hurt.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    hurt.write_bytes(bytes(raw))
    fixed = cli(["verify", "--repair", "--json", "--model", str(model)], home)
    assert fixed.returncode == 1 and "Traceback" not in fixed.stderr, fixed.stderr
    assert json.loads(fixed.stdout)["damaged"][0]["action"] == "recomputed", fixed.stdout
    assert json.loads(_ok(cli(["verify", "--json"], home)).stdout)["clean"] is True


@pytest.mark.subprocess
def test_chat_resumes_from_a_snapshot_and_decodes_only_the_new_message(
    rhome: tuple[Path, Path],
) -> None:
    home, model = rhome
    args = ["--model", str(model), "--gpu-cache-size", "512", "--max-tokens", "8"]
    _ok(chat(home, "My name is Ada.\nWhat is 2+2?\n", "-s", "r", *args))
    again = _ok(chat(home, "Thanks!\n/stats\n", "-s", "r", *args))
    # the whole window (system prompt and both turns) came back as one snapshot from disk
    assert re.search(r"chunk hits: window \d+ · ram \d+ · disk 3 · recomputed 0", again.stdout)
    decoded = re.search(r"prefill: (\d+) tokens", again.stdout)
    assert decoded and int(decoded.group(1)) < 16, again.stdout  # "Thanks!" and its frame


@pytest.mark.subprocess
def test_a_conversation_longer_than_the_window_recalls_by_prefill(
    rhome: tuple[Path, Path],
) -> None:
    home, model = rhome
    args = ["--model", str(model), "--gpu-cache-size", "256", "--max-tokens", "16"]
    lines = [f"Note {i}: the {w} is kept in drawer {i}." for i, w in enumerate("abcdefghijkl")]
    _ok(chat(home, "My locker code is 4711.\n" + "\n".join(lines) + "\n", "-s", "long", *args))
    again = _ok(chat(home, "What is my locker code?\n/stats\n", "-s", "long", *args))
    assert "recalled turn 1" in again.stderr, again.stderr
    assert not re.search(r"recomputed [1-9]", again.stdout)
    _ok(cli(["verify"], home))
    snaps = [o for o in _owners(home) if o.startswith("snap:session:")]
    assert snaps, _owners(home)
    _ok(cli(["rm", "--session", "long"], home))
    left = [o for o in _owners(home) if o.startswith("snap:session:")]
    assert len(left) == len(snaps) - 1, (snaps, left)  # the session's snapshots went with it


def _owners(home: Path) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(home / "store" / "index.sqlite")
    try:
        return [r[0] for r in conn.execute("SELECT DISTINCT owner FROM chunks")]
    finally:
        conn.close()


@pytest.mark.subprocess
def test_serve_reuses_a_prompt_before_and_after_a_restart(rhome: tuple[Path, Path]) -> None:
    home, model = rhome
    body = {"model": str(model), "messages": HISTORY, "max_tokens": 4, "temperature": 0}
    first = Server(home, "--model", str(model))
    try:
        cold = first.post("/v1/chat/completions", body, key=None).json()
        assert "usage" in cold, cold
        again = first.post("/v1/chat/completions", body, key=None).json()
        salted = first.post(
            "/v1/chat/completions", {**body, "cache_salt": "client-b"}, key=None
        ).json()
    finally:
        assert first.stop() == 0, first.stderr()
    prompt = cold["usage"]["prompt_tokens"]
    assert prompt > 128 and cold["timings"]["prompt_n"] == prompt
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt - 16, again
    assert again["choices"][0]["message"] == cold["choices"][0]["message"]
    # another client's salt shares nothing: neither the window nor a snapshot
    assert salted["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, salted
    second = Server(home, "--model", str(model))
    try:
        warm = second.post("/v1/chat/completions", body, key=None).json()
    finally:
        assert second.stop() == 0, second.stderr()
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt - 16, warm
    assert warm["choices"][0]["message"] == cold["choices"][0]["message"]
    assert [o for o in _owners(home) if o.startswith("snap:api:")]
    _ok(cli(["rm", "--api"], home))
    assert not [o for o in _owners(home) if o.startswith(("snap:api:", "api:"))], _owners(home)


def test_the_window_goes_back_right_after_a_cut_decode_and_a_restore(
    rhome: tuple[Path, Path],
) -> None:
    from cascade_cli.engine import Context, Model
    from cascade_cli.engine.live import WINDOW_SEQ, Window

    with Model(rhome[1]) as m, Context(m, 512, 4, 512, 1) as ctx:
        a = m.tokenize("The keeper lit the lamp at dusk and watched the sea all night long.")
        b = m.tokenize("A baker rose before dawn, kneaded the dough and warmed the old oven.")

        def fresh(tokens: list[int]) -> np.ndarray:
            ctx.seq_rm(WINDOW_SEQ)
            return ctx.decode(tokens, 0, WINDOW_SEQ, logits="last").copy()

        want = fresh(a[:10] + b[:3])
        win = Window(ctx, 512)
        win.append(a[:6])
        win.mark()
        win.append(a[6:10])
        ctx.decode(a[10:11], 10, WINDOW_SEQ)  # decoded, never counted: a generation cut short
        win.advance([])
        assert win.dirty
        got = win.append(b[:3], logits="last")  # back to the mark at 6, a[6:10] decoded again
        assert np.array_equal(got, want) and win.history == a[:10] + b[:3]
        other = win.save(0, win.end).copy()  # a state of another text, restored over this one
        win.reset()
        win.append(b[:6])
        win.mark()
        win.append(b[6:12])
        win.restore(other, a[:10] + b[:3])
        assert 6 not in win.marks  # b's mark at 6 is no good for a's tokens
        win.truncate(8)
        assert np.array_equal(win.append(a[8:10] + b[:3], logits="last"), want)
