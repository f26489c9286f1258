"""Turn a file's bytes into a Document: plain text plus where each page starts.

Loaders never raise anything but LoadError, so one bad file can only ever
skip itself.
"""

from __future__ import annotations

import base64
import logging
import re
import zipfile
import zlib
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from io import BytesIO
from typing import Callable, Iterable, Iterator

import regex

from . import analysis
from . import ocr as ocr_engine
from .filters import FileMetadata

log = logging.getLogger(__name__)


class LoadError(Exception):
    """The file cannot be turned into text; the message is the skip reason."""


# A skip for a missing library names it in this shape, so the next run can see the cure has arrived
# (cured_skip) and read the file again, whatever its stat: as files waiting for OCR are.
_MISSING_EXTRA = re.compile(r"\(the Python module ([\w.]+) is not installed\)")


def missing_extra(what: str, module: str, extra: str) -> str:
    return (f"{what} files need the optional extra (the Python module {module} is not installed): "
            f"pip install 'hermes-knowledgebase[{extra}]'")


def cured_skip(error: str | None) -> bool:
    """Whether a file skipped for a missing module can be read now: the module is importable."""
    import importlib.util

    found = _MISSING_EXTRA.search(error or "")
    if found is None:
        return False
    try:
        return importlib.util.find_spec(found.group(1)) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Document:
    text: str
    kind: str
    page_starts: tuple[int, ...] = ()  # character offset where part i+1 begins (citations.PART_UNITS: a page, a cell ...)
    # (offset where an outline entry's section begins, its path "2 Setup > 2.1 Needs"), ascending:
    # a PDF's table of contents, which its text alone no longer shows as headings (PDF only)
    headings: tuple[tuple[int, str], ...] = ()
    # The source file's 1-based line for each line of `text` (converted formats whose source has lines
    # a person opens: HTML): citations and kb_read then speak of the file's own lines.
    source_lines: tuple[int, ...] = ()
    metadata: FileMetadata = FileMetadata()  # a note's tags and front matter date (filters.py)
    # What of the file could not be read though the rest was (one sentence: "2 of 40 scanned pages not
    # read: ..."), for the run's summary; "" when it was read whole.
    left_out: str = ""


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
    """Text files: decoded by their BOM (UTF-8, -16, -32), else as UTF-8, else in the encoding
    charset-normalizer finds (a Latin-1 "café" must not come out as "caf\ufffd"); binaries rejected
    (a NUL in the first 8 KB of text); never fails on a stray undecodable byte."""
    codec, skip = bom_encoding(data) or ("utf-8", 0)
    if codec == "utf-8":
        if b"\x00" in data[:BINARY_PROBE]:
            raise LoadError("binary file")
        text = data[skip:].decode("utf-8", errors="replace") if skip else _decode_unmarked(data)
    else:
        text = data[skip:].decode(codec, errors="replace")
        if "\x00" in text[:BINARY_PROBE]:  # a binary that happens to start with FF FE
            raise LoadError("binary file")
    return text.replace("\r\n", "\n").replace("\r", "\n")


# charset-normalizer reads a sample around the first byte that is not UTF-8, not the whole file: its
# cost grows with every code page it tries, and the bytes before that point are plain ASCII or UTF-8.
DETECTION_SAMPLE_BYTES = 64 * 1024
# Its candidates for short Western text score within a hair of each other (a French cp1252 letter came
# out as cp1257, "très" as "trčs"); cp1252, the superset of Latin-1 that Windows writes, is by far the
# most common of them, so it wins whenever it scores within this much of the detector's favourite.
CP1252_CHAOS_MARGIN = 0.1


