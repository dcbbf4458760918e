"""Time to first token: `ask` (hybrid recall, budget filled) vs prefilling what it recalled.

python bench/ttft.py [--doc base-persuasion-32000] [--book persuasion] [--questions 8]
                     [--window 4096] [--block 512] [--rerank llm|off] [--make TOKENS]

Reuses a base document of bench/niah.py (run that first; its store is bench/.work/store), or
with --make TOKENS ingests the book's first TOKENS tokens as one (base-<book>-TOKENS) first. Asks
the book's hand-written questions (bench/questions/<book>.json) through the real ask path — sink
and chunks restored from disk with the RAM tier cleared before each ask, recall included — and,
in the same process, prefills the same prefix, chunk tokens and question from scratch. Reports
medians and their ratio, and the recall time inside each ask.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.niah import EMBED, MODEL, WORK, base_document  # noqa: E402
from bench.provenance import save  # noqa: E402
from bench.shipped import shipped  # noqa: E402
from cascade_cli.config import Settings, resolve  # noqa: E402
from cascade_cli.documents import catalog  # noqa: E402
from cascade_cli.documents.frame import frame, question_tokens  # noqa: E402
from cascade_cli.documents.library import Library  # noqa: E402
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings, set_verbose  # noqa: E402
from cascade_cli.engine.generate import Generation, generate  # noqa: E402
from cascade_cli.engine.live import Window  # noqa: E402
from cascade_cli.window.ask import AskResult, ask  # noqa: E402


def prefill_ttft(
    ctx: Context, window: int, chunks: list[list[int]], question: str, quoted: list[str]
) -> float:
    """Time to first token when the same recalled text (and the passages `ask` quoted) is
    prefilled from scratch."""
    fr = frame(ctx.model)
    win = Window(ctx, window)
    t = time.perf_counter()
    win.append(fr.prefix)
    for toks in chunks:
        win.append(toks)
    win.append(question_tokens(ctx.model, fr, question, quoted), logits="last")
    with Sampler(SamplerSettings(temperature=0)) as sampler:
        next(iter(generate(ctx, sampler, 0, Generation(pos=win.end), 1, limit=window)), "")
    secs = time.perf_counter() - t
    win.reset()
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--doc", default="base-persuasion-32000")
    ap.add_argument("--model", type=Path, default=MODEL, help="the generator (a .gguf path)")
    ap.add_argument("--book", default="persuasion")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--rerank", default="llm", choices=["llm", "off"])
    ap.add_argument("--make", type=int, default=0, help="ingest this many tokens of the book")
    args = ap.parse_args()
    set_verbose(False)
    qfile = ROOT / "bench" / "questions" / f"{args.book}.json"
    questions = [q["q"] for q in json.loads(qfile.read_text())["questions"]][: args.questions]
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / ("store" if args.model == MODEL else f"store-{args.model.stem}")),
         "memory_cache_size": "256MiB"},
        config_file=None,
    )  # fmt: skip
    if args.make:
        with (
            Context(Model(args.model), args.window + args.block + 256, 3, args.block, cfg.n_threads, "off") as ctx,
            Library(cfg, ctx, embed_path=EMBED) as lib,
        ):  # fmt: skip
            made = base_document(ctx, lib, ROOT / "bench" / "data" / f"{args.book}.txt", args.make)
            args.doc = made.name
    # four sequences, as `cascade ask` opens: the window, the scratch and two more (rerank)
    with (
        Context(Model(args.model), args.window + args.block + 256, 4, args.block, cfg.n_threads, "off") as ctx,
        Library(cfg, ctx, mode="shared", embed_path=EMBED) as lib,
    ):  # fmt: skip
        doc = catalog.find(lib.conn, args.doc)
        print(
            f"document {doc.name}: {doc.tokens} tokens, {doc.chunks} chunks, window {args.window}"
        )
        asked, scratch, recall, tokens, rerank_s = [], [], [], [], []
        own = shipped(args.model)  # the cue and quote place ask ships for this model
        for question in questions:
            lib.ram.clear()
            res = AskResult(doc=doc.name)
            for _ in ask(ctx, lib, doc, question, res, window=args.window, max_tokens=1,
                         rerank=args.rerank, cue=own.get("ask_cue", Settings.ask_cue),
                         where=own.get("ask_note", Settings.ask_note)):  # fmt: skip
                pass
            asked.append(res.timings["ttft_s"])
            rerank_s.append(res.timings["rerank_s"])
            recall.append(res.timings["recall_s"])
            metas = [lib.disk.meta(doc.chunk_key(c["index"])) for c in res.chunks]
            tokens.append(sum(m.n_tokens for m in metas))
            scratch.append(
                prefill_ttft(
                    ctx, args.window, [m.tokens.tolist() for m in metas], question, res.passages
                )
            )
        a, s = statistics.median(asked), statistics.median(scratch)
        save(
            f"ttft-{args.book}-{args.window}-rerank-{args.rerank}",
            topic="ask",
            title=f"ask TTFT vs prefill, window {args.window}, rerank {args.rerank} ({args.book})",
            target="ask's TTFT ≥ 20× below a prefill of the same tokens",
            columns=["window", "rerank", "questions", "recalled tokens (median)", "ask TTFT s",
                     "prefill TTFT s", "ratio", "recall ms (median, max)", "rerank ms (median, max)"],
            rows=[[args.window, args.rerank, len(questions), f"{statistics.median(tokens):.0f}",
                   f"{a:.3f}", f"{s:.3f}", f"**{s / a:.1f}×**",
                   f"{1000 * statistics.median(recall):.1f}, {1000 * max(recall):.1f}",
                   f"{1000 * statistics.median(rerank_s):.1f}, {1000 * max(rerank_s):.1f}"]],
            models=[args.model],
            notes=f"Document {doc.name}: {doc.tokens} tokens in {doc.chunks} chunks of "
            f"{args.block}; q4 store; the RAM tier cleared before each ask (chunks from disk).",
        )  # fmt: skip


if __name__ == "__main__":
    main()
