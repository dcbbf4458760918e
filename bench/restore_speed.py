"""Restore a 4096-token window from the disk and RAM tiers vs re-prefilling it.

python bench/restore_speed.py [--text FILE] [--scheme q4] [--window 4096] [--block 512]

One process, one run: prefill the window (timed), save it as block-sized chunks into a fresh
store, then restore the whole window (read + checksum + dequantize + set_data + shift + copy)
from disk with the page cache dropped per file (posix_fadvise DONTNEED), and again from the RAM
tier. Also times a plain sequential read of the same chunk files, cache dropped the same way.
The process's first restore is reported apart (it also pays first-touch page faults of the
decoded states' memory); the others are medians of --repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as cascade_cli does, before numpy loads

import numpy as np  # noqa: E402

from bench.provenance import save  # noqa: E402
from cascade_cli import kv  # noqa: E402
from cascade_cli.engine import Context, Model, library_dir, set_verbose  # noqa: E402
from cascade_cli.engine.live import Window  # noqa: E402
from cascade_cli.samples import PERSUASION  # noqa: E402
from cascade_cli.store import ChunkMeta, DiskStore, Pager, RamCache  # noqa: E402

MODEL = ROOT / ".cascade-test" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_text() -> Path:
    data = ROOT / "bench" / "data"
    found = sorted(data.glob("*.txt")) if data.is_dir() else []
    return found[0] if found else PERSUASION


def drop_cache(files: list[Path]) -> None:
    """Evict the files' pages from the page cache."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(files: list[Path]) -> tuple[float, int]:
    drop_cache(files)
    t = time.perf_counter()
    n = 0
    for f in files:
        with f.open("rb", buffering=0) as fh:
            n += len(fh.read())
    return time.perf_counter() - t, n


def restore(ctx: Context, pager: Pager, metas: list[ChunkMeta], window: int) -> tuple[float, float]:
    """Seconds for the whole restore, and the part spent getting states (read+verify+decode)."""
    win = Window(ctx, window)
    t0 = time.perf_counter()
    pager.prefetch([m.key for m in metas])
    got = 0.0
    for m in metas:
        t1 = time.perf_counter()
        blob = pager.get(m.key)
        got += time.perf_counter() - t1
        win.place(blob)
    total = time.perf_counter() - t0
    win.reset()
    return total, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text", type=Path, default=None)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--scheme", default="q4")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    set_verbose(False)
    kv.configure(library_dir())
    text = (args.text or default_text()).read_text(encoding="utf-8", errors="replace")
    model = Model(args.model)
    tokens = model.tokenize(text)[: args.window]
    n_ctx = args.window + args.block
    with Context(model, n_ctx, 3, args.block, args.threads, "off") as ctx:
        win = Window(ctx, args.window)
        t = time.perf_counter()
        win.append(tokens)
        prefill = time.perf_counter() - t
        blobs = [
            win.save(p, min(p + args.block, len(tokens))).copy()
            for p in range(0, len(tokens), args.block)
        ]
        raw = sum(b.nbytes for b in blobs)
        win.reset()
        with tempfile.TemporaryDirectory() as tmp:
            disk = DiskStore.open(Path(tmp) / "store", ctx.fingerprint())
            ram = RamCache(4 * raw, stats=disk.stats)
            layout = model.cache_layout

            def encode(blob: object, scheme: str) -> bytes:
                return kv.encode(blob, scheme, layout=layout)  # type: ignore[arg-type]

            pager = Pager(disk, ram, encode, kv.decode, readers=args.threads)
            metas = []
            for i, b in enumerate(blobs):
                p = i * args.block
                meta = ChunkMeta(
                    key=f"w:{i}",
                    owner="w",
                    index=i,
                    start=p,
                    end=p + len(kv.header(b).positions),
                    tokens=np.asarray(tokens[p : p + args.block], dtype=np.int32),
                    pos=p,
                    scheme=args.scheme,
                )
                metas.append(disk.put(meta, encode(b, args.scheme)))
            files = sorted((Path(tmp) / "store" / "data").rglob("*.kv"))
            stored = sum(f.stat().st_size for f in files)
            cold, cold_get, plain = [], [], []
            ram.clear()
            drop_cache(files)
            first = restore(ctx, pager, metas, args.window)[0]  # pays one-time page faults
            for _ in range(args.repeats):
                ram.clear()
                drop_cache(files)
                total, got = restore(ctx, pager, metas, args.window)
                cold.append(total)
                cold_get.append(got)
                plain.append(plain_read(files)[0])
            stages: dict[str, list[float]] = {"read": [], "decode": [], "place": []}
            for _ in range(args.repeats):  # the same work, one stage at a time, single-threaded
                drop_cache(files)
                t = time.perf_counter()
                payloads = [disk.get(m.key) for m in metas]
                stages["read"].append(time.perf_counter() - t)
                t = time.perf_counter()
                states = [kv.decode(p) for p in payloads]
                stages["decode"].append(time.perf_counter() - t)
                win = Window(ctx, args.window)
                t = time.perf_counter()
                for st in states:
                    win.place(st)
                stages["place"].append(time.perf_counter() - t)
                win.reset()
            for m in metas:  # warm the RAM tier
                ram.put(m.key, kv.decode(disk.get(m.key)))
            warm = [restore(ctx, pager, metas, args.window)[0] for _ in range(args.repeats)]
            pager.close()
            disk.close()
    c, w, pr = statistics.median(cold), statistics.median(warm), statistics.median(plain)
    read_only = statistics.median(cold_get)
    rd, dc, pl = (statistics.median(stages[k]) for k in ("read", "decode", "place"))
    mib = 2**20
    save(
        f"restore-{args.model.stem}-{args.scheme}",
        topic="restore",
        title=f"Restore a {args.window}-token window vs re-prefill ({args.model.name}, {args.scheme})",
        target="a restore from disk ≥ 10× faster than the prefill",
        columns=["measure", "seconds", "vs prefill"],
        rows=[
            [f"prefill {len(tokens)} tokens", f"{prefill:.3f}", "1×"],
            ["restore from disk (cache dropped)", f"{c:.3f}", f"**{prefill / c:.0f}× faster**"],
            ["the process's first restore from disk", f"{first:.3f}", f"{prefill / first:.0f}× faster"],
            ["restore from the RAM tier", f"{w:.3f}", f"{prefill / w:.0f}× faster"],
            ["plain sequential read of the files", f"{pr:.4f}", f"{stored / pr / mib:.0f} MiB/s"],
            ["read + verify + dequantize (get)", f"{read_only:.3f}", f"{stored / read_only / mib:.0f} MiB/s"],
            ["stage: read + crc32 verify", f"{rd:.4f}", f"{stored / rd / mib:.0f} MiB/s"],
            [f"stage: dequantize ({args.scheme} → f16)", f"{dc:.4f}", ""],
            ["stage: set_data + shift + seq_cp", f"{pl:.4f}", ""],
        ],
        models=[args.model],
        notes=f"{len(tokens)} tokens in {len(blobs)} chunks, {args.threads} threads; raw f16 state "
        f"{raw / mib:.1f} MiB, on disk {stored / mib:.1f} MiB ({stored / raw:.3f}×). Medians of "
        f"{args.repeats} repeats.",
    )  # fmt: skip


if __name__ == "__main__":
    main()
