"""Answers through the real `ask` against the same model's text baselines, on the same questions.

python bench/answers.py --book sed [--model qwen2.5-coder-0.5b] [--chars 60000] [--window 4096]
                        [--conditions ask rag oracle cut] [--rerank off] [--max-tokens 64]
                        [--cue "Answer: "] [--quote best] [--neighbors 1] [--guard dry]

The book is bench/data/<book>.txt (novels: bench/fetch_text.py; manuals: bench/manuals.py) or,
for ``--book sample``, the shipped sample (cascade_cli/samples/persuasion.txt), its
first --chars characters ingested once per model (bench/.work/answers/<model>/). Its hand-written
questions (bench/questions/<book>.json) whose evidence string lies in that prefix are asked under
each condition, with the same model, window, sampling (greedy, no repeat penalty, the repetition
guard) and answer length:

- ``ask``: `cascade ask` as shipped (window engine, recall, quote; ``--rerank``);
- ``rag``: text RAG — the chunks that ask paged in, prefilled as text in ask's frame, then the
  question (what a user would build instead);
- ``oracle``: the chunk that holds the evidence (as ingest cut it), alone as text right before
  the question (the ceiling);
- ``cut``: the document cut to the window, as text (what a plain llama.cpp run sees);
- ``chat``: a one-turn `cascade chat --doc` session (the conversation frame: the system
  prompt, the excerpts as a user message naming the document, the quote as a system note).

Per condition: answers naming an expected term, looping replies, replies cut by the length
limit mid-sentence, TTFT; for ask also whether the evidence's chunk was paged in and whether the
quote holds the evidence. The table goes to bench/results/answers-<book>-<model>-<window>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.niah import EMBED, WORK  # noqa: E402
from bench.provenance import save  # noqa: E402
from bench.questions import book_path, cut, flat  # noqa: E402
from bench.shipped import shipped as shipped_defaults  # noqa: E402
from cascade_cli.config import Settings, resolve  # noqa: E402
from cascade_cli.documents import catalog  # noqa: E402
from cascade_cli.documents.frame import frame, question_tokens  # noqa: E402
from cascade_cli.documents.ingest import ingest  # noqa: E402
from cascade_cli.documents.library import Library  # noqa: E402
from cascade_cli.engine import Context, Model, Sampler, SamplerSettings, set_verbose  # noqa: E402
from cascade_cli.engine.generate import Generation, generate  # noqa: E402
from cascade_cli.engine.live import WINDOW_SEQ, Window  # noqa: E402
from cascade_cli.engine.loops import loops  # noqa: E402
from cascade_cli.errors import CascadeError  # noqa: E402
from cascade_cli.recall.plan import reserve as reserve_for  # noqa: E402
from cascade_cli.registry import resolve_model  # noqa: E402
from cascade_cli.session.chat import ChatSession  # noqa: E402
from cascade_cli.window.ask import AskResult, ask  # noqa: E402

CONDITIONS = ["ask", "rag", "oracle", "cut", "chat"]


def sampling(guard: str) -> SamplerSettings:
    """Greedy, no repeat penalty (as ask ships), with repetition guard `guard`."""
    return SamplerSettings(temperature=0, repeat_penalty=1.0, guard=guard)


def model_path(name: str) -> Path:
    path = Path(name)
    return path if path.suffix == ".gguf" else resolve_model(name, pull=False)


def document(
    ctx: Context, lib: Library, book: Path, chars: int, stem: str
) -> tuple[catalog.Document, float | None]:
    """The book's first `chars` characters (cut at a line end), ingested once; and the seconds
    its ingest took, when this run ingested it."""
    name = f"{stem}-{chars}"
    try:
        return catalog.find(lib.conn, name), None
    except CascadeError:
        pass
    src = WORK / "answers" / f"{name}.txt"
    src.write_text(cut(book.read_text(encoding="utf-8"), chars), encoding="utf-8")
    t = time.perf_counter()
    doc = ingest(ctx, lib, src, name, "utf-8", lambda s: None)
    took = time.perf_counter() - t
    print(f"{name}: {doc.tokens} tokens, {doc.chunks} chunks ({took:.0f} s)")
    return doc, took


def generated(
    ctx: Context, window: int, tokens: list[int], max_tokens: int, guard: str
) -> tuple[str, float, int]:
    """(reply, TTFT, tokens generated) after prefilling `tokens` from scratch."""
    win = Window(ctx, window)
    t = time.perf_counter()
    win.append(tokens, logits="last")
    state = Generation(pos=win.end)
    pieces, first = [], 0.0
    with Sampler(sampling(guard), ctx.model) as sampler:
        for piece in generate(ctx, sampler, WINDOW_SEQ, state, max_tokens, limit=window):
            first = first or time.perf_counter() - t
            pieces.append(piece)
    win.reset()
    return "".join(pieces).lstrip(), first, len(state.tokens)


def chatted(
    ctx: Context, lib: Library, doc: catalog.Document, question: str, args: argparse.Namespace
) -> tuple[str, float, int]:
    """(reply, TTFT, tokens generated) of a fresh one-turn chat session reading `doc`."""
    greedy = {"temperature": 0.0, "repeat_penalty": 1.0, "max_tokens": args.max_tokens}
    chat = ChatSession(ctx, lib, "answers-bench", overrides=greedy, documents=[doc])
    try:
        reply = "".join(chat.send(question))
        return reply.strip(), chat.last.ttft_s, chat.last.gen_tokens
    finally:
        chat.close()
        chat.delete()


def cut_mid_sentence(answer: str, n: int, max_tokens: int) -> bool:
    """Stopped by the length limit inside a sentence."""
    return n >= max_tokens and not answer.rstrip().endswith((".", "!", "?", '"', "”", ")", "`"))


def run_question(
    ctx: Context, lib: Library, doc: catalog.Document, q: dict[str, Any],
    conditions: list[str], args: argparse.Namespace,
) -> list[dict[str, Any]]:  # fmt: skip
    ev = flat(q["evidence"])
    fr = frame(ctx.model, cue=args.cue)
    ask_q = question_tokens(ctx.model, fr, q["q"])
    rows = []
    res = AskResult(doc=doc.name)
    answer = "".join(ask(ctx, lib, doc, q["q"], res, window=args.window, cue=args.cue,
                         max_tokens=args.max_tokens, rerank=args.rerank, quote=args.quote, where=args.note,
                         neighbors=args.neighbors, sampling=sampling(args.guard)))  # fmt: skip
    chunks = [lib.disk.meta(doc.chunk_key(c["index"])).tokens.tolist() for c in res.chunks]
    paged = ev in flat("".join(ctx.model.detokenize(c) for c in chunks))
    made: dict[str, Callable[[], list[int]]] = {
        "rag": lambda: fr.prefix + [t for c in chunks for t in c] + ask_q,
        "oracle": lambda: fr.prefix + evidence_chunk(ctx, lib, doc, ev) + ask_q,
        "cut": lambda: _cut(ctx, doc, fr.prefix, ask_q, args),
    }
    for cond in conditions:
        if cond == "ask":
            reply, ttft, n = answer, res.timings["ttft_s"], res.timings["gen_tokens"]
        elif cond == "chat":
            reply, ttft, n = chatted(ctx, lib, doc, q["q"], args)
        else:
            reply, ttft, n = generated(ctx, args.window, made[cond](), args.max_tokens, args.guard)
        row = {
            "q": q["q"], "condition": cond,
            "named": any(t.lower() in reply.lower() for t in q["answer_terms"]),
            "loops": loops(reply), "cut": cut_mid_sentence(reply, int(n), args.max_tokens),
            "ttft_s": round(ttft, 4), "answer": reply.strip()[:120], "ends": reply.strip()[-80:],
        }  # fmt: skip
        if cond == "ask":
            row["paged"] = paged
            row["quoted"] = any(ev in flat(p) for p in res.passages)
            row["tokens"] = sum(len(c) for c in chunks)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def evidence_chunk(ctx: Context, lib: Library, doc: catalog.Document, ev: str) -> list[int]:
    """The tokens of the chunk that holds the evidence (with the next one where it crosses the
    edge): what recall pages in at best."""
    texts = [
        lib.disk.meta(doc.chunk_key(i)).tokens.tolist() for i in range(doc.chunks)
    ]  # fmt: skip
    for i, toks in enumerate(texts):
        if ev in flat(ctx.model.detokenize(toks)):
            return toks
        both = toks + (texts[i + 1] if i + 1 < len(texts) else [])
        if ev in flat(ctx.model.detokenize(both)):
            return both
    raise SystemExit(f"evidence not in any chunk: {ev[:60]}")


def _cut(
    ctx: Context, doc: catalog.Document, prefix: list[int], q: list[int], args: argparse.Namespace
) -> list[int]:
    room = args.window - len(prefix) - len(q) - reserve_for(args.max_tokens, args.window)
    src = (WORK / "answers" / f"{doc.name}.txt").read_text(encoding="utf-8")
    return prefix + ctx.model.tokenize(src)[:room] + q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--book", required=True)
    ap.add_argument("--model", default="smollm2-135m", help="a registered name or a .gguf path")
    ap.add_argument("--chars", type=int, default=60000)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--conditions", nargs="+", default=CONDITIONS, choices=CONDITIONS)
    ap.add_argument("--rerank", default=None, choices=["off", "llm"])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--cue", default=None, help="what the answer follows")
    ap.add_argument("--quote", default=None)
    ap.add_argument("--neighbors", type=int, default=None)
    ap.add_argument("--note", default=None, choices=["lines", "system"], help="ask_note")
    ap.add_argument("--guard", default=None, choices=["dry", "stop", "off"], help="repeat guard")
    ap.add_argument("--tag", default="", help="appended to the result's name (a tuning run)")
    ap.add_argument("--questions", type=int, default=0, help="only the first N (0: all)")
    ap.add_argument("--out", type=Path, default=None, help="per-question rows (JSON lines)")
    args = ap.parse_args()
    set_verbose(False)
    model = model_path(args.model)
    shipped(args, model)
    book = book_path(args.book)
    if not book.exists():
        raise SystemExit(f"{book} is missing: python bench/fetch_text.py or bench/manuals.py")
    (WORK / "answers").mkdir(parents=True, exist_ok=True)
    cfg = resolve(
        {"gpu_cache_size": args.window, "block_size": args.block, "compression": "q4",
         "disk_cache_path": str(WORK / "answers" / model.stem), "memory_cache_size": "256MiB",
         "repeat_guard": args.guard},
        config_file=None,
    )  # fmt: skip
    text = cut(book.read_text(encoding="utf-8"), args.chars)
    qs = json.loads((ROOT / "bench" / "questions" / f"{args.book}.json").read_text())["questions"]
    qs = [q for q in qs if flat(q["evidence"]) in flat(text)]
    qs = qs[: args.questions] if args.questions else qs
    rows: list[dict[str, Any]] = []
    with (
        Context(Model(model), args.window + args.block + 256, 4, args.block, cfg.n_threads, "off") as ctx,
        Library(cfg, ctx, embed_path=EMBED) as lib,
    ):  # fmt: skip
        doc, took = document(ctx, lib, book, args.chars, args.book)
        print(f"{doc.name}: {doc.tokens} tokens, {len(qs)} questions with their evidence in it")
        for q in qs:
            rows += run_question(ctx, lib, doc, q, args.conditions, args)
            if args.out:
                with args.out.open("a") as out:
                    out.writelines(json.dumps(r) + "\n" for r in rows[-len(args.conditions) :])
    table = [summary(c, [r for r in rows if r["condition"] == c]) for c in args.conditions]
    asked = [r for r in rows if r["condition"] == "ask"]
    save(
        f"answers-{args.book}-{model.stem}-{args.window}{args.tag}",
        topic="tuning" if args.tag else "answers",
        title=f"Answers vs text baselines: {args.book}, {model.stem}, window {args.window}"
        + (f" — rerank {args.rerank}, quote {args.quote}, neighbors {args.neighbors}, "
           f"cue {args.cue!r}, note {args.note}, guard {args.guard}, replies ≤ {args.max_tokens} tokens ({', '.join(args.conditions)})"
           f" [{args.tag.strip('-')}]" if args.tag else ""),
        target="ask ≥ text RAG − 1 per 20 and ≥ 90 % of the oracle; quote holds the evidence "
        "for ≥ 75 % of paged questions; no loops; ask's TTFT ≥ 30× below text RAG's",
        columns=["condition", "questions", "answer names the answer", "looping",
                 "cut mid-sentence", "TTFT s (median)", "chunk paged in", "quote holds evidence"],
        rows=table,
        models=[model, EMBED],
        notes=f"bench/questions/{args.book}.json's questions whose evidence lies in the first "
        f"{args.chars} characters of {book.relative_to(ROOT)} ({doc.tokens} tokens, "
        f"{doc.chunks} chunks of {doc.block_size}, {doc.scheme}"
        f"{f'; ingested in {took:.0f} s' if took else ''}); window {args.window}, greedy, "
        f"replies ≤ {args.max_tokens} tokens, rerank {args.rerank}, quote {args.quote}, "
        f"neighbors {args.neighbors}, cue {args.cue!r}, note {args.note}, repeat guard {args.guard}; ask paged in "
        f"{statistics.median([r['tokens'] for r in asked]) if asked else 0:.0f} tokens (median).",
    )  # fmt: skip


def shipped(args: argparse.Namespace, model: Path) -> None:
    """Settings not given on the command line: what `ask` ships for this model (the built-in
    defaults under the registry entry's own, found by the model's file name)."""
    own = shipped_defaults(model)
    for arg, key in (("rerank", "rerank"), ("cue", "ask_cue"), ("quote", "quote"),
                     ("guard", "repeat_guard"), ("note", "ask_note")):  # fmt: skip
        if getattr(args, arg) is None:
            setattr(args, arg, own.get(key, getattr(Settings, key)))
    if args.neighbors is None:
        args.neighbors = int(own.get("neighbors", Settings.neighbors))


def summary(cond: str, rs: list[dict[str, Any]]) -> list[Any]:
    ttft = statistics.median([r["ttft_s"] for r in rs]) if rs else 0.0
    paged = sum(r.get("paged", False) for r in rs)
    quoted = sum(r.get("quoted", False) for r in rs)
    return [
        cond, len(rs), sum(r["named"] for r in rs), sum(r["loops"] for r in rs),
        sum(r["cut"] for r in rs), f"{ttft:.3f}",
        paged if cond == "ask" else "—", f"{quoted} of {paged}" if cond == "ask" else "—",
    ]  # fmt: skip


if __name__ == "__main__":
    main()