def _decode_unmarked(data: bytes) -> str:
    """Bytes without a BOM: UTF-8 when they are (the fast path), else the detected encoding."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    sample = _sample_around(data, first_bad)
    if _mostly_utf8(sample):
        return data.decode("utf-8", errors="replace")  # UTF-8 with a stray byte, not another encoding
    return data.decode(_detected_encoding(sample) or "utf-8", errors="replace")


def _sample_around(data: bytes, position: int) -> bytes:
    """Up to DETECTION_SAMPLE_BYTES from the line holding position on (from the start when it fits)."""
    begin = 0 if position < DETECTION_SAMPLE_BYTES // 2 else data.rfind(b"\n", 0, position) + 1
    return data[begin:begin + DETECTION_SAMPLE_BYTES]


def _mostly_utf8(sample: bytes) -> bool:
    """More well-formed UTF-8 characters than broken sequences: a UTF-8 file with a damaged byte, which
    a single-byte code page would turn into mojibake throughout ("MÃ¼nchen")."""
    text = sample.decode("utf-8", errors="replace")
    broken = text.count("\ufffd")
    non_ascii = len(text) - len(text.encode("ascii", errors="ignore"))
    return non_ascii - broken > broken


def _detected_encoding(sample: bytes) -> str | None:
    from charset_normalizer import from_bytes  # only files that are not UTF-8 pay for it

    matches = from_bytes(sample)
    best = matches.best()
    if best is None:
        return None
    if any("cp1252" in match.could_be_from_charset and match.chaos <= best.chaos + CP1252_CHAOS_MARGIN
           for match in matches):
        return "cp1252"
    return best.encoding


def _plain(data: bytes, kind: str) -> Document:
    return Document(decode_text(data), kind)


_BOILERPLATE_TAGS = frozenset({"nav", "footer", "aside"})
_BOILERPLATE_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "complementary"})
# class/id words of site chrome in the generators docs come from (DocBook, Sphinx, MkDocs, Docusaurus,
# javadoc, rustdoc): navigation bars, breadcrumbs, sidebars, footers, tables of contents.
_BOILERPLATE_WORDS = frozenset("""
navheader navfooter navbar navigation nav breadcrumb breadcrumbs sidebar sphinxsidebar related footer
toc toctree-wrapper md-sidebar md-header md-footer theme-doc-sidebar-container pagination skip-link
headerlink sidebar-wrapper table-of-contents indexdiv genindextable
""".split())
_ADMONITION_WORDS = frozenset("note tip warning caution important admonition hint seealso attention danger error".split())
_ADMONITION_TITLES = re.compile(r"^(?:#+ )?((?:note|tip|warning|caution|important|hint|see also|attention|danger)\b.{0,40})$",
                                re.IGNORECASE)
# A block this full of links, with at least this many, is a table of contents or an index, not prose.
LINK_DENSITY = 0.6
MIN_LINKS = 3


class _TextExtractor(HTMLParser):
    """A page's main text with markdown headings, each output line remembering the source line it
    came from. Site chrome is left out by structure: <nav>/<footer>/<aside>, ARIA landmarks and the
    class names doc generators give navigation; blocks made mostly of links (tables of contents,
    back-of-book indexes) are dropped when they close. Headings inside admonitions stay text."""

    _SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    _BLOCK = {"p", "div", "li", "tr", "br", "section", "article", "pre", "table", "ul", "ol", "blockquote",
              "dl", "dt", "dd", "main", "header", "figure", "figcaption", "td", "th"}
    _LINK_BLOCKS = {"ul", "ol", "dl", "table", "div", "tbody"}
    # A lookup, not tag[1].isdigit(): "h²" passes isdigit() and int() refuses it (found by fuzzing).
    _HEADING_LEVELS = {f"h{level}": level for level in range(1, 7)}
    _VOID = {"br", "img", "hr", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[tuple[str, int]] = []  # (text, source line where it starts); see _mark
        self._skip: list[str] = []  # open elements whose text is left out
        self._skipping: Counter[str] = Counter()  # the same, counted by tag: an end tag's lookup is O(1)
        # [tag, index into parts, and the running totals below when it opened] per open block: a block's
        # own counts are the totals' growth since, so text costs the same at any depth (touching every
        # open block made a page of 40k nested <div> take 32 s, quadratic).
        self._blocks: list[list] = []
        self._chars = self._link_chars = self._link_count = 0  # text chars, of them inside links, links seen
        self._links = 0  # depth of open <a>
        self._admonitions: list[str] = []
        self.title: tuple[str, int] | None = None
        self._in_title = False
        self.has_h1 = False

    @staticmethod
    def _chrome(tag: str, attributes: dict) -> bool:
        if tag in _BOILERPLATE_TAGS or (attributes.get("role") or "").lower() in _BOILERPLATE_ROLES:
            return True
        words = set((attributes.get("class") or "").lower().split()) | {(attributes.get("id") or "").lower()}
        return bool(words & _BOILERPLATE_WORDS)

    def handle_starttag(self, tag: str, attrs) -> None:
        line = self.getpos()[0]
        if tag == "title" and self.title is None:
            self._in_title, self.title = True, ("", line)
        if self._skip:
            if tag not in self._VOID:
                self._skip_open(tag)
            return
        attributes = {name: value for name, value in attrs}
        if tag in self._SKIP or self._chrome(tag, attributes):
            if tag not in self._VOID:
                self._skip_open(tag)
            return
        words = set((attributes.get("class") or "").lower().split())
        if words & _ADMONITION_WORDS:
            self._admonitions.append(tag)
        if tag == "a":
            self._links += 1
            self._link_count += 1
        elif tag in self._HEADING_LEVELS:
            level = self._HEADING_LEVELS[tag]
            self.has_h1 |= level == 1 and not self._admonitions
            self._mark("\n\n" if self._admonitions else "\n\n" + "#" * level + " ", line)
        elif tag in self._BLOCK:
            self._mark("\n", line)
        if tag in self._LINK_BLOCKS:
            self._blocks.append([tag, len(self.parts), self._chars, self._link_chars, self._link_count])

    def handle_startendtag(self, tag: str, attrs) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self._VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        line = self.getpos()[0]
        if tag == "title":
            self._in_title = False
        if self._skip:
            if self._skipping[tag]:  # close up to the matching element (browsers forgive missing end tags)
                while True:
                    closed = self._skip.pop()
                    self._skipping[closed] -= 1
                    if closed == tag:
                        break
            return
        if tag == "a":
            self._links = max(0, self._links - 1)
        if self._admonitions and tag == self._admonitions[-1]:
            self._admonitions.pop()
        if tag in self._HEADING_LEVELS or tag in self._BLOCK:
            self._mark("\n", line)
        if tag in self._LINK_BLOCKS and self._blocks and self._blocks[-1][0] == tag:
            _, start, chars_then, link_chars_then, links_then = self._blocks.pop()
            chars, link_chars = self._chars - chars_then, self._link_chars - link_chars_then
            links = self._link_count - links_then
            if links >= MIN_LINKS and chars and link_chars >= LINK_DENSITY * chars:
                del self.parts[start:]
                self._mark("\n", line)

    def _skip_open(self, tag: str) -> None:
        self._skip.append(tag)
        self._skipping[tag] += 1

    def _mark(self, text: str, line: int) -> None:
        """Structure the extractor adds (line breaks, heading markers): its newlines are not the
        source's, so the text after them still starts on `line`."""
        self.parts.append((text, -line))

    def handle_data(self, data: str) -> None:
        if self._in_title and self.title is not None:
            self.title = (self.title[0] + data, self.title[1])
        if self._skip:
            return
        self.parts.append((data, self.getpos()[0]))
        size = len(data.strip())
        self._chars += size
        if self._links:
            self._link_chars += size

    def parse_marked_section(self, i: int, report: int = 1) -> int:
        """`<![x ...`: the stdlib raises AssertionError on any keyword but CDATA, IF and a few more
        (found by fuzz/fuzz_loaders.py); a browser reads it as a bogus comment up to the next '>'."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i + 3)
            return -1 if end < 0 else end + 1

    def lines(self) -> list[tuple[str, int]]:
        """(line, source line) for every output line, blank runs cut to one, admonition titles as text."""
        lines: list[tuple[str, int]] = []
        current, source, line = "", None, 1
        for text, position in self.parts:
            added, line = position < 0, abs(position)
            for n, piece in enumerate(text.split("\n")):
                if n:
                    lines.append((current.strip(), source or line))
                    current, source = "", None
                if piece.strip() and source is None:
                    source = line if added else line + n  # a data newline is a source line
                current += piece
        lines.append((current.strip(), source or line))
        kept: list[tuple[str, int]] = []
        for text, line in lines:
            if text.startswith("#"):
                text = " ".join(text.split())  # a heading on one line, its no-break spaces plain
            if _ADMONITION_TITLES.match(text) and not text.endswith(":"):
                text = text.lstrip("#").strip() + ":"
            if text == "#" * len(text) and text:
                continue  # a heading with no text
            if not text and (not kept or not kept[-1][0]):
                continue
            kept.append((text, line))
        while kept and not kept[-1][0]:
            kept.pop()
        return kept


def _html(data: bytes, kind: str) -> Document:
    return html_document(decode_text(data))


def html_document(text: str) -> Document:
    """An HTML page's main content as Markdown-like text (also an e-mail's HTML body)."""
    extractor = _TextExtractor()
    extractor.feed(text)
    extractor.close()
    lines = extractor.lines()
    title = " ".join((extractor.title or ("", 1))[0].split())  # no-break spaces made plain too
    if title and not extractor.has_h1:  # a reference page's sections (Synopsis, Notes) sit under its title
        first = next((n for n, (text, _) in enumerate(lines) if text.startswith("#")), None)
        if first is not None and lines[first][0].lstrip("#").strip() == title.replace("\xa0", " "):
            lines[first] = (f"# {title}", lines[first][1])  # the page's own title heading, made its top
        else:
            lines = [(f"# {title}", extractor.title[1]), ("", extractor.title[1]), *lines]
    if not lines:
        return Document("", "markdown")
    return Document("\n".join(text for text, _ in lines) + "\n", "markdown",
                    source_lines=tuple(line for _, line in lines))


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


@dataclass(frozen=True)
class _Block:
    """A text block of a PDF page and where it sits, in points from the page's top."""
    top: float
    bottom: float
    lines: tuple[str, ...]


