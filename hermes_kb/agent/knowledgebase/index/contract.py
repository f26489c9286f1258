"""What every index store is, whichever database holds it: the contract `tests/knowledgebase/
test_store_contract.py` checks SQLite's store (store.py) and PostgreSQL's (pg_store.py) against.

It declares the methods the engine calls (`Store`, and `SharedStore` for a server other hosts write
to), the rows they return, the errors they raise and the schema version they write. How ids and
terms are encoded is encoding.py; what both stores do the same way on top of their SQL is common.py.
Neither store imports the other.
"""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

from ..analysis import AnalysedQuery
from ..chunker import Chunk
from ..config import DirectoryConfig
from ..embeddings import ModelIdentity
from ..filters import FileMetadata, FileTable, unpack_parts
from .encoding import WINDOW_BITS

SCHEMA_VERSION = 2  # 2: chunks_fts and chunk_terms hold analysis.py's terms (an older index is re-analysed)
VECTOR_IDS = f"chunk<<{WINDOW_BITS}|window"  # recorded in meta: how vector ids name a chunk's windows


class StoreError(RuntimeError):
    """The index file cannot be used; the message says which file and why."""


class IndexCorrupt(StoreError):
    """SQLite found the file damaged; `hermes kb doctor --repair` rebuilds it from the folder."""


class DiskFull(StoreError):
    """A write ran out of space; SQLite rolled it back, so the index is as it was."""


class FileRefused(StoreError):
    """The store would not take this one file's rows (rolled back): that file is skipped, the run goes on."""


# What SQLite's message says -> (error class, sentence). The sentence gets the directory name and path.
_FAULTS: tuple[tuple[tuple[str, ...], type[StoreError], str], ...] = (
    (("disk is full", "no space left"), DiskFull,
     "The disk holding the index of {name} ({path}) is full; nothing indexed was lost. Free some space, then run "
     "`hermes kb index {name}` again."),
    (("malformed", "not a database", "blob read error", "corrupt", "file is encrypted"), IndexCorrupt,
     "The index of {name} ({path}) is corrupt; run `hermes kb doctor {name} --repair` to rebuild it (your files are "
     "untouched)."),
    (("readonly", "read-only", "unable to open", "permission denied", "access permission"), StoreError,
     "Cannot use the index of {name} at {path} ({detail}); check that the folder is writable."),
    (("locked", "busy"), StoreError,
     "The index of {name} is busy in another process ({detail}); try again in a moment."),
)
_DISK_ERRNOS = {errno.ENOSPC: "no space left", errno.EDQUOT: "no space left", errno.EROFS: "read-only",
                errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


def explain(exc: BaseException, path: Path, name: str) -> StoreError:
    """A SQLite or file-system failure on one index as the one sentence the user sees."""
    detail = str(exc) if not isinstance(exc, OSError) else _DISK_ERRNOS.get(exc.errno, exc.strerror or str(exc))
    lowered = detail.lower()
    for needles, kind, sentence in _FAULTS:
        if any(needle in lowered for needle in needles):
            return kind(sentence.format(name=name, path=path, detail=detail))
    where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
    return StoreError(f"The index of {name} ({path}) failed: {detail}{where}.")




class IndexBusy(RuntimeError):
    """Another process holds the writer lock and the caller chose not to wait."""


class FileRow(NamedTuple):
    """A file as the index last saw it. A tuple, not a frozen dataclass: a no-change rescan builds one
    per file, and a frozen dataclass's __init__ cost 20 ms of the 0.5 s for 10,000 files."""

    id: int
    path: str
    size: int
    mtime_ns: int
    content_hash: str
    kind: str
    chunk_count: int
    indexed_at: float
    error: str | None


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    kind: str
    ord: int
    text: str
    start_line: int
    end_line: int
    page: int | None
    heading: str
    content_hash: str
    file_size: int
    file_mtime_ns: int
    file_recognised: str  # filters.pack_parts of the pages OCR read

    @property
    def recognised(self) -> bool:
        """Whether OCR made this chunk's text (it may carry recognition errors)."""
        return self.kind == "image" or (self.page is not None and self.page in unpack_parts(self.file_recognised))



@dataclass(frozen=True)
class Unlisted:
    """An index no configured directory owns: a folder indexed by path, or an orphan."""
    path: Path
    name: str  # the directory name it was first indexed under ('' when unknown)
    root: str | None
    problem: str | None = None  # why it could not be read


@runtime_checkable
class Store(Protocol):
    """One open index. Not shared across threads. Every write is one transaction: a crash leaves each
    file wholly old or wholly new. A chunk's id never names another chunk while a copy built from an
    earlier generation may still be read with a delta (its ids are never reused in between)."""

    path: Path  # the SQLite file, or where this machine keeps a server index's copies

    # -- the index's state and metadata
    def close(self) -> None: ...
    def transaction(self) -> contextlib.AbstractContextManager[None]: ...
    def snapshot(self) -> contextlib.AbstractContextManager[None]: ...
    def meta(self, key: str) -> str | None: ...
    def all_meta(self) -> dict[str, str]: ...
    def set_meta(self, **values: object) -> None: ...
    def generation(self) -> str: ...
    def counts(self) -> dict[str, int]: ...
    def size_bytes(self) -> int: ...
    def local_bytes(self) -> int: ...
    def integrity_problems(self, full: bool = False, limit: int = 5) -> list[str]: ...
    def tidy(self, bulk: bool) -> None: ...
    def reanalyse(self) -> int: ...
    def code_share(self) -> float: ...
    def cosine_baseline(self) -> float: ...
    def latin_languages(self) -> tuple[str, ...]: ...

    # -- files and chunks
    def files(self) -> dict[str, FileRow]: ...
    def file_facets(self) -> FileTable: ...
    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None: ...
    def write_file(self, path: str, size: int, mtime_ns: int, content_hash: str, kind: str,
                   chunks: Sequence[Chunk], vectors: Sequence[np.ndarray | None] | None, error: str | None = None,
                   metadata: FileMetadata = FileMetadata()) -> list[int]: ...
    def delete_files(self, paths: Iterable[str]) -> int: ...
    def chunks(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRow]: ...
    def chunk_ids_of(self, file_ids: Sequence[int]) -> dict[int, np.ndarray]: ...
    def chunk_total(self) -> int: ...
    def sample_texts(self, limit: int) -> list[str]: ...

    # -- vectors (ids: encoding.vector_ids)
    def model_identity(self) -> ModelIdentity | None: ...
    def pin_model(self, identity: ModelIdentity) -> None: ...
    def has_vector_table(self) -> bool: ...
    def has_window_vectors(self) -> bool: ...
    def drop_vectors(self) -> None: ...
    def reembed_pending(self) -> bool: ...
    def finish_reembed(self) -> None: ...
    def add_vectors(self, vectors: dict[int, np.ndarray]) -> None: ...
    def vectors_for(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]: ...
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]: ...
    def vector_count(self) -> int: ...
    def iter_vectors(self) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...
    def chunks_without_vectors(self) -> int: ...
    def files_without_vectors(self) -> set[str]: ...
    def vectors_touched_since(self, counter: int, limit: int) -> list[int] | None: ...
    def prune_vector_log(self, generation: str) -> None: ...
    def knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]: ...

    # -- terms (records: encoding.pack_terms) and keyword search
    def chunks_without_terms(self, limit: int) -> list[tuple[int, str, str]]: ...
    def save_terms(self, rows: Sequence[tuple[int, int, bytes]]) -> None: ...
    def term_totals(self) -> tuple[int, int]: ...
    def iter_terms(self) -> Iterator[tuple[int, int, bytes]]: ...
    def terms_of(self, chunk_ids: Sequence[int]) -> list[tuple[int, int, bytes]]: ...
    def term_lengths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    # `query`: the search's analysed query (analysis.AnalysedQuery), whose terms every keyword path reads
    def document_frequencies(self, terms: Sequence[str], query: AnalysedQuery | None = None) -> list[float]: ...
    def keyword(self, terms: Sequence[str], k: int, allowed: np.ndarray | None = None,
                query: AnalysedQuery | None = None) -> list[tuple[int, float]]: ...
    def keyword_phrase(self, literal: str, k: int, query: AnalysedQuery | None = None) -> list[tuple[int, float]]: ...


