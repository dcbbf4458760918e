"""Needle-in-a-book: ingest a long real text once, then for each trial put a pass-key sentence at
a random depth and ask for it with each recall mode, plus TTFT against a from-scratch prefill.

python bench/needle.py [--text FILE] [--trials 20] [--window 4096] [--block 512] [--times 25]

A trial's document is the base token stream with the needle sentence written over the same
number of tokens at a sentence boundary, so chunk boundaries do not move. Chunk KV depends only
on the prefix and the previous window, so a trial re-decodes just the chunks whose window holds
the needle (the needle's chunks plus one window after) and copies every other chunk's stored
state from the base document — what a full ingest would have produced, without 20 full ingests.
The base ingest is kept in bench/.work/ between runs.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cascade_cli.config import resolve  # noqa: E402
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings, set_verbose  # noqa: E402
from cascade_cli.engine.generate import Generation, generate  # noqa: E402
from cascade_cli.paging import catalog  # noqa: E402
from cascade_cli.paging.ask import AskResult, ask  # noqa: E402
from cascade_cli.paging.ingest import IngestStatus, ingest  # noqa: E402
from cascade_cli.paging.library import Library  # noqa: E402
from cascade_cli.paging.prompt import frame, question_tokens  # noqa: E402
from cascade_cli.paging.sliding import SlidingWriter  # noqa: E402
from cascade_cli.paging.window import Window  # noqa: E402
from cascade_cli.samples import PERSUASION  # noqa: E402
from cascade_cli.store import ChunkMeta  # noqa: E402

MODEL = ROOT / ".cascade-test" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WORK = ROOT / "bench" / ".work"
DIRECT = "What is the pass key?"
PARAPHRASE = "What secret number was I asked to remember?"
#: (recall mode, question, top_k, neighbours on each side)
RUNS = [("bm25", DIRECT, 1, 0), ("keys", DIRECT, 1, 0), ("hybrid", DIRECT, 1, 0),
        ("bm25", DIRECT, 1, 1), ("hybrid", DIRECT, 2, 1),
        ("bm25", PARAPHRASE, 1, 0), ("keys", PARAPHRASE, 1, 0), ("hybrid", PARAPHRASE, 1, 0)]  # fmt: skip


def default_text() -> Path:
    data = ROOT / "bench" / "data"
    found = sorted(data.glob("*.txt")) if data.is_dir() else []
    return found[0] if found else PERSUASION


def base_document(ctx: Context, lib: Library, text: Path, n_tokens: int) -> catalog.Document:
    """Ingest (or reuse) the first ~n_tokens of the text."""
    src = WORK / f"base-{n_tokens}.txt"
    if not src.exists():
        body = text.read_text(encoding="utf-8", errors="replace")
        toks = ctx.model.tokenize(body)[:n_tokens]
        src.write_text(ctx.model.detokenize(toks), encoding="utf-8")
    t = time.perf_counter()
    last = [0.0]

    def show(s: IngestStatus) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(
                f"  ingest {s.tokens} tokens, {s.tokens / max(s.elapsed, 1e-9):.0f} tok/s",
                flush=True,
            )

    doc = ingest(ctx, lib, src, "base", "utf-8", show)
    print(f"base: {doc.tokens} tokens, {doc.chunks} chunks ({time.perf_counter() - t:.0f} s)")
    return doc


def copy_chunk(
    lib: Library, meta: ChunkMeta, doc: catalog.Document, base: catalog.Document
) -> ChunkMeta:
    new = meta.replace(key=doc.chunk_key(meta.index), owner=doc.owner)
    stored = lib.disk.put(new, lib.disk.get(meta.key))
    with lib.disk.transaction() as conn:
        for table in ("chunk_text", "chunk_keys"):
            cols = (
                "text, doc_id, idx, char_start, char_end"
                if table == "chunk_text"
                else "doc_id, idx, summary"
            )
            sel = cols.replace("doc_id", "?")
            conn.execute(
                f"INSERT INTO {table} ({cols}) SELECT {sel} FROM {table} WHERE doc_id = ? AND idx = ?",
                (doc.id, base.id, meta.index),
            )
    return stored


def make_trial(
    ctx: Context, lib: Library, base: catalog.Document, depth: float, key: int, n: int
) -> tuple[catalog.Document, int]:
    """A document with the needle written at `depth`; returns it and the needle's chunk index."""
    metas = sorted(lib.disk.chunks(base.owner), key=lambda m: m.index)
    stream = [int(t) for m in metas for t in m.tokens]
    needle = ctx.model.tokenize(f"The pass key is {key}. Remember it.\n\n")
    d = int(depth * (len(stream) - 1))
    while d < len(stream) - 1 and not ctx.model.detokenize(stream[d - 2 : d]).endswith("\n\n"):
        d += 1  # start of a paragraph
    with lib.disk.transaction() as conn:
        doc = catalog.create(
            conn, name=f"needle-{n}", path=f"needle-{n}", sha256=f"{n}-{key}-{d}",
            scheme=base.scheme, block_size=base.block_size, window=base.window,
            prefix_tokens=base.prefix_tokens,
        )  # fmt: skip
    block = base.block_size
    first, last_needle = d // block, (d + len(needle) - 1) // block
    writer = SlidingWriter(ctx, lib, doc)
    last = min(len(metas) - 1, last_needle + writer.capacity)
    # insert the needle; to keep later chunk boundaries, drop as many tokens at the end of the
    # re-decoded region (a window past the needle, where no later chunk can see the cut)
    end = metas[last].end
    stream[d:end] = needle + stream[d : end - len(needle)]
    copied = [copy_chunk(lib, m, doc, base) for m in metas[:first]]
    chars = sum(len(ctx.model.detokenize(m.tokens.tolist())) for m in copied)
    writer.rebuild(copied, chars)
    for m in metas[first : last + 1]:
        writer.add(m.index, stream[m.start : m.end])
    for m in metas[last + 1 :]:
        copy_chunk(lib, m, doc, base)
    lib.pager.flush()
    with lib.disk.transaction() as conn:
        catalog.progress(conn, doc, base.tokens, base.chunks, base.chars)
        catalog.finish(conn, doc)
    return catalog.find(lib.disk.conn, doc.name), first


