"""What a knowledgebase keeps open of each index between searches, and which copy a search reads.

Per index: a read connection per thread (opening one costs a tenth of a search at 100k chunks), the
memory-mapped vector and keyword copies and their deltas, and the table filters judge files by. A
search asks `searched(path, store)` and gets the vector index and keyword index it reads: a current
copy, a copy a few changes behind with those changes, or the store itself. Nothing else decides.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from ..filters import FileTable
from . import derived_file, keyword_cache, vector_cache
from .contract import Backend, IndexBusy, Store
from .keyword_cache import KeywordCache, KeywordDelta
from .local_files import writer_lock
from .vector_cache import VectorCache, VectorDelta

log = logging.getLogger(__name__)

# The derived copies beside each index: the module that builds and names one, and the class that opens it.
DERIVED_COPIES = {"vector_cache": (vector_cache, VectorCache), "keyword_cache": (keyword_cache, KeywordCache)}
FORGOTTEN = ("forgotten",)  # a reader's identity once forget() was called: never an index's (backends.identity)

# A shared index another machine changed: this machine's keyword copy is searched with the chunks
# written since (KeywordDelta) while they are this few and the copy this young; past either, the
# changes are merged into the copy first (~0.9 s at 100k chunks, so not before every search).
KEYWORD_DELTA_CHUNKS = 2_000
KEYWORD_DELTA_SECONDS = 60.0


class OpenIndexes:
    """The open connections and copies of every index one KnowledgeBase searches (module docstring)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._copies: dict[tuple[str, Path], VectorCache | VectorDelta | KeywordCache] = {}  # open memory maps, reused while current
        self._readers: dict[tuple[Path, int], tuple[tuple[int, int], Store]] = {}
        self._file_tables: dict[Path, FileTable] = {}  # filters.FileTable of each index searched with a filter

    def searched(self, index_path: Path, store: Store) -> tuple[VectorCache | VectorDelta | None,
                                                              KeywordCache | KeywordDelta | None]:
        """The vector and keyword copies a search of this snapshot reads (None: the store's own index)."""
        return self._copy("vector_cache", index_path, store), self._copy("keyword_cache", index_path, store)

    def reader(self, index_path: Path) -> Store | None:
        """A read connection kept open between searches (opening one costs ~1-2 ms, a tenth of a
        search at 100k chunks); one per thread, reopened when the index was replaced or deleted."""
        key = (index_path, threading.get_ident())
        identity, store = self._readers.get(key, (None, None))
        current = self.backend.identity(index_path, store)
        if current != identity:
            if store is not None:
                store.close()
            self._readers.pop(key, None)
            if current is None:
                return None
            store = self.backend.open(index_path, create=False)
            self._readers[key] = (current, store)
        return store

    def _copy(self, kind: str, index_path: Path, store: Store) -> VectorCache | VectorDelta | KeywordCache | KeywordDelta | None:
        """The memory-mapped copy of this index's vectors or terms if it matches the snapshot being read
        (a large vector copy, or on a shared server a keyword copy, a few changes behind comes with
        those changes)."""
        module = DERIVED_COPIES[kind][0]
        generation = store.generation()
        if kind == "keyword_cache" and self.backend.shared:
            return self._keywords_with_delta(index_path, store, generation)
        copy = self._copies.get((kind, index_path))
        if copy is not None and copy.generation == generation:
            return copy
        # The header alone says whether the file is current: a stale one is not mapped per search.
        on_disk = module.read_generation(module.cache_path(index_path))
        if on_disk != generation:
            return self._vectors_with_delta(index_path, store, on_disk, generation) if kind == "vector_cache" else None
        copy = self._mapped(kind, index_path, generation)
        return copy if copy is not None and copy.generation == generation else None  # not one replaced meanwhile

    def file_table(self, index_path: Path, store: Store) -> FileTable:
        """The index's files as filters judge them, read again only when the index changed."""
        table = self._file_tables.get(index_path)
        if table is None or table.generation != store.generation():
            table = self._file_tables[index_path] = store.file_facets()
        return table

    def _keywords_with_delta(self, index_path: Path, store: Store, generation: str) -> KeywordCache | KeywordDelta | None:
        """This machine's keyword copy of a shared index, current or with the chunks written since it."""
        on_disk = keyword_cache.read_generation(keyword_cache.cache_path(index_path))
        if on_disk is None or not (on_disk == generation or derived_file.earlier_state(on_disk, generation)):
            return None
        copy = self._mapped("keyword_cache", index_path, on_disk)
        if copy is None:
            return None
        if copy.generation == generation:
            return copy
        rows = store.terms_written_since(derived_file.counter(copy.generation), KEYWORD_DELTA_CHUNKS + 1)
        gone = copy.count + len(rows) - store.chunk_total()  # every chunk written since has a new id
        return KeywordDelta(copy, rows, gone, store.live_chunks) if len(rows) + gone <= KEYWORD_DELTA_CHUNKS else None

    def _vectors_with_delta(self, index_path: Path, store: Store, on_disk: str | None,
                            generation: str) -> VectorDelta | None:
        """The vector copy on disk of an earlier state, with the vectors of the chunks changed since, when
        the index run kept it instead of rebuilding (vector_cache.delta_since); read once per state."""
        if not derived_file.earlier_state(on_disk, generation):
            return None
        delta = self._copies.get(("vector_delta", index_path))
        if delta is not None and delta.generation == generation and delta.copy.generation == on_disk:
            return delta
        copy = self._mapped("vector_cache", index_path, on_disk)
        touched = None if copy is None else vector_cache.delta_since(store, copy.header, generation)  # of the copy mapped
        if touched is None:
            return None
        delta = self._copies[("vector_delta", index_path)] = VectorDelta(copy, generation, touched,
                                                                        store.vectors_for(touched.tolist()))
        return delta

    def _mapped(self, kind: str, index_path: Path, generation: str) -> VectorCache | KeywordCache | None:
        """The copy of `kind` on disk, mapped once per state (its header said `generation`; the file
        mapped may be newer, so callers compare its own)."""
        module, opener = DERIVED_COPIES[kind]
        copy = self._copies.get((kind, index_path))
        if copy is None or copy.generation != generation:
            try:
                copy = opener(module.cache_path(index_path))
            except (OSError, ValueError):
                return None
            self._copies[(kind, index_path)] = copy
        return copy

    def catch_up_keywords(self, path: Path, store: Store) -> None:
        """A shared index another host wrote to: this machine's keyword copy is brought up to date
        before searching (only what changed is merged in), so keyword scores stay BM25 over the whole
        index, unless the changes are few and the copy young (then searched with them, see
        KeywordDelta). Skipped while a process here holds the lock (an index run rebuilds it at its
        end); the server's full-text index then finds the chunks, still scored by BM25."""
        copy_path = keyword_cache.cache_path(path)
        on_disk, generation = keyword_cache.read_generation(copy_path), store.generation()
        if on_disk == generation:
            return
        with contextlib.suppress(OSError):
            copy = self._mapped("keyword_cache", path, on_disk) if derived_file.earlier_state(on_disk, generation) else None
            if copy is not None and time.time() - copy_path.stat().st_mtime < KEYWORD_DELTA_SECONDS:
                written = store.count_written_since(derived_file.counter(on_disk))
                if written + max(0, copy.count + written - store.chunk_total()) <= KEYWORD_DELTA_CHUNKS:
                    return
        try:
            with writer_lock(path, wait=False):
                keyword_cache.refresh(store)
        except IndexBusy:
            pass
        except (OSError, ValueError) as exc:
            log.warning("could not bring the keyword copy of %s up to date: %s", path.name, exc)

    def forget(self, path: Path) -> None:
        """Drop what this process keeps open of an index about to be cleared, repaired or found damaged.
        This thread's reader is closed now; another thread's may be inside a search (closing it there
        made that search report the index corrupt), so it is only marked, and that thread closes it on
        its next search (`_reader`), even where a new file got the old one's inode number."""
        for key in [key for key in self._readers if key[0] == path]:
            if key[1] == threading.get_ident():
                self._readers.pop(key)[1].close()
            else:
                self._readers[key] = (FORGOTTEN, self._readers[key][1])
        for kind in (*DERIVED_COPIES, "vector_delta"):
            self._copies.pop((kind, path), None)

