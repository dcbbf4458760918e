"""documents.locate.where: the pages, chapter, headings and lines a span of text touches."""

from __future__ import annotations

from cascade_cli.documents import CHAPTER, HEADING, PAGE, Location, Mark, where

MARKS = [
    Mark(0, PAGE, "1"),
    Mark(0, CHAPTER, "Volume One"),
    Mark(0, HEADING, "Volume One", 1),
    Mark(20, HEADING, "Chapter I", 2),
    Mark(50, HEADING, "A letter", 3),
    Mark(100, PAGE, "2"),
    Mark(120, HEADING, "Chapter II", 2),
    Mark(200, PAGE, "3"),
    Mark(200, CHAPTER, "Volume Two"),
    Mark(200, HEADING, "Volume Two", 1),
]


def _shown(start: int, end: int, lines: list[int] | None = None) -> list[str]:
    return [str(loc) for loc in where(MARKS, lines or [], start, end)]


def test_a_span_inside_one_page_names_its_heading_and_those_above() -> None:
    assert _shown(60, 70) == [
        "page 1",
        "chapter “Volume One”",
        "heading “Volume One”",
        "heading “Chapter I”",
        "heading “A letter”",
    ]


def test_a_span_across_pages_and_chapters_names_each() -> None:
    assert _shown(90, 210) == [
        "page 1",
        "page 2",
        "page 3",
        "chapter “Volume One”",
        "chapter “Volume Two”",
        "heading “Volume One”",
        "heading “Chapter I”",
        "heading “A letter”",
        "heading “Chapter II”",
        "heading “Volume Two”",
    ]


def test_a_heading_at_the_same_level_replaces_the_one_before() -> None:
    assert _shown(130, 131)[2:] == ["heading “Volume One”", "heading “Chapter II”"]


def test_an_empty_span_is_its_first_character_and_a_mark_at_the_end_is_outside() -> None:
    assert _shown(100, 100)[:1] == ["page 2"]
    assert _shown(150, 200)[:2] == ["page 2", "chapter “Volume One”"]


def test_lines_and_text_before_any_mark() -> None:
    lines = [0, 10, 20, 30]  # four lines of ten characters
    assert where([], lines, 0, 5) == [Location("lines", "1-1")]
    assert [str(x) for x in where([], lines, 12, 35)] == ["lines 2–4"]
    assert where([Mark(50, PAGE, "9")], [], 0, 10) == []
