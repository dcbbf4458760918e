"""Soak: `cascade serve` under N clients for a while — conversations started and resent, a
shared prefix, oversized bodies — reporting disk against the budget, memory first vs last,
latencies and errors.

python bench/soak.py [--minutes 30] [--clients 4] [--api-cache-budget 32MiB]
                    [--memory-cache-size 64MiB]

Each client loops until the time is up, picking at random: resend its conversation with one
more user message (60 %), start a new conversation that opens with the shared prefix (a long
system prompt and a long first message every client sends; 30 %), or send a 1 MiB body (10 %),
which the server refuses with 413 (run with --max-body-size 256KiB: a 1 MiB message would be a
quarter-million-token prompt). A 429 (queue full) is retried after its Retry-After. Every 5 s
the server's RSS, the store's size on disk (du) and the bytes of its conversations (the
``api:`` chunks) are sampled.

Reported: requests per kind and status, errors (any other status, a transport error or a bad
response), p50/p99 latency of answered requests (queueing included), the slowest 413, the share
of prompt tokens answered from the cache, the store's size and the conversations' bytes
(max over the run) against --api-cache-budget, RSS mean of the first and the last fifth of the
run. Window 1024, block 128, replies ≤ 16 tokens, threads from CASCADE_THREADS (default 2).
The results go to bench/results/soak-<minutes>min.json (with the 5-second samples), the summary
table to bench/results/soak-summary-<minutes>min-<clients>clients-<budget>.json
(bench/provenance.py). Needs no earlier run: the server's home bench/.work/serve-soak is made
afresh.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_common import MODEL, home  # noqa: E402
from bench.chat_common import ROOT as _ROOT  # noqa: E402
from bench.provenance import save  # noqa: E402
from bench.serve_client import model_name, serving  # noqa: E402
from cascade_cli.config import parse_size  # noqa: E402

SYSTEM = "You are a helpful assistant. Answer in one short sentence. " * 8
TOPICS = ["rivers", "bread", "chess", "glass", "winter", "trains", "tea", "birds", "salt", "maps"]


def _shared_prefix() -> str:
    text = _ROOT / "cascade_cli" / "samples" / "persuasion.txt"
    words = text.read_text(encoding="utf-8").split()[2000:2300]
    return "Here is a passage I am reading:\n" + " ".join(words)


class Tally:
    """What the clients saw (locked: clients are threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.latencies: list[float] = []  # answered requests (200)
        self.refused: list[float] = []  # the 413s
        self.cached = 0
        self.prompt = 0
        self.errors: list[str] = []

    def add(self, kind: str, status: str, seconds: float | None = None) -> None:
        with self.lock:
            key = f"{kind} {status}"
            self.counts[key] = self.counts.get(key, 0) + 1
            if seconds is not None:
                (self.latencies if status == "200" else self.refused).append(seconds)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


def _post(url: str, body: bytes) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    return httpx.post(url + "/v1/chat/completions", content=body, headers=headers, timeout=600)


def _client(url: str, c: int, deadline: float, tally: Tally, prefix: str) -> None:
    rnd = random.Random(c)
    model = model_name(url)
    msgs: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        roll = rnd.random()
        if roll < 0.1:
            kind = "big"
            huge = [{"role": "user", "content": "x" * (1 << 20)}]
            body = json.dumps({"model": model, "messages": huge, "max_tokens": 16}).encode()
        else:
            if roll < 0.4 or not msgs or len(msgs) > 16:
                kind = "new"
                msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prefix}]
                msgs.append({"role": "assistant", "content": "I have read it."})
            else:
                kind = "resend"
            topic = TOPICS[rnd.randrange(len(TOPICS))]
            msgs.append({"role": "user", "content": f"Client {c}: one fact about {topic}?"})
            body = json.dumps(
                {"model": model, "messages": msgs, "max_tokens": 16, "temperature": 0.7}
            ).encode()
        t0 = time.perf_counter()
        try:
            r = _post(url, body)
        except httpx.HTTPError as exc:
            tally.error(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        took = time.perf_counter() - t0
        if r.status_code == 429:
            tally.add(kind, "429")
            time.sleep(int(r.headers.get("retry-after", "1")))
            if kind != "big":
                msgs.pop()
            continue
        if kind == "big":
            tally.add(kind, str(r.status_code), took)
            if r.status_code != 413:
                tally.error(f"big: HTTP {r.status_code}")
            continue
        if r.status_code != 200:
            tally.add(kind, str(r.status_code))
            tally.error(f"{kind}: HTTP {r.status_code}: {r.text[:200]}")
            msgs = []
            continue
        data = r.json()
        usage = data["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        if not 0 <= cached <= usage["prompt_tokens"]:
            tally.error(f"{kind}: impossible usage {usage}")
        with tally.lock:
            tally.cached += cached
            tally.prompt += usage["prompt_tokens"]
        tally.add(kind, "200", took)
        msgs.append({"role": "assistant", "content": data["choices"][0]["message"]["content"]})


def _api_bytes(where: Path) -> int:
    db = where / "store" / "index.sqlite"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
            query = "SELECT COALESCE(SUM(nbytes), 0) FROM chunks WHERE owner GLOB 'api:*'"
            return int(conn.execute(query).fetchone()[0])
    except sqlite3.Error:
        return 0


def _du(where: Path) -> int:
    out = subprocess.run(["du", "-sb", str(where / "store")], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 else 0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, int(q * len(ranked)))]


def soak(args: argparse.Namespace) -> dict[str, Any]:
    where = home("serve-soak")
    budget = args.api_cache_budget
    flags = ["--gpu-cache-size", "1024", "--block-size", "128", "--max-body-size", "256KiB"]
    flags += ["--api-cache-budget", budget, "--memory-cache-size", args.memory_cache_size]
    prefix = _shared_prefix()
    tally = Tally()
    samples: list[dict[str, float]] = []
    with serving(where, *flags) as s:
        t0 = time.monotonic()
        deadline = t0 + args.minutes * 60
        threads = [
            threading.Thread(target=_client, args=(s.url, c, deadline, tally, prefix))
            for c in range(args.clients)
        ]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            samples.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "rss_mib": round(s.rss_mib(), 1),
                    "store_bytes": _du(where),
                    "api_bytes": _api_bytes(where),
                }
            )
            time.sleep(5)
        wall = time.monotonic() - t0
        rss_end = s.rss_mib()
    fifth = max(1, len(samples) // 5)
    report = {
        "minutes": args.minutes,
        "clients": args.clients,
        "flags": flags,
        "wall_s": round(wall, 1),
        "requests": dict(sorted(tally.counts.items())),
        "errors": tally.errors[:20],
        "n_errors": len(tally.errors),
        "latency_s": {
            "p50": round(_pct(tally.latencies, 0.5), 2),
            "p99": round(_pct(tally.latencies, 0.99), 2),
            "mean": round(statistics.fmean(tally.latencies), 2) if tally.latencies else 0.0,
        },
        "refused_413_max_s": round(max(tally.refused, default=0.0), 2),
        "cached_share": round(tally.cached / tally.prompt, 3) if tally.prompt else 0.0,
        "api_cache_budget": budget,
        "api_bytes_max": max((x["api_bytes"] for x in samples), default=0),
        "api_bytes_end": samples[-1]["api_bytes"] if samples else 0,
        "store_bytes_max": max((x["store_bytes"] for x in samples), default=0),
        "rss_first_fifth_mib": round(statistics.fmean(x["rss_mib"] for x in samples[:fifth]), 1),
        "rss_last_fifth_mib": round(statistics.fmean(x["rss_mib"] for x in samples[-fifth:]), 1),
        "rss_end_mib": round(rss_end, 1),
        "samples": samples,
    }
    report.update(windows(samples, parse_size(budget, "budget")))
    return report


def windows(samples: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """RSS over the first and the last 5 minutes, and the samples over the budget."""
    end = samples[-1]["t"] if samples else 0.0
    first = [x["rss_mib"] for x in samples if x["t"] <= 300] or [0.0]
    last = [x["rss_mib"] for x in samples if x["t"] >= end - 300] or [0.0]
    a, b = statistics.fmean(first), statistics.fmean(last)
    return {
        "rss_first_5min_mib": round(a, 1),
        "rss_last_5min_mib": round(b, 1),
        "rss_change": round(b / a - 1, 3) if a else 0.0,
        "api_samples_over_budget": sum(x["api_bytes"] > budget for x in samples),
        "samples_n": len(samples),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--api-cache-budget", default="32MiB")
    ap.add_argument("--memory-cache-size", default="64MiB", help="the server's RAM tier")
    ap.add_argument("--report", type=Path, help="print the summary of a saved results file")
    args = ap.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text())
        saved.update(windows(saved["samples"], parse_size(saved["api_cache_budget"], "budget")))
        print(json.dumps({k: v for k, v in saved.items() if k != "samples"}, indent=1))
        return
    report = soak(args)
    out = ROOT / "bench" / "results" / f"soak-{args.minutes:g}min.json"
    out.write_text(json.dumps(report, indent=1))
    summary(args, report, out)


def summary(args: argparse.Namespace, r: dict[str, Any], out: Path) -> None:
    """The result file (bench/provenance.py): the run's measures against the targets."""
    req = r["requests"]
    answered = {k: n for k, n in req.items() if k.endswith(" 200")}
    big = {k: n for k, n in req.items() if k.startswith("big ")}
    mib = 2**20
    budget = parse_size(r["api_cache_budget"], "budget")
    rows = [
        ["requests answered", f"{sum(answered.values()):,} ("
         + ", ".join(f"{n:,} {k.split()[0]}" for k, n in sorted(answered.items())) + ")"],
        ["1 MiB bodies", f"{sum(big.values()):,}" + (": " + ", ".join(
            f"{n:,} × {k.split()[1]}" for k, n in sorted(big.items()))
            + f"; slowest 413 {r['refused_413_max_s']:.2f} s" if big else "")],
        ["429 (queue full, retried)", sum(n for k, n in req.items() if k.endswith(" 429"))],
        ["errors (any other status, transport errors, impossible usage)", f"**{r['n_errors']}**"],
        ["latency of answered requests, queueing included",
         f"p50 {r['latency_s']['p50']:.2f} s · p99 {r['latency_s']['p99']:.2f} s"],
        ["prompt tokens answered from the cache", f"{r['cached_share']:.1%}"],
        [f"the server's chunks (`api:`) against the {r['api_cache_budget']} budget",
         f"max **{r['api_bytes_max'] / mib:.1f} MiB** ({r['api_samples_over_budget']} of "
         f"{r['samples_n']} samples over; {r['api_bytes_max']:,} vs {budget:,} B), end "
         f"{r['api_bytes_end'] / mib:.1f} MiB"],
        ["the store on disk (du), max", f"{r['store_bytes_max'] / mib:.1f} MiB"],
        ["server RSS, mean of the first vs the last 5 minutes",
         f"{r['rss_first_5min_mib']:.1f} → {r['rss_last_5min_mib']:.1f} MiB "
         f"(**{r['rss_change']:+.1%}**)"],
    ]  # fmt: skip
    save(
        f"soak-summary-{args.minutes:g}min-{args.clients}clients-{args.api_cache_budget}"
        + ("" if args.memory_cache_size == "64MiB" else f"-ram{args.memory_cache_size}"),
        topic="serve",
        title=f"Soak: {args.clients} clients for {args.minutes:g} minutes, resent "
        "conversations, a shared prefix, oversized bodies",
        target="the server's chunks within --api-cache-budget, RSS flat (first vs last 5 minutes "
        "within 10 %), no error other than the designed refusals",
        columns=["measure", "value"],
        rows=rows,
        models=[MODEL],
        notes=f"Server flags: {' '.join(r['flags'])}; replies ≤ 16 tokens; clients: 60 % resend "
        "their conversation with one more message, 30 % start a new one with the shared prefix, "
        f"10 % send a 1 MiB body. Wall {r['wall_s']:.0f} s; the 5-second samples are in "
        f"{out.relative_to(ROOT)}.",
        extra={k: v for k, v in r.items() if k != "samples"},
    )


if __name__ == "__main__":
    main()
