"""Choosing which chunks of a document to page into the window for a question."""

from cascade_cli.recall.select import RECALL_MODES, choose

__all__ = ["RECALL_MODES", "choose"]
