"""`cascade ingest` + `ask --json` on a Chinese and a Japanese document: the needle's chunk is
paged in and its passage quoted (real model, real store, subprocesses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.ingest_helpers import ask_json, ingest
from tests.documents.helpers import doc_id, passage_rows
from tests.recall.scripts_text import (
    JA_PARAGRAPHS,
    JA_QUESTION,
    ZH_PARAGRAPHS,
    ZH_QUESTION,
    document,
)

pytestmark = pytest.mark.subprocess


@pytest.mark.parametrize(
    ("paragraphs", "question", "key"),
    [(ZH_PARAGRAPHS, ZH_QUESTION, "密码是"), (JA_PARAGRAPHS, JA_QUESTION, "青い鳥")],
    ids=["zh", "ja"],
)
def test_ingest_then_ask_pages_the_needle_in(
    home: Path, tmp_path: Path, paragraphs: list[str], question: str, key: str
) -> None:
    src = tmp_path / "doc.txt"
    src.write_text(document(paragraphs), encoding="utf-8")
    ingest(home, src, "d")
    did = doc_id(home, "d")
    rows = passage_rows(home, did)
    chunks = {c for c, *_ in rows}
    needle = {c for c, _, _, text, _ in rows if key in text}
    assert needle and len(chunks) > 4, rows  # sentence passages, many chunks
    data = ask_json(home, "d", question)
    paged = [c["index"] for c in data["chunks"]]
    assert needle & set(paged) and len(paged) < len(chunks), (paged, needle)
    assert any(key in p for p in data["passages"]), data["passages"]
