"""Answers through the real `ask`, with and without the generator rerank.

python bench/answers.py [--doc base-northangerabbey-51200] [--book northangerabbey]
                        [--window 4096] [--rerank off llm] [--max-tokens 48] [--make TOKENS]

Asks the book's hand-written questions (bench/questions/<book>.json) whose evidence sentence is
in the base document (the book's first tokens, ingested by bench/niah.py or `--make`) through
the real ask path, once per rerank mode. Per question and mode: whether the answer's chunk was
paged in (a restored chunk's text holds the evidence string), whether the quote holds it,
whether the answer names an expected answer term, whether it loops, and the rerank time.

The base document is made when it is missing: a --doc named base-<book>-<tokens> that
bench/.work/store does not hold (bench/niah.py makes base-northangerabbey-51200 with
`--text bench/data/northangerabbey.txt --lengths 25`) is ingested here, as --make <tokens> would
(window --window, block --block, q4). The table goes to
bench/results/answers-<doc>-<window>-rerank-<modes>.json (bench/provenance.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.niah import EMBED, MODEL, WORK, base_document  # noqa: E402
from bench.provenance import save  # noqa: E402
from cascade_cli.config import resolve  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.engine.loops import loops  # noqa: E402
from cascade_cli.errors import CascadeError  # noqa: E402
from cascade_cli.paging import catalog  # noqa: E402
from cascade_cli.paging.library import Library  # noqa: E402
from cascade_cli.store import DiskStore  # noqa: E402
from cascade_cli.window.ask import AskResult, ask  # noqa: E402


def flat(text: str) -> str:
    return " ".join(text.split())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--doc", default="base-northangerabbey-51200")
    ap.add_argument("--book", default="northangerabbey")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--rerank", nargs="+", default=["off", "llm"])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--make", type=int, default=0, help="ingest this many tokens of the book")
    ap.add_argument("--out", type=Path, default=None, help="per-question rows (JSON lines)")
    args = ap.parse_args()
    set_verbose(False)
    book = ROOT / "bench" / "data" / f"{args.book}.txt"
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / "store"), "memory_cache_size": "256MiB"},
        config_file=None,
    )  # fmt: skip
    if not args.make and not _held(args.doc):
        made_of = f"base-{args.book}-"
        if not (args.doc.startswith(made_of) and args.doc[len(made_of) :].isdigit()):
            raise SystemExit(f"{args.doc} is not in {WORK / 'store'}: pass --make TOKENS")
        args.make = int(args.doc[len(made_of) :])
        print(f"{args.doc} is missing: ingesting the first {args.make} tokens of {book.name}")
    if args.make and not book.exists():
        raise SystemExit(f"{book} is missing: python bench/fetch_text.py {args.book}")
    if args.make:
        with (
            Context(Model(MODEL), args.window + args.block + 256, 3, args.block, cfg.n_threads, "off") as ctx,
            Library(cfg, ctx, embed_path=EMBED) as lib,
        ):  # fmt: skip
            made = base_document(ctx, lib, book, args.make)
            args.doc = made.name
    text = flat((WORK / f"{args.doc}.txt").read_text(encoding="utf-8"))
    qs = json.loads((ROOT / "bench" / "questions" / f"{args.book}.json").read_text())["questions"]
    qs = [q for q in qs if flat(q["evidence"]) in text]
    out = args.out.open("w") if args.out else None
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in args.rerank}
    with (
        Context(Model(MODEL), args.window + args.block + 256, 4, args.block, cfg.n_threads, "off") as ctx,
        Library(cfg, ctx, mode="shared", embed_path=EMBED) as lib,
    ):  # fmt: skip
        doc = catalog.find(lib.conn, args.doc)
        print(f"{doc.name}: {doc.tokens} tokens, {len(qs)} questions with their evidence in it")
        for q in qs:
            ev = flat(q["evidence"])
            for mode in args.rerank:
                res = AskResult(doc=doc.name)
                answer = "".join(
                    ask(ctx, lib, doc, q["q"], res, window=args.window,
                        max_tokens=args.max_tokens, rerank=mode)
                )  # fmt: skip
                paged = flat(
                    "".join(
                        ctx.model.detokenize(
                            lib.disk.meta(doc.chunk_key(c["index"])).tokens.tolist()
                        )
                        for c in res.chunks
                    )
                )
                row = {
                    "q": q["q"], "rerank": mode, "paged": ev in paged,
                    "quoted": any(ev in flat(p) for p in res.passages),
                    "named": any(t.lower() in answer.lower() for t in q["answer_terms"]),
                    "loops": loops(answer), "rerank_s": res.timings.get("rerank_s", 0.0),
                    "answer": answer.strip()[:80],
                }  # fmt: skip
                rows[mode].append(row)
                print(json.dumps(row), flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
    table = []
    for mode, rs in rows.items():
        ms = [1000 * r["rerank_s"] for r in rs] or [0.0]
        table.append([mode, len(rs), sum(r["paged"] for r in rs), sum(r["quoted"] for r in rs),
                      sum(r["named"] for r in rs), sum(r["loops"] for r in rs),
                      f"{statistics.median(ms):.0f}, {max(ms):.0f}"])  # fmt: skip
    save(
        f"answers-{args.doc}-{args.window}-rerank-{'-'.join(args.rerank)}",
        topic="answers",
        title=f"Answers through `ask` ({args.book}: {args.doc}, window {args.window})",
        target="the quote holds the answer's evidence for ≥ 75 % of questions",
        columns=["rerank", "questions", "answer's chunk paged in", "quote holds the evidence",
                 "answer names the answer", "looping", "rerank ms (median, max)"],
        rows=table,
        models=[MODEL, EMBED],
        notes=f"The hand-written questions of bench/questions/{args.book}.json whose evidence is "
        f"in {doc.name} ({doc.tokens} tokens, {doc.chunks} chunks of {doc.block_size}, "
        f"{doc.scheme}, ingested with window {doc.window}); ask window {args.window}, greedy, "
        f"replies ≤ {args.max_tokens} tokens, the repetition guard on.",
    )  # fmt: skip


def _held(name: str) -> bool:
    """Whether bench/.work holds the ready document `name` (its store row and its text)."""
    if not (WORK / f"{name}.txt").exists():
        return False
    try:
        with DiskStore.open(WORK / "store", None, readonly=True) as store:
            catalog.find(store.conn, name)
    except CascadeError:
        return False
    return True


if __name__ == "__main__":
    main()
