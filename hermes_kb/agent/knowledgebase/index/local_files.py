"""What this machine keeps of an index on its own disk, whichever database holds the index: the
writer's lock file, the derived copies beside it, and, for SQLite, the database file and its journal.
Both backends take this lock (a server index's copies are rebuilt by searches here too)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from . import derived_file
from .contract import IndexBusy, StoreError, explain
from .encoding import keyword_copy_path, vector_copy_path


@contextlib.contextmanager
def guarded(path: Path, name: str, failures: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Turn the database's `failures` and disk errors raised inside into StoreError naming this index
    (its subclasses tell corruption and a full disk apart), so a caller can fence off one bad index and
    go on with the rest."""
    try:
        yield
    except StoreError:
        raise
    except (*failures, OSError) as exc:  # OSError: the index's own files (its folder, the lock, the copies)
        raise explain(exc, path, name) from None


def companion_paths(path: Path) -> tuple[Path, ...]:
    """The index file and everything that lives and dies with it (the lock file excepted)."""
    return path, Path(f"{path}-wal"), Path(f"{path}-shm"), vector_copy_path(path), keyword_copy_path(path)


def index_files(path: Path) -> tuple[Path, ...]:
    """Every file an index keeps beside itself, the lock included: never indexed as content, whatever
    the index file is called (a scan skips *.sqlite* by name only)."""
    return (*companion_paths(path), Path(f"{path}.lock"))


@contextlib.contextmanager
def writer_lock(index_path: Path, on_wait=None, wait: bool = True) -> Iterator[None]:
    """One writer per index across processes; the kernel drops the lock if its holder dies."""
    index_path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{index_path}.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise IndexBusy(f"{index_path} is being indexed by another process.") from None
            if on_wait:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_index(path: Path) -> bool:
    """Delete an index file, its companions and leftovers of killed cache builds; True when something was removed.

    The lock file stays: another process may be waiting on it.
    """
    removed = False
    for candidate in (*companion_paths(path), *derived_file.leftovers(vector_copy_path(path)), *derived_file.leftovers(keyword_copy_path(path))):
        with contextlib.suppress(FileNotFoundError):
            os.remove(candidate)
            removed = True
    return removed


def locked_here(path: Path) -> bool:
    """Whether a process on this machine holds the index's writer lock now (probed without waiting)."""
    if not Path(f"{path}.lock").exists():  # never locked, so never indexed from this machine
        return False
    try:
        with writer_lock(path, wait=False):
            return False
    except IndexBusy:
        return True
    except OSError:  # a lock file that cannot be opened here (read-only folder): nobody writes there either
        return False
