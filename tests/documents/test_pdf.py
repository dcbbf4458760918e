"""documents.pdf: a PDF's text layer page by page (checked against poppler's pdftotext), and
PDFs that are encrypted, scanned, looping, broken or too big refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cascade_cli.documents import PAGE, Limits, extract, where
from cascade_cli.errors import InputError
from tests.documents.makers import (
    austen,
    encrypt,
    pdf_from_markdown,
    pdf_page_tree_cycle,
    pdf_pages,
    pdf_reference_cycle,
    pdf_scanned,
    pdftotext,
)

pytestmark = pytest.mark.subprocess  # the PDF reader runs in a child process


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.replace("’", "'"))


@pytest.fixture(scope="module")
def manual(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A PDF of a few pages typeset by pandoc and groff from a known text."""
    text = "# Persuasion\n\n" + austen(9000)
    return pdf_from_markdown(text, tmp_path_factory.mktemp("pdf") / "manual.pdf"), text


def test_pages_match_pdftotext_page_by_page(manual: tuple[Path, str]) -> None:
    pdf, _ = manual
    ex = extract(pdf)
    pages = [m for m in ex.marks if m.kind == PAGE]
    assert ex.format == "pdf" and not ex.lines and len(pages) >= 3
    assert [m.label for m in pages] == [str(i) for i in range(1, len(pages) + 1)]
    assert pdftotext(pdf).count("\f") == len(pages)
    for i, m in enumerate(pages):
        end = pages[i + 1].start if i + 1 < len(pages) else len(ex.text)
        reference = _words(pdftotext(pdf, int(m.label)))
        folio = [w for w in (reference[:1] + reference[-1:]) if w == m.label]
        assert folio, reference  # groff numbers its pages: the running foot is dropped
        reference = reference[:-1] if reference[-1] == m.label else reference[1:]
        assert _words(ex.text[m.start : end]) == reference


def test_running_feet_go_and_a_sentence_runs_on_across_the_page(
    manual: tuple[Path, str],
) -> None:
    """groff's page numbers are not part of the text, and a sentence cut by a page break is
    not split into two paragraphs."""
    pdf, _ = manual
    ex = extract(pdf)
    pages = [m for m in ex.marks if m.kind == PAGE]
    for m in pages[1:]:
        before = ex.text[: m.start].rstrip()
        assert not before.split()[-1].isdigit(), before[-80:]
        if ex.text[m.start].islower():  # the page begins mid-sentence
            assert not ex.text[: m.start].endswith("\n\n"), ex.text[m.start - 80 : m.start + 20]


def test_a_paragraphs_typeset_lines_are_joined(manual: tuple[Path, str]) -> None:
    """A PDF's lines are the typesetter's, not the text's: a paragraph comes out as one line,
    as the same book's plain text (documents.wrap) and EPUB do."""
    pdf, text = manual
    ex = extract(pdf)
    paragraph = " ".join(text.split("\n\n")[3].split())  # a long one, wrapped in the PDF
    found = " ".join(ex.text.split())
    at = found.find(paragraph[:60].replace("'", "’"))
    assert at >= 0
    lines = [ln for ln in ex.text.split("\n") if ln.strip()]
    assert max(map(len, lines)) > 2 * 100  # joined past a typeset line's width
    assert sum(len(ln) > 200 for ln in lines) >= 3


def test_the_page_named_for_a_passage_holds_it(manual: tuple[Path, str]) -> None:
    pdf, source = manual
    ex = extract(pdf)
    flat = " ".join(ex.text.split())
    sentences = [s for s in re.split(r"(?<=[.;])\s+", " ".join(source.split())) if len(s) > 60]
    checked = 0
    for sentence in sentences[::3]:
        probe = sentence[:40]
        if probe not in flat:  # split by a hyphenated line end: not a clean probe
            continue
        words_before = len(flat[: flat.index(probe)].split())
        at = [m.start() for m in re.finditer(r"\S+", ex.text)][words_before]
        (page,) = [loc for loc in where(ex.marks, [], at, at + 1)]
        assert " ".join(probe.split()[:4]) in " ".join(pdftotext(pdf, int(page.label)).split())
        checked += 1
    assert checked >= 5


