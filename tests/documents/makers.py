"""Real files for the document readers' tests, made here: PDFs (pandoc + groff, or written by
hand as bytes), EPUBs (pandoc, or zipped by hand), and hostile ones (an encrypted PDF by qpdf,
page-tree cycles, a zip bomb, an entity bomb). The Debian tools are installed by
scripts/test.sh; a test that needs a missing one is skipped, saying which and why."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from cascade_cli.samples import PERSUASION

#: Debian package of each tool the tests run.
PACKAGES = {"pandoc": "pandoc", "groff": "groff", "qpdf": "qpdf", "pdftotext": "poppler-utils"}


def need(*tools: str) -> None:
    """Skip the test unless every tool is installed (and, for groff, its PDF device)."""
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {PACKAGES[tool]}; "
                        "scripts/test.sh does)")  # fmt: skip
        if tool == "groff" and shutil.which("gropdf") is None:
            pytest.skip("groff has no PDF device (apt-get install groff, not only groff-base)")


def austen(chars: int, start: int = 0) -> str:
    """Paragraphs of the shipped Persuasion sample, about `chars` long, cut at a paragraph."""
    text = PERSUASION.read_text(encoding="utf-8")[start:]
    cut = text.rfind("\n\n", 0, chars)
    return text[: cut if cut > 0 else chars].strip() + "\n"


def pdf_from_markdown(md: str, out: Path) -> Path:
    """A PDF typeset from Markdown by pandoc (ms) and groff (gropdf), as a manual might be."""
    need("pandoc", "groff")
    ms = subprocess.run(
        ["pandoc", "-f", "markdown", "-t", "ms", "-s", "-V", "fontfamily=T"],
        input=md.encode(),
        capture_output=True,
        check=True,
    ).stdout
    pdf = subprocess.run(
        ["groff", "-ms", "-mpdfmark", "-Tpdf", "-k"], input=ms, capture_output=True, check=True
    ).stdout
    out.write_bytes(pdf)
    return out


def epub_from_markdown(md: str, out: Path, title: str = "A Book") -> Path:
    """An EPUB 3 made by pandoc: one chapter file per top-level heading, a nav document."""
    need("pandoc")
    src = out.with_suffix(".md")
    src.write_text(md, encoding="utf-8")
    subprocess.run(["pandoc", str(src), "-o", str(out), "--metadata", f"title={title}"], check=True)
    return out


def pdftotext(pdf: Path, page: int | None = None) -> str:
    """poppler's text of the PDF, or of one page (1-based): the reference."""
    need("pdftotext")
    pages = ["-f", str(page), "-l", str(page)] if page else []
    return subprocess.run(
        ["pdftotext", *pages, str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout


def encrypt(pdf: Path, out: Path, user: str = "secret") -> Path:
    """`pdf` encrypted with AES-256 by qpdf; an empty `user` password opens without one."""
    need("qpdf")
    subprocess.run(
        ["qpdf", "--encrypt", user, "owner", "256", "--", str(pdf), str(out)], check=True
    )
    return out


# PDFs written by hand ----------------------------------------------------------------------

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def pdf_bytes(objects: list[bytes]) -> bytes:
    """A PDF 1.4 of these objects (object 1 the catalog), with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def _stream(data: bytes) -> bytes:
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def _page(parent: int, content: int) -> bytes:
    return (
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
        b" /Resources << /Font << /F1 3 0 R >> >> >>" % (parent, content)
    )


def _shows(text: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (" + text.encode("latin-1") + b") Tj ET"


def pdf_pages(texts: list[str]) -> bytes:
    """One line of Helvetica text per page."""
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(texts)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % len(texts),
        FONT,
    ]
    for i, text in enumerate(texts):
        objects += [_page(2, 5 + 2 * i), _stream(_shows(text))]
    return pdf_bytes(objects)


def pdf_page_tree_cycle() -> bytes:
    """The page tree's /Kids holds the /Pages node itself, before a real page."""
    return pdf_bytes(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 4 0 R] /Count 2 >>",
            FONT,
            _page(2, 5),
            _stream(_shows("Hello from a loop")),
        ]
    )


def pdf_reference_cycle() -> bytes:
    """A content stream whose /Length is a reference that refers to itself through another."""
    return pdf_bytes(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            FONT,
            _page(2, 5),
            b"<< /Length 6 0 R >>\nstream\n" + _shows("Round and round") + b"\nendstream",
            b"7 0 R",
            b"6 0 R",
        ]
    )


