"""SQLite's backend: one index file per directory under HERMES_HOME (the default)."""

from __future__ import annotations

import os
from pathlib import Path

from ..config import DirectoryConfig
from . import store
from .contract import StoreError, Unlisted
from .local_files import locked_here, remove_index, writer_lock


class SqliteBackend:
    """One SQLite file per directory under HERMES_HOME (the default)."""

    shared = False  # nobody else writes here: an index no folder claims is an orphan to report

    def __init__(self, hermes_home: Path):
        self.hermes_home = hermes_home

    def index_path(self, directory: DirectoryConfig) -> Path:
        return directory.resolved_index_path(self.hermes_home)

    def open(self, path: Path, name: str | None = None, create: bool = True) -> store.IndexStore:
        return store.IndexStore(path, create=create, name=name)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def identity(self, path: Path, opened: store.IndexStore | None) -> tuple | None:
        """What changes when the index is replaced (a repair, a clear and a rebuild); None: no index."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def writer_lock(self, path: Path, name: str, wait: bool = True, on_wait=None, create: bool = False):
        return writer_lock(path, on_wait=on_wait, wait=wait)  # the file is made by the first writer anyway

    def remove(self, path: Path) -> bool:
        return remove_index(path)

    def being_indexed(self, path: Path) -> bool:
        """Whether another process holds this index's writer lock right now (probed without waiting)."""
        return locked_here(path)

    def guarded(self, path: Path, name: str):
        return store.guarded(path, name)

    def query_errors(self) -> tuple[type[BaseException], ...]:
        return (store.sqlite_driver()[0].DatabaseError,)

    def describe(self) -> str:
        return store.driver_description()

    def unlisted(self) -> list[Unlisted]:
        folder = self.hermes_home / "knowledgebase" / "indexes"
        found = []
        for path in sorted(folder.glob("*.sqlite")) if folder.is_dir() else ():
            # The file is named NAME-DIGEST.sqlite: the name chosen at its first run, the digest its folder's path.
            name = path.stem.rpartition("-")[0]
            try:
                with store.IndexStore(path, create=False) as opened:
                    found.append(Unlisted(path, name, opened.meta("root")))
            except StoreError as exc:
                found.append(Unlisted(path, name, None, f"unreadable: {exc}"))
        return found
