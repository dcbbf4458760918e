"""Recall in scripts written without spaces: Chinese and Japanese documents (real MiniLM, real
SQLite FTS5), passages split at 。！？, and an index written before this still found after the
recall migration."""

from __future__ import annotations

import sqlite3

import pytest

from cascade_cli.recall import Recall, tables
from cascade_cli.recall.passages import split
from cascade_cli.recall.scripts import searchable, terms
from tests.recall.scripts_text import (
    JA_NEEDLE,
    JA_PARAGRAPHS,
    JA_QUESTION,
    ZH_NEEDLE,
    ZH_PARAGRAPHS,
    ZH_QUESTION,
)

OWNER = "doc:1"


def test_terms_are_bigrams_of_unspaced_runs_and_words_elsewhere() -> None:
    assert terms("仓库门锁 code 4417") == ["仓库", "库门", "门锁", "code", "4417"]
    assert terms("合言葉は") == ["合言", "言葉", "葉は"]
    assert terms("Emma's riddle") == ["emma", "s", "riddle"]
    assert searchable("Plain English stays as it is.") == "Plain English stays as it is."


@pytest.mark.parametrize("paragraphs", [ZH_PARAGRAPHS, JA_PARAGRAPHS])
def test_passages_end_at_cjk_sentence_ends(paragraphs: list[str]) -> None:
    text = "".join(paragraphs)  # no spaces, no line breaks at all
    passages = split(text)
    assert len(passages) >= len(paragraphs)  # not one passage of ~40 sentences
    assert all(len(p.text) <= 90 for p in passages)
    assert "".join(p.text for p in passages) == text
    assert all(p.text.endswith(("。", "」", "？", "！")) for p in passages[:-1])


def test_thai_sentences_split_at_spaces() -> None:
    said = ["วันนี้อากาศดีมาก", "เราไปเที่ยวทะเลกัน", "รหัสประตูคือสี่สี่หนึ่งเจ็ด"]
    assert [p.text for p in split(" ".join(said))] == said  # each Thai letter counts as a word


def _index(recall: Recall, paragraphs: list[str]) -> int:
    """One chunk per paragraph; the needle's chunk."""
    chars = 0
    needle = -1
    for i, para in enumerate(paragraphs):
        recall.index(OWNER, i, para, chars)
        chars += len(para)
        if para.startswith((ZH_NEEDLE, JA_NEEDLE)):
            needle = i
    recall.flush()
    return needle


@pytest.mark.parametrize(
    ("paragraphs", "question"), [(ZH_PARAGRAPHS, ZH_QUESTION), (JA_PARAGRAPHS, JA_QUESTION)]
)
def test_needle_found_by_lexical_and_semantic_recall(
    recall: Recall, paragraphs: list[str], question: str
) -> None:
    needle = _index(recall, paragraphs)
    assert recall.search([OWNER], question, "bm25")[0].chunk == needle
    assert recall.search([OWNER], question, "hybrid")[0].chunk == needle
    # MiniLM-L6 is an English model whose vocabulary holds CJK characters one by one: it ranks
    # the Japanese needle first, the Chinese one only 4th of 10 (README: Recall)
    ranked = [h.chunk for h in recall.search([OWNER], question, "semantic")]
    assert needle in ranked[: 1 if paragraphs is JA_PARAGRAPHS else 5], ranked


def test_an_index_written_before_is_split_and_indexed_again(recall: Recall) -> None:
    """The recall migration (tables.m006): a store whose Chinese chunk was indexed as one token
    run and one long passage finds the needle after it, once; English chunks are untouched."""
    conn = recall.disk.conn
    english = "The best thing to do in Bath is walk. Then rest."
    with recall.disk.transaction() as c:
        cid = tables.corpus_id(c, OWNER, create=True) or 0
        text = "".join(ZH_PARAGRAPHS)
        for chunk, body in enumerate([text, english]):
            c.execute(
                "INSERT INTO recall_passages (corpus, chunk, pidx, start, text) VALUES (?, ?, 0, ?, ?)",
                (cid, chunk, 1000 * chunk, body),
            )  # as the old code split them: no 。 ends, the raw text in FTS5
            c.execute(
                "INSERT INTO recall_fts (rowid, text) VALUES (?, ?)",
                (tables.rowid(cid, chunk, 0), body),
            )
    assert recall.search([OWNER], ZH_QUESTION, "bm25") == []
    with recall.disk.transaction() as c:
        tables.m006_unspaced_scripts(c)
        tables.rebuild_fts(c)  # m007, which follows it
    rows = conn.execute(
        "SELECT chunk, start, text FROM recall_passages ORDER BY chunk, pidx"
    ).fetchall()
    assert len([r for r in rows if r[0] == 0]) >= len(ZH_PARAGRAPHS)
    assert [r[1:] for r in rows if r[0] == 1] == [(1000, english)]
    hit = recall.search([OWNER], ZH_QUESTION, "bm25")[0]
    assert hit.chunk == 0
    (found,) = recall.passage_texts([hit])
    assert ZH_NEEDLE in found
    assert isinstance(conn, sqlite3.Connection)
