"""Recall variants tried and not adopted (stop 29): bench/questions.py with one more ranking.

python bench/recall_variants.py answer-type --weight W [BOOK ...]
python bench/recall_variants.py chunk-meaning --weight W --k K [BOOK ...]

Each adds a ranking to the fusion at `--weight` as a SUPPORT ranking (adds weight, never leads;
recall/select.py), then runs bench/questions.py on the books (its cached indexes):
- answer-type: for a question asking for a number or an amount ("how many/much/old/long/far…",
  "what age/year/sum…") or a time ("when", "what day/month…"), the passages of the BM25 and the
  semantic rankings (interleaved by rank) that hold a number word or a time word, in that order
  (classic factoid QA's expected answer type);
- chunk-meaning: every chunk by the mean of its `--k` best in-context semantic passage scores
  (a semantic counterpart of the BM25 `subject` ranking).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.questions as questions  # noqa: E402
from cascade_cli.recall import index, select, service  # noqa: E402
from cascade_cli.recall.context import in_context  # noqa: E402
from cascade_cli.recall.lexical import PassageHit  # noqa: E402

NUMBER_Q = re.compile(
    r"\b(how (many|much|old|long|far|soon|near|often)|how large a|"
    r"what (age|year|sum|income|number|amount|fortune|price))\b",
    re.I,
)
TIME_Q = re.compile(r"\b(when|what (day|month|time|hour|season))\b", re.I)
NUMBER_P = re.compile(
    r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen"
    r"|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy"
    r"|eighty|ninety|hundred|thousand|half|dozen|twice|thrice|first|second|third|fourth|fifth"
    r"|sixth|seventh|eighth|ninth|tenth|score)\b",
    re.I,
)
TIME_P = re.compile(
    r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march"
    r"|april|may|june|july|august|september|october|november|december|morning|evening|night"
    r"|noon|weeks?|days?|months?|years?|hours?|o'clock|yesterday|tomorrow|christmas|easter"
    r"|michaelmas|spring|summer|autumn|winter)\b",
    re.I,
)


def answer_type(
    recall: Any, query: str, rankings: Mapping[str, Sequence[PassageHit]]
) -> list[PassageHit]:
    pattern = NUMBER_P if NUMBER_Q.search(query) else TIME_P if TIME_Q.search(query) else None
    if pattern is None or "bm25" not in rankings or "semantic" not in rankings:
        return []
    order = [
        lst[r]
        for r in range(64)
        for lst in (rankings["bm25"], rankings["semantic"])
        if r < len(lst)
    ]
    seen: set[tuple[int, int]] = set()
    out: list[PassageHit] = []
    with recall.disk.lock:
        for h in order:
            if (h.chunk, h.pidx) in seen:
                continue
            seen.add((h.chunk, h.pidx))
            row = index.passage(recall.disk.conn, h.owner, h.chunk, h.pidx)
            if row is not None and pattern.search(row.text):
                out.append(h)
    return out


def chunk_meaning(recall: Any, query: str, k: int) -> list[PassageHit]:
    emb = recall.embedder()
    qvec = emb.embed([query])[0]
    with recall.disk.lock:
        ids, mat = recall.cache.get(recall.disk.conn, "doc:1")
    scores = in_context(ids, mat @ qvec)
    out = []
    for c in np.unique(ids[:, 0]):
        rows = np.where(ids[:, 0] == c)[0]
        order = np.argsort(-scores[rows])
        mean = float(scores[rows][order[:k]].mean())
        out.append(PassageHit("doc:1", int(c), int(ids[rows[order[0]], 1]), mean))
    return sorted(out, key=lambda h: -h.score)[:64]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("variant", choices=["answer-type", "chunk-meaning"])
    ap.add_argument(
        "books", nargs="*", default=["prideprejudice", "persuasion", "northangerabbey", "emma"]
    )
    ap.add_argument("--weight", type=float, default=0.5)
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_intermixed_args()
    state: dict[str, Any] = {}
    search, fuse = service.Recall.search, service.fuse

    def searching(
        self: Any, owners: Any, query: str, mode: str = "hybrid", *a: Any, **kw: Any
    ) -> Any:
        state.update(recall=self, query=query, mode=mode)
        return search(self, owners, query, mode, *a, **kw)

    def fusing(rankings: Mapping[str, Sequence[PassageHit]], k: int = select.RRF_K) -> Any:
        if args.weight > 0 and state["mode"] == "hybrid" and "semantic" in rankings:
            extra = (
                answer_type(state["recall"], state["query"], rankings)
                if args.variant == "answer-type"
                else chunk_meaning(state["recall"], state["query"], args.k)
            )
            rankings = {**rankings, "variant": extra}
        return fuse(rankings, k)

    select.SUPPORT["variant"] = args.weight
    service.Recall.search = searching  # type: ignore[method-assign]
    service.fuse = fusing
    sys.argv = ["questions.py", *args.books]
    questions.main()


if __name__ == "__main__":
    main()
