"""Reopening a chat session in a new process vs re-prefilling its window.

python bench/chat_resume.py [--window 4096] [--tokens 3000] [--runs 5]

Builds a session with `cascade chat` (piped stdin) until its window holds at least --tokens
tokens, then --runs times: copies the store, and in a new process (this script with --probe)
drops the copy's files from the page cache (posix_fadvise DONTNEED), opens the session (its
window restored from the disk tier), sends the next message and times its first token; in the
same process it then prefills the same window and message from scratch and times that first
token. Reports medians and their ratio: time to first token after the message was sent (the
window was restored when the session opened), and restore + first token.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_common import MODEL, chat, env, filler, home, model_tag  # noqa: E402
from bench.provenance import save  # noqa: E402

QUESTION = "Which character did we talk about most so far? Answer in one sentence."


def probe(where: Path, window: int) -> dict[str, float]:
    """In this (new) process: open the session, time the reply's first token; then prefill."""
    from cascade_cli.config import resolve
    from cascade_cli.documents.library import Library
    from cascade_cli.engine import Context, Model, Sampler, SamplerSettings, set_verbose
    from cascade_cli.session.chat import ChatSession

    set_verbose(False)
    for f in (where / "store").rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    cfg = resolve({"gpu_cache_size": window, "disk_cache_path": str(where / "store")})
    model = Model(MODEL)
    with Context(model, window + 256, 4, 512, cfg.n_threads) as ctx, Library(cfg, ctx) as lib:
        t0 = time.perf_counter()
        session = ChatSession(ctx, lib, "r", create=False)
        opened = time.perf_counter() - t0
        tiers = dict(session.totals.tiers)
        tokens = [t for p in session.pages.layout for t in p.tokens]
        q = session.tpl.user(QUESTION)
        t1 = time.perf_counter()
        stream = session.send(QUESTION)
        next(stream)
        ttft = time.perf_counter() - t1
        stream.close()
        session.close()
        ctx.clear()
        with Sampler(SamplerSettings(temperature=0)) as sampler:
            t2 = time.perf_counter()
            ctx.decode(tokens + q, 0, 0, logits="last")
            sampler.sample(ctx)
            prefill = time.perf_counter() - t2
    return {
        "window_tokens": len(tokens), "open_s": opened, "ttft_s": ttft, "prefill_s": prefill,
        "disk": tiers.get("disk", 0), "recomputed": tiers.get("recomputed", 0),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--probe", type=Path)
    args = ap.parse_args()
    if args.probe:
        print(json.dumps(probe(args.probe, args.window)))
        return
    where = home("chat-resume")
    flags = ["--gpu-cache-size", str(args.window), "--max-tokens", "48", "--temperature", "0"]
    messages = filler(40, seed=1)
    sent = 0
    while True:
        chat(where, "r", messages[sent : sent + 3], *flags)
        sent += 3
        info = json.loads(
            subprocess.run(
                [sys.executable, "-m", "cascade_cli", "sessions", "--json"],
                capture_output=True, text=True, env=env(where), cwd=ROOT, check=True,
            ).stdout
        )["sessions"][0]  # fmt: skip
        if info["tokens"] >= args.tokens:
            break
    print(f"session: {info['turns']} turns, {info['tokens']} tokens, {info['bytes']} bytes")
    rows = []
    for _ in range(args.runs):
        copy = where.parent / "chat-resume-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(where, copy, symlinks=True)
        out = subprocess.run(
            [sys.executable, __file__, "--probe", str(copy), "--window", str(args.window)],
            capture_output=True, text=True, env=env(copy), cwd=ROOT, check=True,
        ).stdout  # fmt: skip
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    save(
        "chat-resume" + model_tag(),
        topic="chat",
        title=f"Chat resume vs re-prefill ({MODEL.name})",
        target="TTFT after the restore ≥ 50× below a re-prefill of the window",
        columns=["window tokens", "restore (open) s", "TTFT after restore s", "prefill TTFT s",
                 "ratio TTFT", "ratio restore + TTFT"],
        rows=[[f"{med['window_tokens']:.0f}", f"{med['open_s']:.3f}", f"{med['ttft_s']:.3f}",
               f"{med['prefill_s']:.3f}", f"**{med['prefill_s'] / med['ttft_s']:.0f}×**",
               f"{med['prefill_s'] / (med['open_s'] + med['ttft_s']):.0f}×"]],
        models=[MODEL],
        notes=f"Medians of {args.runs} runs, window {args.window}; each run opens a copy of the "
        "session in a new process with its files dropped from the page cache.",
    )  # fmt: skip


if __name__ == "__main__":
    main()
