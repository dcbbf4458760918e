"""Recall on a real store with the real embedding model (no KV needed: recall reads the index)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from cascade_cli.recall import Recall, fuse, lexical, semantic
from cascade_cli.recall.contextual import in_context
from cascade_cli.recall.focus import focus
from cascade_cli.recall.lexical import PassageHit, query_terms
from cascade_cli.recall.passages import MAX_WORDS, split
from cascade_cli.recall.select import to_quote
from cascade_cli.store import DiskStore
from tests.documents.helpers import SAMPLE
from tests.recall.conftest import Lib

OWNER = "doc:1"
TOPIC = (
    "San Francisco is a city of hills, and its best views are free. In San Francisco the fog "
    "rolls in each evening; the thing founders discuss in San Francisco cafes is startups. "
    "People move to San Francisco for work, the best paid work; San Francisco rents are high, "
    "and one thing every visitor learns is that San Francisco weather surprises them. "
)
ANSWER = (
    "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a "
    "sunny day."
)
SECRET = "The pass key is 48213. Remember it. 48213 is the pass key."


def haystack(n: int, needle: str | None = None, at: int = -1) -> list[str]:
    """n chunk texts cut from the sample text; `needle` written into chunk `at`."""
    text = SAMPLE.read_text(encoding="utf-8")
    chunks = [text[i * 2000 : (i + 1) * 2000] for i in range(n)]
    if needle is not None:
        c = chunks[at]
        cut = c.find(". ", len(c) // 2) + 2
        chunks[at] = c[:cut] + needle + " " + c[cut:]
    return chunks


def index_all(recall: Recall, chunks: list[str]) -> None:
    start = 0
    for i, c in enumerate(chunks):
        recall.index(OWNER, i, c, start)
        start += len(c)
    recall.flush()


def rank_of(recall: Recall, question: str, mode: str, chunk: int, subject: bool = False) -> int:
    ranked = [h.chunk for h in recall.search([OWNER], question, mode, subject=subject)]
    return ranked.index(chunk) if chunk in ranked else 999


def old_chunk_bm25(chunks: list[str], question: str) -> int:
    """Chunk-level BM25 top-1, the recall this replaced."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, idx UNINDEXED)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(c, i) for i, c in enumerate(chunks)])
    match = " OR ".join(f'"{t}"' for t in query_terms(question))
    (top,) = conn.execute("SELECT idx FROM t WHERE t MATCH ? ORDER BY bm25(t)", (match,)).fetchone()
    return int(top)


def test_passages_are_sentence_bounded_and_cover_the_text() -> None:
    text = SAMPLE.read_text(encoding="utf-8")[:6000]
    ps = split(text)
    assert len(ps) > 10
    for p in ps:
        assert text[p.start : p.start + len(p.text)] == p.text
        assert len(p.text.split()) <= MAX_WORDS
    words = [w for p in ps for w in p.text.split()]
    assert words == text.split()  # nothing lost, nothing repeated


def test_a_passage_never_spans_two_speakers() -> None:
    turn = "User: My code is 8585. Keep it.\nAssistant: This is a classic example of a code."
    assert [p.text for p in split(turn)] == [
        "User: My code is 8585. Keep it.",
        "Assistant: This is a classic example of a code.",
    ]
    prose = "He said so. She did not. Then it rained on the hills."
    assert len(split(prose)) == 1  # short sentences of one text still group


def test_answer_beats_chunk_that_repeats_the_topic(recall: Recall) -> None:
    chunks = haystack(8)
    chunks[2] = TOPIC * 3  # mentions the city many times
    chunks[5] = chunks[5][:1000] + " " + ANSWER + " " + chunks[5][1000:]
    question = "What is the best thing to do in San Francisco?"
    assert old_chunk_bm25(chunks, question) == 2  # the old recall picked the wrong chunk
    index_all(recall, chunks)
    for mode in ("bm25", "hybrid"):  # (embeddings alone rate the all-about-the-city chunk close)
        assert rank_of(recall, question, mode, 5) == 0, mode
        # as ask searches: chunks about the subject add weight, the answer still leads
        assert rank_of(recall, question, mode, 5, subject=True) == 0, mode
        assert rank_of(recall, question, mode, 2, subject=True) <= 2, mode
    assert rank_of(recall, question, "semantic", 5) <= 1


