"""Shared pieces of the chat benchmarks: the model, a CLI runner, conversation filler."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_HOME = Path(os.environ.get("CASCADE_TEST_HOME", ROOT / ".cascade-test"))
#: the generator: BENCH_MODEL (a .gguf path) or the default model
MODEL = Path(
    os.environ.get("BENCH_MODEL", MODEL_HOME / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
)
WORK = ROOT / "bench" / ".work"
TEXT = ROOT / "bench" / "data" / "emma.txt"
#: The locker benchmarks' questions (direct, paraphrase): 'tuned' — the wordings the quote
#: policy and format were chosen on; 'held' — written before any run and only ever reported.
WORDINGS = {
    "tuned": (
        "What is my locker code? Answer with the number only.",
        "Which number did I ask you to remember for my locker? Reply with just the number.",
    ),
    "held": (
        "What's my locker code? Reply with only the digits.",
        "Earlier I gave you a number to keep for my locker. What was that number? Digits only.",
    ),
}


def home(name: str) -> Path:
    """A fresh CASCADE_HOME under bench/.work whose models/ links the default model."""
    path = WORK / name
    if path.exists():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    (path / "models").mkdir(parents=True)
    for pulled in MODEL.parent.glob("*.gguf"):  # the chat model and the recall embedder
        (path / "models" / pulled.name).symlink_to(pulled)
    return path


def env(where: Path, threads: int = 1) -> dict[str, str]:
    """A CLI run's environment: no other CASCADE_* setting, this home, threads and MODEL."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    return {
        **clean, "CASCADE_HOME": str(where), "CASCADE_THREADS": str(threads),
        "CASCADE_MODEL": str(MODEL),
    }  # fmt: skip


def model_tag() -> str:
    """The model's part of a result file's name: none for SmolLM2 (the first figures' model)."""
    return "" if MODEL.name.startswith("SmolLM2") else f"-{MODEL.stem}"


def chat(
    where: Path, session: str, messages: list[str], *args: str
) -> subprocess.CompletedProcess[str]:
    """One `cascade chat --session` process fed `messages` on stdin, one per line."""
    proc = subprocess.run(
        [sys.executable, "-m", "cascade_cli", "chat", "--session", session, *args],
        input="".join(m.replace("\n", " ") + "\n" for m in messages),
        capture_output=True,
        text=True,
        env=env(where),
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"chat failed ({proc.returncode}): {proc.stderr}")
    return proc


def passages(chars: int = 1100, seed: int = 0, source: Path = TEXT) -> list[str]:
    """Paragraph runs of *Emma* about `chars` long, shuffled by `seed`."""
    text = source.read_text(encoding="utf-8")
    paras = [re.sub(r"\s+", " ", p).strip() for p in text.split("\n\n")]
    out: list[str] = []
    cur = ""
    for p in paras:
        if not p:
            continue
        cur = f"{cur} {p}".strip()
        if len(cur) >= chars:
            out.append(cur[: chars + 200])
            cur = ""
    random.Random(seed).shuffle(out)
    return out


def filler(n: int, seed: int = 0, chars: int = 1100, source: Path = TEXT) -> list[str]:
    """`n` user messages of a conversation about the novel."""
    asks = [
        "In one sentence, what happens in this passage?",
        "Who speaks in this passage, and what do they want?",
        "What is the mood of this passage? Answer briefly.",
        "Summarize this passage in one sentence.",
    ]
    return [
        f"Here is a passage from {source.stem.title()}: {p} {asks[i % len(asks)]}"
        for i, p in enumerate(passages(chars, seed, source)[:n])
    ]