def prefill_ttft(ctx: Context, window: int, chunks: list[list[int]], question: str) -> float:
    """Time to first token when the same recalled text is prefilled from scratch."""
    fr = frame(ctx.model)
    win = Window(ctx, window)
    t = time.perf_counter()
    win.append(fr.prefix)
    for toks in chunks:
        win.append(toks)
    win.append(question_tokens(ctx.model, fr, question), logits="last")
    with Sampler(SamplerSettings(temperature=0)) as sampler:
        next(iter(generate(ctx, sampler, 0, Generation(pos=win.end), 1, limit=window)), "")
    secs = time.perf_counter() - t
    win.reset()
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text", type=Path, default=None)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--times", type=float, default=25.0, help="text length in windows")
    ap.add_argument("--ttft-trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    set_verbose(False)
    WORK.mkdir(parents=True, exist_ok=True)
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / "store"), "memory_cache_size": "256MiB"},
        config_file=None,
    )  # fmt: skip
    rng = random.Random(args.seed)
    model = Model(MODEL)
    text = args.text or default_text()
    with (
        Context(model, args.window + args.block + 256, 3, args.block, cfg.n_threads, "off") as ctx,
        Library(cfg, ctx) as lib,
    ):
        for stale in catalog.documents(lib.conn, include_partial=True):
            if stale.name.startswith("needle-"):
                lib.remove(stale)
        base = base_document(ctx, lib, text, int(args.times * args.window) + args.block)
        print(f"text {text.name}: {base.tokens} tokens = {base.tokens / args.window:.1f}x window")
        hits = {r: 0 for r in RUNS}
        recalled = {r: 0 for r in RUNS}
        ttft: list[tuple[float, float]] = []
        for n in range(args.trials):
            depth = (n + rng.random()) / args.trials
            key = rng.randrange(10000, 99999)
            doc, needle_chunk = make_trial(ctx, lib, base, depth, key, n)
            row = []
            for run in RUNS:
                mode, question, top_k, nb = run
                res = AskResult(doc=doc.name)
                answer = "".join(ask(ctx, lib, doc, question, res, window=args.window, mode=mode,
                                     top_k=top_k, neighbors=nb, max_tokens=24))  # fmt: skip
                ok = str(key) in answer
                hits[run] += ok
                got = any(c["index"] == needle_chunk for c in res.chunks)
                recalled[run] += got
                row.append(f"{mode}/{top_k}/{nb}{'/para' if question == PARAPHRASE else ''}:"
                           f"{'Y' if ok else 'n'}{'r' if got else '-'}")  # fmt: skip
                if run == RUNS[0] and n < args.ttft_trials:
                    metas = [lib.disk.meta(doc.chunk_key(c["index"])) for c in res.chunks]
                    scratch = prefill_ttft(
                        ctx, args.window, [m.tokens.tolist() for m in metas], question
                    )
                    ttft.append((res.timings["ttft_s"], scratch))
            print(f"trial {n:2d} depth {depth:.2f} key {key}: {' '.join(row)}", flush=True)
            lib.remove(doc)
    print("\n| recall | question | top-k | neighbours | key in answer | needle chunk recalled |")
    print("|---|---|---|---|---|---|")
    for run in RUNS:
        mode, question, top_k, nb = run
        q = "paraphrased" if question == PARAPHRASE else "direct"
        print(
            f"| {mode} | {q} | {top_k} | {nb} | {hits[run]}/{args.trials} | "
            f"{recalled[run]}/{args.trials} |"
        )
    if ttft:
        a = sum(x for x, _ in ttft) / len(ttft)
        s = sum(y for _, y in ttft) / len(ttft)
        print(
            f"\nTTFT over {len(ttft)} trials: ask {a:.3f} s, prefill from scratch {s:.3f} s, {s / a:.1f}x lower"
        )


if __name__ == "__main__":
    main()
