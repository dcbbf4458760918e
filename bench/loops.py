"""Looping replies per 100 asks, with and without the repetition guard.

python bench/loops.py [BOOK ...] [--guards off dry] [--context 400] [--max-tokens 160]

Each hand-written question of bench/questions/<book>.json is asked the way `ask` asks it (the
model's frame, the question tokens with the "Answer: " cue, greedy, no repeat penalty) after
--context tokens of the book around its evidence sentence (the answer's passage at a random
place in it), prefilled instead of restored: a loop is the generator's doing, not paging's, and
no ingest is needed. A reply loops when an n-gram of 3 words repeats 3 times at one period
(cascade_cli.engine.loops). Also counted: replies naming an expected answer term.
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
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings, set_verbose  # noqa: E402
from cascade_cli.engine.generate import Generation, generate  # noqa: E402
from cascade_cli.engine.loops import loops  # noqa: E402
from cascade_cli.paging.prompt import frame, question_tokens  # noqa: E402

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
    print(f"\n{asked} questions, {args.context}-token context, {args.max_tokens} tokens max, "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    print("| guard | looping replies | per 100 | replies naming the answer |")
    print("|---|---|---|---|")
    for g in args.guards:
        print(f"| {g} | {looped[g]}/{asked} | {100 * looped[g] / max(asked, 1):.0f} | "
              f"{named[g]}/{asked} |")  # fmt: skip


if __name__ == "__main__":
    main()
