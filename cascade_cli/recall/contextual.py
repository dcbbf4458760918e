"""Passage scores in context: an answer sentence often shares little meaning with the question
while the sentences around it do ("what errand takes Frank to London?" — "…merely to have his
hair cut"), so each passage's semantic score also earns a share of its neighbours'. Lexical
scores stay the passage's own: in context, a chunk that repeats the question's words throughout
outranks the one sentence that answers it (tests/recall: the topic chunk)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from cascade_cli.recall.lexical import PassageHit

#: Share of the mean of its two neighbours' scores a passage adds to its own (0 = off).
#: On 75 hand-written questions about three novels, 0.6 paged the answer's chunk in for 2 more
#: (54 → 56 of 75; across chunk edges — within chunks only gained less, as did 0.4 and 0.8).
CONTEXT = 0.6

IDS = npt.NDArray[np.int32]
F32 = npt.NDArray[np.float32]


def in_context(
    ids: IDS,
    scores: F32,
    group: IDS | None = None,
    rows: npt.NDArray[np.int64] | None = None,
    share: float = CONTEXT,
) -> F32:
    """`scores` of the passages `ids` ((n, 2) chunk/passage rows in document order) plus `share`
    × the mean of each one's neighbours' (the rows before and after it, across a chunk edge but
    not across a gap of missing chunks, nor from one owner's rows to the next: `group`, the
    owner number of each row, when several are stacked, nor between rows not next to each
    other in the stack: `rows`, their stack rows, when only some are scored)."""
    if share <= 0 or len(scores) < 2:
        return scores
    near = np.diff(ids[:, 0]) <= 1
    if group is not None:
        near &= group[1:] == group[:-1]
    if rows is not None:
        near &= np.diff(rows) == 1
    prev = np.zeros_like(scores)
    nxt = np.zeros_like(scores)
    prev[1:] = np.where(near, scores[:-1], 0)
    nxt[:-1] = np.where(near, scores[1:], 0)
    return (scores + share * (prev + nxt) / 2).astype(np.float32)


def top(owners: Sequence[str], group: IDS, ids: IDS, scores: F32, limit: int) -> list[PassageHit]:
    """The `limit` best-scoring passages, best first (row i belongs to owners[group[i]])."""
    k = min(limit, len(scores))
    if k <= 0:
        return []
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [
        PassageHit(owners[int(group[i])], int(ids[i, 0]), int(ids[i, 1]), float(scores[i]))
        for i in best
    ]
