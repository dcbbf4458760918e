"""`cascade ask` says where its answer came from: the cited line ranges hold the chunks' text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.ingest_helpers import ask_json, ingest
from tests.documents.helpers import NEEDLE, write_text

pytestmark = pytest.mark.subprocess


def test_ask_cites_the_lines_its_chunks_and_quote_come_from(home: Path, tmp_path: Path) -> None:
    src = write_text(tmp_path / "cite.txt", 6000, needle=NEEDLE)
    ingest(home, src, "cite")
    data = ask_json(home, "cite", "What is the pass key?", "--max-tokens", "24")
    lines = src.read_text(encoding="utf-8").splitlines()

    def cited_text(source: dict[str, Any]) -> str:
        first, last = source["lines"]
        assert 1 <= first <= last <= len(lines), source
        return " ".join(" ".join(lines[first - 1 : last]).split())

    assert data["sources"], data
    assert {i for s in data["sources"] for i in s["chunks"]} == {c["index"] for c in data["chunks"]}
    for s in data["sources"]:
        assert (s["doc"], s["page"], s["path"]) == ("cite", None, str(src.resolve()))
        assert s["section"] is None or s["section"] in lines, s  # a heading line of the text
    needle_line = next(n for n, line in enumerate(lines, 1) if "48213" in line)
    assert any(s["lines"][0] <= needle_line <= s["lines"][1] for s in data["sources"])
    quoted = [cited_text(s) for s in data["sources"] if s["quoted"]]
    assert len(quoted) == (1 if data["passages"] else 0)
    for passage in data["passages"]:  # the quote, its cut ends marked with …
        for part in passage.split("…"):
            part = " ".join(part.split())
            assert not part or part in quoted[0], (part, quoted[0])
