"""What every reader shares: the Document a file becomes, the one error a reader may raise, and the
decoding of text files (BOMs, UTF-8, detected legacy encodings) and checks of zip archives.

Readers import this module and nothing else of the package's readers, so no reader can form a cycle
with another; the registry (kinds/registry.py) imports no reader until a file of its kind is read.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from io import BytesIO

from ..filters import FileMetadata


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
    kind: str  # the file's kind (kinds/registry.py), which says how the text is cut and cited
    page_starts: tuple[int, ...] = ()  # character offset where part i+1 begins (the registry names a part: a page, a cell ...)
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
    from charset_normalizer import (
        from_bytes,  # only files that are not UTF-8 pay for it
    )

    matches = from_bytes(sample)
    best = matches.best()
    if best is None:
        return None
    if any("cp1252" in match.could_be_from_charset and match.chaos <= best.chaos + CP1252_CHAOS_MARGIN
           for match in matches):
        return "cp1252"
    return best.encoding


_CARRIAGE_RETURN = re.compile(r"\r\n?")


def newlines(text: str) -> str:
    """Text from inside a container (a JSON string, a MIME part, a slide) gets the one newline the
    rest of the index uses: decode_text normalises a file's own bytes, not what a parser hands back."""
    return _CARRIAGE_RETURN.sub("\n", text) if "\r" in text else text


def parts(sections: list[str], kind: str) -> Document:
    """Sections (slides, sheets, chapters) joined, each a numbered part."""
    starts, offset, texts = [], 0, []
    for section in sections:
        section = newlines(section) + "\n"
        starts.append(offset)
        texts.append(section)
        offset += len(section)
    return Document("".join(texts), kind, page_starts=tuple(starts))


def read_plain(data: bytes, kind: str) -> Document:
    return Document(decode_text(data), kind)

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

