"""Render BENCHMARKS.md from the result files in bench/results/ (runs no model).

python -m bench.report           # rewrite BENCHMARKS.md
python -m bench.report --check   # exit 1 when BENCHMARKS.md is not what the results render
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.provenance import RESULTS, ROOT, markdown

OUT = ROOT / "BENCHMARKS.md"

#: Topics in the order they are shown, each with a line saying what it measures.
TOPICS: dict[str, tuple[str, str]] = {
    "ask": (
        "Ask: time to first token",
        "`cascade ask` restores the recalled chunks' KV from the store and decodes only the "
        "question; the baseline prefills the same tokens from scratch in the same process.",
    ),
    "restore": (
        "Restore vs re-prefill",
        "Restoring a window's KV from the RAM and disk tiers against computing it again.",
    ),
    "codec": (
        "KV codec: size and quality",
        "Stored bytes per token and what quantizing the KV costs the next-token distribution.",
    ),
    "recall": (
        "Recall: needles and questions",
        "Needle-in-a-haystack and RULER-style tasks through the real `ask` path.",
    ),
    "ingest": (
        "Ingest throughput and memory",
        "Tokens per second through the sliding window, and memory as the text grows.",
    ),
    "chat": (
        "Chat sessions",
        "Reopening a session in a new process against re-prefilling its window.",
    ),
    "serve": (
        "Serve",
        "The OpenAI-compatible server: a resent conversation decodes only its new part, "
        "also after a restart.",
    ),
    "answers": (
        "Answers",
        "What the generator makes of what was paged in: looping replies, quotes that hold the "
        "evidence, answers that name the answer.",
    ),
    "tuning": (
        "Tuning runs",
        "How each default was chosen: one setting changed at a time on the tuning texts (the "
        "sed manual, Persuasion), never on the held-out ones.",
    ),
    "memory": (
        "Resource bounds",
        "Memory and open descriptors of one long-running process, against their bounds.",
    ),
    "remote": (
        "Remote tier",
        "A shared remote tier on Redis: restores, another machine's ask, shared prompts.",
    ),
    "models": (
        "Other model families",
        "Sliding-window, recurrent and hybrid models: the live window's memory and restores "
        "from their snapshots.",
    ),
    "earlier": (
        "Earlier figures, without provenance",
        "Not re-measured since result files began to record their provenance: marked as such.",
    ),
}


def _load() -> list[dict[str, Any]]:
    results = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "provenance" in data and "topic" in data:
            data["_file"] = path.relative_to(ROOT).as_posix()
            results.append(data)
    return results


def _machine(m: dict[str, Any]) -> str:
    cores = f"{m.get('usable_cores')} of {m.get('cores')} cores"
    threads = f", CASCADE_THREADS={m['threads']}" if m.get("threads") else ""
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ", no GPU"
    load = f", load average {m['load_avg_1m']}" if m.get("load_avg_1m") is not None else ""
    return f"{m.get('cpu')}, {cores}{threads}{gpu}{load}"


def _provenance(r: dict[str, Any]) -> list[str]:
    p = r["provenance"]
    if p.get("recorded") is False:
        return [f"- provenance: **none recorded** (source: `{p.get('source')}`)"]
    commit = str(p.get("commit", "unknown"))[:10] + (" (dirty)" if p.get("dirty") else "")
    models = ", ".join(f"`{m['file']}` sha256 `{m['sha256'][:16]}…`" for m in p.get("models", []))
    lines = [
        f"- command: `{p.get('command')}`",
        f"- when: {p.get('date')}, commit `{commit}`, llama-cpp-python {p.get('llama_cpp_python')}",
        f"- machine: {_machine(p.get('machine', {}))}",
    ]
    if models:
        lines.append(f"- model: {models}")
    lines.append(f"- result file: `{r['_file']}`")
    return lines


def _section(r: dict[str, Any]) -> list[str]:
    lines = [f"### {r['title']}", ""]
    if r.get("target"):
        lines += [f"Target: {r['target']}", ""]
    lines += [markdown(r["columns"], r["rows"]), ""]
    if r.get("notes"):
        lines += [str(r["notes"]), ""]
    return [*lines, *_provenance(r), ""]


def render(results: list[dict[str, Any]] | None = None) -> str:
    """BENCHMARKS.md as the result files say."""
    results = _load() if results is None else results
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_topic.setdefault(r["topic"], []).append(r)
    order = [t for t in TOPICS if t in by_topic] + sorted(set(by_topic) - set(TOPICS))
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench.report` from the result files in `bench/results/`; do not",
        "edit by hand. Each table is one run of the command under it, with the code, model file,",
        "machine and date that produced it ([how to run them](docs/benchmarks.md)).",
        "",
    ]
    lines += [
        f"- [{TOPICS.get(t, (t, ''))[0]}](#{_anchor(TOPICS.get(t, (t, ''))[0])})" for t in order
    ]
    lines.append("")
    for topic in order:
        title, about = TOPICS.get(topic, (topic, ""))
        lines += [f"## {title}", ""]
        if about:
            lines += [about, ""]
        for r in sorted(by_topic[topic], key=lambda r: str(r["title"])):
            lines += _section(r)
    return "\n".join(lines).rstrip() + "\n"


def _anchor(title: str) -> str:
    keep = [c for c in title.lower() if c.isalnum() or c in " -"]
    return "".join(keep).replace(" ", "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail when BENCHMARKS.md is stale")
    args = ap.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(
                "BENCHMARKS.md is not what bench/results renders; run `python -m bench.report`.",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
