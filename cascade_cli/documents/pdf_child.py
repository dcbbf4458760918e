"""The PDF reader's child process: `python -m cascade_cli.documents.pdf_child PATH MAX_PAGES
MAX_CHARS MAX_BYTES` prints {"pages": [text, ...]} or {"error": kind, ...} as JSON on stdout.

It caps its own address space first (RLIMIT_AS), so a PDF that makes PDFium allocate without
end fails here, not in the parent; the parent kills it past its time cap (documents.pdf).
"""

from __future__ import annotations

import json
import re
import resource
import sys


def read(path: str, max_pages: int, max_chars: int) -> dict[str, object]:
    """The text of each page, or the error that stopped it."""
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        msg = str(exc)
        if "password" in msg.lower():
            return {"error": "password", "detail": msg}
        if "security" in msg.lower():
            return {"error": "security", "detail": msg}
        found = re.search(r"\((PDFium: [^)]*)\)", msg)
        return {"error": "format", "detail": found.group(1) if found else msg}
    n = len(doc)
    if n > max_pages:
        return {"error": "pages", "detail": str(n)}
    pages: list[str] = []
    chars = 0
    for i in range(n):
        try:
            page = doc[i]
            text = page.get_textpage().get_text_range()
        except pdfium.PdfiumError as exc:
            return {"error": "page", "page": i + 1, "detail": str(exc)}
        chars += len(text)
        if chars > max_chars:
            return {"error": "chars", "detail": str(chars)}
        pages.append(text)
    return {"pages": pages}


def main(argv: list[str]) -> None:
    path, max_pages, max_chars, max_bytes = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = max_bytes if hard == resource.RLIM_INFINITY else min(max_bytes, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    answer = read(path, max_pages, max_chars)
    sys.stdout.write(json.dumps(answer, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1:])