@dataclass(frozen=True)
class _Page:
    height: float
    blocks: list[_Block]


@dataclass(frozen=True)
class _PlacedLine:
    """A line of the assembled text, with its block's place on the page: outline entries are found by it."""
    offset: int
    top: float
    bottom: float
    text: str


@dataclass(frozen=True)
class _OutlineEntry:
    level: int
    title: str
    page: int  # 0-based
    top: float | None  # where its destination points, in points from the page's top, when it says


# Running headers and footers: a line in the top or bottom band of the page that comes back, numbers
# aside, at the same height on other pages. Repeated text in a hit says nothing about it and dilutes
# both scores. Two pages suffice (a two-page chapter's header); documents of 1-2 pages keep them.
RUNNING_BAND = 0.12  # of the page height, at the top and at the bottom
RUNNING_MIN_PAGES = 2
RUNNING_MIN_DOCUMENT_PAGES = 3
RUNNING_HEIGHT_SLACK = 2  # points a header may move between pages and still count as the same
_DIGITS = re.compile(r"\d+")
_ROMAN = re.compile(r"[ivxlcdm]+")


ROW_SLACK = 2.0  # points by which the middles of a table row's cells may differ
MIN_TABLE_ROWS = 2  # side-by-side lines read as table rows only when a block has this many rows of them
# Side-by-side lines closer than this many line heights are one run of text, not two cells (twice as
# far between characters of a script written without spaces): OCR of Chinese gives a line per few
# characters, and `|` between them made 15% of its text wrong. Every table row of the PDFs under
# /usr/share/doc stays a row.
COLUMN_GAP = 1.0
_NO_SPACE_EDGE = regex.compile(f"[{analysis.IDEOGRAPHIC}{analysis.CLUSTERED}\u3000-\u303f\uff00-\uffef]")