def pdf_scanned(pages: int = 2) -> bytes:
    """Pages that hold only an image (a tiny inline one): no text layer at all."""
    image = b"q 100 0 0 100 72 600 cm BI /W 2 /H 2 /CS /G /BPC 8 ID \x00\xff\xff\x00 EI Q"
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        FONT,
    ]
    for i in range(pages):
        objects += [_page(2, 5 + 2 * i), _stream(image)]
    return pdf_bytes(objects)


# EPUBs zipped by hand ----------------------------------------------------------------------

CONTAINER = (
    '<?xml version="1.0"?><container version="1.0" '
    'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
    '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
    "</rootfiles></container>"
)


def xhtml(title: str, body: str, doctype: str = "") -> str:
    return (
        f'<?xml version="1.0" encoding="utf-8"?>\n{doctype}'
        f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title></head>'
        f"<body>{body}</body></html>"
    )


def epub2(chapters: list[tuple[str, str, str]], toc: bool = True) -> dict[str, bytes]:
    """The members of an EPUB 2 book: (file name, NCX title, XHTML) per chapter, in spine
    order, listed in the NCX table of contents when `toc`."""
    items = "".join(
        f'<item id="c{i}" href="text/{name}" media-type="application/xhtml+xml"/>'
        for i, (name, _, _) in enumerate(chapters)
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="2.0">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Hand</dc:title>'
        f'</metadata><manifest><item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
        f'<item id="cover" href="images/cover.png" media-type="image/png"/>{items}</manifest>'
        f'<spine toc="ncx">{spine}</spine></package>'
    )
    points = "".join(
        f'<navPoint id="n{i}"><navLabel><text>{title}</text></navLabel>'
        f'<content src="text/{name}#start"/></navPoint>'
        for i, (name, title, _) in enumerate(chapters)
        if toc
    )
    ncx = (
        '<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
        f"<navMap>{points}</navMap></ncx>"
    )
    members = {
        "mimetype": b"application/epub+zip",
        "META-INF/container.xml": CONTAINER.encode(),
        "OEBPS/content.opf": opf.encode(),
        "OEBPS/toc.ncx": ncx.encode(),
        "OEBPS/images/cover.png": b"\x89PNG\r\n\x1a\n" + bytes(64),
    }
    members |= {f"OEBPS/text/{name}": body.encode() for name, _, body in chapters}
    return members


def write_zip(path: Path, members: dict[str, bytes], bombs: dict[str, int] | None = None) -> Path:
    """A zip of `members` (mimetype stored first, the rest deflated), plus for each name in
    `bombs` a member of that many MiB of zeros whose deflate stream is a ~1 KiB segment
    repeated (so gigabytes take a few MiB and a second to write). Written by hand: zipfile
    would have to compress every byte."""
    out = bytearray()
    central = bytearray()
    entries: list[tuple[str, int, int, int, bytes]] = []
    for name, data in members.items():
        method = 0 if name == "mimetype" else 8
        body = data if method == 0 else _deflate(data)
        entries.append((name, method, zlib.crc32(data), len(data), body))
    for name, mib in (bombs or {}).items():
        zeros = bytes(1 << 20)
        co = zlib.compressobj(9, zlib.DEFLATED, -15)
        segment = co.compress(zeros) + co.flush(zlib.Z_FULL_FLUSH)
        crc = 0
        for _ in range(mib):
            crc = zlib.crc32(zeros, crc)
        final = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
        entries.append((name, 8, crc, mib << 20, segment * mib + final))
    for name, method, crc, size, body in entries:
        raw = name.encode()
        offset = len(out)
        head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(body),
                           size, len(raw), 0)  # fmt: skip
        out += head + raw + body
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21,
                               crc, len(body), size, len(raw), 0, 0, 0, 0, 0, offset) + raw  # fmt: skip
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central),
                      len(out), 0)  # fmt: skip
    path.write_bytes(bytes(out + central + end))
    return path


def _deflate(data: bytes) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    return co.compress(data) + co.flush()


def billion_laughs(body: str = "<p>&lol9;</p>") -> str:
    """An XHTML document whose internal DTD nests entities ten deep: &lol9; is 10^9 'lol's."""
    decls = '<!ENTITY lol "lol">\n' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
        for i in range(1, 10)
    )
    return xhtml("Laughs", body, f"<!DOCTYPE html [\n{decls}]>\n")
