"""The remote tier (Redis on loopback): restore, a second machine's ask, shared prompts, MB/s.

python bench/remote.py [--chars 15000] [--turns 6]

One run against a redis-server this script starts on a free loopback port (no persistence):

1. Home A ingests the first --chars characters of the sample (window 4096, blocks of 512, q4)
   with --remote; A asks a question; home B (which never saw the file) asks the same question
   with --remote (pull + chunks from Redis); home C ingests the file itself and asks. Reported:
   B's time to first token vs C's ingest + time to first token, and whether B's answer is A's.
2. In process on B: restore the document's chunks (a ~4k-token window) from the remote tier
   (B's disk copies deleted, RAM cleared, before each try), from B's disk (page cache dropped
   per file), and re-prefill the same tokens. Medians of --repeats.
3. Remote throughput: every chunk of the document fetched with the tier's own `get` (one MGET
   per chunk, checked), against `redis-benchmark` GETs of values of the same size, one client.
4. Two `cascade serve --remote` on two homes: a --turns-turn conversation sent to the first,
   then the same conversation to the second; the second's cached_tokens / prompt_tokens.

The table goes to bench/results/remote-<chars>chars-<turns>turns.json (bench/provenance.py).
Needs redis-server and redis-benchmark (apt-get install redis-server), no earlier run: the homes
(bench/.work/remote-*, serve-a, serve-b) are made afresh.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench.chat_common import home  # noqa: E402
from bench.provenance import save  # noqa: E402
from bench.restore_speed import drop_cache  # noqa: E402
from bench.serve_client import Server, stream  # noqa: E402
from cascade_cli.samples import PERSUASION  # noqa: E402

QUESTION = "Who is Sir Walter Elliot?"
THREADS = os.environ.get("CASCADE_THREADS", "2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(where: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(where),
         "--save", "", "--appendonly", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                          text=True).stdout.strip() == "PONG":  # fmt: skip
            return proc, port
        time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def cli(where: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(CASCADE_HOME=str(where), CASCADE_THREADS=THREADS)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cascade_cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, check=False)  # fmt: skip
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"cascade {' '.join(args[:2])} failed: {proc.stderr}")
    return proc, wall


def machines(url: str, text: Path) -> dict[str, Any]:
    """Part 1: A ingests and publishes, B asks from Redis, C ingests itself."""
    a, b, c = home("remote-a"), home("remote-b"), home("remote-c")
    _, ingest_a = cli(a, "ingest", str(text), "--name", "book", "--remote", url)
    ask_a = json.loads(cli(a, "ask", "book", QUESTION, "--json", "--max-tokens", "48")[0].stdout)
    proc, wall_b = cli(b, "ask", "book", QUESTION, "--json", "--max-tokens", "48", "--remote", url)
    ask_b = json.loads(proc.stdout)
    _, ingest_c = cli(c, "ingest", str(text), "--name", "book")
    proc, wall_c = cli(c, "ask", "book", QUESTION, "--json", "--max-tokens", "48")
    ask_c = json.loads(proc.stdout)
    return {
        "homes": (a, b),
        "ingest_a": ingest_a,
        "b_ttft": ask_b["timings"]["ttft_s"],
        "b_wall": wall_b,
        "b_tiers": sorted({ch["tier"] for ch in ask_b["chunks"]}),
        "b_chunks": len(ask_b["chunks"]),
        "b_prefill": ask_b["timings"]["prefill_tokens"],
        "c_ingest": ingest_c,
        "c_ttft": ask_c["timings"]["ttft_s"],
        "c_wall": wall_c,
        "same_answer": ask_b["answer"] == ask_a["answer"],
        "answer": ask_a["answer"],
    }


def in_process(b: Path, url: str, repeats: int) -> dict[str, Any]:
    """Parts 2 and 3, on home B (the document pulled there)."""
    os.environ["CASCADE_HOME"] = str(b)
    from cascade_cli.config import resolve
    from cascade_cli.documents.frame import frame
    from cascade_cli.documents.library import Library
    from cascade_cli.engine import Context, Model, set_verbose
    from cascade_cli.engine.live import Window
    from cascade_cli.registry import resolve_model

    set_verbose(False)
    cfg = resolve({"remote_cache_url": url, "threads": THREADS})
    model_path = resolve_model(cfg.model)
    wanted = cfg.embed_model.lower() != "none" and cfg.recall != "bm25"  # as Library decides
    embed = [resolve_model(cfg.embed_model, pull=False)] if wanted else []
    with (
        Model(model_path) as model,
        Context(
            model, cfg.gpu_cache_size + cfg.block_size, 3, cfg.block_size, cfg.n_threads, "off"
        ) as ctx,  # fmt: skip
        Library(cfg, ctx, mode="write") as lib,
    ):
        assert lib.remote is not None
        doc = lib.find("book")
        metas = [lib.chunk_meta(doc, i) for i in range(doc.chunks)]
        prefix = frame(model).prefix
        room = cfg.gpu_cache_size - len(prefix)
        while sum(m.n_tokens for m in metas) > room:
            metas.pop()
        tokens = [t for m in metas for t in m.tokens.tolist()]

        def restore() -> float:
            win = Window(ctx, cfg.gpu_cache_size)
            win.append(prefix)
            at, pos = {}, win.end
            for m in metas:
                at[m.key] = pos
                pos += m.n_tokens
            t = time.perf_counter()
            lib.pager.prefetch([m.key for m in metas], at)
            for m in metas:
                win.place(lib.pager.get(m.key, at=win.end))
            took = time.perf_counter() - t
            win.reset()
            return took

        remote, disk = [], []
        for _ in range(repeats + 1):  # the first pays one-time page faults: not counted
            lib.pager.flush()
            lib.disk.delete_owner(doc.owner)
            lib.ram.clear()
            remote.append(restore())
            assert all(lib.pager.origin(m.key) in (None, "remote") for m in metas)
        lib.pager.flush()  # the chunks are on B's disk now (filled on the way back)
        files = sorted((cfg.disk_cache_path / "data").rglob("*.kv"))
        for _ in range(repeats):
            lib.ram.clear()
            drop_cache(files)
            disk.append(restore())
        win = Window(ctx, cfg.gpu_cache_size)
        t = time.perf_counter()
        win.append(prefix + tokens)
        prefill = time.perf_counter() - t
        win.reset()
        tier = lib.remote.tier
        addresses = [lib.remote.chain(doc, m.index) for m in metas]
        sizes: list[int] = []
        t = time.perf_counter()
        for address in addresses:
            assert address is not None
            got = tier.get(address)
            assert got is not None
            sizes.append(len(got[0]))
        fetch = time.perf_counter() - t
    return {
        "tokens": len(prefix) + len(tokens),
        "chunks": len(metas),
        "prefill": prefill,
        "remote": statistics.median(remote[1:]),
        "disk": statistics.median(disk),
        "bytes": sum(sizes),
        "fetch": fetch,
        "chunk_bytes": int(statistics.median(sizes)),
        "models": [model_path, *embed],
        "scheme": cfg.compression,
        "window": cfg.gpu_cache_size,
        "block": cfg.block_size,
    }


def redis_benchmark(port: int, size: int, n: int) -> float:
    """MB/s of GETs of `size`-byte values, one client, no pipelining (the SET test runs first:
    it stores the value the GET test reads)."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set,get", "-d", str(size), "-n", str(n),
         "-c", "1", "--csv"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    row = next(line for line in out.splitlines() if line.startswith('"GET"'))
    rps = float(row.split(",")[1].strip('"'))
    return rps * size / 1e6


