"""Documents as sold: PDF, EPUB, HTML, Markdown, plain text and source code turned into plain
text plus a location map (pages, chapters, headings, lines) that citations name.

Depends on nothing of cascade's but its errors; lxml and pypdfium2 are imported only when a
file of theirs is read (pypdfium2 only in the PDF reader's child process).
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