def test_paraphrase_recalled_where_bm25_is_not(recall: Recall) -> None:
    chunks = haystack(12, SECRET, at=7)
    for i in (2, 5, 10):  # the question's words, without its meaning
        chunks[i] += (
            " Remember that the number of copies is not limited; remember to keep the number of"
            " each version with its notices, as you were asked."
        )
    index_all(recall, chunks)
    question = "What secret number was I asked to remember?"
    assert rank_of(recall, question, "bm25", 7) > 0
    assert rank_of(recall, question, "semantic", 7) == 0
    assert rank_of(recall, question, "hybrid", 7) <= 1  # each method's top chunk leads


def test_fusion_keeps_exact_word_hits(recall: Recall) -> None:
    chunks = haystack(12, "Form QX-7781 must be filed with the clerk.", at=9)
    index_all(recall, chunks)
    question = "Where does QX-7781 go?"
    assert rank_of(recall, question, "bm25", 9) == 0
    assert rank_of(recall, question, "hybrid", 9) <= 1
    # and in the fusion itself: one method's lone top hit leads chunks both rank middling
    lex = [PassageHit(OWNER, c, 0, 1.0) for c in (9, 1, 2, 3)]
    sem = [PassageHit(OWNER, c, 0, 1.0) for c in (4, 1, 2, 3, 5, 6, 7, 8, 9)]
    order = [h.chunk for h in fuse({"bm25": lex, "semantic": sem})]
    assert set(order[:2]) == {9, 4} and order[2] == 1


def test_reindex_replaces_and_forget_drops(recall: Recall) -> None:
    chunks = haystack(6)
    index_all(recall, chunks)
    question = "What secret number was I asked to remember?"
    assert rank_of(recall, question, "hybrid", 3) > 0
    recall.index(OWNER, 3, chunks[3] + " " + SECRET)  # a chunk's text changes: re-indexed
    assert rank_of(recall, question, "hybrid", 3) == 0
    assert recall.indexed(OWNER) == set(range(6)) and recall.indexed_counts([OWNER]) == {OWNER: 6}
    recall.drop_from(OWNER, 4)
    assert recall.indexed(OWNER) == set(range(4)) and recall.indexed_counts([OWNER]) == {OWNER: 4}
    recall.forget(OWNER)
    assert recall.indexed(OWNER) == set() and recall.search([OWNER], question) == []
    assert recall.indexed_counts([OWNER]) == {}


def test_scores_compare_across_documents(recall: Recall) -> None:
    """One FTS5 table for the store: BM25 weighs words by the whole store, so the same passage
    scores the same in any document, and a search over many documents (one query, as for a
    collection's files) ranks them as a search over a few (a query per document) does."""
    owners = [f"doc:{i}" for i in range(1, 13)]  # more than lexical.FEW
    assert len(owners) > lexical.FEW
    for n, owner in enumerate(owners):
        for i, c in enumerate(haystack(4)):
            recall.index(owner, i, c + (" " + SECRET if (n, i) == (6, 2) else ""))
    conn = recall.disk.conn
    many, _ = lexical.search(conn, owners, "What is the pass key?", 64)
    few, _ = lexical.search(conn, ["doc:3", "doc:7"], "What is the pass key?", 64)
    assert (many[0].owner, many[0].chunk) == ("doc:7", 2) and few[0] == many[0]
    common, _ = lexical.search(conn, owners, "Who is Sir Walter Elliot of Kellynch Hall?", 64)
    top = [h for h in common if (h.chunk, h.pidx) == (common[0].chunk, common[0].pidx)]
    assert len({h.owner for h in top}) > lexical.FEW  # the same passage in each document …
    assert max(h.score for h in top) == pytest.approx(min(h.score for h in top))  # … scores alike
    scoped, about = lexical.search(
        conn, owners, "What is the pass key?", 64, subject=True, scope={"doc:7": {0, 1}}
    )
    assert all((h.owner, h.chunk) != ("doc:7", 2) for h in scoped + about)  # out of its scope
    assert recall.indexed_counts(owners) == dict.fromkeys(owners, 4)


