"""kb_read's rule: a file can be read exactly when the index would include it.

Same ignore rules as the scanner (built-in excludes, secret files, every
.gitignore, configured globs), no links out of the root, nothing over
max_file_bytes, nothing binary, and secrets redacted the same way as in the
index. Plain text is streamed: only the asked-for lines are kept in memory.
"""

from __future__ import annotations

import bisect
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .file_access import AccessError, open_inside, read_fd
from .kinds import registry
from .kinds.document import LoadError, bom_encoding, decode_text
from .loaders import is_plain_text, load
from .scanner import IgnoreRules
from .secret_scan import KEY_BLOCKS, redact

BINARY_PROBE_BYTES = 8192


class NotReadable(Exception):
    """The file is in the directory but cannot be served; the message says why."""


@dataclass(frozen=True)
class Window:
    rel_path: str
    end_line: int
    total_lines: int
    text: str
    start_line: int = 0  # where the window begins, when a part was asked for (0: as asked)
    parts: str | None = None  # the pages (slides, cells ...) its lines are on: "page 8", "pages 8-9"


def _part_lines(text: str, starts: tuple[int, ...]) -> list[int]:
    """The line (1-based) where each part (page, slide, cell ...) of a converted text begins."""
    return [text.count("\n", 0, start) + 1 for start in starts]


def _parts_covered(part_lines: list[int], first: int, last: int, unit: str) -> str | None:
    if not part_lines:
        return None
    low, high = bisect.bisect_right(part_lines, first), bisect.bisect_right(part_lines, last)
    return f"{unit} {low}" if low == high else f"{unit}s {low}-{high}"


def read_window(root: Path, rel_path: str, rules: IgnoreRules, size_cap: Callable[[str], int],
                start_line: int, max_lines: int, ocr=None, part: int | None = None) -> Window | None:
    """Lines start_line.. of root/rel_path, or of its page (slide, cell ...) `part`, the unit its
    citations give; None when the index would not include the file. `size_cap(kind)` is the largest
    file of that kind the index reads; `ocr` (ocr.Ocr) reads pictures, from its cache when the index
    run recognised them."""
    if rules.excluded(rel_path):
        return None
    try:
        with open_inside(str(root), rel_path) as (fd, real_rel):
            if real_rel != rel_path and rules.excluded(real_rel):
                return None
            kind = registry.kind_of(real_rel)
            max_file_bytes = size_cap(kind)
            if os.fstat(fd).st_size > max_file_bytes:
                raise NotReadable(f"it is larger than {registry.named(kind).cap_setting} ({max_file_bytes})")
            keep_secrets = rules.allows_secrets(real_rel)
            unit = registry.named(kind).part
            if is_plain_text(kind):
                if part is not None:
                    raise NotReadable(f"it is cited by lines, not by {unit}s")
                end_line, total, lines = _stream_lines(fd, start_line, max_lines)
                text = "\n".join(lines) if keep_secrets else redact("\n".join(lines)).text
                return Window(real_rel, end_line, total, text)
            try:  # a converted format (PDF, DOCX, HTML): its text, not its bytes, from the same descriptor
                data = read_fd(fd, max_file_bytes)
                document = load(data, kind, ocr)
            except (AccessError, LoadError) as exc:
                raise NotReadable(str(exc)) from None
    except AccessError:
        return None
    lines = (document.text if keep_secrets else redact(document.text).text).splitlines()
    part_lines = _part_lines(document.text, document.page_starts)
    if part is not None:
        if not part_lines:
            raise NotReadable(f"it is cited by lines, not by {unit}s")
        if not 1 <= part <= len(part_lines):
            raise NotReadable(f"it has {len(part_lines)} {unit}s, so there is no {unit} {part}")
        start_line = part_lines[part - 1]
        part_end = part_lines[part] - 1 if part < len(part_lines) else len(lines)
        max_lines = max(1, min(max_lines, part_end - start_line + 1))
    elif document.source_lines and len(document.source_lines) == len(lines):
        total = data.count(b"\n") + (not data.endswith(b"\n"))
        return _source_window(real_rel, lines, document.source_lines, total, start_line, max_lines)
    end_line = min(len(lines), start_line + max_lines - 1)
    return Window(real_rel, end_line, len(lines), "\n".join(lines[start_line - 1:end_line]), start_line,
                  _parts_covered(part_lines, start_line, end_line, unit))


def _source_window(rel_path: str, lines: list[str], source_lines: tuple[int, ...], total: int, start_line: int,
                   max_lines: int) -> Window:
    """Lines of converted text by the source file's line numbers, the numbers search cites (HTML):
    the text that came from source lines start_line .. start_line + max_lines - 1 of `total`."""
    last = start_line + max_lines - 1
    kept = [text for text, source in zip(lines, source_lines) if start_line <= source <= last]
    return Window(rel_path, min(total, last), total, "\n".join(kept))


def _stream_lines(fd: int, start_line: int, max_lines: int) -> tuple[int, int, list[str]]:
    """(last line returned, total lines, the lines): one pass, only the window kept.

    UTF-8 is streamed; a file that turns out not to be (a BOM for UTF-16/32, or a byte that is not
    UTF-8: Latin-1, cp1252) is decoded whole, within max_file_bytes, by the loader's rules, so the
    lines served are the lines indexed.
    """
    with io.open(fd, "rb", closefd=False) as raw:
        head = raw.peek(BINARY_PROBE_BYTES)[:BINARY_PROBE_BYTES]
        if (bom_encoding(head) or ("utf-8",))[0] == "utf-8":
            if b"\x00" in head:
                raise NotReadable("it is a binary file")
            text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline=None)
            try:
                return _window(text, start_line, max_lines)
            except UnicodeDecodeError:
                pass
            finally:
                text.detach()
            raw.seek(0)
        try:
            return _window(io.StringIO(decode_text(raw.read())), start_line, max_lines)
        except LoadError:
            raise NotReadable("it is a binary file") from None


def _window(text: Iterable[str], start_line: int, max_lines: int) -> tuple[int, int, list[str]]:
    """A private key block that starts before the window would lose its header, so lines inside any
    key block are blanked here rather than left to `redact`."""
    lines: list[str] = []
    total, block_end = 0, None  # the end marker of the key block being read through, if any
    last = start_line + max_lines - 1
    for total, line in enumerate(text, 1):
        line = line.rstrip("\n")
        if block_end is None:
            block_end = next((end for begin, end in KEY_BLOCKS if begin.search(line)), None)
        masked = block_end is not None
        if block_end is not None and block_end.search(line):
            block_end = None
        if start_line <= total <= last:
            lines.append("*" * len(line) if masked else line)
    return min(total, last), total, lines
