"""Result files with their provenance: which code, model, machine and command made a figure.

Every maintained benchmark ends with `save(...)`: it prints the table and writes
bench/results/<name>.json; `python -m bench.report` renders BENCHMARKS.md from those files.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
_SHA_CACHE = ROOT / "bench" / ".work" / "sha256.json"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def sha256_of(path: Path) -> str:
    """The file's sha256, cached by (path, size, mtime) in bench/.work: models are large."""
    st = path.stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    try:
        cache = json.loads(_SHA_CACHE.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        cache[key] = h.hexdigest()
        _SHA_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = _SHA_CACHE.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(_SHA_CACHE)
    return str(cache[key])


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip().replace("\n", "; ") or None


def _llama() -> dict[str, str]:
    try:
        import llama_cpp
    except ImportError:
        return {"llama_cpp_python": "not installed"}
    info = llama_cpp.llama_print_system_info()
    text = info.decode() if isinstance(info, bytes) else str(info)
    return {"llama_cpp_python": str(llama_cpp.__version__), "llama_cpp_system": text.strip()}


def machine() -> dict[str, Any]:
    """CPU model, cores (online and usable by this process), memory, GPU if any."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        pages = 0
    return {
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(pages / 2**30, 1),
        "gpu": _gpu(),
        "threads": os.environ.get("CASCADE_THREADS"),
        "load_avg_1m": round(os.getloadavg()[0], 2),  # other work on the cores as it ended
        "python": platform.python_version(),
    }


def _code() -> tuple[str, bool]:
    """The commit checked out and whether tracked files differ from it."""
    # results and the report they make are not code: a run beside earlier results is clean
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results",
                 ":!BENCHMARKS.md")  # fmt: skip
    return _git("rev-parse", "HEAD") or "unknown", bool(dirty)


#: The code as the benchmark started (it imports this module first): what it ran, even if the
#: tree changes while it runs.
STARTED = _code()


def provenance(models: Iterable[Path] = ()) -> dict[str, Any]:
    """What produced a result: commit, dirty flag, builds, model files, machine, command, date."""
    commit, dirty = STARTED
    argv = [os.path.relpath(sys.argv[0], ROOT) if sys.argv[0] else "python", *sys.argv[1:]]
    chosen = os.environ.get("BENCH_MODEL")  # the chat and serve benchmarks' model
    env = f"BENCH_MODEL={shlex.quote(os.path.relpath(chosen, ROOT))} " if chosen else ""
    return {
        "commit": commit,
        "dirty": dirty,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": env + "python " + shlex.join(argv),
        **_llama(),
        "models": [
            {"file": p.name, "bytes": p.stat().st_size, "sha256": sha256_of(p)}
            for p in models
            if p.is_file()
        ],
        "machine": machine(),
    }


def markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def save(
    name: str,
    *,
    topic: str,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    models: Iterable[Path] = (),
    target: str | None = None,
    notes: str | None = None,
    extra: dict[str, Any] | None = None,
    where: Path = RESULTS,
) -> Path:
    """Print the table and write bench/results/<name>.json with its provenance."""
    print(markdown(columns, rows), flush=True)
    prov = provenance(models)
    if prov["machine"]["gpu"]:  # a GPU run sits beside the CPU figure, not over it
        name += "-gpu"
    result = {
        "name": name,
        "topic": topic,
        "title": title,
        "target": target,
        "notes": notes,
        "columns": list(columns),
        "rows": [list(r) for r in rows],
        "provenance": prov,
        **({"data": extra} if extra else {}),
    }
    where.mkdir(parents=True, exist_ok=True)
    out = where / f"{name}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(out)
    print(f"result: {out}", flush=True)
    return out
