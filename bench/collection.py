"""A code base as a collection: `cascade ingest DIR`, questions about where things are, and the
re-ingest after one file is edited.

The code base is CPython's lib2to3 as Debian installs it (/usr/lib/python3.11/lib2to3, its
tests left out: 75 files), copied to bench/.work so one file can be edited. The questions and the
file each one's answer is in were written before any answer was looked at (QUESTIONS). A
question counts as right when its file is among the sources `ask --json` cites. Each command
is a real CLI process (model load included), as a user runs it.

    python bench/collection.py [--model PATH] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import save  # noqa: E402

SOURCE = Path("/usr/lib/python3.11/lib2to3")
WORK = ROOT / "bench" / ".work" / "collection"
MODELS = ROOT / ".cascade-test" / "models"
#: (question, the files whose citation answers it), written before any answer was seen.
QUESTIONS = [
    ("Which fixer turns print statements into print() calls?", {"fixes/fix_print.py"}),
    ("Which fixer changes d.iteritems() into d.items()?", {"fixes/fix_dict.py"}),
    ("Which fixer converts the 'except X, e' syntax to 'except X as e'?", {"fixes/fix_except.py"}),
    ("Where are xrange calls converted to range?", {"fixes/fix_xrange.py"}),
    ("Which module drives the refactoring of files and applies the fixers to them?",
     {"refactor.py"}),
    ("Where is the compiler that turns a fixer's pattern string into a matcher?", {"patcomp.py"}),
    ("Which file defines the Node and Leaf classes of the syntax tree?", {"pytree.py"}),
    ("Which fixer renames raw_input to input?", {"fixes/fix_raw_input.py"}),
    ("Which module tokenizes Python source code for the parser?", {"pgen2/tokenize.py"}),
    ("Which fixer replaces the unicode type and u'' string literals?", {"fixes/fix_unicode.py"}),
    ("Which fixer rewrites imports of urllib2 and urlparse?",
     {"fixes/fix_urllib.py", "fixes/fix_imports.py"}),
    ("Where is the command-line entry point that handles the -w and -l options?", {"main.py"}),
]  # fmt: skip


def run(
    args: list[str], home: Path, threads: int
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(CASCADE_HOME=str(home), CASCADE_THREADS=str(threads), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cascade_cli", *args], capture_output=True, text=True, env=env,
        check=False,
    )  # fmt: skip
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"cascade {' '.join(args)} failed:\n{proc.stderr}")
    return proc, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    tree, home = WORK / "lib2to3", WORK / "home"
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(SOURCE, tree, ignore=shutil.ignore_patterns("__pycache__", "tests"))
    (home / "models").mkdir(parents=True)
    for f in MODELS.iterdir():
        (home / "models" / f.name).symlink_to(f)
    model = ["--model", str(args.model)]
    first, t_first = run(["ingest", str(tree), *model], home, args.threads)
    print(first.stdout.strip(), f"({t_first:.1f} s)", flush=True)
    files = len(list(tree.rglob("*.py")))
    rows, right = [], 0
    for question, expected in QUESTIONS:
        proc, _ = run(["ask", "lib2to3", question, "--json", "--max-tokens", "24", *model],
                      home, args.threads)  # fmt: skip
        data = json.loads(proc.stdout)
        cited = [s["doc"].removeprefix("lib2to3/") for s in data["sources"]]
        quoted = [s["doc"].removeprefix("lib2to3/") for s in data["sources"] if s["quoted"]]
        hit = bool(expected & set(cited))
        right += hit
        rows.append([question, " or ".join(sorted(expected)), "yes" if hit else "no",
                     len(cited), "yes" if expected & set(quoted) else "no",
                     f"{data['timings']['ttft_s']:.2f}"])  # fmt: skip
    edited = tree / "fixes" / "fix_print.py"
    edited.write_text(edited.read_text() + "\n# edited for the re-ingest benchmark\n")
    again, t_again = run(["ingest", str(tree), *model], home, args.threads)
    print(again.stdout.strip(), f"({t_again:.1f} s)", flush=True)
    rows.append(
        ["**right file among the sources**", "", f"**{right}/{len(QUESTIONS)}**", "", "", ""]
    )
    save(
        "collection-lib2to3",
        topic="recall",
        title=f"A code base as a collection: lib2to3, {files} Python files ({args.model.name})",
        target="the right file among the sources for ≥ 90 % of the questions; re-ingest after "
        "editing one file ≤ 15 % of the first ingest",
        columns=["question", "file", "cited", "sources", "quoted", "TTFT s"],
        rows=rows,
        models=[args.model],
        notes=f"First ingest {t_first:.1f} s ({first.stdout.strip()}); re-ingest after editing "
        f"fixes/fix_print.py {t_again:.1f} s = {t_again / t_first:.1%} of it ({again.stdout.strip()}); "
        f"both CLI processes with model load, {args.threads} threads, window 4096, block 512. "
        "Questions written before any answer was seen; `ask --json --max-tokens 24`.",
        extra={
            "first_ingest_s": t_first,
            "reingest_s": t_again,
            "right": right,
            "questions": len(QUESTIONS),
        },
    )


if __name__ == "__main__":
    main()
