"""Open a file under a root without ever being led outside it.

Checking a path and then opening it is a race: between the two, a file (or any
directory above it) can be swapped for a symlink to somewhere else. Here every
component is opened relative to its parent's descriptor with O_NOFOLLOW, so
what is opened is what was checked. A symlink met on the way is resolved once
and followed only if its target lies inside the root; the target is then
opened the same careful way, and its relative path is returned so callers can
apply their rules to where the link really leads.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Callable, Iterator

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class AccessError(OSError):
    """The file cannot be opened safely; the message says why in one sentence."""


def _walk(root_fd: int, parts: list[str]) -> int:
    """A descriptor for root/parts..., opened component by component without following links."""
    fd = os.dup(root_fd)
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            # O_NONBLOCK: a FIFO (or device) put where a file was expected must not hang the open;
            # it is refused by the regular-file check after.
            flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _BINARY | (_NONBLOCK if last else _DIRECTORY)
            next_fd = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def relative_parts(rel_path: str) -> list[str]:
    """'a/b/c.md' -> ['a', 'b', 'c.md']; anything that could climb out (.., absolute) is refused."""
    parts = [p for p in rel_path.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts or os.path.isabs(rel_path):
        raise AccessError(errno.EACCES, f"{rel_path} is not a path inside the directory")
    return parts


def resolve_inside(root: str, rel_path: str) -> str | None:
    """Where a path with links in it really leads, relative to root; None when that is outside."""
    root_real = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root_real, *relative_parts(rel_path)))
    if not real.startswith(root_real + os.sep):
        return None
    return os.path.relpath(real, root_real).replace(os.sep, "/")


@contextlib.contextmanager
def open_inside(root: str, rel_path: str) -> Iterator[tuple[int, str]]:
    """(descriptor of a regular file, its real path relative to root); AccessError otherwise."""
    try:
        root_fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise AccessError(exc.errno, f"cannot open the directory {root} ({exc.strerror})") from None
    try:
        try:
            fd = _walk(root_fd, relative_parts(rel_path))
            real_rel = "/".join(relative_parts(rel_path))
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise AccessError(exc.errno, f"cannot open {rel_path} ({exc.strerror})") from None
            # A link on the way: follow it only into the root, then open the target without links.
            target = resolve_inside(root, rel_path)
            if target is None:
                raise AccessError(errno.EACCES, f"{rel_path} is a link to outside the directory") from None
            try:
                fd = _walk(root_fd, relative_parts(target))
            except OSError as again:
                raise AccessError(again.errno, f"{rel_path} changed while it was being opened") from None
            real_rel = target
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise AccessError(errno.EINVAL, f"{rel_path} is not a regular file")
            yield fd, real_rel
        finally:
            os.close(fd)
    finally:
        os.close(root_fd)


def read_fd(fd: int, max_bytes: int) -> bytes:
    """The whole of an open file, refused past max_bytes without reading further (it may have grown
    since it was checked)."""
    if os.fstat(fd).st_size > max_bytes:
        raise AccessError(errno.EFBIG, f"larger than max_file_bytes ({max_bytes})")
    chunks, total = [], 0
    while True:
        block = os.read(fd, min(1 << 20, max_bytes + 1 - total))
        if not block:
            break
        chunks.append(block)
        total += len(block)
        if total > max_bytes:
            raise AccessError(errno.EFBIG, f"grew past max_file_bytes ({max_bytes}) while being read")
    return b"".join(chunks)


def read_inside(root: str, rel_path: str, max_bytes: int, admit: Callable[[str], bool] = lambda real: True) -> bytes:
    """The whole file, read from the descriptor that was checked. `admit` judges where a link inside
    the root really leads (a link named notes.md may point at .env), on the same descriptor."""
    with open_inside(root, rel_path) as (fd, real_rel):
        if real_rel != rel_path and not admit(real_rel):
            raise AccessError(errno.EACCES, f"{rel_path} is a link to {real_rel}, which is excluded")
        return read_fd(fd, max_bytes)
