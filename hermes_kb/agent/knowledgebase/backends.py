"""Where a directory's index lives, and what depends on it: opening, locking, removing, sizing, listing.

The facade asks its backend (chosen by `knowledgebase.store`) instead of
assuming one SQLite file per directory. Either way an index has a local path
under HERMES_HOME: the SQLite file itself, or, for PostgreSQL, the name this
machine gives its derived copies (keyword and vector copies, the lock file),
ending in the schema's name. Nothing above this module knows which it is.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import store
from .config import DirectoryConfig, StoreConfig


@dataclass(frozen=True)
class Unlisted:
    """An index no configured directory owns: a folder indexed by path, or an orphan."""
    path: Path
    name: str  # the directory name it was first indexed under ('' when unknown)
    root: str | None
    problem: str | None = None  # why it could not be read


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
        return store.writer_lock(path, on_wait=on_wait, wait=wait)  # the file is made by the first writer anyway

    def remove(self, path: Path) -> bool:
        return store.remove_index(path)

    def being_indexed(self, path: Path) -> bool:
        """Whether another process holds this index's writer lock right now (probed without waiting)."""
        return _locked_here(path)

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
            except store.StoreError as exc:
                found.append(Unlisted(path, name, None, f"unreadable: {exc}"))
        return found


class PostgresBackend:
    """One schema per directory on a PostgreSQL server with pgvector, shared by every host that
    names the same server: a directory's schema is keyed like its SQLite file (name and folder
    path), so hosts that mount the folder at the same path share one index."""

    shared = True  # other hosts' indexes live here too: never reported as orphans of this machine

    def __init__(self, hermes_home: Path, url: str):
        self.hermes_home, self.url = hermes_home, url
        self._control: dict[int, object] = {}  # per thread: a connection for the questions below, kept open
        self._held: dict[str, object] = {}  # schema -> the connection holding its writer lock in this process

    def _connect(self):
        from . import pg_store

        return pg_store.connect(self.url)

    def _ask(self, question, *args):
        """`question(conn, *args)` from pg_store's catalogue on this thread's kept connection
        (connecting costs ~5 ms, a whole search's budget); reconnected once if the server dropped it.
        Any server error is one sentence (StoreError), as from `guarded`."""
        from .pg_store import driver, where

        psycopg = driver()
        key = threading.get_ident()
        for attempt in range(2):
            conn = self._control.get(key)
            if conn is None or conn.closed:
                conn = self._control[key] = self._connect()
            try:
                return question(conn, *args)
            except psycopg.OperationalError as exc:
                conn.close()
                if attempt:
                    raise store.StoreError(f"Lost the connection to PostgreSQL at {where(self.url)} "
                                           f"({self._reason(exc)}); try again.") from None
            except psycopg.Error as exc:
                raise store.StoreError(f"PostgreSQL at {where(self.url)} refused a question about its indexes: "
                                       f"{self._reason(exc)}.") from None
        return None

    def _reason(self, exc: BaseException) -> str:
        from .pg_store import reason

        return reason(exc, self.url)

    def index_path(self, directory: DirectoryConfig) -> Path:
        from .pg_store import schema_name

        from .pg_store import SCHEMA_PATTERN

        folder = self.hermes_home / "knowledgebase" / "postgres"
        given = directory.index_path
        if given is not None and given.parent == folder and re.fullmatch(SCHEMA_PATTERN, given.name):
            return given  # a folder indexed by path, found on the server under its schema
        return folder / schema_name(directory.resolved_index_path(self.hermes_home).stem, directory.name)

    def open(self, path: Path, name: str | None = None, create: bool = True):
        from .pg_store import PgIndexStore

        conn = self._connect()
        try:
            return PgIndexStore(conn, path.name, path, create=create, name=name)
        except BaseException:
            conn.close()
            raise

    def _schema_oid(self, path: Path) -> int | None:
        from .pg_store import schema_oid

        return self._ask(schema_oid, path.name)

    def exists(self, path: Path) -> bool:
        return self._schema_oid(path) is not None

    def identity(self, path: Path, opened) -> tuple | None:
        """The schema's oid (a dropped and recreated index gets a new one), asked on the reader's own
        connection when there is one: a connection the server dropped (a restart, a terminated
        backend) reads as a new identity, so the caller reconnects instead of failing a search."""
        from .pg_store import driver, schema_oid

        psycopg = driver()

        if opened is not None:
            try:
                oid = schema_oid(opened.conn, path.name)
            except psycopg.OperationalError:
                return ("reconnect", id(opened))
        else:
            oid = self._schema_oid(path)
        return None if oid is None else ("schema", oid)

    @contextlib.contextmanager
    def writer_lock(self, path: Path, name: str, wait: bool = True, on_wait=None,
                    create: bool = False) -> Iterator[None]:
        """The server's writer lock (one writer per directory on every host, pg_store.writer_lock),
        then this machine's file lock (its derived copies are rebuilt by searches too, see
        KnowledgeBase._source). `create` makes the index first (an index run), so that its first
        writer holds the lock as every later one does; without it, an index the server does not
        have takes the local lock only (there is nothing there to guard)."""
        from .pg_store import PgIndexStore, driver, schema_oid, writer_lock

        psycopg = driver()
        with self._connect() as conn:
            if schema_oid(conn, path.name) is None and not create:
                with store.writer_lock(path, on_wait=on_wait, wait=wait):
                    yield
                return
            for attempt in range(2):  # made, checked (ownership, older schemas upgraded) on the lock's connection
                try:
                    PgIndexStore(conn, path.name, path, create=create, name=name)
                    break
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema):
                    if attempt:  # another host made it at the same moment: opened as it stands
                        raise
            with writer_lock(conn, path.name, name, wait, on_wait), store.writer_lock(path, on_wait=on_wait, wait=wait):
                self._held[path.name] = conn
                try:
                    _indexed_here(path).touch()  # this machine writes it (a search's catch-up does not mark it)
                    yield
                finally:
                    del self._held[path.name]

    def being_indexed(self, path: Path) -> bool:
        """Whether a process on any machine indexes this directory right now: the server's lock."""
        from .pg_store import writer_held

        return _locked_here(path) or bool(self._ask(writer_held, path.name))

    def remove(self, path: Path) -> bool:
        """Drop the index; under writer_lock, on the lock's own connection (from any other, the drop
        would wait for the lock this process holds)."""
        from .pg_store import drop_schema, schema_oid

        held = self._held.get(path.name)
        existed = held is not None and schema_oid(held, path.name) is not None
        if held is not None:
            drop_schema(held, path.name)
        _indexed_here(path).unlink(missing_ok=True)
        return store.remove_index(path) or existed  # the local copies go with it

    @contextlib.contextmanager
    def guarded(self, path: Path, name: str) -> Iterator[None]:
        """Server errors as one sentence naming the directory (the URL's password never shown)."""
        from .pg_store import driver, where

        psycopg = driver()

        try:
            with store.guarded(path, name):  # the local copies and lock: disk errors
                yield
        except psycopg.OperationalError as exc:
            raise store.StoreError(f"Lost the connection to PostgreSQL at {where(self.url)} while using the index of "
                                   f"{name} ({self._reason(exc)}); nothing indexed was lost, try again.") from None
        except psycopg.Error as exc:
            raise store.StoreError(f"The index of {name} on PostgreSQL at {where(self.url)} failed: "
                                   f"{self._reason(exc)}.") from None

    def query_errors(self) -> tuple[type[BaseException], ...]:
        from .pg_store import driver

        return (driver().Error,)

    def describe(self) -> str:
        from .pg_store import where

        return f"PostgreSQL at {where(self.url)} (pgvector)"

    def unlisted(self) -> list[Unlisted]:
        """Schemas this machine indexed that its config does not list: each one's root and name, in two queries."""
        from .pg_store import index_roots

        # Only what this machine indexed (marked when it took the writer lock), as only this home's SQLite
        # files are listed: other hosts' folders indexed by path must not join this machine's searches.
        folder = self.hermes_home / "knowledgebase" / "postgres"
        mine = [marker.name[:-len(INDEXED_HERE)] for marker in folder.glob(f"kb_*{INDEXED_HERE}")] if folder.is_dir() else []
        if not mine:
            return []
        return [Unlisted(folder / schema, meta.get("name", ""), meta.get("root"))
                for schema, meta in self._ask(index_roots, mine).items()]


INDEXED_HERE = ".indexed-here"  # beside a server index's local copies: this machine has written it


def _indexed_here(path: Path) -> Path:
    return Path(f"{path}{INDEXED_HERE}")


def _locked_here(path: Path) -> bool:
    if not Path(f"{path}.lock").exists():  # never locked, so never indexed from this machine
        return False
    try:
        with store.writer_lock(path, wait=False):
            return False
    except store.IndexBusy:
        return True
    except OSError:  # a lock file that cannot be opened here (read-only folder): nobody writes there either
        return False


def backend_for(config: StoreConfig, hermes_home: Path) -> SqliteBackend | PostgresBackend:
    """The backend `knowledgebase.store` names."""
    if config.backend == "postgres":
        return PostgresBackend(hermes_home, config.url)
    return SqliteBackend(hermes_home)

