"""SQLite's store (contract.Store): one SQLite file per indexed directory.

Each file's rows change in one transaction, so a crash leaves every file
either fully old or fully new. FTS rows follow `chunks` through triggers;
vectors are deleted explicitly because `chunk_vec` is created only once the
embedding dimension is known.

Over 500 lines because every SQL statement SQLite runs for an index lives here and nowhere else
(the schema, FTS5, sqlite-vec, the vector log, the sampled document frequencies): what both stores
share without SQL is in common.py, encoding.py and local_files.py.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from .. import analysis
from ..chunker import Chunk
from ..embeddings import ModelIdentity
from ..filters import FileMetadata, FileTable, pack_parts, pack_tags
from . import derived_file, encoding
from .common import CHUNK_COLUMNS, StoreCommon
from .contract import SCHEMA_VERSION, VECTOR_IDS, ChunkRow, FileRow, StoreError, explain
from .encoding import WINDOW_BITS
from .local_files import guarded as guarded_files

log = logging.getLogger(__name__)

FTS_TABLE = ("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, heading, content='', contentless_delete=1, "
             "tokenize='ascii')")
VEC_MAX_K = 4096  # sqlite-vec refuses larger k
WINDOW_SLOTS = 1 << WINDOW_BITS
DF_SAMPLE_WINDOWS, DF_SAMPLE_ROWS = 4, 1000  # where document frequencies are estimated
DF_REMEMBERED = 10_000  # terms whose estimates a reader keeps until the index changes
# Columns of `files` added since schema 2, each given to an older index when it is opened.
FACET_COLUMNS = (("tags", "TEXT NOT NULL DEFAULT ''"), ("dated", "REAL"), ("recognised", "TEXT NOT NULL DEFAULT ''"))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files(
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    chunk_count INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL NOT NULL,
    error TEXT,
    tags TEXT NOT NULL DEFAULT '',  -- filters.pack_tags: a note's tags, one per line
    dated REAL,  -- a note's front matter date (epoch seconds); NULL: its mtime stands
    recognised TEXT NOT NULL DEFAULT ''  -- filters.pack_parts: the pages whose text OCR read
);
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    text TEXT NOT NULL,
    start_char INTEGER NOT NULL,
    end_char INTEGER NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    page INTEGER,
    heading TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_file ON chunks(file_id);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(content_hash);
-- Each chunk's terms as analysis.py makes them, space-separated: FTS5 only splits them again (its
-- ascii tokenizer keeps every non-ASCII character in a token), so FTS5, the keyword copy, PostgreSQL
-- and the query all use one analyzer. Contentless: the text lives in chunks; rows go with their chunks.
-- Each chunk's stemmed terms, hashed and counted (see keyword_cache): the keyword copy is sorted from these.
-- `written` is the generation that wrote the row, so a rebuild can merge in only what is newer than its copy.
CREATE TABLE IF NOT EXISTS chunk_terms(
    chunk_id INTEGER PRIMARY KEY, tokens INTEGER NOT NULL, terms BLOB NOT NULL, written INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS chunks_terms_ad AFTER DELETE ON chunks BEGIN
    DELETE FROM chunk_terms WHERE chunk_id = old.id;
END;
"""
# The chunks whose vectors changed after a generation (ids are reused, so "ids above the copy's" would
# not do). A vector copy of an earlier state is searched with the current vectors of the chunks logged
# since it (vector_cache.VectorDelta) instead of being rebuilt after every small change (10-18 s at 1M
# chunks). sqlite-vec writes one row of its shadow table chunk_vec_rowids per vector (rowid = the
# vector's id), so triggers there log every vector written or deleted, whatever wrote it (an older
# version of this code included). Dropping chunk_vec (a re-embed) drops them: the log then counts as
# incomplete until they are made again, with `vectors_logged_since` (the first generation the log
# covers) moved to that moment.
VECTOR_LOG_TABLE = "CREATE TABLE IF NOT EXISTS vectors_touched(chunk_id INTEGER PRIMARY KEY, written INTEGER NOT NULL)"
VECTOR_LOG_TRIGGERS = {
    f"chunk_vec_logs_{event.lower()}": (
        f"CREATE TRIGGER IF NOT EXISTS chunk_vec_logs_{event.lower()} AFTER {event} ON chunk_vec_rowids BEGIN "
        f"INSERT OR REPLACE INTO vectors_touched(chunk_id, written) VALUES ({row}.rowid >> {WINDOW_BITS}, "
        f"COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'), 0)); END")
    for event, row in (("INSERT", "new"), ("DELETE", "old"))
}


