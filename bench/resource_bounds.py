"""Resource bounds: 100 consecutive asks in one process keep RSS and open descriptors flat.

python bench/resource_bounds.py [--asks 100] [--window 2048] [--block 256]

Ingests the shipped sample (cascade_cli/samples/persuasion.txt) into bench/.work/resources
(once), then asks rotating questions through the real ask path in one process — sink and
chunks restored through the RAM and disk tiers, answers of up to 16 tokens — and prints RSS
(/proc/self/statm), open file descriptors (/proc/self/fd) and the median ask time every 10 asks.
The table goes to bench/results/resource-bounds-<window>-<block>[-<model>].json
(bench/provenance.py). Needs no earlier run: the first run makes bench/.work/resources.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provenance import save  # noqa: E402
from cascade_cli.config import resolve  # noqa: E402
from cascade_cli.documents import catalog  # noqa: E402
from cascade_cli.documents.ingest import ingest  # noqa: E402
from cascade_cli.documents.library import Library  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.samples import PERSUASION  # noqa: E402
from cascade_cli.window.ask import AskResult, ask  # noqa: E402

MODEL = (
    Path(os.environ.get("CASCADE_TEST_HOME", ROOT / ".cascade-test"))
    / "models"
    / "SmolLM2-135M-Instruct.Q4_1.gguf"
)
WORK = ROOT / "bench" / ".work" / "resources"
QUESTIONS = [
    "Who is Sir Walter Elliot?",
    "What did Lady Russell advise about the debts?",
    "Who is Mr Shepherd?",
    "Why must the Elliots leave Kellynch Hall?",
    "Who is Anne Elliot?",
]


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--asks", type=int, default=100)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--model", type=Path, default=MODEL)
    args = ap.parse_args()
    set_verbose(False)
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / "store"), "memory_cache_size": "64MiB"},
        config_file=None,
    )  # fmt: skip
    n_ctx = args.window + args.block + 256
    with (
        Context(Model(args.model), n_ctx, 3, args.block, cfg.n_threads, "off") as ctx,
        Library(cfg, ctx) as lib,
    ):
        doc = ingest(ctx, lib, PERSUASION, "persuasion", "utf-8", lambda s: None)
        doc = catalog.find(lib.conn, "persuasion")
        print(f"document: {doc.tokens} tokens, {doc.chunks} chunks, window {args.window}")
        print("| asks | RSS MiB | open fds | median ask s (last 10) |")
        print("|---|---|---|---|")
        times: list[float] = []
        rows: list[list[object]] = []
        rss: list[float] = []
        descriptors: list[int] = []
        for i in range(args.asks):
            t0 = time.perf_counter()
            res = AskResult(doc=doc.name)
            for _ in ask(ctx, lib, doc, QUESTIONS[i % len(QUESTIONS)], res,
                         window=args.window, max_tokens=16):  # fmt: skip
                pass
            times.append(time.perf_counter() - t0)
            if i % 10 == 9:
                gc.collect()
                med = statistics.median(times[-10:])
                rss.append(rss_mib())
                descriptors.append(fds())
                print(f"| {i + 1} | {rss[-1]:.1f} | {descriptors[-1]} | {med:.3f} |", flush=True)
                rows.append([i + 1, f"{rss[-1]:.1f}", descriptors[-1], f"{med:.3f}"])
    save(
        f"resource-bounds-{args.window}-{args.block}"
        + ("" if args.model == MODEL else f"-{args.model.stem}"),
        topic="memory",
        title=f"{args.asks} asks in one process (window {args.window}, {args.model.name})",
        target="open descriptors constant and RSS flat (no growth per ask)",
        columns=["asks", "RSS MiB", "open fds", "median ask s (last 10)"],
        rows=rows,
        models=[args.model],
        notes=f"The shipped sample ({doc.tokens} tokens in {doc.chunks} chunks of {args.block}), "
        f"window {args.window}, q4, memory_cache_size 64MiB; questions rotate over "
        f"{len(QUESTIONS)}, answers ≤ 16 tokens, {cfg.n_threads} threads. Open descriptors: "
        f"{', '.join(str(d) for d in sorted(set(descriptors))) or '-'}; RSS "
        f"{min(rss, default=0):.1f}–{max(rss, default=0):.1f} MiB.",
    )


if __name__ == "__main__":
    main()
