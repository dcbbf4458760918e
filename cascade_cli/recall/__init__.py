"""Choosing which chunks to page into the window: passage-level BM25 (one FTS5 table for the store), sentence
embeddings, reciprocal-rank fusion, and filling a window's budget with the hits."""

from cascade_cli.recall.select import Hit, fill, fuse
from cascade_cli.recall.service import MODES, Recall

__all__ = ["MODES", "Hit", "Recall", "fill", "fuse"]