class KeywordIndex(Protocol):
    """What a search reads keywords in: this machine's keyword copy (keyword_cache.KeywordCache, or a
    KeywordDelta a few changes behind) or the store's own term index (store_keywords.StoreKeywords).
    The retriever calls these and never asks which it has."""

    count: int

    def document_frequencies(self, query_words: Sequence[str], languages: Sequence[str],
                             query: AnalysedQuery | None = None) -> list[float]: ...
    def search(self, query_words: Sequence[str], k: int, languages: Sequence[str], allowed: np.ndarray | None = None,
               query: AnalysedQuery | None = None) -> list[tuple[int, float]]: ...
    def holders_of_all_terms(self, text: str, limit: int, languages: Sequence[str], *,
                             query: AnalysedQuery | None = None) -> list[int] | None: ...


@runtime_checkable
class SharedStore(Store, Protocol):
    """A store other hosts write to (PostgreSQL): what this machine's keyword copy needs to be searched
    a few changes behind (keyword_cache.KeywordDelta) rather than rebuilt before every search."""

    def terms_written_since(self, counter: int, limit: int) -> list[tuple[int, int, bytes]]: ...
    def count_written_since(self, counter: int) -> int: ...
    def live_chunks(self, chunk_ids: Sequence[int]) -> set[int]: ...


class Backend(Protocol):
    """Where a directory's index lives and what depends on it (backends.backend_for picks one): the
    facade asks this instead of assuming one SQLite file per directory. Either way an index has a
    local path under HERMES_HOME: the SQLite file, or where this machine keeps a server index's copies."""

    shared: bool  # other hosts write here too: an index no folder of this machine claims is not an orphan

    def index_path(self, directory: DirectoryConfig) -> Path: ...
    def open(self, path: Path, name: str | None = None, create: bool = True) -> Store: ...
    def exists(self, path: Path) -> bool: ...
    def identity(self, path: Path, opened: Store | None) -> tuple | None: ...
    def writer_lock(self, path: Path, name: str, wait: bool = True, on_wait=None,
                    create: bool = False) -> contextlib.AbstractContextManager[None]: ...
    def remove(self, path: Path) -> bool: ...
    def being_indexed(self, path: Path) -> bool: ...
    def guarded(self, path: Path, name: str) -> contextlib.AbstractContextManager[None]: ...
    def query_errors(self) -> tuple[type[BaseException], ...]: ...
    def describe(self) -> str: ...
    def unlisted(self) -> list[Unlisted]: ...
