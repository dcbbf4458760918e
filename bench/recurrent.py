"""Recurrent and hybrid models: a conversation's window restored from a prefix snapshot vs
decoded again (re-prefill), on tiny random-weight Mamba and Jamba GGUFs written like the test
suite's (tests/engine/tiny_gguf.py) — the paging path, not the model quality, is measured.

python bench/recurrent.py [--tokens 2000] [--repeats 5]

Per model: the window (a system page and turns of `--block`-token pages, --tokens in all) laid out
by window.pages.Pages through window.prefix: cold (everything decoded), then a fresh window
restoring the stored snapshot from the RAM tier, then from disk (RAM emptied) — medians of
--repeats; also the snapshot's bytes on disk vs the tokens it stands for. The table goes to
bench/results/recurrent-<tokens>-<block>.json (bench/provenance.py). Needs no earlier run (the
models are written to a temporary directory), only bench/data/emma.txt
(python bench/fetch_text.py emma).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_common import MODEL  # noqa: E402
from bench.provenance import save  # noqa: E402
from tests.engine.tiny_gguf import write  # noqa: E402

EMMA = ROOT / "bench" / "data" / "emma.txt"


def run(arch: str, tokens: int, block: int, repeats: int, work: Path) -> dict[str, Any]:
    from cascade_cli.config import Settings
    from cascade_cli.documents.library import Library
    from cascade_cli.engine import Context, Model
    from cascade_cli.store import ChunkMeta
    from cascade_cli.window.page import Page
    from cascade_cli.window.pages import Pages

    path = write(work / f"tiny-{arch}.gguf", MODEL, arch)
    threads = int(os.environ.get("CASCADE_THREADS", "2"))
    cfg = Settings(
        disk_cache_path=work / f"store-{arch}", threads=threads, gpu_cache_size=tokens + 64,
        embed_model="none", recall="bm25",
    )  # fmt: skip
    row: dict[str, Any] = {"model": arch}
    with (
        Model(path) as m,
        Context(m, tokens + 64, 4, 512, threads) as ctx,
        Library(cfg, ctx) as lib,
    ):
        words = EMMA.read_text()[: 20 * tokens]
        ids = m.tokenize(words)[:tokens]
        pages = []
        for i in range(0, len(ids), block):
            piece = ids[i : i + block]
            meta = ChunkMeta(
                key=f"session:1:{i // block}", owner="session:1", index=i // block, start=i,
                end=i + len(piece), tokens=np.asarray(piece, dtype=np.int32), scheme="q4",
            )  # fmt: skip
            pages.append(Page(meta.key, piece, meta))
        times: dict[str, list[float]] = {"prefill": [], "ram": [], "disk": []}
        for _ in range(repeats):
            for tier in ("prefill", "ram", "disk"):
                if tier == "prefill":
                    lib.disk.delete_owner("snap:session:1")
                    lib.ram.clear()
                elif tier == "disk":
                    lib.pager.flush()
                    lib.ram.clear()
                win = Pages(ctx, lib, tokens + 64)
                t0 = time.perf_counter()
                placed = win.apply(pages)
                times[tier].append(time.perf_counter() - t0)
                got = "prefill" if placed.tiers.get("prefill") else next(iter(placed.tiers), "")
                assert got == tier, (tier, dict(placed.tiers))
                lib.pager.flush()
        snaps = lib.disk.chunks("snap:session:1")
        row.update(
            {
                "tokens": len(ids),
                "layout": ctx.layout,
                **{f"{k}_s": round(statistics.median(v), 5) for k, v in times.items()},
                "snapshot_bytes": max(s.nbytes for s in snaps),
            }
        )
    row["ram_x"] = round(row["prefill_s"] / row["ram_s"], 1)
    row["disk_x"] = round(row["prefill_s"] / row["disk_s"], 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not EMMA.exists():
        raise SystemExit(f"{EMMA.relative_to(ROOT)} is missing: python bench/fetch_text.py emma")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("mamba", "jamba"):
            rows.append(run(arch, args.tokens, args.block, args.repeats, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
        names = {
            "mamba": "Mamba (recurrent)",
            "jamba": "Jamba (hybrid: 1 attention + 1 Mamba layer)",
        }
        save(
            f"recurrent-{args.tokens}-{args.block}",
            topic="models",
            title="Recurrent and hybrid models: prefix snapshots vs re-prefill (tiny test models)",
            columns=["model (layout)", "re-prefill ms", "from RAM ms", "from disk ms",
                     "snapshot on disk B"],
            rows=[[names.get(r["model"], r["model"]), f"{1000 * r['prefill_s']:.1f}",
                   f"{1000 * r['ram_s']:.2f} = **{r['ram_x']:.0f}×**",
                   f"{1000 * r['disk_s']:.2f} = **{r['disk_x']:.0f}×**",
                   f"{r['snapshot_bytes']:,}"]
                  for r in rows],
            models=[MODEL, *(Path(tmp) / f"tiny-{r['model']}.gguf" for r in rows)],
            notes=f"A {args.tokens}-token window (a page per {args.block} tokens of Emma) laid out "
            "by window.pages.Pages through window/prefix.py on tiny random-weight GGUFs written "
            f"with tests/engine/tiny_gguf.py (64-dim, 2 layers, {MODEL.name}'s tokenizer). Cold: "
            "every page decoded; then a fresh window restoring the stored snapshot from the RAM "
            f"tier, and from disk (RAM emptied, q4 for the attention section). Medians of "
            f"{args.repeats}; {os.environ.get('CASCADE_THREADS', '2')} threads.",
            extra={"rows": rows},
        )  # fmt: skip


if __name__ == "__main__":
    main()
