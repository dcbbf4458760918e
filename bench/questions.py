"""Real questions: does recall page in the chunk that holds the answer?

python bench/questions.py [BOOK ...] [--window 4096] [--block 512]

bench/questions/<book>.json holds 25 hand-written questions per novel, worded unlike the text, each
with an evidence string (verbatim, unique in the book) inside the answering sentence. The book is
cut into chunks exactly as `cascade ingest` cuts it and each chunk is indexed through the same
Recall.index call ingest makes (passages, FTS5, embeddings); no KV is computed, since recall reads
only the index. Per question: the chunks `ask` would page in at --window (hybrid, the default),
the rank of the answer chunk under hybrid, bm25 and semantic, the old recall's choice —
chunk-level BM25 top-1 over whole chunk texts (FTS5 across the document), what `ask` used before —
and whether the passage `ask` quotes before the question (recall.plan.quote_texts over the chunks
it pages in) holds the evidence. ``--model`` cuts the chunks with
that model's tokenizer (a .gguf path; the index is kept per text and chunk cuts). --chars
takes the first N characters cut back to a line end, as bench/answers.py ingests them.

The table goes to bench/results/questions-<books>-<window>-<block>.json (bench/provenance.py).
Needs no earlier run: each book's index is made under bench/.work/questions on first use; the
texts come from bench/fetch_text.py (bench/data/nodefs.md: a copy of Debian's
/usr/share/doc/nodejs/api/fs.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.niah import EMBED, MODEL  # noqa: E402
from bench.provenance import save  # noqa: E402
from cascade_cli.documents.formats import extract  # noqa: E402
from cascade_cli.engine import Model, set_verbose  # noqa: E402
from cascade_cli.engine.embed import Embedder  # noqa: E402
from cascade_cli.recall import Recall, fill  # noqa: E402
from cascade_cli.recall.lexical import query_terms  # noqa: E402
from cascade_cli.recall.passages import MAX_WORDS, MIN_WORDS, TARGET_WORDS  # noqa: E402
from cascade_cli.recall.plan import QUOTE, arrange, quote_texts  # noqa: E402
from cascade_cli.store import DiskStore  # noqa: E402

DATA = ROOT / "bench" / "data"
WORK = ROOT / "bench" / ".work"
QUESTIONS = ROOT / "bench" / "questions"


class _Lib:
    """What Recall needs of a Library: the store and (optionally) an embedding model."""

    def __init__(self, disk: DiskStore, embed: bool) -> None:
        self.disk = disk
        self.embedder_factory = (lambda: Embedder(EMBED, threads=2)) if embed else None


def book_path(book: str) -> Path:
    """bench/data/<book>.txt (or .md); "sample" is the shipped sample, Persuasion's opening."""
    if book == "sample":
        return ROOT / "cascade_cli" / "samples" / "persuasion.txt"
    path = DATA / f"{book}.txt"
    # a manual: bench/data/nodefs.md is /usr/share/doc/nodejs/api/fs.md
    return path if path.exists() else DATA / f"{book}.md"


def cut(text: str, chars: int) -> str:
    """The first `chars` characters cut back to a line end (0: all): the text a run ingests."""
    if not chars:
        return text
    text = text[:chars]
    return text[: text.rfind("\n") + 1] or text


def ingested_text(book: str, chars: int) -> str:
    """The text `cascade ingest` makes of the book's first `chars` characters: the same
    extraction (a hard-wrapped plain text's paragraphs joined: documents.wrap)."""
    path = book_path(book)
    if chars:
        (WORK / "questions").mkdir(parents=True, exist_ok=True)
        part = WORK / "questions" / f"{book}-{chars}{path.suffix}"
        part.write_text(cut(path.read_text(encoding="utf-8"), chars), encoding="utf-8")
        path = part
    return extract(path).text


