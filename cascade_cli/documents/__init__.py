"""Documents: what a file becomes before and after its KV is computed.

The readers (base, formats, html, epub, pdf, wrap, tree, reading, locate) turn PDF, EPUB, HTML,
Markdown, plain text and source code into plain text plus a location map (pages, chapters,
headings, lines) that citations name; they depend on nothing of cascade's but its errors, and
lxml and pypdfium2 are imported only when a file of theirs is read (pypdfium2 only in the PDF
reader's child process). The rest is a document's life in the store: the document frame
(frame: the sink prefix chunks are computed after), the catalog, ingest with its sliding
writer, collections, location maps, recompute of a damaged chunk, recall re-indexing, verify,
and the shared tier (remote_source: content addresses, fetch and publish; manifests).
"""

from cascade_cli.documents.base import CHAPTER, HEADING, PAGE, Extracted, Limits, Mark
from cascade_cli.documents.formats import extract
from cascade_cli.documents.locate import Location, where
from cascade_cli.documents.reading import read_text

__all__ = [
    "CHAPTER",
    "HEADING",
    "PAGE",
    "Extracted",
    "Limits",
    "Location",
    "Mark",
    "extract",
    "read_text",
    "where",
]
