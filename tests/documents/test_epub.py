"""documents.epub: chapters in spine order with their titles; DRM, zip bombs, entity bombs and
broken archives refused in one line that names the file (and the member)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cascade_cli.documents import CHAPTER, HEADING, Limits, extract, where
from cascade_cli.errors import InputError
from tests.documents.makers import (
    austen,
    billion_laughs,
    epub2,
    epub_from_markdown,
    write_zip,
    xhtml,
)


def _words(text: str) -> list[str]:
    """Words only: pandoc makes quotes curly and dashes long."""
    return re.findall(r"[A-Za-z0-9]+", text)


def _chapters(ex) -> list[str]:
    return [m.label for m in ex.marks if m.kind == CHAPTER]


@pytest.mark.subprocess  # pandoc
def test_pandoc_epub_chapters_in_reading_order(tmp_path: Path) -> None:
    parts = [austen(1500, start) for start in (3000, 9000, 15000)]
    md = "".join(
        f"# Part {n}\n\n{text}\n" for n, text in zip(("One", "Two", "Three"), parts, strict=True)
    )
    ex = extract(epub_from_markdown(md, tmp_path / "book.epub", title="Austen Parts"))
    assert ex.format == "epub"
    assert _chapters(ex) == ["Austen Parts", "Part One", "Part Two", "Part Three"]
    marks = [m for m in ex.marks if m.kind == CHAPTER]
    for m in marks:
        assert ex.text[m.start :].startswith(m.label)
    for i, text in enumerate(parts):  # each part's words, in its chapter, in order
        lo, hi = marks[i + 1].start, marks[i + 2].start if i + 2 < len(marks) else len(ex.text)
        assert _words(ex.text[lo:hi])[2:] == _words(text)  # after its title ("Part One")
        at = ex.text.index(text.split()[10], lo)
        assert (
            str(where(ex.marks, [], at, at + 5)[0])
            == f"chapter “Part {('One', 'Two', 'Three')[i]}”"
        )


def test_epub2_spine_order_ncx_titles_and_chapters_without_headings(tmp_path: Path) -> None:
    chapters = [
        ("z-first.xhtml", "The Beginning", xhtml("x", "<p>Alpha paragraph.</p>")),
        ("a-second.xhtml", "Second", xhtml("x", "<h2>Second</h2><p>Beta paragraph.</p>")),
        ("m-third.xhtml", "", xhtml("x", "<h1>Third Part</h1><p>Gamma.</p>")),
    ]
    members = epub2(chapters)
    members["OEBPS/toc.ncx"] = members["OEBPS/toc.ncx"].replace(
        b"<navLabel><text></text></navLabel>", b""
    )
    ex = extract(write_zip(tmp_path / "hand.epub", members))
    assert ex.text == (
        "The Beginning\n\nAlpha paragraph.\n\nSecond\n\nBeta paragraph.\n\nThird Part\n\nGamma."
    )
    assert _chapters(ex) == ["The Beginning", "Second", "Third Part"]
    assert [m.label for m in ex.marks if m.kind == HEADING] == ["Second", "Third Part"]


def test_font_obfuscation_is_not_drm_but_encrypted_chapters_are(tmp_path: Path) -> None:
    members = epub2([("c.xhtml", "C", xhtml("x", "<p>Readable.</p>"))])

    def encryption(uri: str, algorithm: str) -> bytes:
        return (
            '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
            'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
            f'<enc:EncryptionMethod Algorithm="{algorithm}"/><enc:CipherData>'
            f'<enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData></encryption>'
        ).encode()

    font = {"META-INF/encryption.xml": encryption(
        "OEBPS/fonts/a.otf", "http://www.idpf.org/2008/embedding")}  # fmt: skip
    assert "Readable." in extract(write_zip(tmp_path / "font.epub", members | font)).text
    drm = {"META-INF/encryption.xml": encryption(
        "OEBPS/text/c.xhtml", "http://www.w3.org/2001/04/xmlenc#aes128-cbc")}  # fmt: skip
    src = write_zip(tmp_path / "drm.epub", members | drm)
    with pytest.raises(InputError, match=f"{src} is DRM-protected"):
        extract(src)


def test_zip_bomb_chapter_stops_at_the_cap(tmp_path: Path) -> None:
    """A chapter that decompresses to 3 GiB (a 3 MiB file) is refused once 64 MiB are read."""
    members = epub2([("c.xhtml", "C", xhtml("x", "<p>Bomb below.</p>"))])
    del members["OEBPS/text/c.xhtml"]
    src = write_zip(tmp_path / "bomb.epub", members, bombs={"OEBPS/text/c.xhtml": 3072})
    assert src.stat().st_size < 4 << 20
    with pytest.raises(InputError) as exc:
        extract(src)
    assert exc.value.one_line().startswith(
        f"{src}: OEBPS/text/c.xhtml decompresses to more than 64 MiB (refused: a zip bomb?)"
    )


def test_zip_bomb_the_text_never_needs_is_never_read(tmp_path: Path) -> None:
    members = epub2([("c.xhtml", "C", xhtml("x", "<p>Fine text.</p>"))])
    del members["OEBPS/images/cover.png"]
    src = write_zip(tmp_path / "img.epub", members, bombs={"OEBPS/images/cover.png": 3072})
    assert extract(src).text == "C\n\nFine text."


def test_all_members_together_are_capped(tmp_path: Path) -> None:
    big = xhtml("x", "<p>" + "word " * 100_000 + "</p>")
    chapters = [(f"c{i}.xhtml", f"C{i}", big) for i in range(4)]
    src = write_zip(tmp_path / "many.epub", epub2(chapters))
    with pytest.raises(InputError, match="decompresses to more than 1 MiB together"):
        extract(src, limits=Limits(max_member=1 << 20, max_unzipped=1 << 20))


@pytest.mark.parametrize("where_", ["chapter", "package"])
def test_entity_bomb_is_refused_naming_the_member(tmp_path: Path, where_: str) -> None:
    members = epub2([("c.xhtml", "C", xhtml("x", "<p>ok</p>"))])
    if where_ == "chapter":
        members["OEBPS/text/c.xhtml"] = billion_laughs().encode()
        member = "OEBPS/text/c.xhtml"
    else:
        opf = members["OEBPS/content.opf"].decode()
        members["OEBPS/content.opf"] = opf.replace(
            "<package", '<!DOCTYPE package [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;">]>'
            "<package").replace("<dc:title>Hand", "<dc:title>&b;").encode()  # fmt: skip
        member = "OEBPS/content.opf"
    src = write_zip(tmp_path / "laughs.epub", members)
    with pytest.raises(InputError) as exc:
        extract(src)
    assert exc.value.one_line().startswith(f"{src}: {member} declares XML entities")


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("truncated", "is not a readable EPUB"),
        ("no-container", "META-INF/container.xml is missing from the archive"),
        ("broken-opf", "OEBPS/content.opf is not well-formed XML"),
        ("no-chapters", "has no chapters in its spine"),
    ],
)
def test_broken_epubs_are_one_line(tmp_path: Path, case: str, fragment: str) -> None:
    members = epub2([("c.xhtml", "C", xhtml("x", "<p>ok</p>"))])
    src = tmp_path / f"{case}.epub"
    if case == "truncated":
        whole = write_zip(tmp_path / "whole.epub", members).read_bytes()
        src.write_bytes(whole[: len(whole) // 2])
    else:
        if case == "no-container":
            del members["META-INF/container.xml"]
        elif case == "broken-opf":
            members["OEBPS/content.opf"] = members["OEBPS/content.opf"][:-20]
        else:
            members["OEBPS/content.opf"] = members["OEBPS/content.opf"].replace(
                b'<itemref idref="c0"/>', b""
            )
        write_zip(src, members)
    with pytest.raises(InputError) as exc:
        extract(src)
    line = exc.value.one_line()
    assert str(src) in line and fragment in line and "\n" not in line