def load_book(
    model: Model, book: str, block: int, chars: int = 0
) -> tuple[list[Any], list[str], list[int]]:
    """A book's hand-written questions (those whose evidence lies in the text a run ingests of
    its first `chars` characters; 0: the whole book), its chunks as text, and each chunk's
    first character (plus the end)."""
    text = ingested_text(book, chars)
    qs = json.loads((QUESTIONS / f"{book}.json").read_text(encoding="utf-8"))["questions"]
    qs = [q for q in qs if flat(q["evidence"]) in flat(text)]
    texts = chunk_texts(model, text, block)
    starts = [0]
    for t in texts:
        starts.append(starts[-1] + len(t))
    return qs, texts, starts


def indexed_recall(disk: DiskStore, texts: list[str], starts: list[int]) -> Recall:
    """Recall over the chunks' texts as `doc:1`, indexed as ingest does (once per store), every
    passage embedded in this thread (ingest's embedding thread runs at lower priority, which a
    busy machine starves)."""
    lexical_only = Recall(_Lib(disk, embed=False))
    if lexical_only.indexed("doc:1") != set(range(len(texts))):
        for i, t in enumerate(texts):
            lexical_only.index("doc:1", i, t, starts[i])
    lexical_only.close()
    recall = Recall(_Lib(disk, embed=True))
    recall.search(["doc:1"], "warm up", "semantic")  # embeds every passage
    return recall


def chunk_texts(model: Model, text: str, block: int) -> list[str]:
    """The chunks ingest would store, as text (documents.ingest.chunks without a context)."""
    from cascade_cli.documents.ingest import pieces

    out: list[str] = []
    pending: list[int] = []
    for _, piece in pieces(text):
        pending.extend(model.tokenize(piece))
        while len(pending) >= block:
            out.append(model.detokenize(pending[:block]))
            del pending[:block]
    if pending:
        out.append(model.detokenize(pending))
    return out