def test_hand_written_pages_and_their_marks(tmp_path: Path) -> None:
    src = tmp_path / "three.pdf"
    src.write_bytes(pdf_pages(["First page text", "Second page text", "Third page text"]))
    ex = extract(src)
    assert ex.text == "First page text\n\nSecond page text\n\nThird page text"
    assert [(m.start, m.label) for m in ex.marks] == [(0, "1"), (17, "2"), (35, "3")]
    at = ex.text.index("Second")
    assert [str(x) for x in where(ex.marks, [], at, ex.text.index("Third") + 3)] == [
        "page 2",
        "page 3",
    ]


def test_an_owner_password_alone_does_not_stop_reading(tmp_path: Path) -> None:
    src = tmp_path / "plain.pdf"
    src.write_bytes(pdf_pages(["Permissions only"]))
    assert extract(encrypt(src, tmp_path / "owner.pdf", user="")).text == "Permissions only"


def test_a_password_protected_pdf_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "plain.pdf"
    src.write_bytes(pdf_pages(["Secret"]))
    locked = encrypt(src, tmp_path / "locked.pdf")
    with pytest.raises(InputError) as exc:
        extract(locked)
    assert exc.value.one_line() == (
        f"{locked} is encrypted with a password. Remove the password (e.g. `qpdf --decrypt "
        "--password=PASSWORD in.pdf out.pdf`) and ingest the copy."
    )


def test_a_page_tree_that_loops_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "loop.pdf"
    src.write_bytes(pdf_page_tree_cycle())
    with pytest.raises(InputError, match=r"loop.pdf: page \d cannot be read \(a broken or looping"):
        extract(src)


def test_a_reference_cycle_is_read_past(tmp_path: Path) -> None:
    """A stream /Length that refers to itself: PDFium finds the stream's end by scanning."""
    src = tmp_path / "refs.pdf"
    src.write_bytes(pdf_reference_cycle())
    assert extract(src).text == "Round and round"


def test_a_scan_without_text_layer_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "scan.pdf"
    src.write_bytes(pdf_scanned(3))
    with pytest.raises(InputError) as exc:
        extract(src)
    assert exc.value.one_line().startswith(
        f"{src} has no text layer (a scanned PDF? its 3 pages hold no text). Run OCR on it"
    )


def test_pages_without_text_are_noted_and_skipped(tmp_path: Path) -> None:
    src = tmp_path / "mixed.pdf"
    src.write_bytes(pdf_pages(["Typed page", " ", "Another typed page"]))
    ex = extract(src)
    assert ex.text == "Typed page\n\nAnother typed page"
    assert [m.label for m in ex.marks] == ["1", "3"]
    assert ex.notes == ["1 of 3 pages have no text (scanned?): 2"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (
            b"%PDF-1.7\n" + bytes(range(256)) * 40,
            "is not a readable PDF (PDFium: Data format error)",
        ),
        (pdf_pages(["cut short"])[:200], "is not a readable PDF (PDFium: Data format error)"),
    ],
    ids=["garbage", "truncated"],
)
def test_malformed_pdfs_are_one_line(tmp_path: Path, data: bytes, fragment: str) -> None:
    src = tmp_path / "bad.pdf"
    src.write_bytes(data)
    with pytest.raises(InputError) as exc:
        extract(src)
    assert exc.value.one_line().startswith(f"{src} {fragment}")


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        (Limits(max_pages=2), "has more than 2 pages"),
        (Limits(max_chars=20), "holds more than 0 Mi characters of text"),
        (Limits(seconds=0.001), "took more than 0.001 s to read and was stopped"),
        (Limits(pdf_memory=16 << 20), "needs more than 16 MiB of memory to read (refused)"),
    ],
    ids=["pages", "chars", "time", "memory"],
)
def test_caps_stop_the_reader_in_one_line(tmp_path: Path, limits: Limits, fragment: str) -> None:
    src = tmp_path / "capped.pdf"
    src.write_bytes(pdf_pages(["one", "two", "three is a longer page of text"]))
    with pytest.raises(InputError) as exc:
        extract(src, limits=limits)
    assert fragment in exc.value.one_line() and str(src) in exc.value.one_line()
