"""documents.html: a web page's main text and headings, its chrome dropped; XHTML; hostile
markup (entity bombs, nesting bombs) refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascade_cli.documents import HEADING, extract, where
from cascade_cli.errors import InputError
from tests.documents.makers import austen, billion_laughs, xhtml

NAV = "".join(f'<li><a href="/p/{i}">Section {i}</a></li>' for i in range(30))


def _page(article: str, main: bool = True) -> str:
    wrap = f"<main><article>{article}</article></main>" if main else f"<article>{article}</article>"
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Persuasion | Classic Reads</title><style>body {{ font: serif }}</style>
<script>var tracking = "beacon pixel";</script></head><body>
<header><div class="logo">Classic Reads Online</div><form><input name="q"></form></header>
<nav><ul>{NAV}</ul></nav>
<div class="cookie">We use cookies to improve your reading.</div>
{wrap}
<aside><h3>Readers also enjoyed</h3><ul><li><a href="/x">Emma</a></li></ul></aside>
<footer><p>Copyright 2024 Classic Reads. <a href="/privacy">Privacy</a></p></footer>
<script>console.log("more script text")</script></body></html>"""


CHROME = ["Classic Reads", "Section 1", "cookies", "Readers also", "Copyright", "beacon", "script"]


def _article() -> str:
    paras = [p for p in austen(4000).split("\n\n") if len(p) > 100]
    html = "<h1>Persuasion</h1><p>by Jane Austen</p><h2>Chapter 1</h2>"
    html += "".join(f"<p>{p}</p>" for p in paras[:5])
    html += "<h2>Chapter 2</h2><h3>A list</h3><ul><li>first item</li><li>second item</li></ul>"
    html += "<ol start='3'><li>third</li></ol><table><tr><th>Name</th><th>Age</th></tr>"
    html += "<tr><td>Anne</td><td>27</td></tr></table><pre>  code   kept\n    as is</pre>"
    html += "<p>Last <b>bold</b> words&nbsp;here.</p>"
    return html


@pytest.mark.parametrize("main", [True, False], ids=["main", "article-only"])
def test_page_main_text_and_headings_without_chrome(tmp_path: Path, main: bool) -> None:
    src = tmp_path / "page.html"
    src.write_text(_page(_article(), main), encoding="utf-8")
    ex = extract(src)
    assert ex.format == "html" and not ex.lines
    for junk in CHROME:
        assert junk not in ex.text, junk
    heads = [(m.label, m.level) for m in ex.marks if m.kind == HEADING]
    assert heads == [("Persuasion", 1), ("Chapter 1", 2), ("Chapter 2", 2), ("A list", 3)]
    for m in ex.marks:
        assert ex.text[m.start :].startswith(m.label)
    assert ex.text.startswith("Persuasion\n\nby Jane Austen\n\nChapter 1\n\nSir Walter Elliot")
    assert "- first item\n- second item\n\n3. third" in ex.text
    assert "Name | Age\nAnne | 27" in ex.text
    assert "  code   kept\n    as is" in ex.text
    assert ex.text.rstrip().endswith("Last bold words here.")
    at = ex.text.index("second item")
    assert [str(x) for x in where(ex.marks, [], at, at + 5)] == [
        "heading “Persuasion”",
        "heading “Chapter 2”",
        "heading “A list”",
    ]


def test_a_plain_document_keeps_its_title_header(tmp_path: Path) -> None:
    """A header that is not site chrome (no nav, main or article; not mostly links) stays."""
    src = tmp_path / "doc.htm"
    src.write_text(
        "<html><body><header><h1>Report</h1><p>Q3, by the team</p></header>"
        "<p>Sales rose.</p><footer><p>Page written in 2024.</p></footer></body></html>",
        encoding="utf-8",
    )
    assert extract(src).text == "Report\n\nQ3, by the team\n\nSales rose.\n\nPage written in 2024."


def test_declared_charset_wins_over_the_default(tmp_path: Path) -> None:
    src = tmp_path / "old.html"
    src.write_bytes(
        '<html><head><meta charset="windows-1252"></head><body><p>caf\u00e9 \u2014 na\u00efve</p>'
        "</body></html>".encode("windows-1252")
    )
    assert extract(src).text == "caf\u00e9 \u2014 na\u00efve"


def test_xhtml_with_entities_from_its_doctype(tmp_path: Path) -> None:
    doctype = (
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n'
    )
    src = tmp_path / "ch.xhtml"
    src.write_text(xhtml("T", "<h1>One&nbsp;Two</h1><p>caf&eacute; &amp; more</p>", doctype))
    ex = extract(src)
    assert ex.text == "One Two\n\ncafé & more"
    assert [m.label for m in ex.marks] == ["One Two"]


@pytest.mark.parametrize("name", ["laughs.xhtml", "laughs.html"])
def test_entity_bomb_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    src = tmp_path / name
    src.write_text(billion_laughs(), encoding="utf-8")
    with pytest.raises(InputError) as exc:
        extract(src)
    assert f"{src} declares XML entities" in exc.value.one_line()


def test_nesting_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    """100,000 nested divs: libxml2 stops at depth 256 (a parser that went on would spend
    quadratic time), and the reader says so."""
    src = tmp_path / "deep.html"
    src.write_text("<html><body>" + "<div>" * 100_000 + "deep" + "</div>" * 100_000)
    with pytest.raises(InputError, match="nests its elements more than 256 deep"):
        extract(src)


def test_page_without_text_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "empty.html"
    src.write_text("<html><body><script>only()</script><img src=a.png></body></html>")
    with pytest.raises(InputError, match="holds no text"):
        extract(src)
