"""Pictures of text (screenshots, photos of whiteboards, scanned letters), read by OCR and cited by
their recognised lines."""

from __future__ import annotations

from .. import ocr as ocr_engine
from ..filters import FileMetadata
from .document import Document, LoadError
from .pdf import recognised_pages, text_blocks


def needs_ocr(data: bytes) -> bool:
    return True


def read_ahead(data: bytes, ocr) -> None:
    """Starts OCR of a picture file before its turn (ocr.Ocr.read_ahead). A picture that cannot be
    opened is left alone: `read_image` says why when its turn comes."""
    import pymupdf

    try:
        with pymupdf.open(stream=data) as picture:
            if picture.page_count:
                ocr.read_ahead(picture[0], text_blocks)
    except Exception:  # pymupdf raises several unrelated types for damaged files
        pass


def read_image(data: bytes, kind: str, ocr=None) -> Document:
    """A picture's text as OCR reads it (a GIF's or TIFF's first frame), cited by its lines."""
    import pymupdf

    if ocr is None:
        raise LoadError(ocr_engine.missing_sentence("an image"))
    try:
        with pymupdf.open(stream=data) as picture:
            if picture.page_count < 1:
                raise LoadError("unreadable image (no picture in it)")
            read = next(recognised_pages([picture[0]], ocr, 1))
            if isinstance(read, str):
                raise LoadError(read)
            blocks = read
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"unreadable image ({exc})") from None
    text = "\n\n".join("\n".join(block.lines) for block in blocks).strip()
    if not text:
        raise LoadError("no text found in the image")
    return Document(text + "\n", kind, metadata=FileMetadata(recognised=(1,)))