def guarded(path: Path, name: str):
    """SQLite's failures and disk errors raised inside as StoreError naming this index (local_files.guarded)."""
    return guarded_files(path, name, (sqlite_driver()[0].DatabaseError,))


@functools.lru_cache(maxsize=1)
def sqlite_driver():
    """The standard module when it can load extensions, else sqlean's bundled SQLite.

    Many Python builds (pyenv, macOS system Python, conda) compile sqlite3
    without extension loading, and sqlite-vec is an extension.
    """
    import sqlite3

    probe = sqlite3.connect(":memory:")
    try:
        probe.enable_load_extension(True)
        return sqlite3, "sqlite3 (standard library)"
    except AttributeError:
        import sqlean

        return sqlean, "sqlean.py (bundled SQLite)"
    finally:
        probe.close()


def driver_description() -> str:
    module, name = sqlite_driver()
    return f"{name}, SQLite {module.sqlite_version}"



def fts_query(words: Sequence[str], languages: Sequence[str] = (analysis.ENGLISH,),
              query: analysis.AnalysedQuery | None = None) -> str | None:
    """Every term of the query words (analysis.query_terms) quoted and OR-ed: user punctuation, AND,
    NEAR or `*` are never FTS syntax (terms are letters and digits only). A term two words share
    ("cell", "cells") is OR-ed once per word, so it weighs twice, as in the keyword copy."""
    terms = [t for word in words for t in analysis.terms_of(word, languages, query)]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def fts_phrase(literal: str, languages: Sequence[str] = (analysis.ENGLISH,),
               query: analysis.AnalysedQuery | None = None) -> str | None:
    """Chunks holding a term of each of the literal's words (analysis.query_groups); the caller checks
    the text itself for the literal, so word order and punctuation are checked there."""
    groups = analysis.groups_of(literal, languages, query)
    return " AND ".join("(" + " OR ".join(f'"{t}"' for t in group) + ")" for group in groups) if groups else None


def _blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()



