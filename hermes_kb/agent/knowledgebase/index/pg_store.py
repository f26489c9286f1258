"""The PostgreSQL + pgvector store: the SQLite store's contract, one schema per indexed directory.

The team backend (`knowledgebase.store: {backend: postgres, url}`, opened by
pg_backend.PostgresBackend), checked against contract.Store with `store.IndexStore`.
The only module that speaks SQL to the server. Choices:

- One schema per directory (`kb_<name>_<hash>`), so directories share a server
  without sharing tables, and `clear` is one DROP SCHEMA.
- Vectors stay float32 (`vector(dim)`), one row per window, id = chunk id << 5 |
  window as in SQLite; the HNSW index is a halfvec expression index (42% smaller,
  same recall on our data) built after a bulk load (`build_vector_index`),
  since HNSW inserts row by row cost ~2.5 ms each.
- Keyword scores: the same analysed, hashed terms per chunk as SQLite's
  `chunk_terms` (analysis.py), so the BM25 keyword copy (keyword_cache) is built
  from either store and ranks identically; Postgres's ts_rank is not BM25
  (SciFact keyword nDCG@10 0.587 against 0.691), and its text search
  configurations are one language each. Without a copy, a GIN index over each
  chunk's term hashes finds candidates and BM25 scores them (`keyword`).
- Every error a user can cause when connecting is one sentence (StoreError).
- Other roles on the server are not trusted (docs/team.md, "Roles"). Every connection pins
  `search_path` to `pg_catalog, pg_temp`, and every pgvector type, operator and operator class is
  written with the extension's schema, so no schema another role can create objects in (one named
  after this role, `public` on old servers) is ever searched for a name: a teammate's `<=>` cannot
  run as this role. An index schema is used only when its owner, and the owner of every table in
  it, is this role or a role this role is a member of (a team role, by design); a schema someone
  else created under an index's name (squatting) is refused before anything is read or written.

Over 500 lines for the reason store.py is: every statement the server runs for an index is here.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence
from urllib.parse import unquote, urlsplit

import numpy as np

from .. import analysis
from ..chunker import Chunk
from ..embeddings import ModelIdentity
from ..filters import FileMetadata, FileTable, pack_parts, pack_tags
from . import encoding
from .bm25 import bm25
from .common import CHUNK_COLUMNS, StoreCommon
from .contract import (
    SCHEMA_VERSION,
    VECTOR_IDS,
    ChunkRow,
    FileRefused,
    FileRow,
    IndexBusy,
    StoreError,
)
from .encoding import WINDOW_BITS

SCHEMA_PATTERN = r"kb_[a-z0-9_]{1,40}_[0-9a-f]{10}"  # what schema_name makes, nothing else: never `public`
SAFE_SEARCH_PATH = "pg_catalog, pg_temp"  # set on every connection (module docstring)
MIN_SERVER = 130000  # PostgreSQL 13: the oldest pgvector 0.7+ supports
MIN_PGVECTOR = (0, 7, 0)  # halfvec, for the HNSW index
HNSW = {"m": 16, "ef_construction": 64}
KEYWORD_CANDIDATES = 1000  # chunks the server's term index hands to BM25 when no keyword copy is current
MAX_EF_SEARCH = 1000  # pgvector's limit
# A filtered search over at most this many chunks compares their vectors exactly; past it, the HNSW
# index is walked with the filter (pgvector's iterative scan goes on until enough rows pass it).
EXACT_FILTERED_CHUNKS = 2_000
EF_SEARCH = 400  # candidates; 100k chunks (benchmarks/pg_store.py): recall@10 0.910 at 100, 0.954 at 200, 0.975 at 400 (p50 4.7 ms)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS {s}.files(
    id BIGSERIAL PRIMARY KEY, path TEXT NOT NULL UNIQUE, size BIGINT NOT NULL, mtime_ns BIGINT NOT NULL,
    content_hash TEXT NOT NULL, kind TEXT NOT NULL, chunk_count INTEGER NOT NULL DEFAULT 0,
    indexed_at DOUBLE PRECISION NOT NULL, error TEXT, tags TEXT NOT NULL DEFAULT '', dated DOUBLE PRECISION,
    recognised TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS {s}.chunks(
    id BIGSERIAL PRIMARY KEY, file_id BIGINT NOT NULL REFERENCES {s}.files(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, text TEXT NOT NULL, start_char INTEGER NOT NULL, end_char INTEGER NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, page INTEGER, heading TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_file ON {s}.chunks(file_id);
CREATE INDEX IF NOT EXISTS chunks_hash ON {s}.chunks(content_hash);
CREATE TABLE IF NOT EXISTS {s}.chunk_terms(
    chunk_id BIGINT PRIMARY KEY REFERENCES {s}.chunks(id) ON DELETE CASCADE,
    tokens INTEGER NOT NULL, terms BYTEA NOT NULL, written BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS chunk_terms_written ON {s}.chunk_terms(written);
"""
# One row, locked FOR UPDATE by the index's writer (writer_lock); older schemas get it when opened.
_WRITER = """
CREATE TABLE IF NOT EXISTS {s}.writer(id INTEGER PRIMARY KEY CHECK (id = 1));
INSERT INTO {s}.writer VALUES (1) ON CONFLICT DO NOTHING;
"""
# Schema 2: each chunk's term hashes as an array with a GIN index, the server's keyword index (the one
# analyzer's terms, so it finds what the copy finds); schema 1's English tsvector goes.
_ANALYSED = """
ALTER TABLE {s}.chunks DROP COLUMN IF EXISTS tsv;
ALTER TABLE {s}.chunk_terms ADD COLUMN IF NOT EXISTS hashes BIGINT[] NOT NULL DEFAULT '{{}}';
CREATE INDEX IF NOT EXISTS chunk_terms_hashes ON {s}.chunk_terms USING gin(hashes);
"""
# Files' tags and front matter dates (filters.py), for schemas written before they were kept.
_FACETS = """
ALTER TABLE {s}.files ADD COLUMN IF NOT EXISTS tags TEXT NOT NULL DEFAULT '';
ALTER TABLE {s}.files ADD COLUMN IF NOT EXISTS dated DOUBLE PRECISION;
ALTER TABLE {s}.files ADD COLUMN IF NOT EXISTS recognised TEXT NOT NULL DEFAULT '';
"""


