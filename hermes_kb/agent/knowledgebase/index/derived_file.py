"""Files derived from an index (the vector and keyword copies beside it).

Each starts with a header naming the index generation it was built from, so a
reader can tell a stale copy from the header alone, and each is written to a
temporary file and renamed into place, so a reader never sees half of one.

Each also carries checksums, so a copy whose bytes were overwritten in place
(the size unchanged) is detected rather than trusted: a CRC-32 per 1 MiB block
of everything after the header, in a table at the end of the file, and a
CRC-32 of the header and that table in the header. A copy that fails its check
is treated exactly like a stale one: searches use the index itself, and the
next index run rebuilds it. How much is checked, and when:

- on opening (mapping) a copy, and in `read_generation` (what status and the
  search path ask): the header, the table, and every block when the data is at
  most QUICK_FULL_BYTES; above that, every block of the arrays the caller
  names (those each search reads in full, or whose damage could crash a
  search) and SAMPLE_BLOCKS more picked at random;
- in `check(..., full=True)`: every block (the index run does this before it
  decides a copy is current; `verify` in each cache module does it for doctor).

A check that passed is remembered for the file's (device, inode, size, mtime,
ctime), so one process checks one state of a file once; any write to the file
changes its ctime, and a rebuilt copy is a new inode. As git does for its
index, a file changed in the last RACY_SECONDS is not remembered: timestamps
are coarse, and a write right after a check could leave them unchanged.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import random
import re
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

import numpy as np

HEADER_BYTES = 4096
CHECK_BLOCK = 1 << 20  # bytes covered by one CRC-32 (a 1M-chunk vector copy has ~3,500)
QUICK_FULL_BYTES = 64 << 20  # copies with at most this much data are checked whole when opened (~15 ms)
SAMPLE_BLOCKS = 8  # blocks checked at random on opening a larger copy, beyond the arrays named as always checked
CHECKSUMS = "checksums"  # the name of the table in a copy's places
RACY_SECONDS = 2  # a file whose ctime is this recent is checked again next time
LEFTOVER_SECONDS = 3600  # a temporary file untouched this long is a leftover even if its pid is alive again

Places = dict[str, tuple[int, np.dtype, int]]  # array name -> (byte offset, dtype, length)
PlacesOf = Callable[[dict], tuple[Places, int]]


def layout(arrays: dict[str, tuple[type, int]]) -> tuple[Places, int]:
    """Where each (dtype, length) array lives after the header, each starting 8-byte aligned, then the
    checksum table (one CRC-32 per CHECK_BLOCK of everything between the header and the table); and the file size."""
    places, offset = {}, HEADER_BYTES
    for name, (dtype, length) in arrays.items():
        offset = -(-offset // 8) * 8
        places[name] = (offset, np.dtype(dtype), length)
        offset += np.dtype(dtype).itemsize * length
    table_at = -(-offset // 8) * 8
    blocks = -(-(table_at - HEADER_BYTES) // CHECK_BLOCK)
    places[CHECKSUMS] = (table_at, np.dtype("<u4"), blocks)
    return places, table_at + 4 * blocks


# --- writing -----------------------------------------------------------------------------------

def temporary_path(path: Path) -> Path:
    return Path(f"{path}.tmp{os.getpid()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # another user's process, or we cannot tell: keep its file
    return True


def leftovers(path: Path) -> list[Path]:
    """Temporary files of `path` left by a build that died (SIGKILL, power loss): their process is gone,
    or they have not been written for LEFTOVER_SECONDS. A build in progress is never listed."""
    pattern = re.compile(re.escape(path.name) + r"\.tmp(\d+)")
    found = []
    try:
        candidates = list(path.parent.iterdir())
    except OSError:
        return []
    for candidate in candidates:
        match = pattern.fullmatch(candidate.name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            idle = time.time() - candidate.stat().st_mtime
        except OSError:
            continue
        if pid != os.getpid() and (not _pid_alive(pid) or idle > LEFTOVER_SECONDS):
            found.append(candidate)
    return sorted(found)


def remove_leftovers(path: Path) -> list[Path]:
    """Delete what `leftovers` lists; the paths removed."""
    removed = []
    for leftover in leftovers(path):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
            removed.append(leftover)
    return removed


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[BinaryIO]:
    """A handle on a temporary file that becomes `path` once the block finishes without error.

    Temporary files of `path` left by a killed build are removed first; if this one is killed in turn,
    `path` keeps the previous copy and the next build removes this temporary."""
    remove_leftovers(path)
    temporary = temporary_path(path)
    try:
        with open(temporary, "w+b") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _header_crc(info: dict, table: bytes) -> int:
    body = {key: value for key, value in info.items() if key != "crc"}
    return zlib.crc32(table, zlib.crc32(json.dumps(body, sort_keys=True).encode()))


def write_header(handle: BinaryIO, magic: bytes, info: dict, places: Places) -> None:
    """Checksum every block written so far, write the table, then the header (last, so a copy is only
    ever complete or rejected)."""
    handle.flush()
    table_at, _, blocks = places[CHECKSUMS]
    crcs = np.fromiter(_block_crcs(handle.fileno(), range(blocks), table_at), dtype="<u4", count=blocks)
    table = crcs.tobytes()
    handle.seek(table_at)
    handle.write(table)
    info = {**info, "block": CHECK_BLOCK}
    info["crc"] = _header_crc(info, table)
    handle.seek(0)
    handle.write((magic + json.dumps(info).encode()).ljust(HEADER_BYTES, b"\n"))


def _block_crcs(fd: int, blocks: Iterable[int], table_at: int) -> Iterator[int]:
    """CRC-32 of each block, read with pread (never through a mapping, so checking adds no resident pages)."""
    buffer = bytearray(CHECK_BLOCK)
    view = memoryview(buffer)
    for block in blocks:
        start = HEADER_BYTES + block * CHECK_BLOCK
        want = min(CHECK_BLOCK, table_at - start)
        got = os.preadv(fd, [view[:want]], start)
        yield zlib.crc32(view[:got])


# --- reading and checking ------------------------------------------------------------------------

def _parse_header(header: bytes, magic: bytes) -> dict | None:
    if not header.startswith(magic):
        return None
    try:
        info = json.loads(header[len(magic):].rstrip(b"\n"))
    except ValueError:
        return None
    return info if isinstance(info, dict) and "generation" in info else None


def _layout(info: dict, places_of: PlacesOf) -> tuple[Places, int | None]:
    """Where a header says the arrays are, and the file size that implies (None: a header we cannot read)."""
    try:
        return places_of(info)
    except (KeyError, TypeError, ValueError):
        return {}, None


_checked: dict[tuple, bool] = {}  # (path, dev, ino, size, mtime_ns, ctime_ns) -> passed a full check (else quick)
_checked_lock = threading.Lock()


def _state(path: Path, stat: os.stat_result) -> tuple:
    return str(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


class Damaged(ValueError):
    """A copy that exists and claims to be ours but fails its checks."""


def _check_open(handle: BinaryIO, path: Path, magic: bytes, what: str, places_of: PlacesOf,
                full: bool, always: Iterable[str] | None) -> tuple[dict, Places]:
    """The header and places of a copy that passes its checks; raises ValueError (Damaged when the
    file is ours but its bytes are wrong) naming the problem in one sentence."""
    stat = os.fstat(handle.fileno())
    header = handle.read(HEADER_BYTES)
    info = _parse_header(header, magic)
    if info is None:
        if header.startswith(magic):
            raise Damaged(f"{path} has a damaged header")
        if header.startswith(magic[:-2]):  # e.g. HERMESKBVEC1: another version's layout
            raise ValueError(f"{path} is a {what} from another version of hermes-kb")
        raise Damaged(f"{path} is not a {what}: its header is unreadable")
    places, size = _layout(info, places_of)
    if size is None or info.get("block") != CHECK_BLOCK or "crc" not in info:
        raise Damaged(f"{path} has a damaged header")
    if stat.st_size != size:
        raise Damaged(f"{path} is {stat.st_size} bytes but its header implies {size}: it is truncated or damaged")
    key = _state(path, stat)
    with _checked_lock:
        done = _checked.get(key)
    if done or (done is not None and not full):
        return info, places
    table_at, _, blocks = places[CHECKSUMS]
    table = os.pread(handle.fileno(), 4 * blocks, table_at)
    if len(table) != 4 * blocks or _header_crc(info, table) != info["crc"]:
        raise Damaged(f"{path} has a damaged header or checksum table")
    expected = np.frombuffer(table, dtype="<u4")
    data = table_at - HEADER_BYTES
    if full or data <= QUICK_FULL_BYTES or always is None:
        wanted = range(blocks)
        full = True
    else:
        chosen: set[int] = set()
        for name in always:
            offset, dtype, length = places[name]
            if length:
                chosen.update(range((offset - HEADER_BYTES) // CHECK_BLOCK,
                                    (offset + dtype.itemsize * length - 1 - HEADER_BYTES) // CHECK_BLOCK + 1))
        rest = [b for b in range(blocks) if b not in chosen]
        chosen.update(random.sample(rest, min(SAMPLE_BLOCKS, len(rest))))
        wanted = sorted(chosen)
    for block, crc in zip(wanted, _block_crcs(handle.fileno(), wanted, table_at)):
        if crc != int(expected[block]):
            start = HEADER_BYTES + block * CHECK_BLOCK
            inside = [name for name, (offset, dtype, length) in places.items()
                      if offset < start + CHECK_BLOCK and offset + dtype.itemsize * length > start]
            raise Damaged(f"{path} is damaged: bytes {start}-{min(start + CHECK_BLOCK, table_at) - 1} "
                          f"({', '.join(inside) or 'padding'}) fail their checksum")
    if time.time_ns() - stat.st_ctime_ns > RACY_SECONDS * 1_000_000_000:
        with _checked_lock:
            if len(_checked) > 256:
                _checked.clear()
            _checked[key] = full or bool(_checked.get(key))
    return info, places


def check(path: Path, magic: bytes, what: str, places_of: PlacesOf, full: bool = True,
          always: Iterable[str] | None = None) -> str | None:
    """One sentence saying what is wrong with a copy, or None when it passes (a missing file passes:
    there is nothing to distrust, and the index run builds it)."""
    try:
        with open(path, "rb") as handle:
            _check_open(handle, path, magic, what, places_of, full, always)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    except ValueError as exc:
        return str(exc)
    return None


def is_damaged(path: Path, magic: bytes, what: str, places_of: PlacesOf, full: bool = True,
               always: Iterable[str] | None = None) -> bool:
    """True only for a copy that is ours, of this version, and fails its checks (not a missing or old one)."""
    try:
        with open(path, "rb") as handle:
            _check_open(handle, path, magic, what, places_of, full, always)
    except Damaged:
        return True
    except (OSError, ValueError):
        return False
    return False


def state(path: Path, generation: str, magic: bytes, what: str, places_of: PlacesOf, full: bool,
          always: Iterable[str] | None = None) -> str:
    """"current", "stale" (missing, older, or from another version) or "corrupt" (fails its checks):
    what status shows for a copy against the index's generation."""
    if read_generation(path, magic, places_of, always, full) == generation:
        return "current"
    return "corrupt" if is_damaged(path, magic, what, places_of, full, always) else "stale"


