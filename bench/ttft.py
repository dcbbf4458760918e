"""Time to first token: `ask` on an ingested book vs prefilling the same recalled text.

python bench/ttft.py [--configs 1:0 1:1 3:0 7:0] [--rounds 3]

Reuses the base document of bench/needle.py (run that first). For each top-k:neighbours config
(BM25 recall; 1:1 is `ask`'s default), asks questions about the book through the real ask path
(sink and chunks restored from disk, RAM tier cleared before each ask) and, in the same process,
prefills the same prefix, chunk tokens and question from scratch; reports medians over
rounds × questions and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.needle import MODEL, WORK, prefill_ttft  # noqa: E402
from cascade_cli.config import resolve  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.paging import catalog  # noqa: E402
from cascade_cli.paging.ask import AskResult, ask  # noqa: E402
from cascade_cli.paging.library import Library  # noqa: E402

QUESTIONS = [
    "Who is Mr. Knightley?",
    "What happened at Box Hill?",
    "Where does Harriet Smith live?",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--configs", nargs="+", default=["1:0", "1:1", "3:0", "7:0"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    args = ap.parse_args()
    set_verbose(False)
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / "store"), "memory_cache_size": "256MiB"},
        config_file=None,
    )  # fmt: skip
    with (
        Context(
            Model(MODEL), args.window + args.block + 256, 3, args.block, cfg.n_threads, "off"
        ) as ctx,
        Library(cfg, ctx) as lib,
    ):
        doc = catalog.find(lib.conn, "base")
        print(f"document: {doc.tokens} tokens, {doc.chunks} chunks, window {args.window}")
        print("| top-k | neighbours | recalled tokens | ask TTFT s | prefill TTFT s | ratio |")
        print("|---|---|---|---|---|---|")
        for config in args.configs:
            k, nb = (int(x) for x in config.split(":"))
            asked, scratch, tokens = [], [], 0
            for question in QUESTIONS * args.rounds:
                lib.ram.clear()
                res = AskResult(doc=doc.name)
                for _ in ask(ctx, lib, doc, question, res, window=args.window, mode="bm25",
                             top_k=k, neighbors=nb, max_tokens=1):  # fmt: skip
                    pass
                asked.append(res.timings["ttft_s"])
                metas = [lib.disk.meta(doc.chunk_key(c["index"])) for c in res.chunks]
                tokens = sum(m.n_tokens for m in metas)
                scratch.append(
                    prefill_ttft(ctx, args.window, [m.tokens.tolist() for m in metas], question)
                )
            a, s = statistics.median(asked), statistics.median(scratch)
            print(f"| {k} | {nb} | {tokens} | {a:.3f} | {s:.3f} | {s / a:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
