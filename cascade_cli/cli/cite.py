"""An answer's sources as a person reads them on a terminal (`ask`, chat's /sources)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def sources_line(sources: Sequence[dict[str, Any]]) -> str:
    """`sources: persuasion.txt lines 120–160 (quoted) · …` ('' without sources)."""
    return "sources: " + " · ".join(map(cited, sources)) if sources else ""


def cited(source: dict[str, Any]) -> str:
    """One source as a person reads it: `persuasion.txt lines 120–160 (quoted)`."""
    where_ = []
    if source["page"] is not None:
        where_.append(f"page {source['page']}")
    if source["section"]:
        where_.append(f"“{source['section']}”")
    if source["lines"] and source["page"] is None:
        first, last = source["lines"]
        where_.append(f"line {first}" if first == last else f"lines {first}–{last}")
    if not where_:
        where_.append("chunk " + ", ".join(str(c) for c in source["chunks"]))
    name = source["path"].rsplit("/", 1)[-1] or source["doc"]
    _, _, rel = source["doc"].partition("/")
    if rel and source["path"].endswith("/" + rel):  # a collection's file: its path in the tree
        name = rel
    return f"{name} {', '.join(where_)}" + (" (quoted)" if source["quoted"] else "")
