"""Turn a file's bytes into a Document: plain text plus where each page starts.

Loaders never raise anything but LoadError, so one bad file can only ever
skip itself.
"""

from __future__ import annotations

import base64
import logging
import zipfile
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from io import BytesIO
from typing import Callable

log = logging.getLogger(__name__)


class LoadError(Exception):
    """The file cannot be turned into text; the message is the skip reason."""


@dataclass(frozen=True)
class Document:
    text: str
    kind: str
    page_starts: tuple[int, ...] = ()  # character offset where page i+1 begins (PDF only)


# Longest first: the UTF-32-LE mark begins with the UTF-16-LE one.
BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
BINARY_PROBE = 8192


def bom_encoding(data: bytes) -> tuple[str, int] | None:
    """(codec, BOM length) when data starts with a Unicode byte order mark."""
    for mark, codec in BOMS:
        if data.startswith(mark):
            return codec, len(mark)
    return None


def decode_text(data: bytes) -> str:
    """Text files: decoded by their BOM (UTF-8, -16, -32) or as UTF-8; binaries rejected (a NUL in
    the first 8 KB of text); never fails on a stray undecodable byte."""
    codec, skip = bom_encoding(data) or ("utf-8", 0)
    if codec == "utf-8":
        if b"\x00" in data[:BINARY_PROBE]:
            raise LoadError("binary file")
        text = data[skip:].decode("utf-8", errors="replace")
    else:
        text = data[skip:].decode(codec, errors="replace")
        if "\x00" in text[:BINARY_PROBE]:  # a binary that happens to start with FF FE
            raise LoadError("binary file")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _plain(data: bytes, kind: str) -> Document:
    return Document(decode_text(data), kind)


