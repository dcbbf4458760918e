"""Which reader a file needs, and the readers of line-based text: plain text, Markdown, code.

`extract(path)` is the one entry point: a PDF (by its ``%PDF-`` header), an EPUB (a zip whose
first member says ``application/epub+zip``, or any zip named ``.epub``), HTML/XHTML (by name),
Markdown, source code and plain text (by name; anything else is read as plain text). Every
failure is an InputError naming the file and the problem, with a fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from cascade_cli.documents.base import HEADING, Extracted, Limits, Mark, label, line_starts
from cascade_cli.documents.reading import head, read_text
from cascade_cli.documents.wrap import unwrap
from cascade_cli.errors import InputError

MARKDOWN = {".md", ".markdown", ".mdown", ".mkd", ".mkdn", ".rmd"}
HTML = {".html", ".htm", ".xhtml", ".xht", ".shtml"}
#: Source code and configuration: read as text, cited by line, no headings guessed.
CODE = {
    ".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".java", ".kt",
    ".kts", ".scala", ".go", ".rs", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".rb", ".php",
    ".pl", ".pm", ".lua", ".swift", ".m", ".mm", ".r", ".jl", ".hs", ".ml", ".mli", ".ex",
    ".exs", ".erl", ".clj", ".lisp", ".el", ".scm", ".sh", ".bash", ".zsh", ".fish", ".ps1",
    ".bat", ".sql", ".toml", ".yaml", ".yml", ".json", ".ini", ".cfg", ".xml", ".css", ".scss",
    ".vue", ".svelte", ".dart", ".zig", ".nim", ".v", ".vhd", ".f90", ".cmake", ".mk", ".gradle",
    ".proto", ".tf", ".dockerfile",
}  # fmt: skip
_ZIP = b"PK\x03\x04"
_EPUB_MIME = b"mimetypeapplication/epub+zip"


def sniff(path: Path, head: bytes) -> str:
    """The reader for a file, from its first bytes and its name."""
    suffix = path.suffix.lower()
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(_ZIP) and (suffix == ".epub" or head[30:58] == _EPUB_MIME):
        return "epub"
    if suffix == ".pdf":
        raise InputError(
            f"{path} is not a PDF (it has no %PDF- header)",
            "Check that the file is complete, or rename it if it is another format.",
        )
    if suffix == ".epub":
        raise InputError(
            f"{path} is not an EPUB (it is not a zip archive)",
            "Check that the file is complete (download it again).",
        )
    if suffix in HTML:
        return "html"
    if suffix in MARKDOWN:
        return "markdown"
    if suffix in CODE or path.name in ("Makefile", "Dockerfile", "CMakeLists.txt"):
        return "code"
    return "text"


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_LIST = re.compile(r" {0,3}([-*+]|\d{1,9}[.)])[ \t]")
#: A plain-text heading line: "CHAPTER IV", "Part 2. The Return", "BOOK ONE"...
_TITLED = re.compile(
    r"(?:chapter|part|book|volume|section|act|canto|appendix|prologue|epilogue)\b[^.!?]{0,60}\.?",
    re.IGNORECASE,
)


def markdown_marks(text: str) -> list[Mark]:
    """Markdown's ATX (#) and setext (=== / ---) headings, outside fenced code blocks."""
    marks: list[Mark] = []
    fence = ""
    prev, prev_at = "", 0
    at = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if fence:
            if body.lstrip().startswith(fence):
                fence = ""
            body = ""
        elif m := _FENCE.match(body):
            fence = m.group(1)
            body = ""
        elif m := _ATX.match(body):
            heading = (m.group(2) or "").strip()
            if heading:
                marks.append(
                    Mark(at + body.index(heading), HEADING, label(heading), len(m.group(1)))
                )
            body = ""
        elif (m := _SETEXT.match(body)) and prev.strip() and not _LIST.match(prev):
            level = 1 if m.group(1).startswith("=") else 2
            lead = len(prev) - len(prev.lstrip())
            marks.append(Mark(prev_at + lead, HEADING, label(prev), level))
            body = ""  # the underline ends the heading; it heads nothing itself
        prev, prev_at = body, at
        at += len(line)
    return marks


def text_marks(text: str) -> list[Mark]:
    """Headings of a plain text, guessed: a short line alone between blank lines that is all
    capitals ("PERSUASION") or names a chapter, part, book... ("Chapter 4", "PART TWO")."""
    marks: list[Mark] = []
    lines = text.splitlines(keepends=True)
    at = 0
    for i, line in enumerate(lines):
        body = line.strip()
        if (
            body
            and len(body) <= 70
            and (i == 0 or not lines[i - 1].strip())
            and (i + 1 == len(lines) or not lines[i + 1].strip())
            and (
                _TITLED.fullmatch(body)
                or (body.isupper() and body[0].isalnum() and sum(map(str.isalpha, body)) >= 3)
            )
        ):
            marks.append(Mark(at + line.index(body[0]), HEADING, label(body), 1))
        at += len(line)
    return marks


def extract(path: Path, encoding: str = "utf-8", limits: Limits | None = None) -> Extracted:
    """The file's plain text and location map (see the module's docstring for the formats)."""
    limits = limits or Limits()
    kind = sniff(path, head(path))
    if kind == "pdf":
        from cascade_cli.documents.pdf import extract_pdf

        return extract_pdf(path, limits)
    if kind == "epub":
        from cascade_cli.documents.epub import extract_epub

        return extract_epub(path, limits)
    if kind == "html":
        from cascade_cli.documents.html import extract_html

        return extract_html(path, encoding, limits)
    text, sha = read_text(path, encoding)
    if len(text) > limits.max_chars:
        raise InputError(
            f"{path} holds more than {limits.max_chars // 2**20} Mi characters of text",
            "Split it into smaller files.",
        )
    marks = {"markdown": markdown_marks, "text": text_marks}.get(kind, lambda _: [])(text)
    if kind != "text":
        return Extracted(text, kind, sha, marks, lines=True)
    return Extracted(unwrap(text), kind, sha, marks, lines=True, starts=line_starts(text))
