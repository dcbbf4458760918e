"""Recall over a 10,000-file collection: the time `ask` spends choosing chunks, as a collection
grows past what one FTS table per file could serve.

The collection is real code and text: the files the ingest walker takes under Debian's
/usr/lib/python3 (its Python packages), then /usr/share/doc (packages' documentation), the
first 10,000 that extract, in walk order. It is built without model prefill: each file is
extracted (documents.extract), cut into 512-token chunks by the ingest's own chunker with the
model's tokenizer, and its chunks' passages indexed by recall.tables in one catalog commit per
file, as ingest does — only the KV states are not computed (recall never reads them). Passage embeddings are random unit vectors written as
the embedder would (f16): cosine's cost does not depend on the values; the question itself is
embedded by MiniLM-L6 in the timed path. So the semantic ranking is noise here and only its cost
is measured; answer quality over collections is bench/collection.py's.

Timed, per question (written before any timing was looked at), in one process:
- `recall` — Recall.search over the 10,000 owners (BM25 with the subject ranking, and hybrid);
- `plan` — what `ask` runs before it restores chunks: the collection's members from the catalog,
  the indexed-check (ensure_indexed), the sources and the planner's layout (window.ask.plan).
The first hybrid question of a process needs the collection's vector stack: made from the
index (every vector read) and kept in the store, or, in every later process, the kept stack
mapped — both timed apart.

    python bench/recall_scale.py [--files 10000] [--rebuild]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import save  # noqa: E402
from cascade_cli.config import resolve  # noqa: E402
from cascade_cli.documents import (  # noqa: E402
    catalog,
    collection,
    extract,
    locations,
)
from cascade_cli.documents.frame import frame  # noqa: E402
from cascade_cli.documents.ingest import chunks  # noqa: E402
from cascade_cli.documents.library import Library  # noqa: E402
from cascade_cli.documents.reindex import ensure_indexed  # noqa: E402
from cascade_cli.documents.tree import walk  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.errors import CascadeError  # noqa: E402
from cascade_cli.recall import tables, vectors  # noqa: E402
from cascade_cli.recall.passages import Passage, split  # noqa: E402
from cascade_cli.recall.semantic import VectorCache  # noqa: E402
from cascade_cli.window.ask import plan  # noqa: E402

ROOTS = [Path("/usr/lib/python3"), Path("/usr/share/doc")]
WORK = ROOT / "bench" / ".work" / "recall-scale"
MODELS = ROOT / ".cascade-test" / "models"
MODEL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBED = MODELS / "all-MiniLM-L6-v2.f16.gguf"
NAME = "pylibs"
DIM = 384
#: Questions a person might ask of a folder of Python packages (written before any timing).
QUESTIONS = [
    "Where is the HTTP connection pool that retries failed requests?",
    "How does the YAML loader construct Python objects from tags?",
    "Which module parses command-line options and prints the usage message?",
    "Where are SSL certificates verified against the hostname?",
    "How is a wheel file unpacked and installed?",
    "Which function computes the Levenshtein edit distance between strings?",
    "Where is the cache of compiled regular expressions kept?",
    "How does the package resolve dependency version conflicts?",
    "Which class reads and writes INI configuration files?",
    "Where is the JSON decoder that handles NaN and Infinity?",
    "How are cookies stored and sent back to the server?",
    "Which module formats tracebacks with colour in the terminal?",
    "Where does the markdown renderer turn tables into HTML?",
    "How is a deprecation warning raised for an old keyword argument?",
    "Which code detects the character encoding of a byte string?",
    "Where are timezone offsets parsed from an ISO 8601 timestamp?",
    "How does the test runner collect fixtures from conftest files?",
    "Which function quotes a string for safe use in a shell command?",
    "Where is the progress bar drawn and refreshed?",
    "How are environment variable markers evaluated in requirement strings?",
]


def files() -> list[tuple[Path, str]]:
    """The files the walker finds under ROOTS, in order (relative paths prefixed with the
    root's folder name)."""
    return [(path, f"{root.name}/{rel}") for root in ROOTS for path, rel in walk(root).files]


def build(
    ctx: Context, lib: Library, picked: list[tuple[Path, str]], limit: int
) -> dict[str, float]:
    """The collection's catalog rows and recall index, without prefill (see the docstring): the
    first `limit` files that extract (as `ingest DIR` would, the others are counted as failed)."""
    cfg = lib.settings
    rng = np.random.default_rng(7)
    prefix = len(frame(ctx.model).prefix)
    t0 = time.perf_counter()
    failed = 0
    with lib.disk.transaction() as conn:
        conn.execute(
            "INSERT INTO collections (name, root, created, updated) VALUES (?, ?, ?, ?)",
            (NAME, str(ROOTS[0]), time.time(), time.time()),
        )
    n = 0
    for path, rel in picked:
        if n >= limit:
            break
        try:
            source = extract(path)
        except CascadeError as exc:
            failed += 1
            if failed <= 3:
                print(f"  {rel}: {exc.one_line()}", flush=True)
            continue
        n += 1
        name = collection.member(NAME, rel)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        with lib.disk.transaction() as conn:
            conn.execute(
                "INSERT INTO collection_files (name, collection) VALUES (?, ?)", (name, NAME)
            )
            doc = catalog.create(
                conn, name=name, path=str(path), sha256=sha, scheme=cfg.compression,
                block_size=cfg.block_size, window=cfg.gpu_cache_size, prefix_tokens=prefix,
            )  # fmt: skip
            locations.save(conn, doc.id, source)
            tokens = chars = idx = 0
            for idx, (toks, consumed) in enumerate(chunks(ctx, source.text, cfg.block_size)):
                text = ctx.model.detokenize(toks)
                found = [Passage(chars + p.start, p.text) for p in split(text)]
                tables.add(conn, doc.owner, idx, found)
                tokens, chars = tokens + len(toks), chars + len(text)
                del consumed
            rows = vectors.unembedded(conn, [doc.owner])
            vecs = rng.standard_normal((len(rows), DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            vectors.set_vectors(conn, rows, vecs)
            catalog.progress(conn, doc, tokens, idx + 1, len(source.text))
            catalog.finish(conn, doc)
        if n % 500 == 0:
            print(f"  {n} files, {time.perf_counter() - t0:.0f} s", flush=True)
    return {"build_s": time.perf_counter() - t0, "failed": failed}


def sizes(lib: Library) -> dict[str, int]:
    conn = lib.disk.conn
    one = lambda sql: int(conn.execute(sql).fetchone()[0])  # noqa: E731
    out = {
        "documents": one("SELECT COUNT(*) FROM documents"),
        "chunks": one("SELECT COALESCE(SUM(chunks), 0) FROM documents"),
        "tokens": one("SELECT COALESCE(SUM(tokens), 0) FROM documents"),
        "passages": one("SELECT COUNT(*) FROM recall_passages"),
        "index_bytes": sum(
            f.stat().st_size for f in Path(lib.settings.disk_cache_path).glob("index.sqlite*")
        ),
    }
    try:
        out["fts_bytes"] = one("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'recall_fts%'")
        out["passage_bytes"] = one("SELECT SUM(pgsize) FROM dbstat WHERE name = 'recall_passages'")
    except Exception:  # dbstat is optional in SQLite builds
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rebuild", action="store_true", help="build the collection again")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_verbose(False)
    store = WORK / f"store-{args.files}"
    fresh = args.rebuild or not (store / "index.sqlite").exists()
    if args.rebuild:
        shutil.rmtree(store, ignore_errors=True)
    cfg = resolve(
        {"disk_cache_path": str(store), "gpu_cache_size": 4096, "block_size": 512,
         "threads": args.threads},
        config_file=None,
    )  # fmt: skip
    picked = files()
    with (
        Context(Model(MODEL), 4096 + 512, 3, 512, args.threads, "off") as ctx,
        Library(cfg, ctx, embed_path=EMBED) as lib,
    ):
        built = build(ctx, lib, picked, args.files) if fresh else {}
        size = sizes(lib)
        print(size, built, flush=True)
        owners_of = lambda: [d.owner for d in collection.documents_of(lib.disk.conn, NAME)]  # noqa: E731
        owners = owners_of()
        lib.recall.embedder()  # load MiniLM before any timing
        home = lib.recall.cache.home
        assert home is not None
        shutil.rmtree(home, ignore_errors=True)  # the stack made from the index, then kept
        t0 = time.perf_counter()
        lib.recall.search(owners, QUESTIONS[0], "hybrid", subject=True)
        cold = time.perf_counter() - t0
        lib.recall.cache = VectorCache(home=home)  # as a new process: the kept stack mapped
        t0 = time.perf_counter()
        lib.recall.search(owners, QUESTIONS[0], "hybrid", subject=True)
        mapped = time.perf_counter() - t0
        times: dict[str, list[float]] = {"bm25": [], "hybrid": [], "plan": []}
        for q in QUESTIONS:
            for mode in ("bm25", "hybrid"):
                t0 = time.perf_counter()
                lib.recall.search(owners, q, mode, subject=True)
                times[mode].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with lib.disk.lock:
                docs = collection.documents_of(lib.disk.conn, NAME)
            ensure_indexed(ctx, lib, docs)
            plan(ctx, lib, docs, q, 4096, "hybrid", 0, 256)
            times["plan"].append(time.perf_counter() - t0)
    rows = []
    for what, label in (("bm25", "recall, BM25 + subject"), ("hybrid", "recall, hybrid (BM25 + MiniLM)"),
                        ("plan", "ask's planning: members, indexed check, sources, layout")):  # fmt: skip
        ts = sorted(times[what])
        rows.append([label, f"{statistics.median(ts) * 1000:.0f}", f"{ts[int(0.9 * (len(ts) - 1))] * 1000:.0f}",
                     f"{max(ts) * 1000:.0f}"])  # fmt: skip
    rows.append(["first hybrid recall, vectors read from the index (stack made, kept)",
                 f"{cold * 1000:.0f}", "", ""])  # fmt: skip
    rows.append(["first hybrid recall of a new process (the kept stack mapped)",
                 f"{mapped * 1000:.0f}", "", ""])  # fmt: skip
    mb = lambda b: f"{b / 1e6:.0f} MB"  # noqa: E731
    save(
        f"recall-scale-{args.files}",
        topic="recall",
        title=f"Recall over a {size['documents']:,}-file collection",
        target="median ≤ 100 ms",
        columns=["step", "median ms", "p90 ms", "max ms"],
        rows=rows,
        models=[MODEL, EMBED],
        notes=(
            f"{size['documents']:,} files ({size['tokens']:,} tokens, {size['chunks']:,} chunks, "
            f"{size['passages']:,} passages): /usr/lib/python3 then /usr/share/doc. "
            f"Store index {mb(size['index_bytes'])}"
            + (
                f" (FTS5 {mb(size['fts_bytes'])}, passages with f16 vectors "
                f"{mb(size['passage_bytes'])})"
                if "fts_bytes" in size
                else ""
            )
            + f"; {len(QUESTIONS)} questions, {args.threads} threads, one process. Built without "
            "prefill (bench/recall_scale.py's docstring): catalog rows, chunking with the "
            "model's tokenizer and recall's index as ingest writes them, random unit passage "
            "vectors — the semantic ranking is only timed here."
            + (f" Build {built['build_s']:.0f} s." if built else "")
        ),
        extra={"sizes": size, "times_s": times, "cold_s": cold, "mapped_s": mapped, **built},
    )


if __name__ == "__main__":
    os.environ.setdefault("CASCADE_THREADS", "2")
    main()
