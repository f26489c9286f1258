"""Text from documents, file names, models and endpoints, made safe to print on a terminal.

Any of them can carry escape sequences (retitle the window, clear the screen,
fake a prompt, hide text with bidi overrides). Control characters are shown
escaped instead of sent; JSON output needs none of this, since json.dumps
already escapes them exactly.
"""

from __future__ import annotations

import os
import re

from rich.cells import cell_len, set_cell_size
from rich.markup import escape

# C0 (but tab and newline), DEL, C1, and the bidirectional overrides behind "Trojan Source" text.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                            text)


def safe(text: object) -> str:
    """For rich: control characters escaped, then markup escaped."""
    return escape(printable(str(text)))


def short_path(path: str, width: int, home: str | None = None) -> str:
    """A path cut to width (terminal cells: a Chinese character takes two) the way people read one:
    ~ for the home folder, then the start and the end kept (the folder's own name matters most) with …
    in the middle."""
    home = os.path.expanduser("~") if home is None else home
    if home not in ("", "/") and (path == home or path.startswith(home.rstrip("/") + "/")):
        path = "~" + path[len(home.rstrip("/")):]
    if cell_len(path) <= width:
        return path
    parts = path.split("/")
    first = parts[:2] if parts[0] == "" else parts[:1]  # "/srv" or "~" or "docs"
    rest = parts[len(first):]
    for keep in range(len(rest) - 1, 0, -1):  # as much of the end as fits
        candidate = "/".join([*first, "…", *rest[-keep:]])
        if cell_len(candidate) <= width:
            return candidate
    if rest and cell_len(rest[-1]) + 2 <= width:
        return "…/" + rest[-1]
    return "…" + tail_cells(path, width - 1) if width > 1 else "…"


def head_cells(text: str, width: int) -> str:
    """The longest start of `text` that fits `width` terminal cells."""
    return set_cell_size(text, width).rstrip() if cell_len(text) > width else text


def tail_cells(text: str, width: int) -> str:
    """The longest end of `text` that fits `width` terminal cells."""
    kept, used = [], 0
    for char in reversed(text):
        used += cell_len(char)
        if used > width:
            break
        kept.append(char)
    return "".join(reversed(kept))