def _column_gap(text: str, more: str) -> float:
    return 2 * COLUMN_GAP if _no_space_joint(text, more) else COLUMN_GAP


def _no_space_joint(text: str, more: str) -> bool:
    return bool(_NO_SPACE_EDGE.match(text.rstrip()[-1:] or " ") or _NO_SPACE_EDGE.match(more.lstrip()[:1] or " "))


def _continued(text: str, more: str) -> str:
    """Two pieces of one line joined: without a space where either side is a script (or punctuation)
    written without spaces."""
    if not text.strip() or not more.strip():
        return text + more
    return text.rstrip() + ("" if _no_space_joint(text, more) else " ") + more.lstrip()


def _page_blocks(page) -> list[_Block]:
    """The page's text blocks in pymupdf's reading order (the order get_text() gives), images left out."""
    import pymupdf

    # text clipped to the page (as get_text's default); images and ligature glyphs not kept
    return _text_blocks(page.get_text("dict", flags=pymupdf.TEXT_MEDIABOX_CLIP)["blocks"])


def _text_blocks(found: list[dict]) -> list[_Block]:
    """Blocks shaped as pymupdf's get_text("dict") gives them (a text layer's, or OCR's) as the reader's."""
    blocks = []
    for block in found:
        if block.get("type") != 0:
            continue
        lines = _block_rows(block["lines"])
        if any(lines):
            blocks.append(_Block(block["bbox"][1], block["bbox"][3], lines))
    return blocks