def old_top1(texts: list[str], question: str) -> int:
    """The previous recall: BM25 over whole chunks, top-1."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, idx UNINDEXED)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(t, i) for i, t in enumerate(texts)])
    terms = query_terms(question)
    if not terms:
        return -1
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    row = conn.execute(
        "SELECT idx FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 1", (match,)
    ).fetchone()
    return int(row[0]) if row else -1


def flat(text: str) -> str:
    return " ".join(text.split())


def run_book(model: Model, book: str, window: int, block: int, chars: int) -> dict[str, float]:
    qs, texts, starts = load_book(model, book, block, chars)
    joined = "".join(texts)
    budget = (window - 41 - 32 - 256) // block  # prefix, question, answer reserve as in ask
    # the index is kept per text and passage settings, so fusion changes rerun in seconds
    sha = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]  # text and cuts
    tag = f"{book}{chars or ''}-{sha}-{block}-{TARGET_WORDS}-{MIN_WORDS}-{MAX_WORDS}"
    with DiskStore.open(WORK / "questions" / tag, "questions-bench") as disk:
        t0 = time.perf_counter()
        recall = indexed_recall(disk, texts, starts)
        index_s = time.perf_counter() - t0
        counts = recall.passage_counts("doc:1")
        res = {"ask": 0, "hybrid@1": 0, "hybrid@3": 0, "bm25@1": 0, "semantic@1": 0, "old": 0}
        res |= {"quote": 0, "paged": 0}
        times, lex, sem = [], [], []
        for q in qs:
            found = re.search(r"\s+".join(map(re.escape, q["evidence"].split())), joined)
            if found is None:
                raise SystemExit(
                    f"{book}: evidence not found after tokenization: {q['evidence']!r}"
                )
            at, end = found.start(), found.end() - 1
            answer = {i for i in range(len(texts)) if starts[i] <= end and at < starts[i + 1]}
            row, said = [], None
            for mode in ("hybrid", "bm25", "semantic"):
                t_search = time.perf_counter()
                hits = recall.search(["doc:1"], q["q"], mode, subject=True)  # as ask does
                if mode == "hybrid":
                    times.append(time.perf_counter() - t_search)
                    lex.append(recall.timings["lexical_s"])
                    sem.append(recall.timings["semantic_s"])
                    chosen = fill(hits, budget, lambda o: len(texts), lambda o, c: counts.get(c, 1))
                    got = arrange([c for _, c in chosen])
                    res["ask"] += bool(answer & set(got))
                    if answer & set(got):
                        res["paged"] += 1
                        quotes = quote_texts(recall, hits, chosen, QUOTE, "hybrid", q["q"])
                        said = flat(q["evidence"]) in flat(" ".join(t for _, t in quotes))
                        res["quote"] += said
                    res["hybrid@3"] += bool(answer & {h.chunk for h in hits[:3]})
                ranks = [h.chunk for h in hits]
                rank = min((ranks.index(a) for a in answer if a in ranks), default=99)
                res[f"{mode}@1"] += rank == 0
                row.append(f"{mode}:{rank if rank < 99 else '-'}")
            old = old_top1(texts, q["q"])
            res["old"] += old in answer
            print(
                f"  {book} {q['q'][:60]!r:64} {' '.join(row)} old:{'Y' if old in answer else 'n'} "
                f"quote:{'-' if said is None else 'Y' if said else 'n'}"
            )
        recall.close()
    n = len(qs)
    print(f"{book}: {len(texts)} chunks, index ready in {index_s:.1f} s; hybrid search median "
          f"{1000 * statistics.median(times):.1f} ms (BM25 {1000 * statistics.median(lex):.1f}, "
          f"embed + cosine {1000 * statistics.median(sem):.1f}), max {1000 * max(times):.1f} ms")  # fmt: skip
    return {k: v / n for k, v in res.items()} | {"n": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "books", nargs="*", default=["prideprejudice", "persuasion", "northangerabbey", "emma"]
    )
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--chars", type=int, default=0, help="only the first N characters (0: all)")
    ap.add_argument("--model", type=Path, default=MODEL, help="whose tokenizer cuts the chunks")
    args = ap.parse_args()
    for b in args.books:
        if not book_path(b).exists():
            how = (
                "cp /usr/share/doc/nodejs/api/fs.md bench/data/nodefs.md"
                if b == "nodefs"
                else (f"python bench/fetch_text.py {b}")
            )
            raise SystemExit(f"bench/data/{b}.txt is missing: {how}")
    set_verbose(False)
    model = Model(args.model)
    rows = {b: run_book(model, b, args.window, args.block, args.chars) for b in args.books}
    if len(rows) > 1:  # the books together, each question counted once
        n = sum(r["n"] for r in rows.values())
        keys = [k for k in next(iter(rows.values())) if k != "n"]
        rows["all"] = {k: sum(r[k] * r["n"] for r in rows.values()) / n for k in keys} | {"n": n}
    table = []
    for b, r in rows.items():
        pct = {k: f"{100 * v:.0f} %" for k, v in r.items() if k != "n"}
        table.append([b, f"{r['n']:.0f}", f"**{pct['ask']}**", pct["hybrid@1"], pct["hybrid@3"],
                      pct["bm25@1"], pct["semantic@1"], pct["old"],
                      f"{r['quote'] * r['n']:.0f} of {r['paged'] * r['n']:.0f}"])  # fmt: skip
    save(
        f"questions-{'-'.join(args.books)}-{args.window}-{args.block}"
        + (f"-{args.chars}" if args.chars else "")
        + ("" if args.model == MODEL else f"-{args.model.stem}"),
        topic="recall",
        title=f"Real questions: the answer's chunk recalled ({', '.join(args.books)})",
        target="the answer's chunk paged in ≥ 85 % overall, ≥ 80 % in each book",
        columns=["book", "questions", "`ask` pages it in (hybrid, budget filled)",
                 "hybrid top-1", "hybrid top-3", "bm25 passages top-1", "semantic top-1",
                 "old: BM25 chunk top-1", "quote holds the evidence (of paged)"],
        rows=table,
        models=[args.model, EMBED],
        notes=f"Window {args.window}, block {args.block}: the hand-written questions of "
        "bench/questions/<book>.json, each with its verbatim evidence; the chunks as `ingest` "
        "cuts and indexes them (passages, FTS5, embeddings), recall only — no KV is computed.",
    )  # fmt: skip


if __name__ == "__main__":
    main()