def test_a_search_over_many_owners_ranks_their_vectors_together(recall: Recall) -> None:
    """Semantic recall over several documents ranks one stack of their vectors: the same hits
    and scores as each document searched alone, merged; a change to one document is seen."""
    owners = ["doc:1", "doc:2", "doc:3"]
    for n, owner in enumerate(owners):
        for i, c in enumerate(haystack(3)):
            recall.index(owner, i, c if n != 1 or i != 1 else c + " " + SECRET)
    recall.flush()
    question = "What secret number was I asked to remember?"
    emb = recall.embedder()
    assert emb is not None
    qvec = emb.embed([question])[0]
    conn = recall.disk.conn
    joint = semantic.search(conn, recall.cache, owners, qvec, 1000)  # every passage
    alone = [h for o in owners for h in semantic.search(conn, recall.cache, [o], qvec, 1000)]
    assert len(joint) == len(alone) > 20

    def key(h: PassageHit) -> tuple[float, str, int, int]:
        return (-round(h.score, 5), h.owner, h.chunk, h.pidx)

    assert sorted(map(key, joint)) == sorted(map(key, alone))
    assert [h.score for h in joint] == sorted((h.score for h in joint), reverse=True)
    assert (joint[0].owner, joint[0].chunk) == ("doc:2", 1)
    recall.index("doc:3", 2, "Nothing here. " + SECRET)  # another document changes
    recall.flush()
    again = semantic.search(conn, recall.cache, owners, qvec, 10)
    assert ("doc:3", 2) in {(h.owner, h.chunk) for h in again[:2]}


def test_missing_embeddings_are_filled_at_search(tmp_path: Path, embed_model_path: Path) -> None:
    """Passages indexed without an embedding model (or by a killed ingest) are embedded when a
    semantic search needs them."""
    with DiskStore.open(tmp_path / "s", "recall-test") as disk:
        plain = Recall(Lib(disk, None))
        index_all(plain, haystack(6, SECRET, at=4))
        plain.close()
        full = Recall(Lib(disk, embed_model_path))
        assert full.pending([OWNER]) > 0
        question = "What secret number was I asked to remember?"
        assert rank_of(full, question, "semantic", 4) == 0
        assert full.pending([OWNER]) == 0
        full.close()


def test_recreated_corpus_is_not_served_from_the_cache(recall: Recall) -> None:
    """A removed document's owner string can come back (SQLite reuses the largest id): its new
    vectors are searched, not the cached ones of the removed version."""
    question = "What secret number was I asked to remember?"
    index_all(recall, haystack(6, SECRET, at=2))
    assert rank_of(recall, question, "semantic", 2) == 0
    from cascade_cli.recall import tables

    before = tables.generation(recall.disk.conn, OWNER)
    recall.disk.conn.execute("BEGIN")
    tables.forget(recall.disk.conn, OWNER)  # as a document removal does, beside the cache
    recall.disk.conn.execute("COMMIT")
    index_all(recall, haystack(6, SECRET, at=4))
    after = tables.generation(recall.disk.conn, OWNER)
    assert before is not None and after is not None
    assert before[0] != after[0] and after[0] != "None"  # each corpus its own uid
    assert rank_of(recall, question, "semantic", 4) == 0
    # a store whose corpora were made without one (before the fix) gets them on migration
    conn = recall.disk.conn
    conn.execute("BEGIN")
    conn.execute("UPDATE recall_corpora SET uid = NULL")
    tables.m004_corpus_uid_filled(conn)
    conn.execute("COMMIT")
    uids = [u for (u,) in conn.execute("SELECT uid FROM recall_corpora")]
    assert uids and all(u for u in uids) and tables.generation(conn, OWNER) != after


