"""Needle-in-a-haystack and RULER-style retrieval through the real `ask` path.

python bench/niah.py --text bench/data/persuasion.txt --topic Bath [--window 2048] [--ask-window 4096]
                     [--lengths 25 37.5] [--depths 10] [--tasks niah paraphrase multikey multivalue multiquery]

Tasks (answers scored by the needle's value appearing in the answer):
- niah: the field's standard form — a sentence about a topic the haystack mentions often ("The best
  thing to do in {topic} is eat a sandwich and sit in the park on a sunny day."), asked "What is
  the best thing to do in {topic}?"; a grid of depths × haystack lengths (in windows).
- paraphrase: the pass-key needle, asked directly and in other words.
- single (default): both of the above in one document, half a document apart.
- multikey / multivalue / multiquery: RULER's niah_multikey (4 needles "One of the special magic
  numbers for {key} is: {value}." with similar keys, one asked), niah_multivalue (one key, 4
  values, all asked), niah_multiquery (4 keys, all asked in one question).

--needles-only asks the same questions of a document holding only the needles (a control:
the model's ceiling). One base ingest of the longest haystack; a shorter haystack is its first chunks (the same KV a
shorter ingest would produce). Every trial is a document as `cascade ingest` would store it: the haystack's token stream with the
needles written in at sentence starts; chunk KV depends only on the prefix and the previous
window, so only the chunks whose window holds a needle are decoded again (the rest are copied,
KV and recall rows, from the base ingest, kept in bench/.work/). Asks use `ask`'s
defaults (hybrid recall, budget filled with distinct hits) at --ask-window tokens.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provenance import save  # noqa: E402
from bench.shipped import shipped  # noqa: E402
from cascade_cli.config import QUOTES, Settings, resolve  # noqa: E402
from cascade_cli.documents import catalog  # noqa: E402
from cascade_cli.documents.ingest import IngestStatus, ingest  # noqa: E402
from cascade_cli.documents.library import Library  # noqa: E402
from cascade_cli.documents.reindex import ensure_indexed  # noqa: E402
from cascade_cli.documents.sliding import SlidingWriter  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.recall import service  # noqa: E402
from cascade_cli.recall import tables as rindex  # noqa: E402
from cascade_cli.recall.passages import Passage  # noqa: E402
from cascade_cli.recall.plan import QUOTE  # noqa: E402
from cascade_cli.store import ChunkMeta  # noqa: E402
from cascade_cli.window.ask import AskResult, ask  # noqa: E402

HOME = ROOT / ".cascade-test" / "models"
MODEL = HOME / "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBED = HOME / "all-MiniLM-L6-v2.f16.gguf"
WORK = ROOT / "bench" / ".work"
KEYS = ["silver-harbor", "silver-garden", "silent-harbor", "golden-harbor", "silver-hammer",
        "quiet-meadow", "bright-lantern", "hollow-river", "amber-falcon", "crimson-valley"]  # fmt: skip


@dataclass
class Task:
    """Needles (text at a depth) and the questions asked of the document built with them."""

    name: str
    needles: list[tuple[float, str]]
    #: (label, question, values that must appear, the needles it asks about: indices)
    questions: list[tuple[str, str, list[str], list[int]]]
    meta: dict[str, object] = field(default_factory=dict)


def niah(rng: random.Random, depth: float, topic: str) -> Task:
    text = f"The best thing to do in {topic} is eat a sandwich and sit in the park on a sunny day."
    q = f"What is the best thing to do in {topic}?"
    return Task("niah", [(depth, text)], [("niah", q, ["sandwich"], [0])])


def paraphrase(rng: random.Random, depth: float, topic: str) -> Task:
    key = str(rng.randrange(10000, 99999))
    text = f"The pass key is {key}. Remember it. {key} is the pass key."
    return Task("paraphrase", [(depth, text)], [
        ("direct", "What is the pass key?", [key], [0]),
        ("paraphrased", "What secret number was I asked to remember?", [key], [0]),
    ])  # fmt: skip


def single(rng: random.Random, depth: float, topic: str) -> Task:
    """The topic needle at `depth` and the pass key half a document away, in one document (one
    build serves both; they share no words)."""
    a, b = niah(rng, depth, topic), paraphrase(rng, (depth + 0.5) % 1.0, topic)
    return Task("single", a.needles + b.needles, a.questions + [
        (label, q, values, [1]) for label, q, values, _ in b.questions
    ])  # fmt: skip


def _magic(key: str, value: str) -> str:
    return f"One of the special magic numbers for {key} is: {value}."


def multikey(rng: random.Random, depth: float, topic: str) -> Task:
    keys = rng.sample(KEYS[:5], 4)
    values = [str(rng.randrange(1000000, 9999999)) for _ in keys]
    depths = sorted(rng.random() for _ in keys)
    asked = rng.randrange(4)
    q = f"What is the special magic number for {keys[asked]} mentioned in the provided text?"
    needles = [(d, _magic(k, v)) for d, k, v in zip(depths, keys, values, strict=True)]
    return Task("multikey", needles, [("multikey", q, [values[asked]], [asked])])


def multivalue(rng: random.Random, depth: float, topic: str) -> Task:
    key = rng.choice(KEYS)
    values = [str(rng.randrange(1000000, 9999999)) for _ in range(4)]
    depths = sorted(rng.random() for _ in values)
    q = f"What are all the special magic numbers for {key} mentioned in the provided text?"
    needles = [(d, _magic(key, v)) for d, v in zip(depths, values, strict=True)]
    return Task("multivalue", needles, [("multivalue", q, values, [0, 1, 2, 3])])


def multiquery(rng: random.Random, depth: float, topic: str) -> Task:
    keys = rng.sample(KEYS, 4)
    values = [str(rng.randrange(1000000, 9999999)) for _ in keys]
    depths = sorted(rng.random() for _ in keys)
    q = (f"What are all the special magic numbers for {', '.join(keys[:-1])} and {keys[-1]} "
         "mentioned in the provided text?")  # fmt: skip
    needles = [(d, _magic(k, v)) for d, k, v in zip(depths, keys, values, strict=True)]
    return Task("multiquery", needles, [("multiquery", q, values, [0, 1, 2, 3])])


TASKS: dict[str, Callable[[random.Random, float, str], Task]] = {
    "niah": niah, "paraphrase": paraphrase, "single": single, "multikey": multikey,
    "multivalue": multivalue, "multiquery": multiquery,
}  # fmt: skip


def base_document(ctx: Context, lib: Library, text: Path, n_tokens: int) -> catalog.Document:
    """Ingest (or reuse) the first n_tokens of the text."""
    stem = "" if Path(ctx.model.path) == MODEL else f"{Path(ctx.model.path).stem}-"
    name = f"base-{stem}{text.stem}-{n_tokens}"
    src = WORK / f"{name}.txt"
    if not src.exists():
        toks = ctx.model.tokenize(text.read_text(encoding="utf-8"))[:n_tokens]
        src.write_text(ctx.model.detokenize(toks), encoding="utf-8")
    t = time.perf_counter()
    last = [t]

    def show(s: IngestStatus) -> None:
        if time.perf_counter() - last[0] > 60:
            last[0] = time.perf_counter()
            print(
                f"  ingest {s.tokens} tokens, {s.tokens / max(s.elapsed, 1e-9):.0f} tok/s",
                flush=True,
            )

    doc = ingest(ctx, lib, src, name, "utf-8", show)
    print(
        f"{name}: {doc.tokens} tokens, {doc.chunks} chunks ({time.perf_counter() - t:.0f} s)",
        flush=True,
    )
    return doc


def copy_chunk(
    lib: Library, meta: ChunkMeta, doc: catalog.Document, base: catalog.Document
) -> ChunkMeta:
    """The base chunk's KV and recall rows (passages, vectors) under the trial document."""
    new = meta.replace(key=doc.chunk_key(meta.index), owner=doc.owner)
    stored = lib.disk.put(new, lib.disk.get(meta.key))
    with lib.disk.transaction() as conn:
        src = rindex.corpus_id(conn, base.owner)
        dst = rindex.corpus_id(conn, doc.owner, create=True)
        assert src is not None and dst is not None
        rows = conn.execute(
            "SELECT pidx, start, text, vec FROM recall_passages WHERE corpus = ? AND chunk = ?"
            " ORDER BY pidx",
            (src, meta.index),
        ).fetchall()
        rindex.add(
            conn, doc.owner, meta.index, [Passage(start, text) for _, start, text, _ in rows]
        )
        conn.executemany(
            "UPDATE recall_passages SET vec = ? WHERE corpus = ? AND chunk = ? AND pidx = ?",
            [(vec, dst, meta.index, pidx) for pidx, _, _, vec in rows],
        )
    return stored


