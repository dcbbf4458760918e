"""PDF to text (pypdfium2, PDFium's text layer): page after page, each page a mark.

PDFium is native code reading untrusted bytes, so it runs in a child process
(documents.pdf_child) with a cap on its address space, its pages and its characters, and is
killed after `Limits.seconds`: a PDF that loops, eats memory or crashes the reader ends in one
line about that file, and the caller's process (its store, its model) is never touched.
A PDF with no text layer (a scan) is refused, saying so; pages without text in an otherwise
readable PDF are noted. PDFium joins words it hyphenated at a line's end (it marks the hyphen
U+FFFE, dropped here). A page's running head or foot is dropped — a first or last line that
is only a page number (`12`, `- 12 -`, `xii`, `Page 12`), or that repeats, numbers aside, on
most pages — and a sentence that runs on to the next page is not cut by a paragraph break.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from cascade_cli.documents.base import PAGE, Builder, Extracted, Limits
from cascade_cli.documents.reading import open_file
from cascade_cli.documents.wrap import unwrap
from cascade_cli.errors import InputError

#: The directory cascade_cli is imported from: the child imports the same code.
_ROOT = Path(__file__).resolve().parents[2]
_FIX_BROKEN = "Check that the file is complete (download it again), or repair it with qpdf."
#: Characters a page's text is cleaned of: PDFium's hyphen marks, NULs, other controls.
_CLEAN: dict[int, str | None] = {c: " " for c in range(1, 32) if c not in (0x09, 0x0A, 0x0D)}
_CLEAN.update({0xFFFE: None, 0x02: None, 0x00: None})
#: A line that is only a page number.
_FOLIO = re.compile(r"\W*(?:page\s+)?(?:\d{1,5}|[ivxlcdm]{1,8})(?:\s+of\s+\d{1,5})?\W*", re.I)
#: Where a paragraph cannot have ended: the page's last character.
_RUNS_ON = re.compile(r"[^.!?:;\"'”’)\]]\Z")


def running(pages: list[str]) -> list[str]:
    """The pages without their running heads and feet (see the module's docstring)."""
    split = [p.strip("\n").split("\n") for p in pages]

    def key(line: str) -> str:
        return re.sub(r"\d+", "#", line.strip().lower())

    ends = Counter(key(ls[i]) for ls in split if ls for i in {0, len(ls) - 1})
    common = {k for k, n in ends.items() if k and n >= max(3, len(pages) // 2)}
    out = []
    for lines in split:
        for at in (0, -1):
            while lines and (_FOLIO.fullmatch(lines[at].strip()) or key(lines[at]) in common):
                lines.pop(at)
        out.append("\n".join(lines))
    return out


def _run(path: Path, limits: Limits) -> dict[str, object]:
    """The child's answer: {"pages": [...]} or {"error": kind, ...}."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)}  # fmt: skip
    cmd = [
        sys.executable,
        "-m",
        "cascade_cli.documents.pdf_child",
        str(path),
        str(limits.max_pages),
        str(limits.max_chars),
        str(limits.pdf_memory),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, timeout=limits.seconds, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            f"{path} took more than {limits.seconds:g} s to read and was stopped "
            "(a PDF whose pages or objects loop?)",
            _FIX_BROKEN,
        ) from None
    if b"MemoryError" in proc.stderr:
        raise InputError(
            f"{path} needs more than {limits.pdf_memory // 2**20} MiB of memory to read (refused)",
            "Check where the file came from, or repair it with qpdf.",
        )
    if proc.returncode != 0 or not proc.stdout:
        why = (
            f"signal {signal.Signals(-proc.returncode).name}"
            if proc.returncode < 0
            else f"exit status {proc.returncode}"
        )
        raise InputError(f"{path} made the PDF reader crash ({why})", _FIX_BROKEN)
    answer: dict[str, object] = json.loads(proc.stdout)
    return answer


def _error(path: Path, answer: dict[str, object], limits: Limits) -> InputError:
    kind, detail = answer.get("error"), str(answer.get("detail", ""))
    if kind == "password":
        return InputError(
            f"{path} is encrypted with a password",
            "Remove the password (e.g. `qpdf --decrypt --password=PASSWORD in.pdf out.pdf`) "
            "and ingest the copy.",
        )
    if kind == "security":
        return InputError(
            f"{path} is encrypted with a scheme the PDF reader does not know (DRM?)",
            "Ingest a DRM-free copy.",
        )
    if kind == "pages":
        return InputError(
            f"{path} has more than {limits.max_pages} pages", "Split it (e.g. with qpdf --pages)."
        )
    if kind == "chars":
        return InputError(
            f"{path} holds more than {limits.max_chars // 2**20} Mi characters of text",
            "Split it (e.g. with qpdf --pages).",
        )
    if kind == "page":
        return InputError(
            f"{path}: page {answer.get('page')} cannot be read (a broken or looping page tree)",
            _FIX_BROKEN,
        )
    return InputError(f"{path} is not a readable PDF ({detail})", _FIX_BROKEN)


def extract_pdf(path: Path, limits: Limits) -> Extracted:
    """The PDF's text layer, one page after another, with a mark at each page."""
    sha = hashlib.sha256()
    try:
        with open_file(path) as fh:
            while block := fh.read(1 << 20):
                sha.update(block)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}", "Check the file's permissions.") from None
    answer = _run(path, limits)
    if "error" in answer:
        raise _error(path, answer, limits)
    raw = answer["pages"]
    assert isinstance(raw, list)
    pages = [str(p).replace("\r\n", "\n").replace("\r", "\n").translate(_CLEAN) for p in raw]
    blank = [i + 1 for i, p in enumerate(pages) if not p.strip()]
    if len(blank) == len(pages):
        raise InputError(
            f"{path} has no text layer (a scanned PDF? its {len(pages)} pages hold no text)",
            "Run OCR on it first (e.g. `ocrmypdf in.pdf out.pdf`) and ingest the result.",
        )
    b = Builder(str(path), limits.max_chars)
    prev = ""
    for i, page in enumerate(running(pages), 1):
        text = page.strip("\n")
        on = prev and _RUNS_ON.search(prev) and text[:1].islower()
        b.block(1 if on else 2)  # a sentence going on to the next page stays one paragraph
        b.mark(PAGE, str(i))  # a page without text gets no mark: the next one replaces it
        if text.strip():
            b.raw(text)
            prev = text
    notes = []
    if blank:
        shown = ", ".join(map(str, blank[:10])) + (" …" if len(blank) > 10 else "")
        notes.append(f"{len(blank)} of {len(pages)} pages have no text (scanned?): {shown}")
    # typeset lines are layout, not text: joined, as a plain text's hard wraps are
    return Extracted(unwrap(b.text()), "pdf", sha.hexdigest(), b.marks, notes=notes)