def test_semantic_scores_in_context() -> None:
    """A passage earns a share of its neighbours' scores, across a chunk edge but not across
    missing chunks."""
    ids = np.array([(0, 0), (0, 1), (1, 0), (3, 0)], dtype=np.int32)
    scores = np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32)
    got = in_context(ids, scores, share=0.6)
    assert got.tolist() == pytest.approx([0.3, 1.0, 0.3, 0.0])
    assert in_context(ids, scores, share=0.0) is scores


def test_a_sentence_cut_by_a_chunk_edge_is_quoted_whole(recall: Recall) -> None:
    first = "Rain fell all day. The best thing to do in Bath is"
    second = " eat a sandwich in the park. Then we went home."
    recall.index(OWNER, 0, first, 0)
    recall.index(OWNER, 1, second, len(first))
    hits = recall.search([OWNER], "What is the best thing to do in Bath?", "bm25")
    assert hits[0].chunk == 0
    assert recall.passage_texts(hits[:1]) == [
        "Rain fell all day. The best thing to do in Bath is eat a sandwich in the park. Then"
        " we went home."
    ]
    # a conversation's turns are never joined, even where the offsets would allow it
    recall.index("session:1", 0, "User: my code is", 0)
    recall.index("session:1", 1, "  Assistant: noted.", 0)
    turn = recall.search(["session:1"], "code", "bm25")
    assert recall.passage_texts(turn[:1]) == ["User: my code is"]


def test_a_document_quote_reads_on_into_the_passage_after_it(recall: Recall) -> None:
    """The sentence after the one that shares a question's words often answers it: a
    document's quote takes the passage after its best one, across a chunk edge too where the
    window holds the next chunk, and no more; a conversation's quote stays its own passage
    (the next may be another speaker's)."""
    asks = (
        "Frank Churchill rode off to London one fine morning, and everybody at Hartfield "
        "wondered what errand could possibly take a young man there."
    )
    answer = "He had gone merely to have his hair cut, which Emma thought a foolish reason."
    after = "The weather turned cold that week and nobody walked to Highbury any more."
    question = "What errand took Frank to London?"
    for owner, chunks in (
        ("doc:1", [f"{asks} {answer} {after}"]),
        ("doc:2", [f"{asks} ", f"{answer} {after}"]),  # the answer opens the next chunk
    ):
        at = 0
        for i, text in enumerate(chunks):
            recall.index(owner, i, text, at)
            at += len(text)
        (best, *_) = recall.search([owner], question, "bm25")
        assert recall.passage_texts([best]) == [asks]  # the best passage does not say it
        quote = recall.quote_text(best, question, 48)
        assert quote == f"{asks} {answer}", quote
        assert focus(f"{asks} {answer}", question, 12) == recall.quote_text(best, question, 12)
        # from the next chunk only where the window holds it (the quote's cells are copied)
        alone = recall.quote_text(best, question, 48, held={0})
        assert alone == (quote if len(chunks) == 1 else asks)
        assert recall.quote_text(best, question, 48, held={0, 1}) == quote
    recall.index("session:1", 0, f"User: {asks}", 0)
    recall.index("session:1", 1, f"Assistant: {answer}", 0)
    (turn, *_) = recall.search(["session:1"], question, "bm25")
    assert recall.quote_text(turn, question, 48) == f"User: {asks}"


