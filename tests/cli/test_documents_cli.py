"""`cascade ingest` on books and manuals as sold (PDF, EPUB, HTML) with the real default model,
then `cascade ask` answering from them and the stored location map naming where the answer's
passage is; and hostile files: one line naming the file and the problem, exit 2, the store
(holding another document) untouched and verifying clean."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cascade_cli.documents import catalog, locations
from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import ask_json, cli, docs_json, store_with_x
from tests.documents import makers
from tests.documents.helpers import (
    NEEDLE,
    SMALL,
    chunk_rows,
    data_bytes,
    doc_id,
    doc_rows,
    passage_rows,
    ro,
)

pytestmark = pytest.mark.subprocess

#: ~1,000 tokens of Persuasion with the needle in the middle, in three Markdown sections.
SECTIONS = [makers.austen(1500, start) for start in (2000, 6000)]
MARKDOWN = (
    f"# Kellynch Hall\n\n{SECTIONS[0]}\n# The Pass Key\n\n{NEEDLE}\n\n"
    f"# Lady Russell\n\n{SECTIONS[1]}"
)


def _where_needle(home: Path, name: str) -> list[str]:
    """The stored location of the chunk whose passage holds the needle."""
    (chunk,) = {c for c, _, _, t, _ in passage_rows(home, doc_id(home, name)) if "48213" in t}
    conn: sqlite3.Connection = ro(home)
    try:
        doc = catalog.find(conn, name)
        return [str(loc) for loc in locations.locate_chunk(conn, doc, chunk)]
    finally:
        conn.close()


def test_pdf_and_epub_ingest_and_ask_with_their_locations(home: Path, tmp_path: Path) -> None:
    pdf = makers.pdf_from_markdown(MARKDOWN, tmp_path / "manual.pdf")
    epub = makers.epub_from_markdown(MARKDOWN, tmp_path / "book.epub", title="Pass Keys")
    proc = cli(["ingest", str(pdf), str(epub), *SMALL], home)
    assert proc.returncode == 0, proc.stderr
    assert "ingested manual v1" in proc.stdout and "ingested book v1" in proc.stdout
    assert sorted(d["name"] for d in docs_json(home)) == ["book", "manual"]
    for name in ("manual", "book"):
        data = ask_json(home, name, "What is the pass key?")
        assert "48213" in data["answer"], (name, data["answer"])
    # the PDF: the page named for the needle's chunk holds the needle (poppler says so)
    pages = [x.removeprefix("page ") for x in _where_needle(home, "manual") if x.startswith("page")]
    assert pages and any("48213" in makers.pdftotext(pdf, int(p)) for p in pages)
    # the EPUB: the needle's chunk is in the chapter of that title
    assert "chapter “The Pass Key”" in _where_needle(home, "book")


def test_html_beside_a_broken_file_is_ingested_and_the_exit_says_one_failed(
    home: Path, tmp_path: Path
) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        f"<html><body><nav><a href='/'>Home</a></nav><main><h1>Notes</h1><p>{NEEDLE}</p>"
        f"<p>{SECTIONS[0][:600]}</p></main><footer>Copyright</footer></body></html>",
        encoding="utf-8",
    )
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(makers.pdf_pages(["cut short"])[:200])
    proc = cli(["ingest", str(broken), str(page), *SMALL], home)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {broken} is not a readable PDF (PDFium: Data format error). Check that the file "
        "is complete (download it again), or repair it with qpdf."
    ]
    assert "ingested page v1" in proc.stdout
    assert [d["name"] for d in docs_json(home)] == ["page"]
    assert _where_needle(home, "page") == ["heading “Notes”"]


@pytest.fixture(scope="module")
def store_home(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Path]:
    """One store holding document `x`, which no hostile file may change."""
    yield store_with_x(tmp_path_factory.mktemp("hostile-docs"), model_path, 2000)


def _locked(d: Path) -> Path:
    plain = d / "plain.pdf"
    plain.write_bytes(makers.pdf_pages(["Secret"]))
    return makers.encrypt(plain, d / "locked.pdf")


def _bomb(d: Path) -> Path:
    members = makers.epub2([("c.xhtml", "C", makers.xhtml("x", "<p>x</p>"))])
    del members["OEBPS/text/c.xhtml"]
    return makers.write_zip(d / "bomb.epub", members, bombs={"OEBPS/text/c.xhtml": 2048})


def _laughs(d: Path) -> Path:
    members = makers.epub2([("c.xhtml", "C", makers.billion_laughs())])
    return makers.write_zip(d / "laughs.epub", members)


def _file(name: str, data: bytes | str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        (d / name).write_bytes(data.encode() if isinstance(data, str) else data)
        return d / name

    return make


Make = Callable[[Path], Path]
CASES: list[tuple[str, Make, str]] = [
    ("encrypted-pdf", _locked, "locked.pdf is encrypted with a password. Remove the password"),
    ("scanned-pdf", _file("scan.pdf", makers.pdf_scanned()), "scan.pdf has no text layer (a scanned PDF?"),
    ("page-tree-loop", _file("loop.pdf", makers.pdf_page_tree_cycle()), "loop.pdf: page 2 cannot be read (a broken or looping page tree)"),
    ("malformed-pdf", _file("bad.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 8), "bad.pdf is not a readable PDF (PDFium: Data format error)"),
    ("not-a-pdf", _file("fake.pdf", "<html>hello</html>"), "fake.pdf is not a PDF (it has no %PDF- header)"),
    ("zip-bomb-epub", _bomb, "bomb.epub: OEBPS/text/c.xhtml decompresses to more than 64 MiB (refused: a zip bomb?)"),
    ("billion-laughs-epub", _laughs, "laughs.epub: OEBPS/text/c.xhtml declares XML entities"),
    ("billion-laughs-xhtml", _file("laughs.xhtml", makers.billion_laughs()), "laughs.xhtml declares XML entities"),
    ("truncated-epub", _file("cut.epub", b"PK\x03\x04" + bytes(100)), "cut.epub is not a readable EPUB"),
    ("deep-html", _file("deep.html", "<div>" * 50_000), "deep.html nests its elements more than 256 deep"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_hostile_document_is_one_line_and_leaves_the_store_alone(
    store_home: Path, tmp_path: Path, case: str, make: Make, fragment: str
) -> None:
    home = store_home
    did = doc_id(home, "x")
    before = (doc_rows(home), chunk_rows(home, f"doc:{did}"), data_bytes(home))
    proc = cli(["ingest", str(make(tmp_path)), *SMALL], home)
    assert_one_line_error(proc, fragment)
    assert proc.returncode == 2
    assert (doc_rows(home), chunk_rows(home, f"doc:{did}"), data_bytes(home)) == before


def test_the_store_verifies_clean_after_the_hostile_documents(store_home: Path) -> None:
    proc = cli(["verify"], store_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [d["name"] for d in docs_json(store_home)] == ["x"]
