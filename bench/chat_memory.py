"""A fact from turn 1, asked after three windows' worth of conversation, through restarts.

python bench/chat_memory.py [--trials 10] [--window 4096] [--windows 3]

Each trial is one session driven through `cascade chat --session` with piped stdin, greedy:
process 1 says "My locker code is NNNN. Please remember it." (a random code per trial) and
starts a conversation about passages of *Emma* (≈ 650 tokens a turn); processes 2 and 3 continue it until the turns
after the first hold at least --windows × --window tokens. The store is then copied; a 4th
process asks the direct question, a 5th (on the copy) a paraphrase. A trial counts when the
code's digits are in the answer; the table also says whether turn 1 was recalled (the stderr
marker). Controls, no paging: the direct question and the paraphrase right after turn 1 (each in
a session of its own), and the direct question after turn 1 and three more turns (≈ 2,000 tokens,
all still in the window; --distance N of them). The summary goes to
bench/results/chat-memory-<wording>-<window>[-<N>windows][-<text>][-<model>].json.
Needs no earlier run: the session home bench/.work/chat-memory[-<text>] is made afresh.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_common import (  # noqa: E402
    MODEL,
    TEXT,
    WORDINGS,
    chat,
    env,
    filler,
    home,
    model_tag,
)
from bench.provenance import save  # noqa: E402

#: recall's embedding model, linked into the session home beside the generator
EMBED = MODEL.parent / "all-MiniLM-L6-v2.f16.gguf"


def tokens(where: Path, session: str) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "cascade_cli", "sessions", "--json"],
        capture_output=True, text=True, env=env(where), cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    return int(next(s["tokens"] for s in json.loads(out)["sessions"] if s["name"] == session))


def ask(where: Path, session: str, question: str, flags: list[str]) -> tuple[str, str]:
    """(answer, what the stderr marker says was recalled)."""
    proc = chat(where, session, [question], *flags)
    marks = [line for line in proc.stderr.splitlines() if line.startswith("(recalled ")]
    return proc.stdout.strip(), marks[-1][len("(recalled ") : -1] if marks else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--windows", type=float, default=3.0)
    ap.add_argument("--control", type=int, default=3)
    ap.add_argument("--text", type=Path, default=TEXT, help="the filler's text")
    ap.add_argument("--wording", default="tuned", choices=list(WORDINGS))
    ap.add_argument("--distance", type=int, default=None, help="distance controls (--control)")
    ap.add_argument("--home", default=None, help="bench/.work/NAME (default: by the text)")
    args = ap.parse_args()
    flags = ["--gpu-cache-size", str(args.window), "--temperature", "0", "--max-tokens", "32"]
    rng = random.Random(9)
    where = home(
        args.home or ("chat-memory" if args.text == TEXT else f"chat-memory-{args.text.stem}")
    )
    print("| trial | code | later tokens | processes | direct | recalled | paraphrase |"
          " recalled |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    hits = {"direct": 0, "paraphrase": 0}
    turn1 = {"direct": 0, "paraphrase": 0}  # turn 1 among the recalled turns
    laters: list[int] = []  # tokens after turn 1, per trial
    processes: list[int] = []
    for trial in range(args.trials):
        code = str(rng.randrange(1000, 10000))
        name = f"t{trial}"
        talk = filler(200, seed=100 + trial, chars=2600, source=args.text)
        chat(where, name, [f"My locker code is {code}. Please remember it."], *flags)
        first = tokens(where, name)
        target = first + args.windows * args.window
        procs, sent = 1, 0
        per_process = -(-int(args.windows * args.window) // 650 // 3) + 1
        while tokens(where, name) < target:
            chat(where, name, talk[sent : sent + per_process], *flags)
            sent += per_process
            procs += 1
        later = tokens(where, name) - first
        copy = where.parent / f"{where.name}-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(where, copy, symlinks=True)
        direct_q, para_q = WORDINGS[args.wording]
        direct, r1 = ask(where, name, direct_q, flags)
        para, r2 = ask(copy, name, para_q, flags)
        ok1, ok2 = code in direct, code in para
        hits["direct"] += ok1
        hits["paraphrase"] += ok2
        turn1["direct"] += "turn 1" in r1.split(", ")
        turn1["paraphrase"] += "turn 1" in r2.split(", ")
        laters.append(later)
        processes.append(procs + 1)
        print(
            f"| {trial} | {code} | {later} | {procs + 1} | {'yes' if ok1 else 'no: ' + direct.replace(chr(10), ' ')[:40]}"
            f" | {r1} | {'yes' if ok2 else 'no: ' + para.replace(chr(10), ' ')[:40]} | {r2} |",
            flush=True,
        )
    print(f"direct {hits['direct']}/{args.trials}, paraphrase {hits['paraphrase']}/{args.trials}")
    direct_q, para_q = WORDINGS[args.wording]
    got = {"direct": 0, "paraphrase": 0}
    for trial in range(args.control):  # each wording in a session of its own
        code = str(rng.randrange(1000, 10000))
        for kind, question in (("direct", direct_q), ("paraphrase", para_q)):
            name = f"c{trial}-{kind}"
            chat(where, name, [f"My locker code is {code}. Please remember it."], *flags)
            answer, _ = ask(where, name, question, flags)
            got[kind] += code in answer
            print(
                f"control {trial} {kind}: {code}, {'yes' if code in answer else 'no: ' + answer[:60]}"
            )
    print(
        f"control (turn 1 right before the question): direct {got['direct']}/{args.control}, "
        f"paraphrase {got['paraphrase']}/{args.control}"
    )
    ok = 0
    distance = args.control if args.distance is None else args.distance
    for trial in range(distance):
        code = str(rng.randrange(1000, 10000))
        name = f"d{trial}"
        chat(where, name, [f"My locker code is {code}. Please remember it."], *flags)
        chat(where, name, filler(3, seed=300 + trial, chars=2600), *flags)
        answer, recalled = ask(where, name, direct_q, flags)
        ok += code in answer
        print(f"distance control {trial}: {tokens(where, name)} tokens, nothing paged out"
              f" ({recalled}), {'yes' if code in answer else 'no: ' + answer[:40]}")  # fmt: skip
    later_tokens = statistics.median(laters) if laters else 0
    rows = [
        [f"direct, {later_tokens / args.window:.1f} windows later, through restarts",
         f"**{hits['direct']}/{args.trials}**", f"{turn1['direct']}/{args.trials}"],
        ["paraphrase", f"**{hits['paraphrase']}/{args.trials}**",
         f"{turn1['paraphrase']}/{args.trials}"],
    ]  # fmt: skip
    for kind in ("direct", "paraphrase") if args.control else ():
        rows.append([f"control: {kind} right after turn 1", f"{got[kind]}/{args.control}",
                     "(in the window)"])  # fmt: skip
    if distance:
        rows.append(["control: turn 1 in the window, 3 turns before the question",
                     f"{ok}/{distance}", "(in the window)"])  # fmt: skip
    tag = "" if args.windows == 3 else f"-{args.windows:g}windows"
    tag += "" if args.text == TEXT else f"-{args.text.stem}"
    tag += model_tag()
    save(
        f"chat-memory-{args.wording}-{args.window}{tag}",
        topic="chat",
        title=f"The locker code through chat ({MODEL.name}) after ≥ {args.windows:g} windows "
        f"({args.wording} "
        f"wordings, filler: {args.text.name}, window {args.window})",
        target="direct ≥ 9/10, paraphrase ≥ 5/10",
        columns=["question", "answered", "turn 1 recalled"],
        rows=rows,
        models=[MODEL, EMBED],
        notes=f"{args.trials} trials, window {args.window}, ≥ {args.windows:g} windows of filler "
        f"after turn 1 (median {later_tokens:.0f} tokens), greedy, replies ≤ 32 tokens, recall "
        f"hybrid; each trial one `cascade chat --session` over {max(processes, default=0)} "
        f"processes, the paraphrase asked on a copy of the store. Questions: {direct_q!r} / "
        f"{para_q!r}.",
    )


if __name__ == "__main__":
    main()
