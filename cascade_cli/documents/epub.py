"""EPUB to text: the chapters in the spine's reading order, each headed by its title.

Read with zipfile and lxml (documents.html), not a whole-book library: only the members the
text needs are read (container, package, table of contents, the spine's XHTML; never images
or fonts), each streamed with a cap on the bytes it decompresses to and on all of them
together, so a zip bomb stops at the cap. A chapter's title is its table-of-contents entry
(EPUB 3 nav or EPUB 2 NCX), else its first heading, else its <title>; a title its chapter does
not show as a heading is written before the chapter's text. Encrypted chapters (DRM) are refused.
"""

from __future__ import annotations

import hashlib
import posixpath
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag

from cascade_cli.documents.base import CHAPTER, Builder, Extracted, Limits, label
from cascade_cli.documents.html import LEVELS, parse_html, parse_xml, plain, walk
from cascade_cli.documents.reading import open_file
from cascade_cli.errors import InputError

_XHTML = {"application/xhtml+xml", "text/html", "application/xml", "text/xml"}
#: Font obfuscation (IDPF, Adobe): fonts scrambled, text readable; any other algorithm is DRM.
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_CHUNK = 1 << 16


@dataclass
class _Book:
    path: Path
    zf: zipfile.ZipFile
    limits: Limits
    unzipped: int = 0

    def read(self, name: str) -> bytes:
        """One member, streamed and capped (its own cap, and all members' together)."""
        what = f"{self.path}: {name}"
        try:
            info = self.zf.getinfo(name)
        except KeyError:
            raise InputError(f"{what} is missing from the archive", _FIX_BROKEN) from None
        cap = self.limits.max_member
        if info.file_size > cap:
            raise _bomb(what, cap)
        out = bytearray()
        try:
            with self.zf.open(info) as fh:
                while block := fh.read(_CHUNK):
                    out += block
                    self.unzipped += len(block)
                    if len(out) > cap:
                        raise _bomb(what, cap)
                    if self.unzipped > self.limits.max_unzipped:
                        raise _bomb(f"{self.path}", self.limits.max_unzipped, "together")
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise InputError(f"{what} is damaged ({exc})", _FIX_BROKEN) from None
        except (RuntimeError, NotImplementedError) as exc:  # zip encryption, odd compression
            raise InputError(f"{what} cannot be read ({exc})", _FIX_BROKEN) from None
        return bytes(out)

    def xml(self, name: str) -> Any:
        from lxml import etree

        try:
            return parse_xml(self.read(name), f"{self.path}: {name}")
        except etree.XMLSyntaxError as exc:
            what = f"{self.path}: {name}"
            raise InputError(f"{what} is not well-formed XML ({exc})", _FIX_BROKEN) from None


_FIX_BROKEN = "Check that the file is complete (download it again), or convert it with Calibre."


def _bomb(what: str, cap: int, how: str = "") -> InputError:
    return InputError(
        f"{what} decompresses to more than {cap // 2**20} MiB{' ' + how if how else ''} "
        "(refused: a zip bomb?)",
        "Check where the file came from; a real book's chapters are far smaller.",
    )


def _local(el: Any) -> str:
    tag = el.tag
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _find(root: Any, name: str) -> list[Any]:
    return [el for el in root.iter() if _local(el) == name]


def _resolve(base: str, href: str) -> str:
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), unquote(urldefrag(href)[0])))


def _open(path: Path, limits: Limits) -> _Book:
    try:
        zf = zipfile.ZipFile(path)  # a regular file: extract sniffed it through open_file
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
        raise InputError(f"{path} is not a readable EPUB ({exc})", _FIX_BROKEN) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}", "Check the file's permissions.") from None
    if len(zf.infolist()) > limits.max_members:
        zf.close()
        raise InputError(
            f"{path} holds more than {limits.max_members} files (refused: a zip bomb?)",
            "Check where the file came from.",
        )
    return _Book(path, zf, limits)


