"""documents.formats: which reader a file gets, and the line-based readers (plain text,
Markdown, source code) with their headings and line starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascade_cli.documents import HEADING, Limits, extract, where
from cascade_cli.documents.wrap import unwrap
from cascade_cli.errors import InputError
from tests.documents.makers import austen, pdf_pages, write_zip


def _heads(ex) -> list[tuple[str, int]]:
    return [(m.label, m.level) for m in ex.marks if m.kind == HEADING]


def test_plain_text_keeps_its_lines_and_guessed_headings(tmp_path: Path) -> None:
    body = austen(3000)
    text = f"PERSUASION\n\nby Jane Austen\n\n{body}\nCHAPTER II.\n\nThe end.\n"  # body: Chapter 1
    src = tmp_path / "book.txt"
    src.write_text(text, encoding="utf-8")
    ex = extract(src)
    assert (ex.format, ex.text, ex.lines) == ("text", unwrap(text), True)
    assert len(ex.text) == len(text) and "who united these gifts" in ex.text  # joined
    assert _heads(ex) == [("PERSUASION", 1), ("Chapter 1", 1), ("CHAPTER II.", 1)]
    for m in ex.marks:
        assert ex.text[m.start :].startswith(m.label)
    starts = ex.line_starts()
    assert len(starts) == text.count("\n") and starts[0] == 0
    assert all(text[s - 1] == "\n" for s in starts[1:])
    # "The end." is on the last line, under CHAPTER II.
    at = text.index("The end.")
    located = [str(loc) for loc in where(ex.marks, starts, at, at + 8)]
    assert located == ["heading “CHAPTER II.”", f"line {len(starts)}"]


def test_markdown_headings_atx_and_setext_not_in_code_fences(tmp_path: Path) -> None:
    text = (
        "Title\n=====\n\nIntro.\n\n## Install ##\n\nRun it:\n\n```sh\n# not a heading\n```\n\n"
        "Usage\n-----\n\n- a list item\n---\n\n### Flags\n\n#\n\nend\n"
    )
    src = tmp_path / "guide.md"
    src.write_text(text, encoding="utf-8")
    ex = extract(src)
    assert ex.format == "markdown" and ex.text == text
    assert _heads(ex) == [("Title", 1), ("Install", 2), ("Usage", 2), ("Flags", 3)]
    for m in ex.marks:
        assert text[m.start :].startswith(m.label)
    at = text.index("end\n")
    assert [str(x) for x in where(ex.marks, ex.line_starts(), at, at + 2)][:3] == [
        "heading “Title”",
        "heading “Usage”",
        "heading “Flags”",
    ]


def test_source_code_is_cited_by_lines_without_headings(tmp_path: Path) -> None:
    code = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(40))
    src = tmp_path / "mod.py"
    src.write_text(code, encoding="utf-8")
    ex = extract(src)
    assert (ex.format, ex.text, ex.marks) == ("code", code, [])
    at = code.index("def f10")
    assert [str(x) for x in where(ex.marks, ex.line_starts(), at, at + 30)] == ["lines 31–32"]


@pytest.mark.subprocess  # the PDF reader's child process
def test_sniffing_by_content_beats_the_name(tmp_path: Path) -> None:
    (tmp_path / "manual.txt").write_bytes(pdf_pages(["Hidden PDF"]))
    assert extract(tmp_path / "manual.txt").format == "pdf"


@pytest.mark.parametrize(
    ("name", "data", "fragment"),
    [
        ("x.pdf", b"just some text\n", "is not a PDF (it has no %PDF- header)"),
        ("x.epub", b"<html>not a zip</html>", "is not an EPUB (it is not a zip archive)"),
        ("x.docx", b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(40), "contains NUL bytes"),
        ("x.txt", "caf\u00e9".encode("latin-1"), "is not valid utf-8 (byte 3)"),
        ("x.md", b"  \n\n\t\n", "is empty"),
    ],
)
def test_unreadable_files_are_one_input_error(
    tmp_path: Path, name: str, data: bytes, fragment: str
) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError) as exc:
        extract(tmp_path / name)
    line = exc.value.one_line()
    assert fragment in line and str(tmp_path / name) in line and "\n" not in line


def test_text_past_the_character_cap_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("word " * 1000, encoding="utf-8")
    with pytest.raises(InputError, match="more than 0 Mi characters"):
        extract(tmp_path / "big.txt", limits=Limits(max_chars=100))


def test_a_zip_that_is_not_an_epub_by_name_is_read_as_text_and_refused(tmp_path: Path) -> None:
    write_zip(tmp_path / "a.zip", {"a.txt": b"hello"})
    with pytest.raises(InputError, match=r"NUL bytes|not valid utf-8"):
        extract(tmp_path / "a.zip")


def test_a_hard_wrapped_text_is_joined_into_paragraphs_one_character_for_one() -> None:
    """What a Gutenberg text wraps at ~70 columns reads as the same book's PDF or EPUB does;
    a verse, a list, an indented block, a paragraph's end keep their breaks."""
    prose = austen(4000)
    verse = "\n".join(["Oh! the days of old,", "Oh! the nights so cold,", "Sing we now."])
    listed = (
        "Her sisters were these three at the least, as she counted them once more:\n- Anne\n- Mary"
    )
    indented = "She read it twice over and again, and found in it words she kept to herself:\n    Dear Anne,"
    text = f"{prose}\n{verse}\n\n{listed}\n\n{indented}\n"
    out = unwrap(text)
    assert len(out) == len(text) and all(
        a == b or (a, b) == (" ", "\n") for a, b in zip(out, text, strict=True)
    )
    paragraphs = [p for p in out.split("\n\n") if p.strip()]
    assert all("\n" not in p.strip() for p in paragraphs[:-3])  # each prose paragraph one line
    assert verse in out and "\n- Anne\n- Mary" in out and ":\n    Dear Anne," in out
    code = "\n".join(f"{'    ' * (i % 3)}x{i} = {'y' * (i % 50)}" for i in range(60))
    assert unwrap(code) == code  # not a hard-wrapped text: left as it is
