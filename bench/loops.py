"""Looping replies per 100 asks, with and without the repetition guard.

python bench/loops.py [BOOK ...] [--guards off dry] [--context 400] [--max-tokens 160]

Each hand-written question of bench/questions/<book>.json is asked the way `ask` asks it (the
model's frame, the question tokens with the "Answer: " cue, greedy, no repeat penalty) after
--context tokens of the book around its evidence sentence (the answer's passage at a random
place in it), prefilled instead of restored: a loop is the generator's doing, not paging's, and
no ingest is needed. A reply loops when an n-gram of 3 words repeats 3 times at one period
(cascade_cli.engine.loops). Also counted: replies naming an expected answer term. The table goes
to bench/results/loops-<books>-<context>ctx-<max-tokens>max-<limit>q.json (bench/provenance.py).
Needs no earlier run, only the books' texts in bench/data (python bench/fetch_text.py BOOK ...).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.niah import MODEL  # noqa: E402
from bench.provenance import save  # noqa: E402
from cascade_cli.documents.frame import frame, question_tokens  # noqa: E402
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings, set_verbose  # noqa: E402
from cascade_cli.engine.generate import Generation, generate  # noqa: E402
from cascade_cli.engine.loops import loops  # noqa: E402

DATA = ROOT / "bench" / "data"
QUESTIONS = ROOT / "bench" / "questions"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("books", nargs="*", default=["emma", "persuasion", "prideprejudice",
                                                  "northangerabbey"])  # fmt: skip
    ap.add_argument("--guards", nargs="+", default=["off", "dry"])
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--limit", type=int, default=25, help="questions per book")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    missing = [b for b in args.books if not (DATA / f"{b}.txt").exists()]
    if missing:
        raise SystemExit(f"bench/data lacks {', '.join(missing)}: python bench/fetch_text.py "
                         f"{' '.join(missing)}")  # fmt: skip
    set_verbose(False)
    rng = random.Random(7)
    looped = {g: 0 for g in args.guards}
    named = {g: 0 for g in args.guards}
    asked = 0
    out = args.out.open("w") if args.out else None
    t0 = time.perf_counter()
    with Model(MODEL) as m, Context(m, args.context + 512, 1, 512, args.threads, "off") as ctx:
        fr = frame(m)
        for book in args.books:
            text = (DATA / f"{book}.txt").read_text()
            qs = json.loads((QUESTIONS / f"{book}.json").read_text())["questions"][: args.limit]
            for i, q in enumerate(qs):
                at = text.find(q["evidence"])
                before = m.tokenize(text[max(0, at - 6 * args.context) : at])
                after = m.tokenize(text[at : at + 6 * args.context])
                k = rng.randint(0, args.context - 16)
                doc = before[len(before) - min(k, len(before)) :]
                doc = doc + after[: args.context - len(doc)]
                tokens = fr.prefix + doc + question_tokens(m, fr, q["q"])
                asked += 1
                row = []
                for guard in args.guards:
                    ctx.clear()
                    ctx.decode(tokens, 0, 0)
                    state = Generation(pos=len(tokens))
                    settings = SamplerSettings(temperature=0, repeat_penalty=1.0, guard=guard)
                    with Sampler(settings, m) as s:
                        answer = "".join(generate(ctx, s, 0, state, args.max_tokens)).strip()
                    loop = loops(answer)
                    hit = any(t.lower() in answer.lower() for t in q["answer_terms"])
                    looped[guard] += loop
                    named[guard] += hit
                    row.append(f"{guard}:{'L' if loop else '-'}{'Y' if hit else 'n'}")
                    if out:
                        out.write(json.dumps({"book": book, "q": i, "guard": guard, "loop": loop,
                                              "named": hit, "stopped_by": state.stopped_by,
                                              "answer": answer}) + "\n")  # fmt: skip
                        out.flush()
                print(f"{book} {i:2d} {' '.join(row)}", flush=True)
    save(
        f"loops-{'-'.join(args.books)}-{args.context}ctx-{args.max_tokens}max-{args.limit}q",
        topic="answers",
        title=f"Looping replies with and without the repetition guard ({', '.join(args.books)})",
        target="0 looping replies per 100 with the guard on (dry)",
        columns=["guard", "looping replies", "per 100", "replies naming the answer"],
        rows=[[g, f"{looped[g]}/{asked}", f"**{100 * looped[g] / max(asked, 1):.0f}**",
               f"{named[g]}/{asked}"] for g in args.guards],
        models=[MODEL],
        notes=f"{asked} hand-written questions (≤ {args.limit} a book), each after "
        f"{args.context} tokens of the book around its evidence, prefilled; greedy, no repeat "
        f"penalty, ≤ {args.max_tokens} tokens, {args.threads} thread(s), "
        f"{time.perf_counter() - t0:.0f} s. A reply loops when a 3-word n-gram repeats 3 times "
        "at one period (cascade_cli.engine.loops).",
    )  # fmt: skip


if __name__ == "__main__":
    main()