def test_a_document_quote_reads_back_into_the_passage_before_it_in_its_chunk(
    recall: Recall,
) -> None:
    """In a manual the sentence before the one that shares a question's words often names what
    it asks for (an option, then what it is for): a document's quote takes the passage before
    its best one where that passage is in the same chunk (a quote is copied from its chunk's
    cells), never from the chunk before."""
    before = (
        "The --unbuffered option buffers both input and output of the editor as minimally "
        "as it is practical to do."
    )
    best = "This is particularly useful when the input is coming from tail -f and you watch it."
    after = "The --null-data option treats the input as lines that each end with a zero byte."
    question = "What helps when piping tail -f?"
    recall.index("doc:1", 0, f"{before} {best} {after}", 0)
    recall.index("doc:2", 0, f"{before} ", 0)
    recall.index("doc:2", 1, f"{best} {after}", len(before) + 1)
    for owner, quote in (
        ("doc:1", f"{before} {best} {after}"),
        ("doc:2", f"{best} {after}"),  # the best passage opens its chunk
    ):
        (hit, *_) = recall.search([owner], question, "bm25")
        assert recall.passage_texts([hit]) == [best]
        assert recall.quote_text(hit, question, 64) == quote


def test_a_quote_reads_the_passage_after_to_its_sentence_end_across_a_chunk_edge(
    recall: Recall,
) -> None:
    """The passage after the best one may be its chunk's last, its sentence cut by the chunk
    edge ("'Forty,' replied Sir Basil, 'fort" | "y, and no more.'"): the quote reads on into
    the next chunk where the window holds it, and stops at the edge where it does not."""
    best = "Sir Basil was asked how old the admiral with the weathered face really was."
    cut, rest = "He looked at him and replied that the admiral was", "forty and no more."
    chunk0 = f"{best} {cut} "
    recall.index("doc:1", 0, chunk0, 0)
    recall.index(
        "doc:1", 1, f"{rest} Picture to yourselves my amazement that evening.", len(chunk0)
    )
    question = "How old was the admiral with the weathered face?"
    (hit, *_) = recall.search(["doc:1"], question, "bm25")
    assert (hit.chunk, recall.passage_texts([hit])) == (0, [best])
    assert f"{cut} {rest}" in recall.quote_text(hit, question, 64, {0, 1})
    assert recall.quote_text(hit, question, 64, {0}).endswith(cut)


def test_quote_policies() -> None:
    """'agree' quotes the best hit only when every method ranked it first; 'tops' quotes each
    method's first."""
    lex = [PassageHit(OWNER, c, 0, 1.0) for c in (3, 1, 2)]
    same = fuse({"bm25": lex, "semantic": [PassageHit(OWNER, c, 0, 1.0) for c in (3, 2)]})
    split_ = fuse({"bm25": lex, "semantic": [PassageHit(OWNER, c, 0, 1.0) for c in (2, 3)]})
    assert [h.chunk for h in to_quote(same, "agree", 2)] == [3]
    assert [h.chunk for h in to_quote(same, "tops", 2)] == [3]
    assert to_quote(split_, "agree", 2) == []
    assert {h.chunk for h in to_quote(split_, "tops", 2)} == {2, 3}
    assert to_quote(same, "off", 2) == []


def test_a_subject_ranking_adds_weight_but_never_leads() -> None:
    lex = [PassageHit(OWNER, c, 0, 1.0) for c in (9, 1, 2)]
    sem = [PassageHit(OWNER, c, 0, 1.0) for c in (4, 1, 2)]
    subject = [PassageHit(OWNER, c, 3, 1.0) for c in (2, 7)]
    plain = [h.chunk for h in fuse({"bm25": lex, "semantic": sem})]
    fused = fuse({"bm25": lex, "subject": subject, "semantic": sem})
    order = [h.chunk for h in fused]
    assert set(order[:2]) == set(plain[:2]) == {9, 4}  # each method's top still leads
    assert order.index(2) < order.index(1) and plain.index(1) < plain.index(2)  # reordered
    assert 7 in order and next(h for h in fused if h.chunk == 7).tops == ()
    assert next(h for h in fused if h.chunk == 2).passage == 0  # a leading method's passage