def _block_rows(lines: list[dict]) -> tuple[str, ...]:
    """A block's lines; where lines stand side by side (the same height, one after another left to
    right: a table's cells, which pymupdf gives one line each), a row `| 4 | CARD32 | OFFSET |`.

    pymupdf's own table finder (`find_tables`) was measured on the PDFs under /usr/share/doc: 0.4 s a
    page, and it read tables of contents as tables while missing tables drawn without ruling lines;
    a row is a geometric fact of the line boxes, which cost nothing more to read."""
    placed: list[tuple[float, float, float, str]] = []
    for line in lines:
        text = "".join(span["text"] for span in line["spans"]).rstrip()
        x0, y0, x1, y1 = line["bbox"]
        middle = (y0 + y1) / 2
        last = placed[-1] if placed else None
        if last and abs(last[2] - middle) <= ROW_SLACK and -ROW_SLACK <= x0 - last[1] < _column_gap(last[3], text) * (y1 - y0):
            placed[-1] = (last[0], x1, last[2], _continued(last[3], text))  # the same run of text, not a cell
            continue
        placed.append((x0, x1, middle, text))
    rows: list[list[tuple[float, float, float, str]]] = []
    for cell in placed:
        row = rows[-1] if rows else None
        if row and abs(row[-1][2] - cell[2]) <= ROW_SLACK and cell[0] >= row[-1][1] - ROW_SLACK:
            row.append(cell)
        else:
            rows.append([cell])
    if sum(1 for row in rows if len(row) > 1) < MIN_TABLE_ROWS:
        return tuple(text.replace("\r", "") for *_, text in placed)
    return tuple("| " + " | ".join(text.strip() for *_, text in row) + " |" if len(row) > 1 else row[0][3]
                 for row in rows)


def _recognised(pages: Iterable, ocr, total: int) -> Iterator[list[_Block] | str]:
    """Each page's text as OCR reads it (ocr.Ocr.read: cached, in worker processes), or why not."""
    for read in ocr.read(pages, _text_blocks, total):
        yield read if isinstance(read, str) else [_Block(top, bottom, tuple(lines)) for top, bottom, lines in read]


def _needs_ocr(page, blocks: list[_Block]) -> bool:
    """A page with (almost) no text layer but a picture: a scan, a photo of a page."""
    return sum(len(line) for block in blocks for line in block.lines) < ocr_engine.MIN_TEXT_CHARS and bool(page.get_images())


def _read_pages(pdf, ocr=None) -> tuple[list[_Page], list[int], int, dict[int, str]]:
    """(the pages, the 1-based numbers of those OCR read, how many wait for OCR, why OCR could not
    read the others: page number -> reason)."""
    found: list[list[_Block]] = []
    scans: list[int] = []  # 0-based numbers of the pages OCR reads, after the text layers
    chars = 0
    for number, page in enumerate(pdf):
        found.append(_page_blocks(page))
        if _needs_ocr(page, found[-1]):
            scans.append(number)
        chars = _within_text_limit(chars, found[-1])  # counted as pages are read: a text bomb stops at the limit
    recognised, unread = [], {}
    if ocr is not None and scans:
        for number, read in zip(scans, _recognised((pdf[number] for number in scans), ocr, len(scans))):
            if isinstance(read, str):
                unread[number + 1] = read
            else:
                chars = _within_text_limit(chars, read)  # the scan's few characters are replaced by its text
                found[number] = read
                recognised.append(number + 1)
    pages = [_Page(page.rect.height, blocks) for page, blocks in zip(pdf, found)]
    return pages, recognised, len(scans) if ocr is None else 0, unread


def _within_text_limit(chars: int, blocks: list[_Block]) -> int:
    """chars plus the blocks' characters, or LoadError past MAX_PDF_TEXT_CHARS."""
    chars += sum(len(line) + 1 for block in blocks for line in block.lines)
    if chars > MAX_PDF_TEXT_CHARS:
        raise LoadError(f"its text runs past {MAX_PDF_TEXT_CHARS} characters, the limit for one PDF")
    return chars


