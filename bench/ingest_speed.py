"""Ingest throughput vs plain sliding-window decoding, and peak RSS for two text lengths.

python bench/ingest_speed.py [--text FILE] [--tokens 8192] [--memory-tokens 20000 200000]

Each run is a fresh subprocess (so peak RSS is per run). For each --tokens length: decode the
text with the same sliding window and no saving (the baseline), then the real ingest into a
fresh store; prints both tokens/s and their ratio. For each --memory-tokens length: the real
ingest only, with its peak RSS (ru_maxrss) against model file + window KV + memory_cache_size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = ROOT / ".cascade-test" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

from bench.provenance import save  # noqa: E402


def default_text() -> Path:
    data = ROOT / "bench" / "data"
    found = sorted(data.glob("*.txt")) if data.is_dir() else []
    from cascade_cli.samples import PERSUASION

    return found[0] if found else PERSUASION


def child(text_path: Path, n_tokens: int, window: int, block: int, mode: str) -> dict[str, float]:
    from cascade_cli.config import resolve
    from cascade_cli.documents.frame import frame
    from cascade_cli.documents.ingest import chunks, ingest
    from cascade_cli.documents.library import Library
    from cascade_cli.engine import Context, Model, set_verbose
    from cascade_cli.engine.live import Window

    set_verbose(False)
    model = Model(MODEL)
    full = text_path.read_text(encoding="utf-8", errors="replace")
    # cut the text to about n_tokens (4 chars/token estimate, then exact by chunking)
    text = full[: n_tokens * 5]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "doc.txt"
        src.write_text(text)
        cfg = resolve(
            {
                "gpu_cache_size": window,
                "block_size": block,
                "disk_cache_path": str(Path(tmp) / "store"),
                "compression": "q4",
                "memory_cache_size": os.environ.get("BENCH_MEMORY_CACHE", "512MiB"),
            },
            config_file=None,
        )
        threads = os.cpu_count() or 2
        with Context(model, window + block, 3, block, threads, "off") as ctx:
            t = time.perf_counter()
            tokens = 0
            if mode == "baseline":
                win = Window(ctx, window)
                win.append(frame(model).prefix)
                p0 = win.end
                live: deque[int] = deque()
                for toks, _ in chunks(ctx, text, block):
                    while win.room() < len(toks):
                        win.drop(p0, p0 + live.popleft())
                    win.append(toks)
                    live.append(len(toks))
                    tokens += len(toks)
            else:
                with Library(cfg, ctx) as lib:
                    doc = ingest(ctx, lib, src, "doc", "utf-8", lambda s: None)
                    tokens = doc.tokens
            secs = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"tokens": tokens, "seconds": secs, "rss": rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text", type=Path, default=None)
    ap.add_argument("--tokens", type=int, nargs="*", default=[8192])
    ap.add_argument("--memory-tokens", type=int, nargs="*", default=[20000, 200000])
    ap.add_argument("--memory-cache-size", default="512MiB")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    text = args.text or default_text()
    if args.child:
        n = args.tokens[0]
        print(json.dumps(child(text, n, args.window, args.block, args.child)))
        return

    def run(n: int, mode: str) -> dict[str, float]:
        cmd = [sys.executable, __file__, "--text", str(text), "--tokens", str(n)]
        cmd += ["--window", str(args.window), "--block", str(args.block), "--child", mode]
        env = {**os.environ, "BENCH_MEMORY_CACHE": args.memory_cache_size}
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

    rows: list[list[object]] = []
    for n in args.tokens:
        b, i = run(n, "baseline"), run(n, "ingest")
        bt, it = b["tokens"] / b["seconds"], i["tokens"] / i["seconds"]
        rows.append([f"{i['tokens']:.0f}", f"{bt:.0f}", f"{it:.0f}", f"**{it / bt:.2f}**",
                     f"{i['rss'] / 2**20:.0f}"])  # fmt: skip
    from cascade_cli.config import parse_size
    from cascade_cli.engine import Model

    with Model(MODEL) as m:  # f16 K and V per token, every layer
        per_token = m.n_layer * (m.n_embd_k_gqa + m.n_embd_v_gqa) * 2
    kv_bytes = (args.window + args.block) * per_token
    budget = (MODEL.stat().st_size + kv_bytes + parse_size(args.memory_cache_size)) * 1.15
    for n in args.memory_tokens:
        i = run(n, "ingest")
        rows.append([f"{i['tokens']:.0f}", "", f"{i['tokens'] / i['seconds']:.0f}", "",
                     f"{i['rss'] / 2**20:.0f}"])  # fmt: skip
    save(
        f"ingest-speed-{text.stem}",
        topic="ingest",
        title=f"Ingest throughput and peak RSS ({text.name}, {MODEL.name})",
        target="ingest ≥ 0.9× the plain sliding-window decode; peak RSS within the bound below, independent of length",
        columns=["tokens", "baseline tok/s", "ingest tok/s", "ratio", "peak RSS MiB"],
        rows=rows,
        models=[MODEL],
        notes=f"Window {args.window}, block {args.block}, q4; each row a fresh process. The "
        f"baseline decodes the same sliding window without saving. RSS bound: model "
        f"{MODEL.stat().st_size / 2**20:.0f} MiB + window KV {kv_bytes / 2**20:.0f} MiB + "
        f"memory_cache_size {args.memory_cache_size}, + 15 % = {budget / 2**20:.0f} MiB.",
    )


if __name__ == "__main__":
    main()