def sentence_start(ctx: Context, stream: list[int], d: int) -> int:
    """The first position at or after `d` that starts a sentence (after ". " or a blank line;
    a line break alone is only the text's wrapping)."""
    while d < len(stream) - 1:
        prev = ctx.model.detokenize(stream[max(0, d - 3) : d])
        if prev.endswith((". ", ".  ", ".\n", "\n\n", '." ', '."\n', "! ", "? ")):
            return d
        d += 1
    return d


def build(
    ctx: Context, lib: Library, base: catalog.Document, task: Task, n: int, n_chunks: int = 0
) -> tuple[catalog.Document, list[list[int]]]:
    """The trial document and the chunk indices each needle lies in."""
    metas = sorted(lib.disk.chunks(base.owner), key=lambda m: m.index)
    metas = metas[: n_chunks or len(metas)]  # a shorter haystack: the base's first chunks
    stream = [int(t) for m in metas for t in m.tokens]
    block = base.block_size
    writer = SlidingWriter(ctx, lib, base)  # only for its capacity
    cap = writer.capacity
    needle_chunks: list[list[int]] = [[] for _ in task.needles]  # in the task's needle order
    redo: set[int] = set()
    for i, (depth, text) in sorted(enumerate(task.needles), key=lambda x: x[1]):
        toks = ctx.model.tokenize(" " + text + " ")
        d = sentence_start(ctx, stream, int(depth * (len(stream) - 1)))
        first = d // block
        last = min(len(metas) - 1, (d + len(toks) - 1) // block + cap)
        end = metas[last].end
        stream[d:end] = toks + stream[d : end - len(toks)]  # later chunk boundaries stay
        needle_chunks[i] = list(range(first, (d + len(toks) - 1) // block + 1))
        redo.update(range(first, last + 1))
    with lib.disk.transaction() as conn:
        doc = catalog.create(
            conn, name=f"trial-{n}", path=f"trial-{n}", sha256=f"trial-{n}-{time.time()}",
            scheme=base.scheme, block_size=base.block_size, window=base.window,
            prefix_tokens=base.prefix_tokens,
        )  # fmt: skip
    done: list[ChunkMeta] = []
    chars = 0
    w: SlidingWriter | None = None
    for m in metas:
        if m.index in redo:
            if w is None:
                w = SlidingWriter(ctx, lib, doc)
                w.rebuild(done, chars)
            text = w.add(m.index, stream[m.start : m.end])
            lib.pager.flush()
            done.append(lib.disk.meta(doc.chunk_key(m.index)))
        else:
            w = None
            done.append(copy_chunk(lib, m, doc, base))
            text = ctx.model.detokenize(m.tokens.tolist())
        chars += len(text)
    lib.pager.flush()
    lib.recall.flush()
    with lib.disk.transaction() as conn:
        catalog.progress(conn, doc, metas[-1].end, len(metas), chars)
        catalog.finish(conn, doc)
    return catalog.find(lib.disk.conn, doc.name), needle_chunks


def needles_document(
    ctx: Context, lib: Library, task: Task, n: int
) -> tuple[catalog.Document, list[list[int]]]:
    """A document of the task's needle sentences alone (one chunk), ingested as any file is."""
    src = WORK / f"needles-{n}.txt"
    src.write_text(" ".join(text for _, text in task.needles) + "\n", encoding="utf-8")
    doc = ingest(ctx, lib, src, f"trial-{n}", "utf-8", lambda status: None)
    return doc, [[0] for _ in task.needles]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=MODEL, help="the generator (a .gguf path)")
    ap.add_argument("--topic", required=True, help="a place the text mentions often")
    ap.add_argument("--window", type=int, default=2048, help="ingest window")
    ap.add_argument("--ask-window", type=int, default=0, help="ask window (default: --window)")
    ap.add_argument("--ruler-window", type=int, default=4096, help="ask window of the RULER tasks")
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--lengths", type=float, nargs="+", default=[25.0, 31.25], help="in windows")
    ap.add_argument("--depths", type=int, default=10)
    ap.add_argument("--trials", type=int, default=10, help="trials of each RULER task")
    ap.add_argument(
        "--tasks", nargs="+", default=["single", "multikey", "multivalue", "multiquery"]
    )
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=None, help="write per-trial JSON lines here")
    ap.add_argument("--reindex", action="store_true", help="rebuild the base's recall index")
    ap.add_argument(
        "--needles-only", action="store_true",
        help="control: ask each question of a document holding only its needles (the model's "
        "ceiling without any haystack)",
    )  # fmt: skip
    ap.add_argument(
        "--quotes", nargs="+", default=[QUOTE], choices=QUOTES,
        help="ask each question under each of these quote policies (scored apart)",
    )  # fmt: skip
    args = ap.parse_args()
    set_verbose(False)
    service.EMBED_NICE = 0  # trials wait for their embeddings: don't starve them
    WORK.mkdir(parents=True, exist_ok=True)
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / ("store" if args.model == MODEL else f"store-{args.model.stem}")),
         "memory_cache_size": "256MiB"},
        config_file=None,
    )  # fmt: skip
    rng = random.Random(args.seed)
    own = shipped(args.model)  # the cue and quote place ask ships for this model
    ask_window = args.ask_window or args.window
    n_ctx = max(args.window, ask_window, args.ruler_window) + args.block + 256
    out = args.out.open("w") if args.out else None
    scores: dict[str, list[int]] = {}
    recalls: dict[str, list[int]] = {}
    recall_s: list[float] = []
    ttft: list[float] = []
    with (
        Context(Model(args.model), n_ctx, 3, args.block, cfg.n_threads, "off") as ctx,
        Library(cfg, ctx, embed_path=EMBED) as lib,
    ):
        for stale in catalog.documents(lib.conn, include_partial=True):
            if stale.name.startswith("trial-"):
                lib.remove(stale)
        base = base_document(ctx, lib, args.text, int(max(args.lengths) * args.window))
        if args.reindex:
            lib.recall.forget(base.owner)
            ensure_indexed(ctx, lib, [base], print)
        plan: list[tuple[str, float, float]] = []  # task, depth, length; single needles first
        for times in args.lengths:
            for name in ("single", "niah", "paraphrase"):
                if name in args.tasks:
                    plan += [
                        (name, (i + rng.random()) / args.depths, times) for i in range(args.depths)
                    ]
        for name in args.tasks:
            if name.startswith("multi"):
                plan += [(name, 0.0, args.lengths[0])] * args.trials
        for n, (name, depth, times) in enumerate(plan):
            n_chunks = int(times * args.window) // args.block
            task = TASKS[name](rng, depth, args.topic)
            if args.needles_only:
                doc, needle_chunks = needles_document(ctx, lib, task, n)
            else:
                doc, needle_chunks = build(ctx, lib, base, task, n, n_chunks)
            window = args.ruler_window if name.startswith("multi") else ask_window
            row = []
            for (label, question, values, needles), quote in itertools.product(
                task.questions, args.quotes
            ):
                res = AskResult(doc=doc.name)
                own_cue = own.get("ask_cue", Settings.ask_cue)
                own_note = own.get("ask_note", Settings.ask_note)
                answer = "".join(ask(ctx, lib, doc, question, res, window=window, max_tokens=48,
                                     quote=quote, cue=own_cue, where=own_note))  # fmt: skip
                ok = all(v.lower() in answer.lower() for v in values)
                got = {c["index"] for c in res.chunks}
                rec = all(any(c in got for c in needle_chunks[i]) for i in needles)
                key = f"{label}@{times:g}x" if label == "niah" else label
                key += f" [{quote}]" if len(args.quotes) > 1 else ""
                scores.setdefault(key, []).append(int(ok))
                recalls.setdefault(key, []).append(int(rec))
                recall_s.append(res.timings["recall_s"])
                ttft.append(res.timings["ttft_s"])
                row.append(
                    f"{label}{'/' + quote if len(args.quotes) > 1 else ''}:{'Y' if ok else 'n'}{'r' if rec else '-'}"
                )
                if out:
                    out.write(json.dumps({"task": key, "depth": depth, "ok": ok, "recalled": rec,
                                              "needle_chunks": needle_chunks, "chunks": sorted(got),
                                              "quoted": res.passages, "answer": answer,
                                              "values": values, **res.timings}) + "\n")  # fmt: skip
                    out.flush()
            print(f"{n:3d} {name} depth {depth:.2f} {times:g}x: {' '.join(row)}", flush=True)
            lib.remove(doc)
    rows = [
        [key, f"{sum(s)}/{len(s)} ({100 * sum(s) / len(s):.0f} %)", f"{sum(r)}/{len(r)}"]
        for key, s, r in ((k, scores[k], recalls[k]) for k in scores)
    ]
    timing = (
        f" Recall per ask: median {1000 * statistics.median(recall_s):.1f} ms, max "
        f"{1000 * max(recall_s):.1f} ms; TTFT median {statistics.median(ttft):.3f} s."
        if recall_s
        else ""
    )
    stem = args.text.stem + ("" if args.model == MODEL else f"-{args.model.stem}")
    save(
        f"niah-{stem}" + ("-needles-only" if args.needles_only else ""),
        topic="recall",
        title=f"Needles in {args.text.name}" + (" (needles only: the control)" if args.needles_only else "")
        + ("" if args.model == MODEL else f", {args.model.name}"),
        columns=["task", "answered", "needle chunk(s) recalled"],
        rows=rows,
        models=[args.model],
        notes=f"Ingest window {args.window}, ask window {ask_window} (RULER {args.ruler_window}), "
        f"block {args.block}, q4, hybrid recall, haystacks of {' and '.join(f'{x:g}' for x in args.lengths)} "
        f"windows, {args.depths} depths, seed {args.seed}." + timing,
    )  # fmt: skip


if __name__ == "__main__":
    main()
