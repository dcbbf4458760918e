"""How short can the quote be? The passage `ask`'s quote policy picks, cut to its best W-word
window around the question's words (recall.focus), for several W.

python bench/quote_focus.py BOOK ... [--words 16 24 32 48 0] [--block 512] [--read alone next]

For each hand-written question of bench/questions/<book>.json (the index `ingest` builds, kept
under bench/.work/questions as bench/questions.py keeps it): hybrid recall as `ask` runs it, the
passage the default quote policy (paging.plan.QUOTE) picks, and that passage focused to W words
(0: whole), read from the passage alone or, as `ask` quotes a document, on into the passage
after it (--read next: recall.index.reading). Reported per reading and W: the quote holds the answer's evidence string, the quote names an
expected answer term (bench/questions keys), and its mean size in tokens — what every ask (and
every paging chat turn) decodes before the question.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.questions import MODEL, WORK, indexed_recall, load_book  # noqa: E402
from cascade_cli.engine import Model, set_verbose  # noqa: E402
from cascade_cli.paging.plan import QUOTE  # noqa: E402
from cascade_cli.recall import index  # noqa: E402
from cascade_cli.recall.focus import focus  # noqa: E402
from cascade_cli.recall.passages import MAX_WORDS, MIN_WORDS, TARGET_WORDS  # noqa: E402
from cascade_cli.recall.select import to_quote  # noqa: E402
from cascade_cli.store import DiskStore  # noqa: E402


def flat(text: str) -> str:
    return " ".join(text.split())


def run_book(
    model: Model, book: str, block: int, widths: list[int], reads: list[str]
) -> dict[str, int]:
    qs, texts, starts = load_book(model, book, block)
    tag = f"{book}-{block}-{TARGET_WORDS}-{MIN_WORDS}-{MAX_WORDS}"
    res = {"questions": 0, "quoted": 0}
    cols = [(r, w) for r in reads for w in widths]
    for r, w in cols:
        res |= {f"ev@{r}{w}": 0, f"term@{r}{w}": 0, f"tok@{r}{w}": 0}
    with DiskStore.open(WORK / "questions" / tag, "questions-bench") as disk:
        recall = indexed_recall(disk, texts, starts)
        for q in qs:
            ev = flat(q["evidence"])
            hits = recall.search(["doc:1"], q["q"], "hybrid", subject=True)
            picked = to_quote(hits, QUOTE, recall.methods("hybrid"))
            source = {"alone": recall.passage_texts(picked), "next": []}
            with disk.lock:
                for h in picked:
                    row = index.passage(disk.conn, h.owner, h.chunk, h.passage)
                    source["next"] += [index.reading(disk.conn, row)] if row else []
            res["questions"] += 1
            res["quoted"] += bool(picked)
            marks = []
            for r, w in cols:
                cut = [focus(t, q["q"], w) for t in source[r]]
                ev_ok = any(ev in flat(t) for t in cut)
                term_ok = any(a.lower() in t.lower() for t in cut for a in q["answer_terms"])
                res[f"ev@{r}{w}"] += ev_ok
                res[f"term@{r}{w}"] += term_ok
                res[f"tok@{r}{w}"] += sum(len(model.tokenize(t)) for t in cut)
                marks.append(("E" if ev_ok else "-") + ("T" if term_ok else "-"))
            print(f"  {book} {q['q'][:56]!r:60} {' '.join(marks)}", flush=True)
        recall.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("books", nargs="+")
    ap.add_argument("--words", type=int, nargs="+", default=[16, 24, 32, 48, 0])
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--read", nargs="+", default=["alone", "next"], choices=["alone", "next"])
    args = ap.parse_args()
    set_verbose(False)
    with Model(MODEL) as m:
        rows = {b: run_book(m, b, args.block, args.words, args.read) for b in args.books}
    print(f"\nquote policy {QUOTE!r}, block {args.block}: evidence held / answer term named "
          "/ mean tokens, per reading and quote width in words (0: the whole text)")  # fmt: skip
    cols = [(r, w) for r in args.read for w in args.words]
    head = " | ".join(f"{r}, W={w or 'whole'}" for r, w in cols)
    print(f"| book | questions | {head} |")
    print("|---|---|" + "---|" * len(cols))
    for b, r in rows.items():
        qn = r["questions"]
        cells = " | ".join(
            f"{r[f'ev@{d}{w}']} / {r[f'term@{d}{w}']} / {r[f'tok@{d}{w}'] / qn:.0f} tok"
            for d, w in cols
        )
        print(f"| {b} | {qn} | {cells} |")


if __name__ == "__main__":
    main()
