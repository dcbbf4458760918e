"""Run one benchmark on an earlier commit and on this tree, back to back, and table both.

python bench/before_after.py --before COMMIT -- python bench/ttft.py --window 2048 ...

The earlier commit is checked out in a worktree beside this one (its bench/data, bench/.work and
.cascade-test are this tree's, so both runs read the same texts, stores and models); the command
runs there, then here, on the same machine one after the other. This tree's run writes its result
file as usual (the current figure); the two tables are also saved together as
bench/results/<its name>-before-after.json, a row per code version, with both provenances.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provenance import RESULTS, save  # noqa: E402

SHARED = ["bench/data", "bench/.work", ".cascade-test"]


def worktree(commit: str) -> Path:
    """A worktree of `commit` sharing this tree's data, work files and test models."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    path = Path(tempfile.gettempdir()) / f"cascade-before-{full[:12]}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), full],
                       check=True, capture_output=True)  # fmt: skip
    for rel in SHARED:
        link, target = path / rel, ROOT / rel
        if target.exists() and not link.is_symlink():
            if link.exists():
                subprocess.run(["rm", "-rf", str(link)], check=True)
            link.symlink_to(target)
    return path


def run(cwd: Path, command: list[str]) -> dict[str, Any]:
    """Run the benchmark in `cwd`; the result file it wrote."""
    results = cwd / "bench" / "results"
    before = {p: p.stat().st_mtime for p in results.glob("*.json")}
    argv = [sys.executable if c == "python" else c for c in command]
    subprocess.run(argv, cwd=cwd, check=True)
    fresh = [p for p in results.glob("*.json") if before.get(p) != p.stat().st_mtime]
    if not fresh:
        raise SystemExit(f"{' '.join(command)} wrote no result in {results}")
    newest = max(fresh, key=lambda p: p.stat().st_mtime)
    data: dict[str, Any] = json.loads(newest.read_text())
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", required=True, help="the earlier commit")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- python bench/....py ARGS")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    old = run(worktree(args.before), command)
    new = run(ROOT, command)
    rows = [[f"before ({old['provenance']['commit'][:7]})", *r] for r in old["rows"]]
    rows += [[f"after ({new['provenance']['commit'][:7]})", *r] for r in new["rows"]]
    out = save(
        f"{new['name']}-before-after",
        topic=new["topic"],
        title=f"{new['title']} — before/after",
        target=new.get("target"),
        columns=["code", *new["columns"]],
        rows=rows,
        notes=f"The same command on {old['provenance']['commit'][:12]} and then on "
        f"{new['provenance']['commit'][:12]}, one after the other on this machine "
        f"(bench/before_after.py). {new.get('notes') or ''}".strip(),
        extra={"before": old["provenance"], "after": new["provenance"]},
        where=RESULTS,
    )
    saved = json.loads(out.read_text())
    saved["provenance"]["models"] = new["provenance"]["models"]  # the same files, both runs
    out.write_text(json.dumps(saved, indent=1) + "\n")


if __name__ == "__main__":
    main()