def servers(url: str, turns: int) -> dict[str, Any]:
    """Part 4: a conversation sent to one server, then to another that never saw it."""
    paras = [p.strip() for p in PERSUASION.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Remember this passage:\n{paras[10 + i]}"})
        messages.append({"role": "assistant", "content": "I will remember it."})
    messages.append({"role": "user", "content": "Who is mentioned in the first passage?"})
    out: dict[str, Any] = {}
    for name in ("serve-a", "serve-b"):
        where = home(name)
        server = Server(where, "--remote", url)
        try:
            out[name] = stream(server.url, messages, 8)
        finally:
            server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chars", type=int, default=15000)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "book.txt"
        whole = PERSUASION.read_text(encoding="utf-8")
        text.write_text(whole[: whole.rfind("\n\n", 0, args.chars) + 1], encoding="utf-8")
        proc, port = start_redis(Path(tmp))
        url = f"redis://127.0.0.1:{port}/0"
        try:
            m = machines(url, text)
            p = in_process(m["homes"][1], url, args.repeats)
            bench_mbs = redis_benchmark(port, p["chunk_bytes"], 200)
            s = servers(url, args.turns)
        finally:
            proc.terminate()
            proc.wait(10)
    mib = p["bytes"] / 2**20
    a, b = s["serve-a"]["usage"], s["serve-b"]["usage"]
    cached = b["prompt_tokens_details"]["cached_tokens"]
    same = s["serve-a"]["text"] == s["serve-b"]["text"]
    rows = [
        [f"re-prefill {p['tokens']} tokens", f"{p['prefill']:.3f} s"],
        ["restore from remote (Redis, loopback)", f"{p['remote']:.3f} s = "
         f"**{p['prefill'] / p['remote']:.0f}×** faster than prefill"],
        ["restore from disk (page cache dropped)", f"{p['disk']:.3f} s = "
         f"{p['prefill'] / p['disk']:.0f}× (remote / disk = {p['remote'] / p['disk']:.2f})"],
        ["A: ingest + publish", f"{m['ingest_a']:.1f} s (wall)"],
        ["B asks A's book (--remote, no prefill): first token", f"{m['b_ttft']:.2f} s "
         f"(process wall {m['b_wall']:.1f} s; tiers {m['b_tiers']}, {m['b_chunks']} chunks, "
         f"{m['b_prefill']} prefill tokens = the question)"],
        ["C ingests it itself, then asks: ingest + first token", f"{m['c_ingest']:.1f} s + "
         f"{m['c_ttft']:.2f} s = {m['c_ingest'] + m['c_ttft']:.1f} s (ask process wall "
         f"{m['c_wall']:.1f} s)"],
        ["B's answer identical to A's", f"{m['same_answer']} ({m['answer'][:60]!r}…)"],
        [f"remote tier `get`, whole document ({p['chunks']} × {p['chunk_bytes'] / 2**20:.2f} "
         "MiB)", f"{p['bytes'] / p['fetch'] / 1e6:.0f} MB/s"],
        ["redis-benchmark GET, same value size, 1 client", f"{bench_mbs:.0f} MB/s"],
        ["server A (cold): prompt / cached tokens", f"{a['prompt_tokens']} / "
         f"{a['prompt_tokens_details']['cached_tokens']} (ttft {s['serve-a']['ttft_s']:.2f} s)"],
        ["server B, same conversation: cached / prompt", f"{cached} / {b['prompt_tokens']} = "
         f"**{cached / b['prompt_tokens']:.2f}** (ttft {s['serve-b']['ttft_s']:.2f} s)"],
        ["B's reply = A's (A decoded the prompt, B restored q4 blocks)", same],
    ]  # fmt: skip
    save(
        f"remote-{args.chars}chars-{args.turns}turns",
        topic="remote",
        title="The remote tier on Redis (loopback): restore, a second machine's ask, shared "
        "prompts",
        target="restore from the remote tier ≥ 100× faster than re-prefill; the second "
        "server's cached_tokens ≥ 0.8 × prompt",
        columns=["measure", "value"],
        rows=rows,
        models=p["models"],
        notes=f"The first {args.chars} characters of the shipped Persuasion sample, window "
        f"{p['window']}, blocks of {p['block']}, {p['scheme']}, threads {THREADS}; a "
        f"{p['tokens']}-token window, {p['chunks']} chunks, {mib:.1f} MiB; restores are medians "
        f"of {args.repeats}; a {args.turns}-turn conversation for the servers; redis-server on a "
        f"loopback port, no persistence. Load average {load:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end.",
    )


if __name__ == "__main__":
    main()