def _titles(book: _Book, opf: str, items: dict[str, tuple[str, str, str]], toc: str) -> dict:
    """Chapter file → title, from the EPUB 3 nav document or else the EPUB 2 NCX."""
    titles: dict[str, str] = {}
    nav = next((h for h, _, props in items.values() if "nav" in props.split()), None)
    if nav is not None and nav in book.zf.NameToInfo:
        root = book.xml(nav)
        navs = _find(root, "nav")
        tocs = [n for n in navs if "toc" in (n.get("{http://www.idpf.org/2007/ops}type") or "")]
        for a in _find((tocs or navs or [root])[0], "a"):
            if a.get("href"):
                titles.setdefault(_resolve(nav, a.get("href")), label(plain(a)))
    elif toc in items and items[toc][0] in book.zf.NameToInfo:
        ncx = items[toc][0]
        for point in _find(book.xml(ncx), "navPoint"):
            text = next(iter(_find(point, "text")), None)
            src = next(iter(_find(point, "content")), None)
            if text is not None and src is not None and src.get("src"):
                titles.setdefault(_resolve(ncx, src.get("src")), label(plain(text)))
    return {k: v for k, v in titles.items() if v}


def _drm(book: _Book, spine: set[str]) -> None:
    """An InputError when META-INF/encryption.xml encrypts a chapter (not just a font)."""
    if "META-INF/encryption.xml" not in book.zf.NameToInfo:
        return
    root = book.xml("META-INF/encryption.xml")
    for data in _find(root, "EncryptedData"):
        method = next(iter(_find(data, "EncryptionMethod")), None)
        ref = next(iter(_find(data, "CipherReference")), None)
        algorithm = method.get("Algorithm") if method is not None else ""
        uri = unquote(ref.get("URI") or "") if ref is not None else ""
        if algorithm not in _FONT_OBFUSCATION and posixpath.normpath(uri) in spine:
            raise InputError(
                f"{book.path} is DRM-protected (its chapters are encrypted)",
                "Ingest a DRM-free copy (many shops sell them), or export the text yourself.",
            )


def extract_epub(path: Path, limits: Limits) -> Extracted:
    """An EPUB's chapters in reading order, with chapter and heading marks."""
    book = _open(path, limits)
    with book.zf:
        container = book.xml("META-INF/container.xml")
        rootfile = next((r.get("full-path") for r in _find(container, "rootfile")), None)
        if not rootfile:
            raise InputError(f"{path} names no package document", _FIX_BROKEN)
        opf = posixpath.normpath(rootfile)
        package = book.xml(opf)
        items: dict[str, tuple[str, str, str]] = {}
        for item in _find(package, "item"):
            if item.get("id") and item.get("href"):
                items[item.get("id")] = (
                    _resolve(opf, item.get("href")),
                    (item.get("media-type") or "").lower(),
                    item.get("properties") or "",
                )
        spine_el = next(iter(_find(package, "spine")), None)
        refs = _find(spine_el, "itemref") if spine_el is not None else []
        order = [
            items[r.get("idref")]
            for r in refs
            if r.get("idref") in items and r.get("linear", "yes") != "no"
        ]
        chapters = [h for h, mt, props in order if mt in _XHTML and "nav" not in props.split()]
        if not chapters:
            raise InputError(f"{path} has no chapters in its spine", _FIX_BROKEN)
        _drm(book, set(chapters))
        toc = spine_el.get("toc", "") if spine_el is not None else ""
        titles = _titles(book, opf, items, toc)
        b = Builder(str(path), limits.max_chars)
        missing = 0
        for href in chapters:
            if href not in book.zf.NameToInfo:
                missing += 1
                continue
            _chapter(book, href, titles.get(href), b)
        text = b.text()
    if not text.strip():
        raise InputError(f"{path} holds no text (only images?)", "Pass an EPUB with text.")
    notes = [f"{missing} chapters named in the spine are missing from the archive"] * bool(missing)
    sha = hashlib.sha256()
    with open_file(path) as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
    return Extracted(text, "epub", sha.hexdigest(), b.marks, notes=notes)


def _chapter(book: _Book, href: str, title: str | None, b: Builder) -> None:
    from lxml import etree

    data = book.read(href)
    what = f"{book.path}: {href}"
    try:
        root = parse_xml(data, what)
    except etree.XMLSyntaxError:  # tag soup in an EPUB 2 book: read it as HTML
        root = parse_html(data, what)
    heads = {" ".join(plain(el).split()).casefold() for el in root.iter() if _local(el) in LEVELS}
    b.block(2)
    if title is not None:
        b.mark(CHAPTER, title)
        if title.casefold() not in heads:
            b.inline(title)  # a title the chapter does not show: its first line
            b.block(2)
    else:
        first = next((el for el in root.iter() if _local(el) in LEVELS), None)
        doc_title = next((plain(t) for t in _find(root, "title")), "")
        name = plain(first) if first is not None else doc_title
        b.mark(CHAPTER, label(name) or posixpath.basename(href))
    walk(root, b, page=False)
