"""Files derived from an index (the vector and keyword copies beside it).

Each starts with a header naming the index generation it was built from, so a
reader can tell a stale copy from the header alone, and each is written to a
temporary file and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import numpy as np

HEADER_BYTES = 4096

Places = dict[str, tuple[int, np.dtype, int]]  # array name -> (byte offset, dtype, length)


def layout(arrays: dict[str, tuple[type, int]]) -> tuple[Places, int]:
    """Where each (dtype, length) array lives after the header, each starting 8-byte aligned; and the file size."""
    places, offset = {}, HEADER_BYTES
    for name, (dtype, length) in arrays.items():
        offset = -(-offset // 8) * 8
        places[name] = (offset, np.dtype(dtype), length)
        offset += np.dtype(dtype).itemsize * length
    return places, offset


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


def read_generation(path: Path, magic: bytes, places_of: Callable[[dict], tuple[Places, int]]) -> str | None:
    """The generation a copy was built from; None when it is missing, not such a copy, or not the size its
    header implies (a layout from another version, or a damaged file), so that it is rebuilt rather than trusted."""
    try:
        with open(path, "rb") as handle:
            info = _parse_header(handle.read(HEADER_BYTES), magic)
            if info is None or os.fstat(handle.fileno()).st_size != _layout(info, places_of)[1]:
                return None
    except OSError:
        return None
    return info["generation"]


def _layout(info: dict, places_of: Callable[[dict], tuple[Places, int]]) -> tuple[Places, int | None]:
    """Where a header says the arrays are, and the file size that implies (None: a header we cannot read)."""
    try:
        return places_of(info)
    except (KeyError, TypeError, ValueError):
        return {}, None


@dataclass
class Mapped:
    """An open copy: its header, its file (kept open for pread), and plain arrays over one mapping
    (np.memmap's subclass costs ~50 µs per indexing)."""
    info: dict
    file: BinaryIO
    places: Places
    arrays: dict[str, np.ndarray]


def open_mapped(path: Path, magic: bytes, what: str, places_of: Callable[[dict], tuple[Places, int]]) -> Mapped:
    """Map a copy whose header and size check out, or raise ValueError: the caller then uses the index itself."""
    handle = open(path, "rb")  # noqa: SIM115 - lives as long as the copy
    try:
        info = _parse_header(handle.read(HEADER_BYTES), magic)
        if info is None:
            raise ValueError(f"{path} is not a {what}")
        places, size = _layout(info, places_of)
        if size is None or os.fstat(handle.fileno()).st_size != size:
            raise ValueError(f"{path} is truncated or from another version")
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except BaseException:
        handle.close()
        raise
    arrays = {name: np.frombuffer(mapping, dtype, length, offset) for name, (offset, dtype, length) in places.items()}
    return Mapped(info, handle, places, arrays)
