"""The one place the session layer reaches recall: the store's shared `Recall` service.

Sessions index each turn's text under their owner (``session:<id>``) and search it together with
any documents given with ``--doc``, with the mode the settings name (``recall``). Only hits that
rank first for a method, or that both methods found, are recalled: a 135M model reads a short,
relevant window better than a full one (see BENCHMARKS.md, chat memory).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from cascade_cli.paging.library import Library
from cascade_cli.recall import Hit, Recall
from cascade_cli.recall import index as recall_index
from cascade_cli.recall.select import RRF_K

#: A fused score this high means a method ranked the chunk first, or both methods found it.
MIN_SCORE = 1.0 / (RRF_K + 1) - 1e-9


def recall_for(lib: Library) -> Recall:
    """The recall a session uses over its own history and the documents it was given."""
    return lib.recall


def strong(hits: Sequence[Hit]) -> list[Hit]:
    """The hits worth a place in the window."""
    return [h for h in hits if h.score >= MIN_SCORE]


def forget_in(conn: sqlite3.Connection, owner: str) -> None:
    """Drop an owner's recall rows inside the caller's transaction (no model needed: `rm`)."""
    recall_index.forget(conn, owner)