class _TextExtractor(HTMLParser):
    """Keeps visible text, turns headings into markdown so the chunker sees structure."""

    _SKIP = {"script", "style", "noscript", "template", "svg"}
    _BLOCK = {"p", "div", "li", "tr", "br", "section", "article", "pre", "table", "ul", "ol", "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip_depth = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in self._SKIP:
            self._skip_depth += 1
        elif len(tag) == 2 and tag[0] == "h" and tag[1].isdigit():
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif (len(tag) == 2 and tag[0] == "h" and tag[1].isdigit()) or tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip_depth:
            self.parts.append(data)

    def parse_marked_section(self, i: int, report: int = 1) -> int:
        """`<![x ...`: the stdlib raises AssertionError on any keyword but CDATA, IF and a few more
        (found by fuzz/fuzz_loaders.py); a browser reads it as a bogus comment up to the next '>'."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i + 3)
            return -1 if end < 0 else end + 1


def _html(data: bytes, kind: str) -> Document:
    extractor = _TextExtractor()
    extractor.feed(decode_text(data))
    extractor.close()
    lines = [line.strip() for line in "".join(extractor.parts).splitlines()]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return Document(text.strip() + "\n", "markdown")


# A PDF's streams are compressed too. Extracting a page costs ~46 bytes of memory per byte of its
# content stream (an 8 MB stream: 0.52 GB RSS; 60 MB: 3 GB), and one 0.2 MB file can hold a 60 MB
# stream. So every stream text extraction may decode (all but images) is inflated here first, in
# bounded steps, before pymupdf sees the page; and the text taken out of the whole file is capped.
MAX_PDF_STREAM_BYTES = 8_000_000
MAX_PDF_STREAMS_BYTES = 256_000_000
MAX_PDF_TEXT_CHARS = 32_000_000


def _flate_size(raw: bytes, budget: int) -> int:
    """Inflated size of a FlateDecode stream, stopping once past budget (never holding more than a step)."""
    inflater = zlib.decompressobj()
    size, pending = 0, raw
    while pending and size <= budget:
        size += len(inflater.decompress(pending, 1 << 20))
        pending = inflater.unconsumed_tail
    return size


def check_pdf_streams(pdf) -> None:
    """LoadError when one non-image stream would inflate past MAX_PDF_STREAM_BYTES, or all of them
    past MAX_PDF_STREAMS_BYTES. Streams under other filters than Flate are left to pymupdf: LZW and
    RLE reach nothing like Flate's thousandfold."""
    total = 0
    for xref in range(1, pdf.xref_length()):
        if not pdf.xref_is_stream(xref) or pdf.xref_get_key(xref, "Subtype")[1] == "/Image":
            continue
        filters = pdf.xref_get_key(xref, "Filter")[1]
        if "FlateDecode" not in filters:
            continue
        raw = pdf.xref_stream_raw(xref)
        if filters != "/FlateDecode":
            raw = _outer_decoded(raw, filters)
        size = _flate_size(raw, MAX_PDF_STREAM_BYTES)
        total += size
        if size > MAX_PDF_STREAM_BYTES or total > MAX_PDF_STREAMS_BYTES:
            raise LoadError(f"its compressed streams expand past the limit for PDFs ({MAX_PDF_STREAM_BYTES} bytes "
                            f"a stream, {MAX_PDF_STREAMS_BYTES} in all): a compression bomb?")


def _outer_decoded(raw: bytes, filters: str) -> bytes:
    """[/ASCII85Decode /FlateDecode] and the like: undo the text encodings in front of Flate."""
    for name in filters.strip("[]").split():
        if name == "/FlateDecode":
            return raw
        if name == "/ASCII85Decode":
            raw = base64.a85decode(raw.strip().removesuffix(b"~>"), adobe=False, ignorechars=b" \t\n\r\x0b\x0c")
        elif name == "/ASCIIHexDecode":
            raw = bytes.fromhex(raw.strip().removesuffix(b">").decode("ascii", "replace"))
        else:
            return b""  # an unusual chain: left to pymupdf
    return raw


def _pdf(data: bytes, kind: str) -> Document:
    import pymupdf  # heavy; only PDF users pay for it

    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            if pdf.needs_pass:
                raise LoadError("encrypted PDF")
            check_pdf_streams(pdf)
            pages, chars = [], 0
            for page in pdf:
                pages.append(page.get_text())
                chars += len(pages[-1])
                if chars > MAX_PDF_TEXT_CHARS:
                    raise LoadError(f"its text runs past {MAX_PDF_TEXT_CHARS} characters, the limit for one PDF")
    except LoadError:
        raise
    except Exception as exc:  # pymupdf raises several unrelated types for damaged files
        raise LoadError(f"unreadable PDF ({exc})") from None
    starts, parts, offset = [], [], 0
    for text in pages:
        text = text.replace("\r\n", "\n").rstrip() + "\n\n"
        starts.append(offset)
        parts.append(text)
        offset += len(text)
    if not "".join(parts).strip():
        raise LoadError("PDF has no extractable text (scanned images?)")
    return Document("".join(parts), "pdf", tuple(starts))


# A zip archive may expand a thousandfold; parsing its XML costs several times more again. Checked
# from the archive's directory before anything is inflated: Python's zipfile never inflates an entry
# past its declared size, so a lying header cannot get round it. Measured with a bomb just under the
# cap (tests/test_attacks.py, test_zip_bombs_...): indexing it stays under MAX_FILE_RSS_BYTES.
MAX_ARCHIVE_EXPANDED_BYTES = 32_000_000
MAX_FILE_RSS_BYTES = 1_000_000_000


def check_archive(data: bytes, limit: int = MAX_ARCHIVE_EXPANDED_BYTES) -> None:
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            expanded = sum(entry.file_size for entry in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
        # NotImplementedError: a header claiming a zip version or feature zipfile lacks (fuzz/fuzz_loaders.py)
        raise LoadError(f"unreadable archive ({exc})") from None
    if expanded > limit:
        raise LoadError(f"expands to {expanded} bytes, over the {limit}-byte limit for archives (a zip bomb?)")


def _docx(data: bytes, kind: str) -> Document:
    try:
        import docx
    except ImportError:
        raise LoadError("DOCX support needs the optional extra: pip install 'hermes-knowledgebase[docx]'") from None
    check_archive(data)
    try:  # python-docx surfaces zip and xml errors directly, while opening and while reading parts
        document = docx.Document(BytesIO(data))
        # python-docx looks a paragraph's style up by XPath over the whole style sheet each time
        # (`paragraph.style`): 450k paragraphs took 517 s. One table of style names, read once, is linear.
        style_names = {style.style_id: style.name or "" for style in document.styles}
        lines = []
        for paragraph in document.paragraphs:
            style = style_names.get(paragraph._p.style, "")
            level = style.removeprefix("Heading ").strip()
            prefix = "#" * int(level) + " " if style.startswith("Heading ") and level.isdigit() else ""
            lines.append(prefix + paragraph.text)
    except Exception as exc:
        raise LoadError(f"unreadable DOCX ({exc})") from None
    return Document("\n\n".join(line for line in lines if line.strip()) + "\n", "markdown")


LOADERS: dict[str, Callable[[bytes, str], Document]] = {
    "markdown": _plain, "text": _plain, "rst": _plain, "python": _plain,
    "javascript": _plain, "typescript": _plain, "yaml": _plain, "toml": _plain,
    "json": _plain, "html": _html, "pdf": _pdf, "docx": _docx,
}


def is_plain_text(kind: str) -> bool:
    """Whether the file's bytes are its text (so it can be streamed) rather than a format to convert."""
    return LOADERS.get(kind, _plain) is _plain


def load(data: bytes, kind: str) -> Document:
    """The file's text, or LoadError with the reason, whatever the bytes.

    A parser's own bug on a strange file (python-docx, pymupdf, html.parser) becomes that file's
    skip reason rather than the end of the run. fuzz/fuzz_loaders.py calls LOADERS directly, past
    this net, so such bugs still surface there and get a precise fix.
    """
    try:
        return LOADERS.get(kind, _plain)(data, kind)
    except LoadError:
        raise
    except Exception as exc:
        log.warning("the %s loader failed on a file", kind, exc_info=True)
        raise LoadError(f"unreadable {kind} file ({type(exc).__name__}: {exc})") from None
