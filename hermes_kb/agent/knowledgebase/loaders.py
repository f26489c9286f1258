"""Turn a file's bytes into a Document: plain text plus where each page starts.

The one door to the readers in kinds/: the registry names each kind's reader, and every file comes
through `load`, so a reader's failure is that file's skip reason, never the end of the run, and both
stores receive text they can hold.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace

from .kinds import registry
from .kinds.document import Document, LoadError

log = logging.getLogger(__name__)


def is_plain_text(kind: str) -> bool:
    """Whether the file's lines are its text's lines (so kb_read streams them) rather than a format to
    convert: plain text, and notes whose front matter is rewritten line for line."""
    return registry.named(kind).lines_are_the_files


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and lone surrogates (a parser's, never text)


def _clean(text: str) -> str:
    """One character for one: offsets, lines and page starts stay true."""
    return _UNSTORABLE.sub("\ufffd", text) if _UNSTORABLE.search(text) else text


def storable(document: Document) -> Document:
    """A document every store can hold: PostgreSQL's text refuses NUL, and no UTF-8 encoder takes a
    lone surrogate, so a byte sequence in one file could fail a team's whole run. Cleaned here, once,
    for both backends, so they index and skip exactly the same files."""
    return replace(document, text=_clean(document.text),
                   headings=tuple((offset, _clean(title)) for offset, title in document.headings))


def load(data: bytes, kind: str, ocr=None) -> Document:
    """The file's text, or LoadError with the reason, whatever the bytes; `ocr` (ocr.Ocr) reads the
    pictures of text in PDFs and image files.

    A parser's own bug on a strange file (python-docx, pymupdf, html.parser) becomes that file's
    skip reason rather than the end of the run. fuzz/fuzz_loaders.py calls the readers directly, past
    this net, so such bugs still surface there and get a precise fix.
    """
    spec = registry.named(kind)
    try:
        reader = spec.read_function()
        return storable(reader(data, kind, ocr) if spec.ocr else reader(data, kind))
    except (LoadError, MemoryError):  # MemoryError: the per-file budget's to report (extraction.py)
        raise
    except Exception as exc:
        log.warning("the %s loader failed on a file", kind, exc_info=True)
        raise LoadError(f"unreadable {kind} file ({type(exc).__name__}: {exc})") from None


def needs_ocr(data: bytes, kind: str) -> bool:
    """Whether reading the file takes OCR: a picture, or a PDF with a page that is a picture of text.
    The indexer reads such files after every other, so keyword search has those first."""
    probe = registry.hook(registry.named(kind).ocr_probe)
    return probe is not None and probe(data)


def read_ahead(data: bytes, kind: str, ocr) -> None:
    """Starts OCR of a file before its turn (ocr.Ocr.read_ahead), where its kind can."""
    start = registry.hook(registry.named(kind).read_ahead)
    if start is not None and ocr is not None:
        start(data, ocr)
