"""Does the quote hold the answer? `ask`'s quote policy against the generator's rerank.

python bench/rerank.py BOOK ... [--window 4096] [--candidates 5]

For each hand-written question of bench/questions/<book>.json (the index `ingest` builds, kept
under bench/.work/questions as bench/questions.py keeps it): the chunks `ask` pages in, the
passages `--quote tops` quotes, and the best passage of each of the first --candidates hits in
the window scored by the generator's mean log P(question | passage) — the sink, the passage, the
cue and the question prefilled in one sequence per candidate, several per decode (what `ask`
scores from the restored KV, without ingest's earlier context in the passage's cells). Reported
per N ≤ --candidates: the quote (the best-scoring of the first N) holds the answer's evidence
string; N = 1 is the fused ranking's own first passage. Ranking by the mean or the sum of the
question's log-probabilities (or either minus the question's own) is the same order: all
candidates score the same question tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.questions import MODEL, WORK, indexed_recall, load_book  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.engine.score import Job, mean_logprobs  # noqa: E402
from cascade_cli.paging.plan import arrange  # noqa: E402
from cascade_cli.paging.prompt import frame  # noqa: E402
from cascade_cli.recall import fill, index  # noqa: E402
from cascade_cli.recall.passages import MAX_WORDS, MIN_WORDS, TARGET_WORDS  # noqa: E402
from cascade_cli.recall.rerank import question_job  # noqa: E402
from cascade_cli.recall.select import to_quote  # noqa: E402
from cascade_cli.store import DiskStore  # noqa: E402


def flat(text: str) -> str:
    return " ".join(text.split())


def run_book(ctx: Context, book: str, window: int, block: int, n: int) -> dict[str, int]:
    model = ctx.model
    qs, texts, starts = load_book(model, book, block)
    prefix = frame(model).prefix
    budget = (window - len(prefix) - 32 - 256) // block
    tag = f"{book}-{block}-{TARGET_WORDS}-{MIN_WORDS}-{MAX_WORDS}"
    res = {"questions": 0, "paged": 0, "tops": 0, "tops_tokens": 0}
    res |= {f"rerank@{k}": 0 for k in range(1, n + 1)}
    res |= {f"rerank@{k}_tokens": 0 for k in range(1, n + 1)}
    score_s: list[float] = []
    with DiskStore.open(WORK / "questions" / tag, "questions-bench") as disk:
        recall = indexed_recall(disk, texts, starts)
        counts = recall.passage_counts("doc:1")
        for q in qs:
            ev = flat(q["evidence"])
            hits = recall.search(["doc:1"], q["q"], "hybrid", subject=True)
            chosen = arrange(
                [c for _, c in fill(hits, budget, lambda o: len(texts), lambda o, c: counts.get(c, 1))]
            )  # fmt: skip
            res["questions"] += 1
            res["paged"] += any(ev in flat(texts[c]) for c in chosen) or any(
                ev in flat(texts[c] + texts[c + 1]) for c in chosen if c + 1 < len(texts)
            )
            tops = recall.passage_texts(to_quote(hits, "tops", recall.methods("hybrid")))
            res["tops"] += any(ev in flat(t) for t in tops)
            res["tops_tokens"] += sum(len(model.tokenize(t)) for t in tops)
            cands = [h for h in hits if h.chunk in chosen][:n]
            rows = []
            with disk.lock:
                for h in cands:
                    row = index.passage(disk.conn, h.owner, h.chunk, h.passage)
                    rows.append(row.text if row else "")
            qt, lead = question_job(ctx, q["q"])
            t0 = time.perf_counter()
            jobs = []
            for s, passage in enumerate(rows):
                body = prefix + model.tokenize(" " + passage)
                jobs.append(Job(1 + s, 0, body + qt, len(body) + lead))
            scores = mean_logprobs(ctx, jobs) if jobs else []
            for s in range(len(jobs)):
                ctx.seq_rm(1 + s)
            score_s.append(time.perf_counter() - t0)
            whole = recall.passage_texts(cands)
            marks = []
            for k in range(1, n + 1):
                if not scores:
                    continue
                best = max(range(min(k, len(scores))), key=lambda i: scores[i])
                ok = ev in flat(whole[best]) if best < len(whole) else False
                res[f"rerank@{k}"] += ok
                res[f"rerank@{k}_tokens"] += len(model.tokenize(whole[best]))
                marks.append("Y" if ok else "n")
            print(f"  {book} {q['q'][:56]!r:60} tops:{'Y' if any(ev in flat(t) for t in tops) else 'n'}"
                  f" rerank@1..{n}:{''.join(marks)}", flush=True)  # fmt: skip
        recall.close()
    print(f"{book}: prefill-scoring {len(score_s)} questions, median "
          f"{1000 * statistics.median(score_s):.0f} ms", flush=True)  # fmt: skip
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("books", nargs="+")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--candidates", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_verbose(False)
    n = args.candidates
    with Model(MODEL) as m, Context(m, 4096, n + 1, 512, args.threads, "off") as ctx:
        rows = {b: run_book(ctx, b, args.window, args.block, n) for b in args.books}
    print(f"\nwindow {args.window}, block {args.block}: the quote holds the answer's evidence")
    head = " | ".join(f"rerank N={k}" for k in range(1, n + 1))
    print(f"| book | questions | answer's chunk paged in | `--quote tops` | {head} |")
    print("|---|---|---|---|" + "---|" * n)
    for b, r in rows.items():
        qn = r["questions"]
        cells = " | ".join(
            f"{r[f'rerank@{k}']}/{qn} ({r[f'rerank@{k}_tokens'] / qn:.0f} tok)"
            for k in range(1, n + 1)
        )
        print(f"| {b} | {qn} | {r['paged']}/{qn} | {r['tops']}/{qn} ({r['tops_tokens'] / qn:.0f} tok) | {cells} |")  # fmt: skip


if __name__ == "__main__":
    main()
