"""PostgreSQL's backend: one schema per directory on a server with pgvector, shared by every host that
names the same server; this machine keeps each index's copies and lock file under HERMES_HOME."""

from __future__ import annotations

import contextlib
import re
import threading
from pathlib import Path
from typing import Iterator

from ..config import DirectoryConfig
from . import pg_store
from .contract import StoreError, Unlisted
from .local_files import guarded as guarded_files
from .local_files import locked_here, remove_index
from .local_files import writer_lock as local_writer_lock
from .pg_store import PgIndexStore, driver, schema_oid, where


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
        return pg_store.connect(self.url)

    def _ask(self, question, *args):
        """`question(conn, *args)` from pg_store's catalogue on this thread's kept connection
        (connecting costs ~5 ms, a whole search's budget); reconnected once if the server dropped it.
        Any server error is one sentence (StoreError), as from `guarded`."""
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
                    raise StoreError(f"Lost the connection to PostgreSQL at {where(self.url)} "
                                           f"({self._reason(exc)}); try again.") from None
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL at {where(self.url)} refused a question about its indexes: "
                                       f"{self._reason(exc)}.") from None
        return None

    def _reason(self, exc: BaseException) -> str:
        return pg_store.reason(exc, self.url)

    def index_path(self, directory: DirectoryConfig) -> Path:
        folder = self.hermes_home / "knowledgebase" / "postgres"
        given = directory.index_path
        if given is not None and given.parent == folder and re.fullmatch(pg_store.SCHEMA_PATTERN, given.name):
            return given  # a folder indexed by path, found on the server under its schema
        return folder / pg_store.schema_name(directory.resolved_index_path(self.hermes_home).stem, directory.name)

    def open(self, path: Path, name: str | None = None, create: bool = True):
        conn = self._connect()
        try:
            return PgIndexStore(conn, path.name, path, create=create, name=name)
        except BaseException:
            conn.close()
            raise

    def _schema_oid(self, path: Path) -> int | None:
        return self._ask(schema_oid, path.name)

    def exists(self, path: Path) -> bool:
        return self._schema_oid(path) is not None

    def identity(self, path: Path, opened) -> tuple | None:
        """The schema's oid (a dropped and recreated index gets a new one), asked on the reader's own
        connection when there is one: a connection the server dropped (a restart, a terminated
        backend) reads as a new identity, so the caller reconnects instead of failing a search."""
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
        copies.OpenIndexes.catch_up_keywords). `create` makes the index first (an index run), so
        that its first writer holds the lock as every later one does; without it, an index the
        server does not have takes the local lock only (there is nothing there to guard)."""
        psycopg = driver()
        with self._connect() as conn:
            if schema_oid(conn, path.name) is None and not create:
                with local_writer_lock(path, on_wait=on_wait, wait=wait):
                    yield
                return
            for attempt in range(2):  # made, checked (ownership, older schemas upgraded) on the lock's connection
                try:
                    PgIndexStore(conn, path.name, path, create=create, name=name)
                    break
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema):
                    if attempt:  # another host made it at the same moment: opened as it stands
                        raise
            with pg_store.writer_lock(conn, path.name, name, wait, on_wait), local_writer_lock(path, on_wait=on_wait, wait=wait):
                self._held[path.name] = conn
                try:
                    _indexed_here(path).touch()  # this machine writes it (a search's catch-up does not mark it)
                    yield
                finally:
                    del self._held[path.name]

    def being_indexed(self, path: Path) -> bool:
        """Whether a process on any machine indexes this directory right now: the server's lock."""
        return locked_here(path) or bool(self._ask(pg_store.writer_held, path.name))

    def remove(self, path: Path) -> bool:
        """Drop the index; under writer_lock, on the lock's own connection (from any other, the drop
        would wait for the lock this process holds)."""
        held = self._held.get(path.name)
        existed = held is not None and schema_oid(held, path.name) is not None
        if held is not None:
            pg_store.drop_schema(held, path.name)
        _indexed_here(path).unlink(missing_ok=True)
        return remove_index(path) or existed  # the local copies go with it

    @contextlib.contextmanager
    def guarded(self, path: Path, name: str) -> Iterator[None]:
        """Server errors as one sentence naming the directory (the URL's password never shown)."""
        psycopg = driver()

        try:
            with guarded_files(path, name):  # the local copies and lock: disk errors
                yield
        except psycopg.OperationalError as exc:
            raise StoreError(f"Lost the connection to PostgreSQL at {where(self.url)} while using the index of "
                                   f"{name} ({self._reason(exc)}); nothing indexed was lost, try again.") from None
        except psycopg.Error as exc:
            raise StoreError(f"The index of {name} on PostgreSQL at {where(self.url)} failed: "
                                   f"{self._reason(exc)}.") from None

    def query_errors(self) -> tuple[type[BaseException], ...]:
        return (driver().Error,)

    def describe(self) -> str:
        return f"PostgreSQL at {where(self.url)} (pgvector)"

    def unlisted(self) -> list[Unlisted]:
        """Schemas this machine indexed that its config does not list: each one's root and name, in two queries."""
        # Only what this machine indexed (marked when it took the writer lock), as only this home's SQLite
        # files are listed: other hosts' folders indexed by path must not join this machine's searches.
        folder = self.hermes_home / "knowledgebase" / "postgres"
        mine = [marker.name[:-len(INDEXED_HERE)] for marker in folder.glob(f"kb_*{INDEXED_HERE}")] if folder.is_dir() else []
        if not mine:
            return []
        return [Unlisted(folder / schema, meta.get("name", ""), meta.get("root"))
                for schema, meta in self._ask(pg_store.index_roots, mine).items()]


INDEXED_HERE = ".indexed-here"  # beside a server index's local copies: this machine has written it


def _indexed_here(path: Path) -> Path:
    return Path(f"{path}{INDEXED_HERE}")