def _running_key(line: str, edge: str, top: float) -> tuple[str, str, int] | None:
    """The same for "Page 3" and "Page 4" (and "iii", "iv") at the same place; None for a blank line."""
    text = " ".join(_DIGITS.sub("#", line).casefold().split())
    if not text:
        return None
    return edge, "#" if _ROMAN.fullmatch(text) else text, round(top)


def _edge_keys(block: _Block, height: float) -> list[tuple[str, str, int] | None]:
    """Each line's running key when the whole block lies in the top or bottom band; [] otherwise."""
    if block.bottom <= height * RUNNING_BAND:
        edge = "top"
    elif block.top >= height * (1 - RUNNING_BAND):
        edge = "bottom"
    else:
        return []
    return [_running_key(line, edge, block.top) for line in block.lines]


def _running_lines(pages: list[_Page]) -> set[tuple[str, str, int]]:
    """Keys of the lines that run through the document as headers or footers."""
    if len(pages) < RUNNING_MIN_DOCUMENT_PAGES:
        return set()
    pages_with: Counter[tuple[str, str, int]] = Counter()
    for page in pages:
        pages_with.update({key for block in page.blocks for key in _edge_keys(block, page.height) if key})

    def pages_near(key: tuple[str, str, int]) -> int:
        edge, text, top = key
        slack = range(-RUNNING_HEIGHT_SLACK, RUNNING_HEIGHT_SLACK + 1)
        return sum(pages_with.get((edge, text, top + step), 0) for step in slack)

    return {key for key in pages_with if pages_near(key) >= RUNNING_MIN_PAGES}


def _kept_lines(block: _Block, height: float, running: set) -> list[str]:
    keys = _edge_keys(block, height) or [None] * len(block.lines)
    return [line for line, key in zip(block.lines, keys) if key is None or key not in running]


def _assemble(pages: list[_Page], running: set, placed_pages: set[int]
              ) -> tuple[str, tuple[int, ...], dict[int, list[_PlacedLine]]]:
    """(text, page starts, the placed lines of placed_pages). A blank line between blocks lets the
    chunker cut at paragraphs; every page ends with one, so no page is empty of characters."""
    parts: list[str] = []
    starts: list[int] = []
    placed: dict[int, list[_PlacedLine]] = {}
    offset = 0
    for number, page in enumerate(pages):
        starts.append(offset)
        kept = [_kept_lines(block, page.height, running) for block in page.blocks]
        if not any(kept):  # a header runs above a page's text: a page holding nothing else keeps it
            kept = [list(block.lines) for block in page.blocks]
        for block, lines in zip(page.blocks, kept):
            if not lines:
                continue
            if number in placed_pages:
                line_offset = offset
                for line in lines:
                    placed.setdefault(number, []).append(_PlacedLine(line_offset, block.top, block.bottom, line))
                    line_offset += len(line) + 1
            parts.append("\n".join(lines) + "\n\n")
            offset += len(parts[-1])
        if offset == starts[-1]:
            parts.append("\n\n")
            offset += 2
    return "".join(parts), tuple(starts), placed


def _outline(pdf, pages: list[_Page]) -> list[_OutlineEntry]:
    """The table of contents (bookmarks), entries pointing nowhere in the file left out. A damaged
    outline costs the headings, never the text: pymupdf raises several unrelated types for it."""
    try:
        toc = pdf.get_toc(simple=False)
    except Exception:
        log.warning("a PDF's outline could not be read; its chunks get no headings", exc_info=True)
        return []
    entries = []
    for item in toc:
        level, title, number = item[0], " ".join(str(item[1]).split()), item[2]
        if not title or not 1 <= number <= len(pages):
            continue
        point = item[3].get("to") if len(item) > 3 and isinstance(item[3], dict) else None
        y = getattr(point, "y", None)  # PDF coordinates: measured up from the page's bottom
        top = pages[number - 1].height - y if isinstance(y, (int, float)) else None
        entries.append(_OutlineEntry(level, title, number - 1, top))
    return entries


def _title_keys(text: str) -> list[str]:
    """"2.1 Requirements" can be looked up as itself or as "requirements": a leading section
    number ("2.1", "A.1", "3)") is optional, since outlines keep it or drop it."""
    words = text.casefold().split()
    keys = [" ".join(words)] if words else []
    if len(words) > 1 and any(c.isdigit() for c in words[0]):
        keys.append(" ".join(words[1:]))
    return keys


