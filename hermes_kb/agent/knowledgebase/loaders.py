"""Turn a file's bytes into a Document: plain text plus where each page starts.

Loaders never raise anything but LoadError, so one bad file can only ever
skip itself.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from io import BytesIO
from typing import Callable


class LoadError(Exception):
    """The file cannot be turned into text; the message is the skip reason."""


@dataclass(frozen=True)
class Document:
    text: str
    kind: str
    page_starts: tuple[int, ...] = ()  # character offset where page i+1 begins (PDF only)


def decode_text(data: bytes) -> str:
    """Text files: reject binaries, never fail on a stray undecodable byte."""
    if b"\x00" in data[:8192]:
        raise LoadError("binary file")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    text = data.decode("utf-8", errors="replace")
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


def _html(data: bytes, kind: str) -> Document:
    extractor = _TextExtractor()
    extractor.feed(decode_text(data))
    extractor.close()
    lines = [line.strip() for line in "".join(extractor.parts).splitlines()]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return Document(text.strip() + "\n", "markdown")


def _pdf(data: bytes, kind: str) -> Document:
    import pymupdf  # heavy; only PDF users pay for it

    try:
        with pymupdf.open(stream=data, filetype="pdf") as pdf:
            if pdf.needs_pass:
                raise LoadError("encrypted PDF")
            pages = [page.get_text() for page in pdf]
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
# cap (tests/knowledgebase/test_resource_limits.py): indexing it stays under MAX_FILE_RSS_BYTES.
MAX_ARCHIVE_EXPANDED_BYTES = 32_000_000
MAX_FILE_RSS_BYTES = 1_000_000_000


def check_archive(data: bytes, limit: int = MAX_ARCHIVE_EXPANDED_BYTES) -> None:
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            expanded = sum(entry.file_size for entry in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise LoadError(f"unreadable archive ({exc})") from None
    if expanded > limit:
        raise LoadError(f"expands to {expanded} bytes, over the {limit}-byte limit for archives (a zip bomb?)")


def _docx(data: bytes, kind: str) -> Document:
    try:
        import docx
    except ImportError:
        raise LoadError("DOCX support needs the optional extra: pip install 'hermes-knowledgebase[docx]'") from None
    check_archive(data)
    try:
        document = docx.Document(BytesIO(data))
    except Exception as exc:  # python-docx surfaces zip and xml errors directly
        raise LoadError(f"unreadable DOCX ({exc})") from None
    # python-docx looks a paragraph's style up by XPath over the whole style sheet each time
    # (`paragraph.style`): 450k paragraphs took 517 s. One table of style names, read once, is linear.
    style_names = {style.style_id: style.name or "" for style in document.styles}
    lines = []
    for paragraph in document.paragraphs:
        style = style_names.get(paragraph._p.style, "")
        level = style.removeprefix("Heading ").strip()
        prefix = "#" * int(level) + " " if style.startswith("Heading ") and level.isdigit() else ""
        lines.append(prefix + paragraph.text)
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
    return LOADERS.get(kind, _plain)(data, kind)