class IndexStore(StoreCommon):
    """One open index file. Not shared across threads."""

    @staticmethod
    def _t(table: str) -> str:
        return table  # one index per file: no schema

    def __init__(self, path: Path, create: bool = True, name: str | None = None):
        """`name` is the directory's, for error sentences; the file's own name otherwise."""
        self.path = path
        self._sample_frame: tuple[str, int, list[int], float] | None = None  # see _counts
        self._frequencies: dict[str, float] = {}  # term -> estimate, for the generation of _sample_frame
        name = name or path.stem
        if not create and not path.exists():
            raise StoreError(f"No index at {path}; run `hermes kb index` first.")
        path.parent.mkdir(parents=True, exist_ok=True)
        module, _ = sqlite_driver()
        try:
            self.conn = module.connect(str(path), isolation_level=None, timeout=30.0, check_same_thread=False)
            self.conn.enable_load_extension(True)
            import sqlite_vec

            sqlite_vec.load(self.conn)
            self.conn.enable_load_extension(False)
            for pragma in ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL", "busy_timeout=30000"):
                self.conn.execute(f"PRAGMA {pragma}")
            self.conn.executescript(_SCHEMA)
            self._add_facet_columns()
            if create:  # an index run: readers only ask the log (vector_log_complete), never make it
                self._start_vector_log()
            if self.meta("schema_version") is None:
                with self.transaction():
                    self.conn.execute(FTS_TABLE)
                    self.set_meta(schema_version=SCHEMA_VERSION, created_at=time.time(), analyzer=analysis.ANALYZER)
            self._check_schema(f"{name} ({path})")
        except module.DatabaseError as exc:
            raise explain(exc, path, name) from None

    def _add_facet_columns(self) -> None:
        """Files of an index written before tags and dates were kept get the columns (empty until the
        next run re-reads them: chunker.CHUNKER_VERSION 9 re-chunks every file, re-embedding nothing)."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(files)")}
        added = [(name, kind) for name, kind in FACET_COLUMNS if name not in columns]
        if added:
            with self.transaction():
                for name, kind in added:
                    self.conn.execute(f"ALTER TABLE files ADD COLUMN {name} {kind}")

    def _start_vector_log(self) -> None:
        """Make the vector log complete where it is not (an index written before it, or whose chunk_vec
        an older version re-created); it covers what changes from now on. Where it cannot be made (a
        read-only file, SQLite refusing triggers on a shadow table), copies are rebuilt as before."""
        if self.vector_log_complete():
            return
        try:
            with self.transaction():
                if not self.vector_log_complete():  # another process may have made it while this one waited
                    self.conn.execute(VECTOR_LOG_TABLE)
                    if self.has_vector_table():
                        for statement in VECTOR_LOG_TRIGGERS.values():
                            self.conn.execute(statement)
                    self.set_meta(vectors_logged_since=int(self.meta("generation") or 0))
        except sqlite_driver()[0].DatabaseError as exc:
            log.info("no vector log for %s (%s): its vector copy is rebuilt after every change", self.path, exc)

    def vector_log_complete(self) -> bool:
        """Whether every vector written or deleted now is logged (VECTOR_LOG_TRIGGERS)."""
        names = {row[0] for row in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN ('vectors_touched', 'chunk_vec', ?, ?)", tuple(VECTOR_LOG_TRIGGERS))}
        return "vectors_touched" in names and ("chunk_vec" not in names or set(VECTOR_LOG_TRIGGERS) <= names)

    def reanalyse(self) -> int:
        """Every chunk's keyword terms made again from its stored text with this analyzer (an index
        written by another one), in one transaction: FTS5 and chunk_terms; vectors and files are not
        touched, so nothing is re-embedded or re-read. The keyword copy follows (a new generation)."""
        with self.transaction():
            if self.meta("analyzer") == analysis.ANALYZER:
                return 0  # another process did it while this one waited for the lock
            for trigger in ("chunks_ai", "chunks_ad"):  # schema 1 fed FTS5 from triggers
                self.conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            self.conn.execute("DROP TABLE IF EXISTS chunks_fts")
            self.conn.execute(FTS_TABLE)
            self.conn.execute("DELETE FROM chunk_terms")
            generation = self._bump_generation()
            done, used = 0, set()
            self.conn.execute("DELETE FROM meta WHERE key = 'languages'")
            for rows in self._chunk_texts("?"):
                batch = [(chunk_id, *analysis.index_tokens(text, heading)) for chunk_id, text, heading in rows]
                self.conn.executemany("INSERT INTO chunks_fts(rowid, text, heading) VALUES (?, ?, ?)",
                                      [(chunk_id, " ".join(t), " ".join(h)) for chunk_id, t, h, _ in batch])
                self.conn.executemany("INSERT INTO chunk_terms(chunk_id, tokens, terms, written) VALUES (?, ?, ?, ?)",
                                      [(chunk_id, *encoding.pack_terms(t, h), generation) for chunk_id, t, h, _ in batch])
                used.update(latin for *_, latin in batch)
                done += len(batch)
            self._record_languages(used)
            self.set_meta(schema_version=SCHEMA_VERSION, analyzer=analysis.ANALYZER)
        log.info("re-analysed %d chunks of %s for %s", done, self.path, analysis.ANALYZER)
        return done

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            # SQLite has already rolled back on some errors (a full disk, an I/O error); a second
            # ROLLBACK would fail and hide the error that matters.
            if self.conn.in_transaction:
                with contextlib.suppress(sqlite_driver()[0].DatabaseError):
                    self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One consistent view for several reads: a writer committing meanwhile is not seen halfway."""
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            # Read only: ending it cannot lose anything, and on a damaged file it may fail too, which
            # must not hide the error the reads met.
            with contextlib.suppress(sqlite_driver()[0].DatabaseError):
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    # --- meta ---------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def all_meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def set_meta(self, **values: object) -> None:
        self.conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                              [(k, str(v)) for k, v in values.items()])

    def finish_reembed(self) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = 'reembed_pending'")

    def has_vector_table(self) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunk_vec'").fetchone() is not None

    def pin_model(self, identity: ModelIdentity) -> None:
        """Record the model and create the vector table with its dimension."""
        self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS chunk_vec USING vec0("
                          f"embedding float[{int(identity.dim)}] distance_metric=cosine)")
        self.set_meta(model_id=identity.model_id, model_variant=identity.variant, dimension=identity.dim,
                      vector_ids=VECTOR_IDS)
        self._start_vector_log()

    def _bump_generation(self) -> int:
        """Called inside every transaction that changes chunks or vectors, so copies can tell they are stale."""
        self.conn.execute("INSERT INTO meta(key, value) VALUES ('generation', 1) "
                          "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")
        return int(self.meta("generation"))

    def generation(self) -> str:
        """Names this index's current content; the creation time keeps a recreated index's count distinct."""
        meta = dict(self.conn.execute("SELECT key, value FROM meta WHERE key IN ('created_at', 'generation')"))
        return f"{meta.get('created_at', '')}:{meta.get('generation', 0)}"

    # --- files --------------------------------------------------------------------------
    def files(self) -> dict[str, FileRow]:
        rows = self.conn.execute("SELECT id, path, size, mtime_ns, content_hash, kind, chunk_count, indexed_at, error FROM files")
        return {row[1]: FileRow._make(row) for row in rows}

    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None:
        self.conn.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, file_id))

    def file_facets(self) -> FileTable:
        """Every file that has chunks, as search filters judge it (filters.FileTable)."""
        rows = self.conn.execute("SELECT f.id, f.path, f.kind, f.tags, COALESCE(f.dated, f.mtime_ns / 1e9), MIN(c.id), "
                                 "MAX(c.id), COUNT(*) FROM files f JOIN chunks c ON c.file_id = f.id GROUP BY f.id").fetchall()
        return FileTable(rows, self.chunk_ids_of, self.generation())

    def chunk_ids_of(self, file_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Each of these files' chunk ids."""
        found: dict[int, list[int]] = {}
        for chunk_id, file_id in self.conn.execute("SELECT c.id, c.file_id FROM json_each(?) AS j JOIN chunks c "
                                                   "ON c.file_id = j.value", (json.dumps(list(file_ids)),)):
            found.setdefault(file_id, []).append(chunk_id)
        return {file_id: np.array(sorted(ids), dtype=np.int64) for file_id, ids in found.items()}

    def _delete_chunks_of(self, file_ids: Sequence[int]) -> None:
        if not file_ids:
            return
        marks = ",".join("?" * len(file_ids))
        if self.has_vector_table():
            self.conn.execute(f"WITH RECURSIVE window(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM window WHERE n < {WINDOW_SLOTS - 1}) "
                              f"DELETE FROM chunk_vec WHERE rowid IN (SELECT (c.id << {WINDOW_BITS}) + window.n FROM chunks c, window "
                              f"WHERE c.file_id IN ({marks}))", file_ids)
        self.conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id IN ({marks}))", file_ids)
        self.conn.execute(f"DELETE FROM chunks WHERE file_id IN ({marks})", file_ids)

    def write_file(self, path: str, size: int, mtime_ns: int, content_hash: str, kind: str,
                   chunks: Sequence[Chunk], vectors: Sequence[np.ndarray | None] | None,
                   error: str | None = None, metadata: FileMetadata = FileMetadata()) -> list[int]:
        """Replace everything known about one file, atomically, and return its chunk ids. `vectors[i]`
        holds chunk i's window vectors, one row each (a single 1-D vector is one window); a chunk
        whose entry is None (or every chunk, with vectors None) waits for `add_vectors`."""
        with self.transaction():
            generation = self._bump_generation()
            row = self.conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
            values = (size, mtime_ns, content_hash, kind, len(chunks), time.time(), error, pack_tags(metadata.tags),
                      metadata.dated, pack_parts(metadata.recognised))
            if row:
                self._delete_chunks_of([row[0]])
                self.conn.execute("UPDATE files SET size=?, mtime_ns=?, content_hash=?, kind=?, chunk_count=?, indexed_at=?, "
                                  "error=?, tags=?, dated=?, recognised=? WHERE id=?", (*values, row[0]))
                file_id = row[0]
            else:
                file_id = self.conn.execute(
                    "INSERT INTO files(path, size, mtime_ns, content_hash, kind, chunk_count, indexed_at, error, tags, dated, "
                    "recognised) VALUES (?,?,?,?,?,?,?,?,?,?,?)", (path, *values)).lastrowid
            ids: list[int] = []
            used: set[str] = set()
            for ord_, chunk in enumerate(chunks):
                chunk_id = self.conn.execute(
                    "INSERT INTO chunks(file_id, ord, text, start_char, end_char, start_line, end_line, page, heading, content_hash) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (file_id, ord_, chunk.text, chunk.start_char, chunk.end_char, chunk.start_line, chunk.end_line,
                     chunk.page, chunk.heading, chunk.content_hash)).lastrowid
                ids.append(chunk_id)
                text_terms, heading_terms, latin = analysis.index_tokens(chunk.text, chunk.heading)
                used.add(latin)
                self.conn.execute("INSERT INTO chunks_fts(rowid, text, heading) VALUES (?, ?, ?)",
                                  (chunk_id, " ".join(text_terms), " ".join(heading_terms)))
                self.conn.execute("INSERT INTO chunk_terms(chunk_id, tokens, terms, written) VALUES (?, ?, ?, ?)",
                                  (chunk_id, *encoding.pack_terms(text_terms, heading_terms), generation))
            if vectors is not None:
                self._insert_vectors({chunk_id: windows for chunk_id, windows in zip(ids, vectors) if windows is not None})
            self._record_languages(used)
        return ids

    def _insert_vectors(self, vectors: dict[int, np.ndarray]) -> None:
        """Each chunk's window vectors, one row per window."""
        for chunk_id, windows in vectors.items():
            windows = np.atleast_2d(windows)
            self.conn.executemany("INSERT INTO chunk_vec(rowid, embedding) VALUES (?, ?)",
                                  zip(encoding.vector_ids(chunk_id, len(windows)), map(_blob, windows)))

    def vectors_touched_since(self, counter: int, limit: int) -> list[int] | None:
        """Ids (ascending) of the chunks whose vectors were written or deleted after change `counter`
        (derived_file.counter); None when more than `limit` were, or the log does not reach back that
        far (it began later, or was cut at a newer copy)."""
        since = self.meta("vectors_logged_since")
        if since is None or counter < int(since) or not self.vector_log_complete():
            return None
        # No ORDER BY: after a first index the log holds every chunk, and sorting it all would cost more
        # than the answer is worth; at most limit + 1 rows are sorted here.
        rows = self.conn.execute("SELECT chunk_id FROM vectors_touched WHERE written > ? LIMIT ?", (counter, limit + 1)).fetchall()
        return None if len(rows) > limit else sorted(row[0] for row in rows)

    def prune_vector_log(self, generation: str) -> None:
        """A vector copy of `generation` was just built: what the log holds up to it serves no delta, and
        only that copy may be searched with one (`vector_copy_built`: an index restored from a backup
        has its own, so a copy built after the backup cannot pass for its base)."""
        counter = derived_file.counter(generation)
        with self.transaction():
            if self.vector_log_complete():
                self.conn.execute("DELETE FROM vectors_touched WHERE written <= ?", (counter,))
                self.set_meta(vectors_logged_since=max(counter, int(self.meta("vectors_logged_since") or 0)))
            self.set_meta(vector_copy_built=generation)

    def _delete_paths(self, paths: list[str]) -> None:
        for begin in range(0, len(paths), 500):
            batch = paths[begin:begin + 500]
            marks = ",".join("?" * len(batch))
            ids = [r[0] for r in self.conn.execute(f"SELECT id FROM files WHERE path IN ({marks})", batch)]
            self._delete_chunks_of(ids)
            self.conn.execute(f"DELETE FROM files WHERE path IN ({marks})", batch)

    # --- vectors ------------------------------------------------------------------------
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Existing vectors for chunk texts we have embedded before (moved or copied files)."""
        if not self.has_vector_table():
            return {}
        owners: dict[int, str] = {}
        hashes = list(set(hashes))
        for begin in range(0, len(hashes), 500):
            batch = hashes[begin:begin + 500]
            marks = ",".join("?" * len(batch))
            rows = self.conn.execute(f"SELECT MIN(id), content_hash FROM chunks WHERE content_hash IN ({marks}) "
                                     f"GROUP BY content_hash", batch)
            owners.update(rows)
        vectors = self.vectors_for(list(owners))
        return {owners[chunk_id]: vector for chunk_id, vector in vectors.items()}

    def vectors_for(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Each chunk's window vectors, one row per window.

        Read from sqlite-vec 0.1's shadow tables (as iter_vectors): a `rowid IN` query on the virtual
        table reads its whole 1,024-vector storage blob for every row it returns (2.1 ms a chunk at 1M
        chunks); here each blob is read once for all the rows wanted from it (2,000 recently written
        chunks: 0.065 s against 4.3 s).
        """
        if not chunk_ids or not self.has_vector_table():
            return {}
        dim = int(self.meta("dimension") or 0)
        located: list[tuple[int, int, int]] = []  # (vector id, storage chunk, row in it)
        for begin in range(0, len(chunk_ids), 250):  # 32 ids a chunk: 8,000 parameters a statement
            wanted = encoding.all_vector_ids(chunk_ids[begin:begin + 250])
            located += self.conn.execute(f"SELECT rowid, chunk_id, chunk_offset FROM chunk_vec_rowids WHERE rowid IN "
                                         f"({','.join('?' * len(wanted))})", wanted).fetchall()
        located.sort(key=lambda row: (row[1], row[2]))
        ids, blocks = [], []
        for storage, rows in itertools.groupby(located, key=lambda row: row[1]):
            rows = list(rows)
            found = self.conn.execute("SELECT vectors FROM chunk_vec_vector_chunks00 WHERE rowid = ?", (storage,)).fetchone()
            stored = np.frombuffer(found[0] if found else b"", dtype=np.float32)
            offsets = [offset for _, _, offset in rows]
            if dim == 0 or len(stored) % dim or max(offsets) >= len(stored) // dim:
                raise StoreError(f"{self.path}: unexpected sqlite-vec storage layout; vectors cannot be read.")
            ids += [vector_id for vector_id, _, _ in rows]
            blocks.append(stored.reshape(-1, dim)[offsets])
        if not ids:
            return {}
        return encoding.group_by_chunk(np.array(ids, dtype=np.int64), np.concatenate(blocks))

    def vector_count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM chunk_vec").fetchone()[0] if self.has_vector_table() else 0

    def iter_vectors(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every (ids, vectors), a storage chunk of up to 1024 at a time, in no particular id order.

        Reads sqlite-vec 0.1's shadow tables (validity bitmap, rowids, one vector blob per 1024
        rows) instead of scanning the virtual table, which opens a blob per row: 0.5 s against
        1.2 s per 100k vectors here. The layout is checked as it is read; the version is pinned.
        """
        dim = int(self.meta("dimension") or 0)
        # No ORDER BY: SQLite sorted every vector blob in a temporary B-tree before the first row
        # (1.77M vectors: 25 s of a 41 s cache rebuild, against 4.7 s for the whole read without it).
        rows = self.conn.execute("SELECT c.size, c.validity, c.rowids, v.vectors FROM chunk_vec_chunks c "
                                 "JOIN chunk_vec_vector_chunks00 v ON v.rowid = c.chunk_id")
        for size, validity, rowids, vectors in rows:
            if len(rowids) != 8 * size or len(vectors) != 4 * size * dim or len(validity) * 8 < size:
                raise StoreError(f"{self.path}: unexpected sqlite-vec storage layout; vectors cannot be copied.")
            valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[:size].astype(bool)
            if valid.any():
                ids = np.frombuffer(rowids, dtype=np.int64)[valid]
                yield ids, np.frombuffer(vectors, dtype=np.float32).reshape(size, dim)[valid]

    def knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine of its best window), best first. Asks for 4 windows a chunk: most chunks
        have one or two, so k chunks are almost always among them. With `allowed` (a filter's chunk
        ids), those chunks' vectors are compared exactly: this runs only while no current vector copy
        exists, and sqlite-vec's KNN cannot be limited to a set of chunks."""
        if allowed is not None:
            return encoding.exact_knn(self.vectors_for, query, k, allowed)
        rows = self.conn.execute("SELECT rowid, distance FROM chunk_vec WHERE embedding MATCH ? AND k = ?",
                                 (_blob(query), min(4 * k, VEC_MAX_K)))
        # A zero query vector has no cosine distance (NULL); it matches nothing.
        found = [(rowid, 1.0 - distance) for rowid, distance in rows if distance is not None]
        if not found:
            return []
        ids, scores = zip(*found)
        return encoding.best_per_chunk(np.array(ids, dtype=np.int64), np.array(scores), k)

    # --- keywords -----------------------------------------------------------------------
    def keyword(self, terms: Sequence[str], k: int, allowed: np.ndarray | None = None,
                query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        """(chunk id, positive bm25 score), best first, of chunks holding any of the terms (and among
        the `allowed` chunk ids, when a filter gives them)."""
        return self._match(fts_query(terms, self.latin_languages(), query), k, allowed)

    def keyword_phrase(self, literal: str, k: int, query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        """Chunks holding the literal's words in order, next to each other (punctuation aside)."""
        return self._match(fts_phrase(literal, self.latin_languages(), query), k)

    def _match(self, match: str | None, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        if not match:
            return []
        if allowed is not None:
            rows = self.conn.execute("SELECT rowid, -bm25(chunks_fts) AS score FROM chunks_fts WHERE chunks_fts MATCH ? "
                                     "AND rowid IN (SELECT value FROM json_each(?)) ORDER BY bm25(chunks_fts) LIMIT ?",
                                     (match, json.dumps(allowed.tolist()), k))
        else:
            rows = self.conn.execute("SELECT rowid, -bm25(chunks_fts) AS score FROM chunks_fts WHERE chunks_fts MATCH ? "
                                     "ORDER BY bm25(chunks_fts) LIMIT ?", (match, k))
        return [(rowid, score) for rowid, score in rows]

    def chunk_total(self) -> int:
        """Rows FTS5 counts for its IDF (one per chunk)."""
        return self._counts()[1]

    def _counts(self) -> tuple[str, int, list[int], float]:
        """(generation, chunks, bounds of the id windows document frequencies are sampled in, the
        chunks over those the windows hold), counted once per state of the index: COUNT(*) walks the
        whole table (5 ms at 1M chunks), and a keyword search on FTS5 asked for it three times (keyword
        p50 at 1M chunks 35.2 -> 12.4 ms with the term estimates kept too, docs/benchmarks.md). A
        reader kept between searches reuses them until a write moves the generation."""
        generation = self.generation()
        if self._sample_frame is None or self._sample_frame[0] != generation:
            total = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
            low, high = self.conn.execute("SELECT (SELECT min(id) FROM chunks), (SELECT max(id) FROM chunks)").fetchone()
            bounds, scale = [], 0.0
            if low is not None:
                span = high - low + 1
                if span <= DF_SAMPLE_WINDOWS * DF_SAMPLE_ROWS:
                    windows = [(low, high)]
                else:
                    step = span // DF_SAMPLE_WINDOWS
                    windows = [(low + i * step, low + i * step + DF_SAMPLE_ROWS - 1) for i in range(DF_SAMPLE_WINDOWS)]
                bounds = [value for window in windows for value in window]
                # Scaled by the chunks the windows hold, not by their width: ids have holes (deleted files,
                # a --full run), and a width-based scale gave estimates past the chunk count.
                sampled = self.conn.execute("SELECT " + " + ".join(
                    f"(SELECT count(*) FROM chunks WHERE id BETWEEN ?{2 * i + 1} AND ?{2 * i + 2})"
                    for i in range(len(windows))), bounds).fetchone()[0]
                scale = total / sampled if sampled else 0.0
            self._sample_frame, self._frequencies = (generation, total, bounds, scale), {}
        return self._sample_frame

    def document_frequencies(self, terms: Sequence[str], query: analysis.AnalysedQuery | None = None) -> list[float]:
        """Chunks holding each term, counted in a few id windows spread over the index and scaled.

        FTS5 keeps no document frequencies (fts5vocab walks whole posting lists, as slow as the
        search it would plan), while a seek into a rowid window is cheap. Exact on small indexes.
        """
        _, total, bounds, scale = self._counts()
        if not bounds:
            return [0.0] * len(terms)
        sql = "SELECT " + " + ".join(f"(SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?1 AND rowid BETWEEN ?{2 * i + 2} "
                                     f"AND ?{2 * i + 3})" for i in range(len(bounds) // 2))
        languages = self.latin_languages()
        if len(self._frequencies) > DF_REMEMBERED:
            self._frequencies.clear()
        for term in terms:  # a search asks twice (affordable_terms, then the keyword scale)
            if term not in self._frequencies:
                self._frequencies[term] = min(
                    self.conn.execute(sql, (fts_query([term], languages, query), *bounds)).fetchone()[0] * scale, float(total))
        return [self._frequencies[term] for term in terms]

    def chunks_without_terms(self, limit: int) -> list[tuple[int, str, str]]:
        """(id, text, heading) of chunks written before chunk_terms existed."""
        return self.conn.execute("SELECT c.id, c.text, c.heading FROM chunks c LEFT JOIN chunk_terms t ON t.chunk_id = c.id "
                                 "WHERE t.chunk_id IS NULL LIMIT ?", (limit,)).fetchall()

    def save_terms(self, rows: Sequence[tuple[int, int, bytes]]) -> None:
        """Derived data: the generation does not move, since what a search finds does not change."""
        with self.transaction():
            written = int(self.meta("generation") or 0)
            self.conn.executemany("INSERT OR REPLACE INTO chunk_terms(chunk_id, tokens, terms, written) VALUES (?, ?, ?, ?)",
                                  [(*row, written) for row in rows])

    def term_totals(self) -> tuple[int, int]:
        """(chunks with terms, bytes of packed terms)."""
        count, size = self.conn.execute("SELECT COUNT(*), COALESCE(SUM(length(terms)), 0) FROM chunk_terms").fetchone()
        return count, size

    def iter_terms(self) -> Iterator[tuple[int, int, bytes]]:
        return iter(self.conn.execute("SELECT chunk_id, tokens, terms FROM chunk_terms ORDER BY chunk_id"))

    def terms_of(self, chunk_ids: Sequence[int]) -> list[tuple[int, int, bytes]]:
        """(chunk id, tokens, terms) of the given chunks, in chunk id order."""
        rows = []
        for begin in range(0, len(chunk_ids), 500):
            batch = list(chunk_ids[begin:begin + 500])
            rows += self.conn.execute(f"SELECT chunk_id, tokens, terms FROM chunk_terms WHERE chunk_id IN "
                                      f"({','.join('?' * len(batch))})", batch).fetchall()
        return sorted(rows)

    def term_lengths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids ascending, their token counts, the generation that wrote each)."""
        rows = self.conn.execute("SELECT chunk_id, tokens, written FROM chunk_terms ORDER BY chunk_id").fetchall()
        table = np.array(rows, dtype=np.int64).reshape(-1, 3)
        return table[:, 0], table[:, 1].astype(np.float64), table[:, 2]

    def tidy(self, bulk: bool) -> None:
        """After an index run: merge FTS5's segments when many files changed, and fold the WAL back."""
        if bulk:
            self.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def size_bytes(self) -> int:
        return self.local_bytes()

    # --- reading ------------------------------------------------------------------------
    def chunks(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        rows = self.conn.execute(
            f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.id IN ({marks})", list(chunk_ids))
        return {row[0]: ChunkRow(*row) for row in rows}

    def counts(self) -> dict[str, int]:
        files, errors = self.conn.execute("SELECT COUNT(*), COUNT(error) FROM files").fetchone()
        chunks = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        vectors = self.conn.execute("SELECT COUNT(*) FROM chunk_vec").fetchone()[0] if self.has_vector_table() else 0
        fts = self.conn.execute("SELECT COUNT(*) FROM chunks_fts_docsize").fetchone()[0]
        return {"files": files, "files_with_errors": errors, "chunks": chunks, "vectors": vectors, "fts_rows": fts}

    def integrity_problems(self, full: bool = False, limit: int = 5) -> list[str]:
        """SQLite's own check (quick: pages and structure; full: indexes against tables too) plus the
        FTS index against its table; [] when healthy. Reads the whole file: for doctor and for
        confirming a suspected fault, not for every status."""
        module, _ = sqlite_driver()
        try:
            rows = [r[0] for r in self.conn.execute(f"PRAGMA {'integrity_check' if full else 'quick_check'}({limit})")]
            problems = [] if rows == ["ok"] else rows
            if not problems:
                self.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
        except module.DatabaseError as exc:
            problems = [str(exc)]
        return problems

    def chunks_without_vectors(self) -> int:
        """Chunks that have no vector (a re-embed cut short); 0 when no model is pinned yet."""
        if not self.has_vector_table():
            return 0
        chunks = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        with_vectors = self.conn.execute("SELECT COUNT(DISTINCT rowid >> 5) FROM chunk_vec").fetchone()[0]
        return max(0, chunks - with_vectors)

    def files_without_vectors(self) -> set[str]:
        """Paths of files with a chunk that has no vector (no first window, rowid id << 5)."""
        have = {row[0] >> 5 for row in self.conn.execute("SELECT rowid FROM chunk_vec WHERE rowid & 31 = 0")} \
            if self.has_vector_table() else set()
        rows = self.conn.execute("SELECT c.id, f.path FROM chunks c JOIN files f ON f.id = c.file_id")
        return {path for chunk_id, path in rows if chunk_id not in have}