class _PageLines:
    """One page's lines, indexed so that placing every outline entry of the page costs O(log n)
    each: a scan of the page per entry made a page of 3000 lines with 3000 bookmarks take 5 s."""

    TITLE_CANDIDATES = 32  # lines of the same text looked at for the one below a destination

    def __init__(self, lines: list[_PlacedLine]):
        self.by_title: dict[str, list[_PlacedLine]] = {}
        for line in lines:
            for key in _title_keys(line.text):
                self.by_title.setdefault(key, []).append(line)
        ordered = sorted(lines, key=lambda line: line.bottom)
        self.bottoms = [line.bottom for line in ordered]
        # highest[i]: of ordered[i:] (every line reaching down to bottoms[i] or further), the one
        # nearest the page's top, the first in the text of equals.
        self.highest: list[_PlacedLine] = []
        for line in reversed(ordered):
            best = self.highest[-1] if self.highest else line
            self.highest.append(min(best, line, key=lambda candidate: (candidate.top, candidate.offset)))
        self.highest.reverse()

    def first_below(self, top: float) -> _PlacedLine | None:
        """The line nearest the page's top among those reaching down to top or further."""
        index = bisect_left(self.bottoms, top - RUNNING_HEIGHT_SLACK)
        return self.highest[index] if index < len(self.highest) else None

    def titled(self, title: str, top: float | None) -> _PlacedLine | None:
        """The first line showing title (below the destination, when one is there and says)."""
        for key in _title_keys(title):
            found = self.by_title.get(key)
            if found:
                below = (line for line in found[:self.TITLE_CANDIDATES]
                         if top is None or line.bottom >= top - RUNNING_HEIGHT_SLACK)
                return next(below, found[0])
        return None


def _entry_offset(entry: _OutlineEntry, lines: _PageLines | None, page_start: int) -> int:
    """Where an entry's section begins: the line showing its title, else the first line at its
    destination, else the start of its page."""
    if lines is not None:
        line = lines.titled(entry.title, entry.top)
        if line is None and entry.top is not None:
            line = lines.first_below(entry.top)
        if line is not None:
            return line.offset
    return page_start


def _outline_headings(entries: list[_OutlineEntry], placed: dict[int, list[_PlacedLine]],
                      starts: tuple[int, ...]) -> tuple[tuple[int, str], ...]:
    """(offset, "2 Installation > 2.1 Requirements") per entry, ascending by offset; an entry found at
    the same place as the one before it (both at the top of the page) comes after it, so it wins."""
    path: list[tuple[int, str]] = []
    headings = []
    indexed: dict[int, _PageLines] = {}
    for entry in entries:
        path = [(level, title) for level, title in path if level < entry.level] + [(entry.level, entry.title)]
        if entry.page not in indexed and entry.page in placed:
            indexed[entry.page] = _PageLines(placed[entry.page])
        offset = _entry_offset(entry, indexed.get(entry.page), starts[entry.page])
        headings.append((offset, " > ".join(title for _, title in path)))
    return tuple(sorted(headings, key=lambda heading: heading[0]))


def _pdf(data: bytes, kind: str, ocr=None) -> Document:
    """Each page's text layer; pages that are pictures of text read by OCR when `ocr` is given."""
    import pymupdf  # heavy; only PDF users pay for it

    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            if pdf.needs_pass:
                raise LoadError("password-protected PDF; save a copy without the password to index it")
            check_pdf_streams(pdf)
            pages, recognised, waiting, unread = _read_pages(pdf, ocr)
            outline = _outline(pdf, pages)
    except LoadError:
        raise
    except Exception as exc:  # pymupdf raises several unrelated types for damaged files
        raise LoadError(f"unreadable PDF ({exc})") from None
    text, starts, placed = _assemble(pages, _running_lines(pages), {entry.page for entry in outline})
    if not text.strip():
        if waiting:
            raise LoadError(ocr_engine.missing_sentence(f"{waiting} scanned page{'s' * (waiting > 1)}"))
        failed = [reason for reason in unread.values() if not reason.startswith(ocr_engine.NOT_READ)]
        if failed:
            raise LoadError(f"{len(unread)} scanned page{'s' * (len(unread) > 1)} not read: {failed[0]}")
        if unread:
            raise LoadError(f"its pictures of text are over the {ocr_engine.MAX_IMAGE_PIXELS:,}-pixel limit "
                            f"(a decompression bomb?); not read")
        raise LoadError("PDF has no extractable text")
    return Document(text, "pdf", starts, _outline_headings(outline, placed, starts),
                    metadata=FileMetadata(recognised=tuple(recognised)), left_out=_unread_pages(unread, len(pages)))