def schema_name(key: str, name: str) -> str:
    """A schema per directory: readable, unique by the directory's key, within Postgres's 63 bytes."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40] or "index"
    return f"kb_{slug}_{hashlib.blake2b(key.encode(), digest_size=5).hexdigest()}"


def where(url: str) -> str:
    """The server(s) a URL names, as messages show them: what follows the credentials; never raises."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    return hosts or "the local server"


def scrub(text: str, url: str) -> str:
    """libpq's text with the URL's password taken out, however it was written."""
    password = urlsplit(url).netloc.rpartition("@")[0].partition(":")[2]
    for secret in {password, unquote(password)} - {""}:
        text = text.replace(secret, "***")
    return text


def reason(exc: BaseException, url: str) -> str:
    """The line of libpq's message that says what failed ("Connection refused", not the hint after it)."""
    lines = [line.strip() for line in scrub(str(exc), url).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0].rpartition(" failed: ")[2] or lines[0]


def driver():
    """psycopg, or one sentence saying how to install it."""
    try:
        import psycopg
    except ImportError:
        raise StoreError("knowledgebase.store is postgres, which needs psycopg: "
                         "pip install 'hermes-knowledgebase[postgres]'.") from None
    return psycopg


def _explain_connect(exc: Exception, url: str) -> StoreError:
    """One sentence for what a user got wrong when connecting, from libpq's message."""
    text, at, user = scrub(str(exc), url), where(url), unquote(urlsplit(url).username or "") or "the default user"
    reasons = (
        ("password authentication failed", f"PostgreSQL at {at} refused the credentials of {user}; check the user "
                                            "and password in knowledgebase.store.url."),
        ("does not exist", f"PostgreSQL at {at} has no such database or role ({reason(exc, url)}); "
                           "create it or fix knowledgebase.store.url."),
        ("no password supplied", f"PostgreSQL at {at} wants a password for {user}; put it in knowledgebase.store.url "
                                 "(or an environment variable it names)."),
    )
    for needle, sentence in reasons:
        if needle in text:
            return StoreError(sentence)
    return StoreError(f"Cannot reach the PostgreSQL server at {at} ({reason(exc, url)}); "
                      "is it running and is knowledgebase.store.url right?")


def connect(url: str, timeout_s: float = 10.0):
    """An autocommit connection to a server this store can use, or StoreError saying why not."""
    psycopg = driver()

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout_s)), prepare_threshold=None)
    except psycopg.Error as exc:
        raise _explain_connect(exc, url) from None
    try:
        # Before anything else runs: no later name can resolve into a schema another role writes.
        conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)", (SAFE_SEARCH_PATH,))
        check_server(conn, where(url))
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"PostgreSQL at {where(url)} refused the first questions of a session ({reason(exc, url)}).") from None
    except BaseException:
        conn.close()
        raise
    return conn


def check_server(conn, where: str) -> None:
    """The server is new enough and has pgvector (created here when the user may create it)."""
    import psycopg

    version = int(conn.execute("SHOW server_version_num").fetchone()[0])
    if version < MIN_SERVER:
        raise StoreError(f"The PostgreSQL server at {where} runs version {version // 10000}; the knowledgebase needs "
                         f"{MIN_SERVER // 10000} or later.")
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if row is None:
        available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if available is None:
            raise StoreError(f"The PostgreSQL server at {where} has no pgvector; install it (the postgresql-NN-pgvector "
                             "package or the pgvector/pgvector image), then run `CREATE EXTENSION vector;` in the database.")
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")  # never pg_catalog (the path's first)
        except psycopg.Error as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StoreError(f"pgvector is not enabled in the database at {where} and could not be enabled ({detail}); "
                             "run `CREATE EXTENSION vector;` in it as its owner or a superuser.") from None
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    found = tuple(int(part) for part in re.findall(r"\d+", row[0])[:3])
    if found < MIN_PGVECTOR:
        raise StoreError(f"pgvector {row[0]} at {where} is too old (halfvec needs 0.7 or later); run "
                         "`ALTER EXTENSION vector UPDATE;` after upgrading the package.")


def vector_schema(conn) -> str:
    """The schema pgvector was installed in: its types and operators are named through it."""
    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                       "WHERE e.extname = 'vector'").fetchone()
    if row is None:
        raise StoreError("pgvector was removed from the database while the knowledgebase was using it.")
    return row[0]


def foreign_owner(conn, schema: str) -> str | None:
    """Who owns this schema, or a table in it, when that is not this role or a role it is a member
    of (None when every owner is trusted): the test for squatting and foreign objects."""
    row = conn.execute(
        "SELECT r.rolname FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner "
        "WHERE n.nspname = %s AND NOT pg_has_role(current_user, n.nspowner, 'MEMBER') "
        "UNION ALL SELECT r.rolname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_roles r ON r.oid = c.relowner WHERE n.nspname = %s "
        "AND NOT pg_has_role(current_user, c.relowner, 'MEMBER') LIMIT 1", (schema, schema)).fetchone()
    return None if row is None else row[0]


