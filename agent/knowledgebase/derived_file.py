"""Files derived from an index (the vector and keyword copies beside it).

Each starts with a header naming the index generation it was built from, so a
reader can tell a stale copy from the header alone, and each is written to a
temporary file and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import BinaryIO, Iterator

HEADER_BYTES = 4096


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[BinaryIO]:
    """A handle on a temporary file that becomes `path` once the block finishes without error."""
    temporary = Path(f"{path}.tmp{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_header(handle: BinaryIO, magic: bytes, info: dict) -> None:
    handle.seek(0)
    handle.write((magic + json.dumps(info).encode()).ljust(HEADER_BYTES, b"\n"))


def _parse_header(header: bytes, magic: bytes) -> dict | None:
    if not header.startswith(magic):
        return None
    try:
        info = json.loads(header[len(magic):].rstrip(b"\n"))
    except ValueError:
        return None
    return info if isinstance(info, dict) and "generation" in info else None


def read_generation(path: Path, magic: bytes) -> str | None:
    """The generation a copy was built from; None when it is missing or not such a copy."""
    try:
        with open(path, "rb") as handle:
            info = _parse_header(handle.read(HEADER_BYTES), magic)
    except OSError:
        return None
    return info["generation"] if info else None


def required_header(handle: BinaryIO, magic: bytes, what: str) -> dict:
    """The header of an open copy, or ValueError: the caller then falls back to the index itself."""
    info = _parse_header(handle.read(HEADER_BYTES), magic)
    if info is None:
        raise ValueError(f"{handle.name} is not a {what}")
    return info