def _unread_pages(unread: dict[int, str], pages: int) -> str:
    """The pages OCR could not read, for a PDF whose other pages were indexed."""
    if not unread:
        return ""
    numbers = ", ".join(map(str, sorted(unread)[:5])) + (" ..." if len(unread) > 5 else "")
    retried = any(not reason.startswith(ocr_engine.NOT_READ) for reason in unread.values())
    return (f"{len(unread)} of {pages} page{'s' * (pages > 1)} not read (page{'s' * (len(unread) > 1)} {numbers}: "
            f"{next(iter(unread.values()))})" + ("; `hermes kb index --full` tries them again" * retried))


def needs_ocr(data: bytes, kind: str) -> bool:
    """Whether reading the file takes OCR: a picture, or a PDF with a page that is a picture of text.
    The indexer reads such files after every other, so keyword search has those first. Only pages
    with a picture have their text read here; a PDF `load` would refuse is left to say why."""
    if kind in OCR_KINDS - {"pdf"}:
        return True
    if kind != "pdf":
        return False
    import pymupdf

    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            if pdf.needs_pass:
                return False
            check_pdf_streams(pdf)
            return any(page.get_images() and _needs_ocr(page, _page_blocks(page)) for page in pdf)
    except Exception:  # damaged, a bomb, or a parser's bug: load reports it in its turn
        return False


def read_ahead(data: bytes, kind: str, ocr) -> None:
    """Starts OCR of a picture file before its turn (ocr.Ocr.read_ahead). A picture that cannot be
    opened is left alone: `load` says why when its turn comes."""
    if kind != "image" or ocr is None:
        return
    import pymupdf

    try:
        with pymupdf.open(stream=data) as picture:
            if picture.page_count:
                ocr.read_ahead(picture[0], _text_blocks)
    except Exception:  # pymupdf raises several unrelated types for damaged files
        pass


def _image(data: bytes, kind: str, ocr=None) -> Document:
    """A picture's text as OCR reads it (a GIF's or TIFF's first frame), cited by its lines."""
    import pymupdf

    if ocr is None:
        raise LoadError(ocr_engine.missing_sentence("an image"))
    try:
        with pymupdf.open(stream=data) as picture:
            if picture.page_count < 1:
                raise LoadError("unreadable image (no picture in it)")
            read = next(_recognised([picture[0]], ocr, 1))
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
    return Document(text + "\n", "text", metadata=FileMetadata(recognised=(1,)))


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
        raise LoadError(missing_extra("DOCX", "docx", "docx")) from None
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
    "json": _plain, "html": _html, "pdf": _pdf, "docx": _docx, "image": _image,
}
OCR_KINDS = frozenset({"pdf", "image"})  # their loaders take the OCR engine


def is_plain_text(kind: str) -> bool:
    """Whether the file's lines are its text's lines (so kb_read streams them) rather than a format to
    convert: plain text, and notes whose front matter is rewritten line for line."""
    return LOADERS.get(kind, _plain) in (_plain, LOADERS["markdown"])


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
    skip reason rather than the end of the run. fuzz/fuzz_loaders.py calls LOADERS directly, past
    this net, so such bugs still surface there and get a precise fix.
    """
    try:
        loader = LOADERS.get(kind, _plain)
        return storable(loader(data, kind, ocr) if kind in OCR_KINDS else loader(data, kind))
    except (LoadError, MemoryError):  # MemoryError: the per-file budget's to report (extraction.py)
        raise
    except Exception as exc:
        log.warning("the %s loader failed on a file", kind, exc_info=True)
        raise LoadError(f"unreadable {kind} file ({type(exc).__name__}: {exc})") from None


from .formats import EXTRA_LOADERS  # noqa: E402  (formats builds on this module's Document and helpers)

LOADERS.update(EXTRA_LOADERS)
