"""HTML and XHTML to text (lxml): the main text and its headings, the page's chrome left out.

Dropped: script, style, forms, media and navigation; on a web page (not an EPUB chapter) also a
header, footer or aside outside the ``<main>``/``<article>`` when the page is laid out as a site
(it has a nav or articles) or the element is mostly links. With one ``<main>`` (or else one
``<article>``) only it is read. Headings (h1-h6) become marks. Markup is parsed without fetching anything, without
expanding entities, and with libxml2's depth cap (256); a document that declares XML entities
is refused (an entity-expansion bomb has no other use here).
"""

from __future__ import annotations

import codecs
import hashlib
import html.entities
import re
from pathlib import Path
from typing import Any

from cascade_cli.documents.base import HEADING, Builder, Extracted, Limits
from cascade_cli.documents.reading import decode, read_bytes
from cascade_cli.errors import InputError

SKIP = {
    "script", "style", "noscript", "template", "nav", "head", "title", "svg", "math", "iframe",
    "object", "embed", "canvas", "form", "button", "select", "textarea", "input", "dialog",
    "audio", "video", "map",
}  # fmt: skip
CHROME = {"header", "footer", "aside"}
CHROME_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
PARAGRAPH = {
    "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote",
    "figure", "figcaption", "table", "ul", "ol", "dl", "pre", "address", "details", "summary",
    "fieldset", "hr", "body", "center", "h1", "h2", "h3", "h4", "h5", "h6",
}  # fmt: skip
LINE = {"li", "dt", "dd", "tr", "br", "caption", "legend"}
LEVELS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_ENTITY_DECL = re.compile(rb"<!ENTITY", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""")
_HIDDEN = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)


def _tag(el: Any) -> str:
    tag = el.tag
    return tag.rpartition("}")[2].lower() if isinstance(tag, str) else ""


def refuse_entities(data: bytes, what: str) -> None:
    """An InputError when the document's prolog declares XML entities."""
    root = re.search(rb"<(?:html|[A-Za-z_][\w.-]*:html|package|container|ncx)\b", data[: 1 << 20])
    prolog = data[: root.start() if root else 1 << 20]
    if _ENTITY_DECL.search(prolog):
        raise InputError(
            f"{what} declares XML entities (refused: entity expansion is off, and such "
            "declarations are the shape of an XML bomb)",
            "Check where the file came from; a real book or page does not need them.",
        )


def parse_xml(data: bytes, what: str) -> Any:
    """An XML document's root, parsed safely (see the module's docstring); XMLSyntaxError
    when it is not well-formed."""
    from lxml import etree

    refuse_entities(data, what)
    parser = etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        _check_depth(str(exc), what)
        raise
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        refuse_entities(b"<!ENTITY", what)
    return root


def parse_html(data: bytes, what: str) -> Any:
    """An HTML document's root (`data` in UTF-8), parsed safely."""
    from lxml import etree

    refuse_entities(data, what)
    parser = etree.HTMLParser(
        encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True, huge_tree=False
    )
    root = etree.fromstring(data, parser)
    for e in parser.error_log:
        _check_depth(e.message or "", what)
    if root is None:
        raise InputError(f"{what} holds no HTML", "Check that the file is complete.")
    return root


def plain(el: Any) -> str:
    """An element's text, entities left unexpanded (e.g. &nbsp; under a DOCTYPE) written as
    their characters. Recursion is bounded by the parser's depth cap."""
    from lxml import etree

    out = [el.text or ""] if isinstance(el.tag, str) else []
    for child in el:
        if child.tag is etree.Entity:
            out.append(chr(html.entities.name2codepoint.get(child.name, 0x20)))
        elif isinstance(child.tag, str):
            out.append(plain(child))
        out.append(child.tail or "")
    return "".join(out)


def _check_depth(message: str, what: str) -> None:
    if "Excessive depth" in message:
        raise InputError(
            f"{what} nests its elements more than 256 deep (refused: a parser bomb?)",
            "Check where the file came from.",
        )


def walk(root: Any, b: Builder, page: bool) -> None:
    """Write the text under `root` to `b` (see the module's docstring for what is left out)."""
    from lxml import etree

    start = root
    site = False
    if page:
        found = root.xpath("//*[local-name()='main' or @role='main']")
        if len(found) != 1:
            found = root.xpath("//*[local-name()='article']")
        if len(found) == 1:
            start = found[0]
        else:
            site = bool(root.xpath("//*[local-name()='nav' or local-name()='article']"))
            bodies = root.xpath("//*[local-name()='body']")
            start = bodies[0] if bodies else root
    inside = 0  # <main>/<article> ancestors
    lists: list[list[int]] = []  # [ordered, count] of open lists
    pre = 0
    walker = etree.iterwalk(start, events=("start", "end"))
    skipped: Any = None
    for event, el in walker:
        tag = _tag(el)
        if event == "start":
            if not isinstance(el.tag, str):  # an entity left unexpanded, e.g. &nbsp;
                if el.tag is etree.Entity:
                    code = html.entities.name2codepoint.get(el.name, 0x20)
                    _text(b, chr(code), pre)
                continue
            if _skip(el, tag, page and inside == 0, site):
                walker.skip_subtree()
                skipped = el
                continue
            if tag in ("main", "article") or el.get("role") == "main":
                inside += 1
            if tag in PARAGRAPH:
                b.block(2)
            elif tag in LINE:
                b.block(1)
            if tag in LEVELS:
                b.mark(HEADING, plain(el), LEVELS[tag])
            elif tag in ("ul", "ol"):
                first = el.get("start", "1")
                lists.append([tag == "ol", int(first) - 1 if first.isdigit() else 0])
            elif tag == "li" and lists:
                lists[-1][1] += 1
                b.inline(f"{lists[-1][1]}. " if lists[-1][0] else "- ")
            elif tag in ("td", "th") and el.getprevious() is not None:
                b.inline(" | ")
            elif tag == "pre":
                pre += 1
            if el.text:
                _text(b, el.text, pre)
            continue
        if el is skipped:
            skipped = None
        elif isinstance(el.tag, str):
            if tag in ("main", "article") or el.get("role") == "main":
                inside -= 1
            if tag in ("ul", "ol") and lists:
                lists.pop()
            elif tag == "pre":
                pre -= 1
            if tag in PARAGRAPH:
                b.block(2)
            elif tag in LINE:
                b.block(1)
        if el is not start and el.tail:
            _text(b, el.tail, pre)


def _text(b: Builder, s: str, pre: int) -> None:
    if pre:
        b.raw(s)
    else:
        b.inline(s)


def _skip(el: Any, tag: str, outside: bool, site: bool) -> bool:
    role = (el.get("role") or "").lower()
    if tag in SKIP or role == "navigation":
        return True
    if el.get("hidden") is not None or el.get("aria-hidden") == "true":
        return True
    if _HIDDEN.search(el.get("style") or ""):
        return True
    if not outside:
        return False
    if role in CHROME_ROLES:
        return True
    return tag in CHROME and (site or _mostly_links(el))


def _mostly_links(el: Any) -> bool:
    """Whether most of the element's text is in links (or it holds a form): navigation."""
    if el.xpath(".//*[local-name()='form' or local-name()='nav']"):
        return True
    total = len(plain(el).split())
    linked = sum(len(plain(a).split()) for a in el.xpath(".//*[local-name()='a']"))
    return total > 0 and linked * 2 > total


def charset(data: bytes, fallback: str) -> str:
    """A byte-order mark's encoding, else the document's declared one, else `fallback`."""
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                      (codecs.BOM_UTF16_BE, "utf-16")):  # fmt: skip
        if data.startswith(bom):
            return name
    head = data[:4096]
    m = _XML_ENCODING.search(head) or _META_CHARSET.search(head)
    if m:
        name = m.group(1).decode("ascii")
        try:
            codecs.lookup(name)
            return name
        except LookupError:
            pass
    return fallback


def extract_html(path: Path, encoding: str, limits: Limits) -> Extracted:
    """An HTML or XHTML file's main text and headings."""
    data = read_bytes(path, limits.max_bytes)
    sha = hashlib.sha256(data).hexdigest()
    enc = charset(data, encoding)
    text = data.decode(enc, "replace") if enc == "utf-16" else decode(path, data, enc)
    utf8 = text.encode("utf-8")
    root = None
    if path.suffix.lower() in (".xhtml", ".xht") or utf8.lstrip().startswith(b"<?xml"):
        from lxml import etree

        try:
            root = parse_xml(re.sub(rb"^\s*<\?xml[^>]*\?>", b"", utf8), str(path))
        except etree.XMLSyntaxError:
            root = None  # not well-formed: read it as HTML
    if root is None:
        root = parse_html(utf8, str(path))
    b = Builder(str(path), limits.max_chars)
    walk(root, b, page=True)
    out = b.text()
    if not out.strip():
        raise InputError(f"{path} holds no text", "Pass a page with some text.")
    return Extracted(out, "html", sha, b.marks)
