"""Ingest throughput of this checkout against another (e.g. the commit before passage recall).

git worktree add /tmp/cascade-old 4ef50a7   # the commit before recall was rebuilt
python bench/ingest_compare.py --old /tmp/cascade-old [--text bench/data/emma.txt] [--tokens 6000]
                               [--rounds 2]

Runs `python -m cascade_cli ingest` from each tree in turn (old, new, old, new, …) on the same
slice of text into a fresh store each time, with the same settings (window 4096, block 512, q4),
and reports tokens/s of the whole command — for this tree that includes indexing passages and
embedding them (ingest waits for the last embeddings before it marks the document ready).
Alternating cancels most of the drift of a shared machine; the ratio is of medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / ".cascade-test" / "models"


def run(tree: Path, text: Path, threads: int) -> float:
    home = Path(tempfile.mkdtemp(prefix="cascade-ingest-"))
    try:
        (home / "models").mkdir()
        for m in MODELS.glob("*.gguf"):
            (home / "models" / m.name).symlink_to(m)
        env = {**os.environ, "CASCADE_HOME": str(home), "CASCADE_THREADS": str(threads),
               "PYTHONPATH": str(tree)}  # fmt: skip
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "cascade_cli", "ingest", str(text), "--name", "t"],
            cwd=tree, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        secs = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: {proc.stderr.strip().splitlines()[-1:]}")
        return secs
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--text", type=Path, default=ROOT / "bench" / "data" / "emma.txt")
    ap.add_argument("--tokens", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from cascade_cli.engine import Model, set_verbose

    set_verbose(False)
    with Model(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf") as m:
        toks = m.tokenize(args.text.read_text(encoding="utf-8"))[: args.tokens]
        body = m.detokenize(toks)
    src = Path(tempfile.mkdtemp()) / "slice.txt"
    src.write_text(body, encoding="utf-8")
    times: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for label, tree in (("old", args.old.resolve()), ("new", ROOT)):
            secs = run(tree, src, args.threads)
            times[label].append(secs)
            print(f"round {r} {label}: {secs:.1f} s = {len(toks) / secs:.1f} tok/s", flush=True)
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"\n{len(toks)} tokens of {args.text.name}, {args.rounds} rounds, {args.threads} threads")
    print("| tree | median s | tok/s |")
    print("|---|---|---|")
    print(f"| old ({args.old}) | {old:.1f} | {len(toks) / old:.1f} |")
    print(f"| new | {new:.1f} | {len(toks) / new:.1f} |")
    print(f"\nnew / old throughput: {old / new:.2f}")


if __name__ == "__main__":
    main()
