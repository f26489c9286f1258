"""PDFs: text blocks in reading order, tables kept as rows, running headers and footers dropped, the
outline turned into headings, pages that are pictures of text read by OCR; compression bombs refused
before pymupdf inflates them."""

from __future__ import annotations

import base64
import logging
import re
import zlib
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator

import regex

from .. import analysis
from .. import ocr as ocr_engine
from ..filters import FileMetadata
from .document import Document, LoadError

log = logging.getLogger(__name__)


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
    return text_blocks(page.get_text("dict", flags=pymupdf.TEXT_MEDIABOX_CLIP)["blocks"])


def text_blocks(found: list[dict]) -> list[_Block]:
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


def recognised_pages(pages: Iterable, ocr, total: int) -> Iterator[list[_Block] | str]:
    """Each page's text as OCR reads it (ocr.Ocr.read: cached, in worker processes), or why not."""
    for read in ocr.read(pages, text_blocks, total):
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
        for number, read in zip(scans, recognised_pages((pdf[number] for number in scans), ocr, len(scans))):
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


def read_pdf(data: bytes, kind: str, ocr=None) -> Document:
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
    return Document(text, kind, starts, _outline_headings(outline, placed, starts),
                    metadata=FileMetadata(recognised=tuple(recognised)), left_out=_unread_pages(unread, len(pages)))


def _unread_pages(unread: dict[int, str], pages: int) -> str:
    """The pages OCR could not read, for a PDF whose other pages were indexed."""
    if not unread:
        return ""
    numbers = ", ".join(map(str, sorted(unread)[:5])) + (" ..." if len(unread) > 5 else "")
    retried = any(not reason.startswith(ocr_engine.NOT_READ) for reason in unread.values())
    return (f"{len(unread)} of {pages} page{'s' * (pages > 1)} not read (page{'s' * (len(unread) > 1)} {numbers}: "
            f"{next(iter(unread.values()))})" + ("; `hermes kb index --full` tries them again" * retried))



def needs_ocr(data: bytes) -> bool:
    """Whether the PDF has a page that is a picture of text. Only pages with a picture have their text
    read here; a PDF `read_pdf` would refuse is left to say why."""
    import pymupdf

    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            if pdf.needs_pass:
                return False
            check_pdf_streams(pdf)
            return any(page.get_images() and _needs_ocr(page, _page_blocks(page)) for page in pdf)
    except Exception:  # damaged, a bomb, or a parser's bug: load reports it in its turn
        return False