class PgIndexStore(StoreCommon):
    """One directory's schema on a PostgreSQL server, with the methods of contract.SharedStore. Not shared across threads.

    `path` is where this machine keeps its derived copies of the index (vector_cache, keyword_cache
    name their files after it), as beside a SQLite file: searches read them instead of the server.
    """

    def __init__(self, conn, schema: str, path: Path, create: bool = True, name: str | None = None):
        if not re.fullmatch(SCHEMA_PATTERN, schema):  # it is spliced into SQL as an identifier
            raise ValueError(f"not a schema name this store creates: {schema!r}")
        self.conn, self.schema, self.path, self.name = conn, schema, path, name or schema
        self.vec = vector_schema(conn)  # spliced as an identifier: a catalogue name, quoted
        if '"' in self.vec:
            raise StoreError(f"pgvector's schema name {self.vec!r} cannot be quoted safely; move the extension.")
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None
        if not exists and not create:
            raise StoreError(f"No index for {self.name} on the server; run `hermes kb index` first.")
        if exists:
            self._check_owner()
            self._upgrade()
        else:
            with self.transaction():
                conn.execute(f'CREATE SCHEMA "{schema}"')  # fails if another role created it meanwhile
                conn.execute("".join(part.format(s=f'"{schema}"') for part in (_SCHEMA, _ANALYSED, _WRITER)))
                if self.meta("schema_version") is None:  # the name: other hosts list it as a folder indexed by path
                    self.set_meta(schema_version=SCHEMA_VERSION, created_at=time.time(), name=self.name,
                                  analyzer=analysis.ANALYZER)
        self._check_schema(self.name)

    def _upgrade(self) -> None:
        """An older schema's files get tags and dates (filled as the next run re-reads each file), and
        the row its writers lock. Asked first: a reader without the rights to change it still reads."""
        present = self.conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
                                    "AND table_name = 'files' AND column_name = 'recognised'", (self.schema,)).fetchone()
        if present is None:
            with self.transaction():
                self.conn.execute(_FACETS.format(s=f'"{self.schema}"'))
        if self.conn.execute("SELECT to_regclass(%s) IS NULL AND has_schema_privilege(%s, 'CREATE')",
                             (f'"{self.schema}".writer', self.schema)).fetchone()[0]:
            with self.transaction():
                self.conn.execute(_WRITER.format(s=f'"{self.schema}"'))

    def reanalyse(self) -> int:
        """Every chunk's terms made again from its stored text with this analyzer, in one transaction
        (vectors untouched: nothing is re-embedded); the server's keyword index with them."""
        psycopg = driver()
        try:
            with self.transaction():
                # Hosts that open it at once re-analyse it once; readers' SELECTs pass (EXCLUSIVE needs
                # the UPDATE right, which an advisory lock on a public key did not).
                self.conn.execute(f"LOCK TABLE {self._t('meta')} IN EXCLUSIVE MODE")
                if self.meta("analyzer") == analysis.ANALYZER:
                    return 0  # another host did it while this one waited
                self.conn.execute(_ANALYSED.format(s=f'"{self.schema}"'))
                self.conn.execute(f"DELETE FROM {self._t('chunk_terms')}")
                generation = self._bump_generation()
                self.conn.execute(f"DELETE FROM {self._t('meta')} WHERE key = 'languages'")
                done, used = 0, set()
                for rows in self._chunk_texts("%s"):  # one COPY a batch: a query cannot run while one is open
                    with self.conn.cursor() as cursor, cursor.copy(
                            f"COPY {self._t('chunk_terms')}(chunk_id, tokens, terms, written, hashes) FROM STDIN") as copy:
                        for chunk_id, text, heading in rows:
                            text_terms, heading_terms, latin = analysis.index_tokens(text, heading)
                            used.add(latin)
                            copy.write_row(_term_row(chunk_id, text_terms, heading_terms, generation))
                    done += len(rows)
                self._record_languages(used)
                self.set_meta(schema_version=SCHEMA_VERSION, analyzer=analysis.ANALYZER)
        except psycopg.errors.InsufficientPrivilege:
            raise StoreError(f"The index of {self.name} was written by an older hermes-knowledgebase and needs its "
                             f"keyword terms made again, which its owner's next `hermes kb index` does (this role may "
                             f"not write it).") from None
        return done

    def _check_owner(self) -> None:
        owner = foreign_owner(self.conn, self.schema)
        if owner is not None:
            raise StoreError(f"The schema {self.schema} that would hold the index of {self.name} belongs to the role "
                             f"{owner}, which you are not a member of; nothing was read or written there. Drop it or "
                             f"ask its owner (docs/team.md, \"Roles\").")

    def _t(self, table: str) -> str:
        return f'"{self.schema}".{table}'

    def _v(self, name: str) -> str:
        """A pgvector type or operator class, named through the extension's schema."""
        return f'"{self.vec}".{name}'

    def _distance(self) -> str:
        return f'OPERATOR("{self.vec}".<=>)'

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One consistent view for several reads (REPEATABLE READ)."""
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield

    # --- meta ---------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.conn.execute(f"SELECT value FROM {self._t('meta')} WHERE key = %s", (key,)).fetchone()
        return row[0] if row else None

    def all_meta(self) -> dict[str, str]:
        return dict(self.conn.execute(f"SELECT key, value FROM {self._t('meta')}").fetchall())

    def set_meta(self, **values: object) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {self._t('meta')}(key, value) VALUES (%s, %s) "
                               "ON CONFLICT(key) DO UPDATE SET value = excluded.value", [(k, str(v)) for k, v in values.items()])

    def finish_reembed(self) -> None:
        self.conn.execute(f"DELETE FROM {self._t('meta')} WHERE key = 'reembed_pending'")

    def has_vector_table(self) -> bool:
        """The pinned dimension is read in this snapshot, the table in the catalogue, which does not
        wait for snapshots: a reader whose snapshot predates pin_model sees the table but no dimension,
        and one predating drop_vectors the dimension but no table. Both are written in one transaction."""
        row = self.conn.execute(f"SELECT to_regclass(%s) IS NOT NULL AND EXISTS (SELECT 1 FROM {self._t('meta')} "
                                f"WHERE key = 'dimension')", (f'"{self.schema}".chunk_vec',)).fetchone()
        return bool(row[0])

    def pin_model(self, identity: ModelIdentity) -> None:
        with self.transaction():  # a reader sees the vector table only with its dimension
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {self._t('chunk_vec')}(id BIGINT PRIMARY KEY, "
                              f"embedding {self._v('vector')}({int(identity.dim)}) NOT NULL)")
            self.set_meta(model_id=identity.model_id, model_variant=identity.variant, dimension=identity.dim,
                          vector_ids=VECTOR_IDS)

    def _bump_generation(self) -> int:
        row = self.conn.execute(f"INSERT INTO {self._t('meta')}(key, value) VALUES ('generation', '1') ON CONFLICT(key) "
                                f"DO UPDATE SET value = (CAST({self._t('meta')}.value AS BIGINT) + 1)::text RETURNING value").fetchone()
        return int(row[0])

    def generation(self) -> str:
        meta = dict(self.conn.execute(f"SELECT key, value FROM {self._t('meta')} WHERE key IN ('created_at', 'generation')").fetchall())
        return f"{meta.get('created_at', '')}:{meta.get('generation', 0)}"

    # --- files --------------------------------------------------------------------------
    def files(self) -> dict[str, FileRow]:
        rows = self.conn.execute(f"SELECT id, path, size, mtime_ns, content_hash, kind, chunk_count, indexed_at, error "
                                 f"FROM {self._t('files')}").fetchall()
        return {row[1]: FileRow._make(row) for row in rows}

    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None:
        self.conn.execute(f"UPDATE {self._t('files')} SET size = %s, mtime_ns = %s WHERE id = %s", (size, mtime_ns, file_id))

    def file_facets(self) -> FileTable:
        rows = self.conn.execute(f"SELECT f.id, f.path, f.kind, f.tags, COALESCE(f.dated, f.mtime_ns / 1e9), MIN(c.id), "
                                 f"MAX(c.id), COUNT(*) FROM {self._t('files')} f JOIN {self._t('chunks')} c "
                                 f"ON c.file_id = f.id GROUP BY f.id").fetchall()
        return FileTable(rows, self.chunk_ids_of, self.generation())

    def chunk_ids_of(self, file_ids: Sequence[int]) -> dict[int, np.ndarray]:
        found: dict[int, list[int]] = {}
        for chunk_id, file_id in self.conn.execute(f"SELECT id, file_id FROM {self._t('chunks')} WHERE file_id = ANY(%s)",
                                                   (list(file_ids),)).fetchall():
            found.setdefault(file_id, []).append(chunk_id)
        return {file_id: np.array(sorted(ids), dtype=np.int64) for file_id, ids in found.items()}

    def _delete_chunks_of(self, file_ids: Sequence[int]) -> None:
        if not file_ids:
            return
        if self.has_vector_table():
            chunk_ids = [row[0] for row in self.conn.execute(
                f"SELECT id FROM {self._t('chunks')} WHERE file_id = ANY(%s)", (list(file_ids),)).fetchall()]
            self.conn.execute(f"DELETE FROM {self._t('chunk_vec')} WHERE id = ANY(%s)", (encoding.all_vector_ids(chunk_ids),))
        self.conn.execute(f"DELETE FROM {self._t('chunks')} WHERE file_id = ANY(%s)", (list(file_ids),))

    def write_file(self, path: str, size: int, mtime_ns: int, content_hash: str, kind: str,
                   chunks: Sequence[Chunk], vectors: Sequence[np.ndarray | None] | None,
                   error: str | None = None, metadata: FileMetadata = FileMetadata()) -> list[int]:
        """Replace everything known about one file in one transaction; its chunk ids. Text the server
        refuses (loaders.storable cleans what is known) is that file's FileRefused, never the run's."""
        psycopg = driver()
        try:
            return self._write_file(path, size, mtime_ns, content_hash, kind, chunks, vectors, error, metadata)
        except (psycopg.DataError, UnicodeEncodeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise FileRefused(f"PostgreSQL refused its text ({first})") from None

    def _write_file(self, path: str, size: int, mtime_ns: int, content_hash: str, kind: str,
                    chunks: Sequence[Chunk], vectors: Sequence[np.ndarray | None] | None,
                    error: str | None, metadata: FileMetadata) -> list[int]:
        with self.transaction():
            generation = self._bump_generation()
            row = self.conn.execute(f"SELECT id FROM {self._t('files')} WHERE path = %s", (path,)).fetchone()
            values = (size, mtime_ns, content_hash, kind, len(chunks), time.time(), error, pack_tags(metadata.tags),
                      metadata.dated, pack_parts(metadata.recognised))
            if row:
                self._delete_chunks_of([row[0]])
                self.conn.execute(f"UPDATE {self._t('files')} SET size=%s, mtime_ns=%s, content_hash=%s, kind=%s, "
                                  f"chunk_count=%s, indexed_at=%s, error=%s, tags=%s, dated=%s, recognised=%s WHERE id=%s",
                                  (*values, row[0]))
                file_id = row[0]
            else:
                file_id = self.conn.execute(
                    f"INSERT INTO {self._t('files')}(path, size, mtime_ns, content_hash, kind, chunk_count, indexed_at, error, "
                    f"tags, dated, recognised) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id", (path, *values)).fetchone()[0]
            # Ids first, then COPY: one round trip per table instead of three statements per chunk.
            ids = [r[0] for r in self.conn.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                (self._t("chunks"), len(chunks))).fetchall()]
            with self.conn.cursor() as cursor:
                with cursor.copy(f"COPY {self._t('chunks')}(id, file_id, ord, text, start_char, end_char, start_line, "
                                 "end_line, page, heading, content_hash) FROM STDIN") as copy:
                    for ord_, (chunk_id, chunk) in enumerate(zip(ids, chunks)):
                        copy.write_row((chunk_id, file_id, ord_, chunk.text, chunk.start_char, chunk.end_char,
                                        chunk.start_line, chunk.end_line, chunk.page, chunk.heading, chunk.content_hash))
                used: set[str] = set()
                with cursor.copy(f"COPY {self._t('chunk_terms')}(chunk_id, tokens, terms, written, hashes) FROM STDIN") as copy:
                    for chunk_id, chunk in zip(ids, chunks):
                        text_terms, heading_terms, latin = analysis.index_tokens(chunk.text, chunk.heading)
                        used.add(latin)
                        copy.write_row(_term_row(chunk_id, text_terms, heading_terms, generation))
            self._record_languages(used)
            if vectors is not None:
                self._insert_vectors({chunk_id: v for chunk_id, v in zip(ids, vectors) if v is not None})
        return ids

    def _insert_vectors(self, vectors: dict[int, np.ndarray]) -> None:
        """Each chunk's window vectors, one row per window, in one COPY."""
        with self.conn.cursor() as cursor, cursor.copy(f"COPY {self._t('chunk_vec')}(id, embedding) FROM STDIN") as copy:
            for chunk_id, windows in vectors.items():
                windows = np.atleast_2d(np.asarray(windows, dtype=np.float32))
                for vector_id, window in zip(encoding.vector_ids(chunk_id, len(windows)), windows):
                    copy.write_row((vector_id, _literal(window)))

    def _delete_paths(self, paths: list[str]) -> None:
        ids = [r[0] for r in self.conn.execute(f"SELECT id FROM {self._t('files')} WHERE path = ANY(%s)", (paths,)).fetchall()]
        self._delete_chunks_of(ids)
        self.conn.execute(f"DELETE FROM {self._t('files')} WHERE path = ANY(%s)", (paths,))

    # --- vectors ------------------------------------------------------------------------
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        if not self.has_vector_table():
            return {}
        owners = dict(self.conn.execute(f"SELECT MIN(id), content_hash FROM {self._t('chunks')} WHERE content_hash = ANY(%s) "
                                        f"GROUP BY content_hash", (list(set(hashes)),)).fetchall())
        vectors = self.vectors_for(list(owners))
        return {owners[chunk_id]: vector for chunk_id, vector in vectors.items()}

    def vectors_for(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        if not chunk_ids or not self.has_vector_table():
            return {}
        # Every id a window may have, looked up in the primary key: `id >> 5 = ANY(...)` scans the whole
        # table, and a join on id ranges got a parallel scan for small lists (0.2 s at 177k rows).
        with self.conn.cursor(binary=True) as cursor:
            rows = cursor.execute(f"SELECT id, embedding FROM {self._t('chunk_vec')} WHERE id = ANY(%s)",
                                  (encoding.all_vector_ids(chunk_ids),)).fetchall()
        if not rows:
            return {}
        return encoding.group_by_chunk(*_unpack(rows))

    def vector_count(self) -> int:
        return self.conn.execute(f"SELECT COUNT(*) FROM {self._t('chunk_vec')}").fetchone()[0] if self.has_vector_table() else 0

    def iter_vectors(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every (ids, vectors), 1024 at a time, in no particular order, for a local vector copy. Close
        it (contextlib.closing) before the snapshot it is read in ends: see `_streamed`."""
        for rows in self._streamed("vectors", f"SELECT id, embedding FROM {self._t('chunk_vec')}", binary=True):
            yield _unpack(rows)

    def _streamed(self, name: str, sql: str, binary: bool = False) -> Iterator[list[tuple]]:
        """The rows of `sql`, 1024 at a time, through a server-side cursor (`name`, one open at a time
        each): a client-side cursor holds the whole result in libpq's memory before the first row
        (50k vectors: +86 MB of peak RSS, so ~3 GB at 1.77M; +11 MB so). The cursor lives in a
        transaction block of its own until the iterator is exhausted or closed: one left half-read
        past the end of an enclosing snapshot breaks the connection's transaction nesting."""
        with self.conn.transaction(), self.conn.cursor(name=f"hermes_kb_{name}", binary=binary) as cursor:
            cursor.execute(sql)
            while rows := cursor.fetchmany(1024):
                yield rows

    def build_vector_index(self) -> None:
        """The HNSW index (cosine over halfvec), after a bulk load: built once, then kept by inserts."""
        if not self.has_vector_table():
            return
        dim = int(self.meta("dimension"))
        self.conn.execute(f"CREATE INDEX IF NOT EXISTS chunk_vec_hnsw ON {self._t('chunk_vec')} USING hnsw "
                          f"((embedding::{self._v('halfvec')}({dim})) {self._v('halfvec_cosine_ops')}) WITH (m = {HNSW['m']}, "
                          f"ef_construction = {HNSW['ef_construction']})")

    def knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine of its best window), best first. The HNSW index (halfvec) picks ef_search
        candidates; they are re-scored in float32, so scores equal SQLite's for the same vectors and
        near-ties among similar windows are ordered exactly. `allowed`: a filter's chunk ids."""
        if not self.has_vector_table() or not np.any(query):
            return []
        if allowed is not None and len(allowed) <= EXACT_FILTERED_CHUNKS:
            return encoding.exact_knn(self.vectors_for, query, k, allowed)
        dim, candidates = int(self.meta("dimension")), max(EF_SEARCH, 4 * k)
        only, arguments = "", [_literal(query), _literal(query), candidates, 4 * k]
        if allowed is not None:
            only = f"WHERE id >> {WINDOW_BITS} = ANY(%s::bigint[]) "
            arguments.insert(1, allowed.tolist())
        with self.transaction():
            # pgvector caps ef_search at 1000; past it, the iterative scan goes on until LIMIT is met.
            self.conn.execute(f"SET LOCAL hnsw.ef_search = {min(candidates, MAX_EF_SEARCH)}")
            self.conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            rows = self.conn.execute(
                f"SELECT id, 1 - (embedding {self._distance()} %s::{self._v('vector')}) AS score FROM (SELECT id, embedding "
                f"FROM {self._t('chunk_vec')} {only}ORDER BY embedding::{self._v('halfvec')}({dim}) {self._distance()} "
                f"%s::{self._v('halfvec')}({dim}) LIMIT %s) AS candidates "
                f"ORDER BY score DESC LIMIT %s", arguments).fetchall()
        if not rows:
            return []
        return encoding.best_per_chunk(np.array([r[0] for r in rows], dtype=np.int64),
                                           np.array([r[1] for r in rows], dtype=np.float64), k)

    # --- keywords: the BM25 copy is built from chunk_terms, as from SQLite's; searched here only
    # when no current copy can be had (a reader while another host writes, an index past its size)
    def keyword(self, terms: Sequence[str], k: int, allowed: np.ndarray | None = None,
                query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        """(chunk id, bm25), best first: the GIN index of term hashes finds the chunks holding the
        query's rarest terms (up to KEYWORD_CANDIDATES), scored with BM25 from their own terms, as a
        copy would score them."""
        words = list(terms)
        if not words:
            return []
        languages = self.latin_languages()
        per_word, frequencies = self._word_frequencies(words, languages, query)
        wanted, total = [], 0
        for term_hash, df in sorted(frequencies.items(), key=lambda item: item[1]):
            if df and (not wanted or total + df <= 4 * KEYWORD_CANDIDATES):
                wanted.append(term_hash)
                total += df
        if not wanted:
            return []
        only, arguments = "", [wanted, KEYWORD_CANDIDATES]
        if allowed is not None:
            only = "AND chunk_id = ANY(%s::bigint[]) "
            arguments.insert(1, allowed.tolist())
        found = [row[0] for row in self.conn.execute(
            f"SELECT chunk_id FROM {self._t('chunk_terms')} WHERE hashes && %s::bigint[] {only}LIMIT %s", arguments).fetchall()]
        count, mean_tokens = self.conn.execute(f"SELECT COUNT(*), COALESCE(AVG(tokens), 0) FROM {self._t('chunk_terms')}").fetchone()
        return bm25(words, self.terms_of(found), dict(zip(words, self._most_frequent(per_word, frequencies))),
                    count, float(mean_tokens), k, languages, query)

    def keyword_phrase(self, literal: str, k: int, query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        """Up to k chunks holding a term of each of the literal's words; unranked (the caller checks
        their text for the literal itself)."""
        groups = [encoding.query_hashes(group) for group in analysis.groups_of(literal, self.latin_languages(), query)]
        if not groups:
            return []
        where = " AND ".join("hashes && %s::bigint[]" for _ in groups)
        rows = self.conn.execute(f"SELECT chunk_id FROM {self._t('chunk_terms')} WHERE {where} LIMIT %s", (*groups, k))
        return [(row[0], 1.0) for row in rows.fetchall()]

    def _term_frequencies(self, hashes: Sequence[int]) -> dict[int, int]:
        """Chunks holding each term hash, counted with the GIN index."""
        if not hashes:
            return {}
        rows = self.conn.execute(f"SELECT h, (SELECT COUNT(*) FROM {self._t('chunk_terms')} WHERE hashes @> ARRAY[h]) "
                                 f"FROM unnest(%s::bigint[]) AS h", (list(dict.fromkeys(hashes)),)).fetchall()
        return {int(h): int(n) for h, n in rows}

    def document_frequencies(self, terms: Sequence[str], query: analysis.AnalysedQuery | None = None) -> list[float]:
        """Chunks holding each query word: its most frequent term, as a copy counts it."""
        return self._most_frequent(*self._word_frequencies(terms, self.latin_languages(), query))

    def _word_frequencies(self, words: Sequence[str], languages: Sequence[str],
                          query: analysis.AnalysedQuery | None = None) -> tuple[list[list[int]], dict[int, int]]:
        """(each word's term hashes, chunks holding each hash): one round trip for every term."""
        per_word = [encoding.query_hashes(analysis.terms_of(word, languages, query)) for word in words]
        return per_word, self._term_frequencies([h for hashes in per_word for h in hashes])

    @staticmethod
    def _most_frequent(per_word: list[list[int]], frequencies: dict[int, int]) -> list[float]:
        return [float(max((frequencies.get(h, 0) for h in hashes), default=0)) for hashes in per_word]

    def chunk_total(self) -> int:
        return self.conn.execute(f"SELECT COUNT(*) FROM {self._t('chunks')}").fetchone()[0]

    def chunks_without_terms(self, limit: int) -> list[tuple[int, str, str]]:
        """Always written with their chunks here; kept for keyword_cache's contract."""
        return self.conn.execute(f"SELECT c.id, c.text, c.heading FROM {self._t('chunks')} c LEFT JOIN {self._t('chunk_terms')} t "
                                 f"ON t.chunk_id = c.id WHERE t.chunk_id IS NULL LIMIT %s", (limit,)).fetchall()

    def save_terms(self, rows: Sequence[tuple[int, int, bytes]]) -> None:
        with self.transaction(), self.conn.cursor() as cursor:
            written = int(self.meta("generation") or 0)
            cursor.executemany(f"INSERT INTO {self._t('chunk_terms')}(chunk_id, tokens, terms, written, hashes) "
                               "VALUES (%s,%s,%s,%s,%s) ON CONFLICT(chunk_id) DO UPDATE SET tokens = excluded.tokens, "
                               "terms = excluded.terms, written = excluded.written, hashes = excluded.hashes",
                               [(*row, written, encoding.term_hashes(row[2])) for row in rows])

    def term_totals(self) -> tuple[int, int]:
        count, size = self.conn.execute(f"SELECT COUNT(*), COALESCE(SUM(length(terms)), 0) FROM {self._t('chunk_terms')}").fetchone()
        return int(count), int(size)

    def iter_terms(self) -> Iterator[tuple[int, int, bytes]]:
        """Every chunk's (id, tokens, terms) in id order; close it before its snapshot ends (`_streamed`)."""
        for rows in self._streamed("terms", f"SELECT chunk_id, tokens, terms FROM {self._t('chunk_terms')} ORDER BY chunk_id"):
            yield from ((r[0], r[1], bytes(r[2])) for r in rows)

    def terms_of(self, chunk_ids: Sequence[int]) -> list[tuple[int, int, bytes]]:
        rows = self.conn.execute(f"SELECT chunk_id, tokens, terms FROM {self._t('chunk_terms')} WHERE chunk_id = ANY(%s) "
                                 f"ORDER BY chunk_id", (list(chunk_ids),)).fetchall()
        return [(r[0], r[1], bytes(r[2])) for r in rows]

    def terms_written_since(self, counter: int, limit: int) -> list[tuple[int, int, bytes]]:
        """(chunk id, tokens, terms) of up to `limit` chunks written after change `counter`: what a
        keyword copy built then lacks (keyword_cache.KeywordDelta)."""
        rows = self.conn.execute(f"SELECT chunk_id, tokens, terms FROM {self._t('chunk_terms')} WHERE written > %s "
                                 f"ORDER BY chunk_id LIMIT %s", (counter, limit)).fetchall()
        return [(r[0], r[1], bytes(r[2])) for r in rows]

    def vectors_touched_since(self, counter: int, limit: int) -> None:
        """No log of vector changes on a shared server (store.VECTOR_LOG): each machine's vector copy is
        rebuilt when the index moved on, never searched with a delta."""
        return None

    def prune_vector_log(self, generation: str) -> None:
        """Nothing to prune (vectors_touched_since)."""

    def live_chunks(self, chunk_ids: Sequence[int]) -> set[int]:
        """Which of these chunk ids the index holds now."""
        rows = self.conn.execute(f"SELECT id FROM {self._t('chunks')} WHERE id = ANY(%s)", (list(chunk_ids),)).fetchall()
        return {row[0] for row in rows}

    def count_written_since(self, counter: int) -> int:
        return self.conn.execute(f"SELECT COUNT(*) FROM {self._t('chunk_terms')} WHERE written > %s", (counter,)).fetchone()[0]

    def term_lengths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = self.conn.execute(f"SELECT chunk_id, tokens, written FROM {self._t('chunk_terms')} ORDER BY chunk_id").fetchall()
        table = np.array(rows, dtype=np.int64).reshape(-1, 3)
        return table[:, 0], table[:, 1].astype(np.float64), table[:, 2]

    # --- reading ------------------------------------------------------------------------
    def chunks(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not chunk_ids:
            return {}
        rows = self.conn.execute(f"SELECT {CHUNK_COLUMNS} FROM {self._t('chunks')} c JOIN {self._t('files')} f "
                                 f"ON f.id = c.file_id WHERE c.id = ANY(%s)", (list(chunk_ids),)).fetchall()
        return {row[0]: ChunkRow(*row) for row in rows}

    def counts(self) -> dict[str, int]:
        files, errors = self.conn.execute(f"SELECT COUNT(*), COUNT(error) FROM {self._t('files')}").fetchone()
        return {"files": files, "files_with_errors": errors, "chunks": self.chunk_total(), "vectors": self.vector_count()}

    def chunks_without_vectors(self) -> int:
        if not self.has_vector_table():
            return 0
        with_vectors = self.conn.execute(f"SELECT COUNT(DISTINCT id >> {WINDOW_BITS}) FROM {self._t('chunk_vec')}").fetchone()[0]
        return max(0, self.chunk_total() - with_vectors)

    def files_without_vectors(self) -> set[str]:
        if not self.has_vector_table():
            rows = self.conn.execute(f"SELECT DISTINCT f.path FROM {self._t('chunks')} c JOIN {self._t('files')} f ON f.id = c.file_id")
        else:
            rows = self.conn.execute(f"SELECT DISTINCT f.path FROM {self._t('chunks')} c JOIN {self._t('files')} f ON f.id = c.file_id "
                                     f"WHERE NOT EXISTS (SELECT 1 FROM {self._t('chunk_vec')} v WHERE v.id = c.id << {WINDOW_BITS})")
        return {row[0] for row in rows.fetchall()}

    def tidy(self, bulk: bool) -> None:
        """After an index run: the HNSW index, built once after the first bulk load (kept by inserts since)."""
        self.build_vector_index()

    def integrity_problems(self, full: bool = False, limit: int = 5) -> list[str]:
        """The server keeps its own pages whole (WAL, checksums where enabled): nothing to check here."""
        return []

    def size_bytes(self) -> int:
        """Tables, their indexes and TOAST on the server, and this machine's copies of them."""
        row = self.conn.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
                                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'", (self.schema,)).fetchone()
        return int(row[0]) + self.local_bytes()

    def drop(self) -> None:
        """Delete this directory's whole index (`clear`)."""
        drop_schema(self.conn, self.schema)


# --- the server's catalogue: which indexes exist (pg_backend.PostgresBackend asks) -----------------
def schema_oid(conn, schema: str) -> int | None:
    """The schema's oid (a dropped and recreated index gets a new one); None when there is none."""
    row = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return None if row is None else int(row[0])


def drop_schema(conn, schema: str) -> None:
    """Drop an index's schema: only one this store made (its name, and its meta table with a schema version)."""
    if not re.fullmatch(SCHEMA_PATTERN, schema):
        raise ValueError(f"not a schema name this store creates: {schema!r}")
    if conn.execute("SELECT to_regclass(%s)", (f'"{schema}".meta',)).fetchone()[0] is None or \
            conn.execute(f'SELECT 1 FROM "{schema}".meta WHERE key = \'schema_version\'').fetchone() is None:
        return
    conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def index_roots(conn, schemas: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each of these index schemas that exists: its meta root and name (two queries in all)."""
    wanted = [schema for schema in schemas if re.fullmatch(SCHEMA_PATTERN, schema)]  # spliced into SQL below
    present = [row[0] for row in conn.execute(
        "SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid "
        "WHERE n.nspname = ANY(%s) AND c.relname = 'meta' AND pg_has_role(current_user, n.nspowner, 'MEMBER') "
        "AND pg_has_role(current_user, c.relowner, 'MEMBER') ORDER BY 1", (wanted,)).fetchall()]
    found: dict[str, dict[str, str]] = {schema: {} for schema in present}
    if present:
        rows = conn.execute(" UNION ALL ".join(f"SELECT '{schema}', key, value FROM \"{schema}\".meta "
                                               f"WHERE key IN ('root', 'name')" for schema in present)).fetchall()
        for schema, key, value in rows:
            found[schema][key] = value
    return found


def writer_held(conn, schema: str) -> bool:
    """Whether some session (on any host) holds, or waits for, the writer lock of this schema: its
    row lock shows in pg_locks as a granted ROW SHARE lock on the `writer` table, which no search takes."""
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'relation' AND granted "
                       "AND mode = 'RowShareLock' AND relation IN (SELECT c.oid FROM pg_class c JOIN pg_namespace n "
                       "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'writer') "
                       "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
                       (schema,)).fetchone()  # by name in the catalogue: to_regclass needs the schema's USAGE
    return bool(row[0])


@contextlib.contextmanager
def writer_lock(conn, schema: str, name: str, wait: bool = True, on_wait=None) -> Iterator[None]:
    """One writer per directory across every host: the one row of the index's `writer` table, locked
    FOR UPDATE in a transaction held open on `conn` for the whole run (the server releases it if this
    process dies; what runs on `conn` inside commits with it, or rolls back on an error). FOR UPDATE
    needs the UPDATE right, so only a role that may write the index can hold it: the advisory lock it
    replaces was keyed by the public schema name, and any role that could connect held it, stalling
    the owner's runs for as long as it liked. IndexBusy when taken and not waiting."""
    psycopg = driver()
    table = f'"{schema}".writer'
    with conn.transaction():
        try:
            with conn.transaction():  # a savepoint: the refusal leaves the transaction usable
                conn.execute(f"SELECT 1 FROM {table} FOR UPDATE NOWAIT")
        except psycopg.errors.InsufficientPrivilege:
            raise StoreError(f"Your PostgreSQL role may not write the index of {name}; nothing was changed. Ask "
                             f"its owner for write access (docs/team.md, \"Roles\").") from None
        except psycopg.errors.LockNotAvailable:
            if not wait:
                raise IndexBusy(f"Another process is indexing {name}; try again when it finishes.") from None
            if on_wait:
                on_wait()
            conn.execute(f"SELECT 1 FROM {table} FOR UPDATE")
        yield


def _term_row(chunk_id: int, text_terms: list[str], heading_terms: list[str], written: int) -> tuple:
    """A chunk_terms row: packed records for BM25, their hashes for the GIN index."""
    tokens, packed = encoding.pack_terms(text_terms, heading_terms)
    return chunk_id, tokens, packed, written, encoding.term_hashes(packed)


def _literal(vector: np.ndarray) -> str:
    """pgvector's text form; exact for float32 (repr round-trips)."""
    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float32).tolist())) + "]"


def _unpack(rows: Sequence[tuple[int, bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, float32 matrix) from rows of id and pgvector's binary form: a 4-byte header (dimension,
    unused), then big-endian float32s. Nine times faster than parsing the text form."""
    ids = np.array([row[0] for row in rows], dtype=np.int64)
    packed = np.frombuffer(b"".join(row[1] for row in rows), dtype=">f4")
    return ids, packed.reshape(len(rows), -1)[:, 1:].astype(np.float32)
