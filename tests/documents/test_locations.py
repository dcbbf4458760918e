"""documents.locations: a version's location map in the store's index (catalog.m005_locations),
the span and chunk look-ups citations use, its removal with the version, and a store written
before the map existed opening, upgraded, with its documents intact."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cascade_cli.documents import CHAPTER, HEADING, PAGE, Extracted, Mark, catalog, locations
from cascade_cli.recall import tables as recall_index
from cascade_cli.recall.passages import Passage
from cascade_cli.store import DiskStore

TEXT = "Page one words.\n\nPage two words.\n\nPage three words."
PDF = Extracted(
    TEXT,
    "pdf",
    "0" * 64,
    [
        Mark(0, PAGE, "1"),
        Mark(0, CHAPTER, "Opening"),
        Mark(17, PAGE, "2"),
        Mark(17, HEADING, "Middle", 2),
        Mark(34, PAGE, "3"),
    ],
)


def _doc(conn: sqlite3.Connection, name: str) -> catalog.Document:
    return catalog.create(conn, name=name, path=f"/x/{name}", sha256="0" * 64, scheme="q4",
                          block_size=128, window=512, prefix_tokens=8)  # fmt: skip


def _shown(conn: sqlite3.Connection, doc: catalog.Document, start: int, end: int) -> list[str]:
    return [str(loc) for loc in locations.locate(conn, doc, start, end)]


def test_save_locate_and_chunk_spans(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as store:
        with store.transaction() as conn:
            doc = _doc(conn, "manual")
            locations.save(conn, doc.id, PDF)
            recall_index.add(conn, doc.owner, 0, [Passage(0, "Page one words.")])
            recall_index.add(conn, doc.owner, 1, [Passage(17, "Page two words."),
                                                  Passage(34, "Page three words.")])  # fmt: skip
            recall_index.add(conn, doc.owner, 2, [])
        conn = store.conn
        assert locations.source_format(conn, doc.id) == "pdf"
        assert _shown(conn, doc, 20, 25) == ["page 2", "chapter “Opening”", "heading “Middle”"]
        assert locations.chunk_span(conn, doc, 1) == (17, len(TEXT))
        assert [str(x) for x in locations.locate_chunk(conn, doc, 0)] == [
            "page 1",
            "chapter “Opening”",
        ]
        assert [str(x) for x in locations.locate_chunk(conn, doc, 1)][:2] == ["page 2", "page 3"]
        assert locations.locate_chunk(conn, doc, 2) == []  # whitespace only: no span
        with store.transaction() as conn:  # saving again replaces, never duplicates
            locations.save(conn, doc.id, PDF)
        assert len(locations.load(store.conn, doc.id)[0]) == len(PDF.marks)


def test_lines_of_a_text_version_round_trip(tmp_path: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(1, 2001))
    source = Extracted(text, "code", "0" * 64, [], lines=True)
    with DiskStore.open(tmp_path, "fp") as store:
        with store.transaction() as conn:
            doc = _doc(conn, "code")
            locations.save(conn, doc.id, source)
        marks, lines = locations.load(store.conn, doc.id)
        assert marks == [] and lines == source.line_starts() and len(lines) == 2000
        at = text.index("line 1500\n")
        assert _shown(store.conn, doc, at, at + 20) == ["lines 1500–1501"]


def test_removing_a_version_removes_its_map_and_sweep_drops_orphans(tmp_path: Path) -> None:
    with DiskStore.open(tmp_path, "fp") as store:
        with store.transaction() as conn:
            kept, gone = _doc(conn, "kept"), _doc(conn, "gone")
            for d in (kept, gone):
                locations.save(conn, d.id, PDF)
        catalog.remove(store, gone)
        assert not locations.has_map(store.conn, gone.id)
        assert locations.has_map(store.conn, kept.id)
        with store.transaction() as conn:  # a row deleted behind catalog's back
            conn.execute("DELETE FROM documents WHERE id = ?", (kept.id,))
        catalog.sweep(store)
        assert store.conn.execute("SELECT COUNT(*) FROM document_marks").fetchone() == (0,)
        assert store.conn.execute("SELECT COUNT(*) FROM document_sources").fetchone() == (0,)


def test_a_store_from_before_location_maps_opens_upgraded(tmp_path: Path) -> None:
    """The index as the previous release left it (no m005, no tables): it opens, read-only
    first, and its document is still listed, found and locatable (as nowhere)."""
    with DiskStore.open(tmp_path, "fp") as store, store.transaction() as conn:
        doc = _doc(conn, "old")
        catalog.finish(conn, doc)
        conn.execute("DROP TABLE document_marks")
        conn.execute("DROP TABLE document_sources")
        conn.execute("DELETE FROM _migrations WHERE name = 'm005_locations'")
    with DiskStore.open(tmp_path, "fp", readonly=True) as store:
        (found,) = catalog.documents(store.conn)
        assert found.name == "old" and locations.locate(store.conn, found, 0, 10) == []
    with DiskStore.open(tmp_path, "fp") as store:
        assert catalog.find(store.conn, "old").id == doc.id
        assert not locations.has_map(store.conn, doc.id)
        with store.transaction() as conn:  # a re-ingest gives it one
            locations.save(conn, doc.id, PDF)
        assert _shown(store.conn, doc, 40, 41) == ["page 3", "chapter “Opening”",
                                                   "heading “Middle”"]  # fmt: skip