def counter(generation: str) -> int:
    """The change count of a generation: rows an index marks `written` above it were written after it."""
    return int(generation.rsplit(":", 1)[1])


def earlier_state(copy_generation: str | None, generation: str) -> bool:
    """True when a copy was built from an earlier state of this same index: not a recreated index,
    and not a later state (an index restored from a backup), whose `written` marks could not tell
    what changed."""
    return copy_generation is not None and copy_generation.rsplit(":", 1)[0] == generation.rsplit(":", 1)[0] \
        and counter(copy_generation) < counter(generation)


def claimed(path: Path, magic: bytes) -> dict | None:
    """What a copy's header claims (generation, count...), nothing checked: enough to know a copy is of
    another state (and so rebuilt whatever its blocks hold) without reading them."""
    try:
        with open(path, "rb") as handle:
            return _parse_header(handle.read(HEADER_BYTES), magic)
    except OSError:
        return None


def read_generation(path: Path, magic: bytes, places_of: PlacesOf, always: Iterable[str] | None = None,
                    full: bool = False) -> str | None:
    """The generation a copy was built from; None when it is missing, not such a copy, not the size its
    header implies, or fails its checksums (quick or full), so that it is rebuilt rather than trusted."""
    try:
        with open(path, "rb") as handle:
            info, _ = _check_open(handle, path, magic, "copy", places_of, full, always)
    except (OSError, ValueError):
        return None
    return info["generation"]


@dataclass
class Mapped:
    """An open copy: its header, its file (kept open for pread), and plain arrays over one mapping
    (np.memmap's subclass costs ~50 µs per indexing)."""
    info: dict
    file: BinaryIO
    places: Places
    arrays: dict[str, np.ndarray]


def open_mapped(path: Path, magic: bytes, what: str, places_of: PlacesOf,
                always: Iterable[str] | None = None) -> Mapped:
    """Map a copy whose header, size and checksums (the quick check) pass, or raise ValueError:
    the caller then uses the index itself."""
    handle = open(path, "rb")  # noqa: SIM115 - lives as long as the copy
    try:
        info, places = _check_open(handle, path, magic, what, places_of, False, always)
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except BaseException:
        handle.close()
        raise
    arrays = {name: np.frombuffer(mapping, dtype, length, offset) for name, (offset, dtype, length) in places.items()
              if name != CHECKSUMS}
    return Mapped(info, handle, places, arrays)
