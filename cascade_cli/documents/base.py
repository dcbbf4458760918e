"""What every reader returns: a document's plain text, and where each part of it came from.

A reader builds the text piece by piece with `Builder`, leaving a `Mark` wherever a new page,
chapter or heading begins; the marks (and, for line-based formats, the line starts) are the
document's location map, stored beside its chunks so that a span of the text can be cited.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cascade_cli.errors import InputError

#: The kinds of mark; a "lines" location is computed from the text's line starts instead.
PAGE, CHAPTER, HEADING = "page", "chapter", "heading"
#: Longest label kept (a heading's text is cut there).
LABEL_CHARS = 200


@dataclass(frozen=True)
class Limits:
    """Caps on what reading one file may cost (hostile or broken input fails with one line)."""

    #: bytes of a markup file read into memory (HTML, XHTML)
    max_bytes: int = 256 << 20
    #: characters of extracted text, any format
    max_chars: int = 256 << 20
    #: bytes one EPUB member may decompress to
    max_member: int = 64 << 20
    #: bytes all the EPUB members read may decompress to, together
    max_unzipped: int = 512 << 20
    #: members in an EPUB's zip directory
    max_members: int = 50_000
    #: pages of a PDF
    max_pages: int = 50_000
    #: seconds the PDF reader may run (it runs in a child process, killed after)
    seconds: float = 600.0
    #: address space of the PDF reader's child process, bytes
    pdf_memory: int = 4 << 30


@dataclass(frozen=True)
class Mark:
    """From character `start` of the text on, the text is on this page (`label` its number, 1
    for the first), in this chapter (`label` its title) or under this heading (`label` its text,
    `level` 1 to 6), until the next mark of the kind (a heading: of its level or above)."""

    start: int
    kind: str
    label: str
    level: int = 0


@dataclass
class Extracted:
    """A file turned into plain text, with its location map."""

    text: str
    #: "pdf", "epub", "html", "markdown", "text" or "code"
    format: str
    #: sha256 of the file's bytes (an unchanged file resumes an interrupted ingest)
    sha256: str
    marks: list[Mark] = field(default_factory=list)
    #: whether line numbers name places in the text (plain text, Markdown, source code)
    lines: bool = False
    #: things worth telling the user (e.g. pages without a text layer), one line each
    notes: list[str] = field(default_factory=list)
    #: the file's line starts, where the text's line breaks are not all the file's (a
    #: hard-wrapped paragraph joined into one line: documents.wrap.unwrap)
    starts: list[int] | None = None

    def line_starts(self) -> list[int]:
        """The character offset where each line of the file begins (line 1 at index 0); empty
        unless the format has meaningful lines."""
        if not self.lines:
            return []
        return list(self.starts) if self.starts is not None else line_starts(self.text)


def line_starts(text: str) -> list[int]:
    """The character offset where each line of `text` begins (line 1 at index 0)."""
    starts = [0]
    find = text.find
    at = find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = find("\n", at + 1)
    if starts[-1] == len(text) and len(starts) > 1:
        starts.pop()  # the newline that ends the last line begins no line
    return starts


def label(text: str) -> str:
    """Whitespace collapsed, cut to LABEL_CHARS."""
    clean = " ".join(text.split())
    return clean if len(clean) <= LABEL_CHARS else clean[: LABEL_CHARS - 1] + "…"


class Builder:
    """Text assembled from pieces: paragraph and line breaks between blocks, runs of inline
    whitespace collapsed, marks placed where the next text begins, and a cap on its length."""

    def __init__(self, what: str, max_chars: int) -> None:
        self.what = what
        self.max_chars = max_chars
        self.parts: list[str] = []
        self.n = 0
        self.marks: list[Mark] = []
        self._pending: list[Mark] = []  # placed at the next text written
        self._break = 0  # newlines owed before the next text (0, 1 or 2)
        self._space = False  # a space owed before the next inline text

    def _write(self, s: str) -> None:
        if self._break and self.n:
            s = "\n" * self._break + s
        elif self._space and self.n:
            s = " " + s
        self._break = 0
        self._space = False
        if self._pending:
            lead = len(s) - len(s.lstrip("\n "))
            for m in self._pending:
                self.marks.append(Mark(self.n + lead, m.kind, m.label, m.level))
            self._pending.clear()
        self.parts.append(s)
        self.n += len(s)
        if self.n > self.max_chars:
            raise InputError(
                f"{self.what} holds more than {self.max_chars // 2**20} Mi characters of text",
                "Split it into smaller files.",
            )

    def block(self, newlines: int = 2) -> None:
        """End the current line (1) or paragraph (2)."""
        self._break = max(self._break, newlines)
        self._space = False

    def inline(self, s: str) -> None:
        """Flowing text: whitespace runs become one space; nothing at the start of a line."""
        if not s:
            return
        words = s.split()
        if not words:
            self._space = True
            return
        if s[0].isspace():
            self._space = True
        self._write(" ".join(words))
        self._space = s[-1].isspace()

    def raw(self, s: str) -> None:
        """Text kept as it is (preformatted code, a PDF page)."""
        if s:
            self._write(s)

    def mark(self, kind: str, text: str, level: int = 0) -> None:
        """A page, chapter or heading begins with the next text written. A pending mark of the
        same kind (and, for a heading, the same level or deeper) that got no text is dropped."""
        self._pending = [
            m for m in self._pending if m.kind != kind or (kind == HEADING and m.level < level)
        ]
        self._pending.append(Mark(0, kind, label(text), level))

    def text(self) -> str:
        return "".join(self.parts)
