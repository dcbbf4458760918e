"""Where could a quote come from? The answer's sentence among the paged chunks' passages.

python bench/quote_ceiling.py BOOK ... [--window 4096] [--block 512]

For each hand-written question of bench/questions/<book>.json (the index `ingest` builds, kept
under bench/.work/questions as bench/questions.py keeps it): the chunks `ask` pages in (hybrid,
budget filled), whether one passage of them holds the answer's evidence string whole (the
evidence strings often run over a sentence end, which no single passage then holds), and the
rank of that passage among all the paged chunks' passages by BM25, by the in-context semantic
score, and by their reciprocal-rank fusion (k = RRF_K) — how often any passage ranking of what
the window already holds would put the answer first, or in its top K.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.questions import MODEL, WORK, indexed_recall, load_book  # noqa: E402
from cascade_cli.engine import Model, set_verbose  # noqa: E402
from cascade_cli.paging.plan import arrange  # noqa: E402
from cascade_cli.recall import fill, index, lexical, semantic  # noqa: E402
from cascade_cli.recall.passages import MAX_WORDS, MIN_WORDS, TARGET_WORDS  # noqa: E402
from cascade_cli.recall.select import RRF_K  # noqa: E402
from cascade_cli.store import DiskStore  # noqa: E402

TOPS = (1, 3, 10)


def flat(text: str) -> str:
    return " ".join(text.split())


def run_book(model: Model, book: str, window: int, block: int) -> dict[str, int]:
    qs, texts, starts = load_book(model, book, block)
    budget = (window - 41 - 32 - 256) // block  # as bench/questions.py
    tag = f"{book}-{block}-{TARGET_WORDS}-{MIN_WORDS}-{MAX_WORDS}"
    res = {"questions": 0, "paged": 0, "one passage": 0}
    res |= {f"{m}@{k}": 0 for m in ("bm25", "semantic", "fused") for k in TOPS}
    with DiskStore.open(WORK / "questions" / tag, "questions-bench") as disk:
        recall = indexed_recall(disk, texts, starts)
        counts = recall.passage_counts("doc:1")
        emb = recall.embedder()
        assert emb is not None
        for q in qs:
            ev = flat(q["evidence"])
            hits = recall.search(["doc:1"], q["q"], "hybrid", subject=True)
            picked = fill(hits, budget, lambda o: len(texts), lambda o, c: counts.get(c, 1))
            paged = set(arrange([c for _, c in picked]))
            res["questions"] += 1
            res["paged"] += any(ev in flat("".join(texts[c : c + 2])) for c in paged)
            with disk.lock:
                good = {
                    (c, i)
                    for c in paged
                    for i in range(counts.get(c, 0))
                    if (row := index.passage(disk.conn, "doc:1", c, i)) is not None
                    and ev in flat(index.whole(disk.conn, row))
                }
                lex = lexical.search(disk.conn, "doc:1", q["q"], -1)
                sem = semantic.search(
                    disk.conn, recall.cache, "doc:1", emb.embed([q["q"]])[0], 1 << 30, paged
                )
            res["one passage"] += bool(good)
            ranks: dict[str, list[tuple[int, int]]] = {
                "bm25": [(h.chunk, h.pidx) for h in lex if h.chunk in paged],
                "semantic": [(h.chunk, h.pidx) for h in sem],
            }
            score: dict[tuple[int, int], float] = {}
            for ranking in ranks.values():
                for r, key in enumerate(ranking):
                    score[key] = score.get(key, 0.0) + 1 / (RRF_K + r + 1)
            ranks["fused"] = sorted(score, key=lambda key: -score[key])
            marks = []
            for m, ranking in ranks.items():
                at = min((ranking.index(g) for g in good if g in ranking), default=1 << 30)
                for k in TOPS:
                    res[f"{m}@{k}"] += at < k
                marks.append(f"{m}:{at + 1 if at < 1 << 30 else '-'}")
            print(f"  {book} {q['q'][:56]!r:60} {' '.join(marks)}", flush=True)
        recall.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("books", nargs="+")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    args = ap.parse_args()
    set_verbose(False)
    with Model(MODEL) as m:
        rows = {b: run_book(m, b, args.window, args.block) for b in args.books}
    cols = [f"{m}@{k}" for m in ("bm25", "semantic", "fused") for k in TOPS]
    print(f"\nwindow {args.window}, block {args.block}: the answer's passage among the paged "
          "chunks' passages (questions where it ranks within the top K)")  # fmt: skip
    print("| book | questions | chunk paged in | one passage holds the evidence | " + " | ".join(cols) + " |")  # fmt: skip
    print("|---|---|---|---|" + "---|" * len(cols))
    total = {k: sum(r[k] for r in rows.values()) for k in next(iter(rows.values()))}
    for b, r in [*rows.items(), ("all", total)]:
        cells = " | ".join(str(r[c]) for c in cols)
        print(f"| {b} | {r['questions']} | {r['paged']} | {r['one passage']} | {cells} |")


if __name__ == "__main__":
    main()
