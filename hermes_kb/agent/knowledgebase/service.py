"""KnowledgeBase: the one facade the CLI, the tools and the chat hook use.

It maps directory names to index files, opens stores per operation, and
loads the embedding model only when vectors are really needed (status and
keyword search never pay for it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import embeddings, keyword_cache, readable, vector_cache
from .config import ConfigError, DirectoryConfig, KnowledgebaseConfig, expand
from .embeddings import EmbeddingError
from .indexer import (
    IndexSummary,
    ModelMismatchError,
    NullProgress,
    Progress,
    index_directory,
    mismatch_message,
)
from .keyword_cache import KeywordCache
from .retriever import SearchError, SearchOptions, SearchResult, SearchSource, search
from .scanner import IgnoreRules, scan
from .store import (
    IndexBusy,
    IndexStore,
    StoreError,
    driver_description,
    index_size_bytes,
    remove_index,
    writer_lock,
)
from .vector_cache import VectorCache

log = logging.getLogger(__name__)


# The derived copies beside each index: the module that builds and names one, and the class that opens it.
DERIVED_COPIES = {"vector_cache": (vector_cache, VectorCache), "keyword_cache": (keyword_cache, KeywordCache)}
INLINE_REFRESH_BYTES = 256_000  # a changed file this small is re-indexed before its hit is returned


def _small_file(path: str) -> bool:
    try:
        return os.path.getsize(path) <= INLINE_REFRESH_BYTES
    except OSError:
        return False


class KnowledgebaseError(RuntimeError):
    """An operation the user asked for cannot be done; the message says why."""


# Everything a user (or a model's tool call) can cause: shown as one sentence, never a traceback.
USER_ERRORS = (ConfigError, KnowledgebaseError, SearchError, StoreError, EmbeddingError, ModelMismatchError)


def expected_identity(config: embeddings.EmbeddingConfig) -> tuple[str, str]:
    """Model id and variant the configured backend will produce, without loading it."""
    if config.backend != "local":
        return config.model, config.backend
    if config.model_path:
        return config.model, "custom"
    if config.model == "sentence-transformers/all-MiniLM-L6-v2" and embeddings.package_file(*embeddings.PIP_MODEL) \
            and embeddings.package_file(*embeddings.PIP_TOKENIZER):
        return config.model, "onnx-int8"
    return config.model, "fastembed-download"


@dataclass
class ReadResult:
    directory: str
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str

    def to_dict(self) -> dict:
        return self.__dict__ | {"continues": self.end_line < self.total_lines}


class KnowledgeBase:
    def __init__(self, config: KnowledgebaseConfig, hermes_home: Path,
                 embedder_factory: Callable[[], embeddings.Embedder] | None = None):
        self.config = config
        self.hermes_home = hermes_home
        self._embedder_factory = embedder_factory or (lambda: embeddings.create_embedder(config.embedding, hermes_home))
        # What the configured model will be, known without loading it; an injected embedder must be asked.
        self._expected_identity = None if embedder_factory else expected_identity(config.embedding)
        self._embedder: embeddings.Embedder | None = None
        self._copies: dict[tuple[str, Path], VectorCache | KeywordCache] = {}  # open memory maps, reused while current
        self._readers: dict[tuple[Path, int], tuple[tuple[int, int], IndexStore]] = {}

    # --- helpers --------------------------------------------------------------------------
    def embedder(self) -> embeddings.Embedder:
        if self._embedder is None:
            self._embedder = self._embedder_factory()
        return self._embedder

    def targets(self, target: str | None) -> list[DirectoryConfig]:
        """No target: every configured directory. Otherwise a name, a configured path, or any folder."""
        if target is None:
            directories = [*self.config.directories, *self._ad_hoc_indexed()]
            if not directories:
                raise KnowledgebaseError("No knowledgebase directories are configured; add some under "
                                         "knowledgebase.directories in config.yaml or pass a folder.")
            return directories
        directory = self.config.directory(target)
        if directory is not None:
            return [directory]
        try:
            return [self.config.ad_hoc(target)]
        except ConfigError as exc:
            raise KnowledgebaseError(str(exc)) from None

    def indexed_target(self, target: str) -> DirectoryConfig | None:
        """A configured directory or a folder already indexed by hand, by name or path; None otherwise.

        This is the set a model's tool call may touch: unlike `targets`, it never makes up a new ad-hoc folder.
        """
        directory = self.config.directory(target)
        if directory is not None:
            return directory
        wanted = Path(expand(target)).resolve()
        return next((d for d in self._ad_hoc_indexed() if d.name == target or d.path == wanted), None)

    def _ad_hoc_indexed(self) -> list[DirectoryConfig]:
        """Folders indexed by path (not listed in config.yaml) still exist for search and status."""
        folder = self.hermes_home / "knowledgebase" / "indexes"
        configured = {self.index_path(d) for d in self.config.directories}
        found = []
        for path in sorted(folder.glob("*.sqlite")) if folder.is_dir() else ():
            if path in configured:
                continue
            try:
                with IndexStore(path, create=False) as store:
                    root = store.meta("root")
            except StoreError:
                continue
            if root and Path(root).is_dir():
                directory = self.config.ad_hoc(root)
                if self.index_path(directory) == path:
                    found.append(directory)
        return found

    def index_path(self, directory: DirectoryConfig) -> Path:
        return directory.resolved_index_path(self.hermes_home)

    def _reader(self, index_path: Path) -> IndexStore | None:
        """A read connection kept open between searches (opening one costs ~1-2 ms, a tenth of a
        search at 100k chunks); one per thread, reopened when the file was replaced or deleted."""
        try:
            st = os.stat(index_path)
        except FileNotFoundError:
            return None
        key = (index_path, threading.get_ident())
        identity, store = self._readers.get(key, (None, None))
        if identity != (st.st_dev, st.st_ino):
            if store is not None:
                store.close()
            store = IndexStore(index_path, create=False)
            self._readers[key] = ((st.st_dev, st.st_ino), store)
        return store

    def _copy(self, kind: str, index_path: Path, store: IndexStore) -> VectorCache | KeywordCache | None:
        """The memory-mapped copy of this index's vectors or terms if it matches the snapshot being read."""
        module, opener = DERIVED_COPIES[kind]
        generation = store.generation()
        copy = self._copies.get((kind, index_path))
        if copy is None or copy.generation != generation:
            # The header alone says whether the file is current: a stale one is not mapped per search.
            if module.read_generation(module.cache_path(index_path)) != generation:
                return None
            try:
                copy = opener(module.cache_path(index_path))
            except (OSError, ValueError):
                return None
            self._copies[(kind, index_path)] = copy
        return copy

    def _refusal(self, directory: DirectoryConfig, store: IndexStore) -> str | None:
        indexed = store.model_identity()
        if indexed is None:
            return None
        if not store.has_window_vectors():
            return (f"The vectors of {directory.name} are from an older version of the index; run "
                    f"`hermes kb index {directory.name}` to rebuild them (keyword search works meanwhile).")
        if self._expected_identity is None:
            self._expected_identity = (self.embedder().identity.model_id, self.embedder().identity.variant)
        model_id, variant = self._expected_identity
        if (indexed.model_id, indexed.variant) != (model_id, variant):
            return mismatch_message(directory.name, indexed, f"{model_id} ({variant})")
        if self._embedder is not None and self._embedder.identity != indexed:
            return mismatch_message(directory.name, indexed, self._embedder.identity)
        return None

    # --- operations -----------------------------------------------------------------------
    def index(self, target: str | None = None, full: bool = False,
              progress: Callable[[], Progress] | None = None, wait: bool = True) -> list[IndexSummary]:
        """Sync directories; with wait=False a directory another process is indexing raises IndexBusy."""
        summaries = []
        for directory in self.targets(target):
            if not directory.path.is_dir():
                raise KnowledgebaseError(f"Directory {directory.path} ({directory.name}) does not exist.")
            path = self.index_path(directory)
            reporter = progress() if progress else NullProgress()
            with writer_lock(path, wait=wait,
                             on_wait=lambda: reporter.note(f"Waiting for another process indexing {directory.name}...")):
                with IndexStore(path) as store:
                    summaries.append(index_directory(directory, self.config, store, self.embedder, reporter, full))
        return summaries

    def search(self, query: str, k: int = 10, directory: str | None = None, mode: str = "hybrid",
               path_glob: str | None = None, kind: str | None = None, max_tokens: int | None = None,
               min_score: float | None = None) -> SearchResult:
        """Search; hits from small files that changed since indexing are re-indexed and searched again."""
        arguments = dict(query=query, k=k, directory=directory, mode=mode, path_glob=path_glob, kind=kind,
                         max_tokens=max_tokens, min_score=min_score)
        result = self._search(**arguments)
        stale = {(h.directory, h.abs_path) for h in result.hits if h.stale}
        refreshable = {name for name, path in stale if _small_file(path)}
        if not refreshable:
            return result
        for target in self.targets(directory):
            if target.name in refreshable:
                try:
                    self.index(str(target.path), wait=False)
                except IndexBusy:
                    log.info("%s is being indexed elsewhere; returning its changed hits flagged stale", target.name)
        return self._search(**arguments)

    def _search(self, query: str, k: int, directory: str | None, mode: str, path_glob: str | None,
                kind: str | None, max_tokens: int | None, min_score: float | None) -> SearchResult:
        sources = []
        with contextlib.ExitStack() as stack:
            for target in self.targets(directory):
                path = self.index_path(target)
                store = self._reader(path)
                if store is None:
                    if directory is not None:
                        raise KnowledgebaseError(f"{target.name} is not indexed yet; run `hermes kb index {directory}`.")
                    continue
                refusal = self._refusal(target, store)
                stack.enter_context(store.snapshot())
                sources.append(SearchSource(target.name, str(target.path), store, refusal,
                                            self._copy("vector_cache", path, store), self._copy("keyword_cache", path, store)))
            if not sources:
                raise KnowledgebaseError("Nothing is indexed yet; run `hermes kb index` first.")
            options = SearchOptions(
                k=k, mode=mode, fusion=self.config.fusion, alpha=self.config.alpha, rrf_k=self.config.rrf_k,
                min_score=self.config.min_score if min_score is None else min_score,
                max_tokens=max_tokens, path_glob=path_glob, kind=kind, keyword_row_budget=self.config.keyword_row_budget)
            return search(sources, query, lambda: self.embedder().embed_query(query), options)

    def read(self, path: str, start_line: int = 1, max_lines: int = 80) -> ReadResult:
        """A window of a file the index includes; nothing else, whatever the path or its links say."""
        if start_line < 1 or max_lines < 1:
            raise KnowledgebaseError("start_line and max_lines must be at least 1.")
        for directory in self.targets(None):
            rel = self._inside(directory, path)
            if rel is None:
                continue
            try:
                rules = self.config.scan_rules(directory)
                window = readable.read_window(directory.path, rel,
                                              IgnoreRules(directory.path, rules["exclude"], rules["allow_secrets"]),
                                              self.config.max_file_bytes, start_line, max_lines)
            except readable.NotReadable as exc:
                raise KnowledgebaseError(f"Cannot read {path}: {exc}.") from None
            if window is None:
                continue
            return ReadResult(directory.name, window.rel_path, start_line, window.end_line, window.total_lines, window.text)
        raise KnowledgebaseError(f"{path} is not a file inside an indexed directory.")

    @staticmethod
    def _inside(directory: DirectoryConfig, path: str) -> str | None:
        """path relative to the directory's root (absolute paths must lie under it); None if it climbs out."""
        if os.path.isabs(path):
            root = str(directory.path)
            if not os.path.normpath(path).startswith(root + os.sep):
                return None
            path = os.path.relpath(os.path.normpath(path), root)
        rel = os.path.normpath(path).replace(os.sep, "/")
        return None if rel == "." or rel.startswith("../") or rel == ".." else rel

    def status(self, target: str | None = None) -> list[dict]:
        rows = []
        for directory in self.targets(target):
            path = self.index_path(directory)
            row = {"name": directory.name, "root": str(directory.path), "index_path": str(path),
                   "indexed": path.exists(), "driver": driver_description()}
            if path.exists():
                with IndexStore(path, create=False) as store:
                    meta = store.all_meta()
                    known = store.files()
                    row.update(store.counts())
                    identity = store.model_identity()
                    row["model"] = f"{identity.model_id} ({identity.variant}, {identity.dim}d)" if identity else None
                    row["vector_search"] = self._refusal(directory, store) or "ok"
                    for kind, (module, _) in DERIVED_COPIES.items():
                        row[kind] = "current" if module.read_generation(module.cache_path(path)) == store.generation() else "stale"
                    if row["keyword_cache"] == "stale" and keyword_cache.over_limit(store):
                        row["keyword_cache"] = "off"
                updated = float(meta.get("updated_at", 0) or 0)
                row["last_indexed"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(updated)) if updated else None
                row["size_bytes"] = index_size_bytes(path)
                row["changed_on_disk"] = self._changed_on_disk(directory, known, path)
            rows.append(row)
        return rows

    def _changed_on_disk(self, directory: DirectoryConfig, known: dict, index_path: Path) -> int | None:
        """Stat-only count of files added, modified or deleted since the last index."""
        if not directory.path.is_dir():
            return None
        scanned = scan(directory.path, ignore_paths=(index_path,), **self.config.scan_rules(directory))
        present = {f.rel_path for f in scanned.files}
        changed = sum(1 for f in scanned.files
                      if f.rel_path not in known or (known[f.rel_path].size, known[f.rel_path].mtime_ns) != (f.size, f.mtime_ns))
        return changed + sum(1 for p in known if p not in present)

    def clear(self, target: str | None = None) -> list[str]:
        cleared = []
        for directory in self.targets(target):
            path = self.index_path(directory)
            for key in [key for key in self._readers if key[0] == path]:
                self._readers.pop(key)[1].close()
            for kind in DERIVED_COPIES:
                self._copies.pop((kind, path), None)
            with writer_lock(path):
                if remove_index(path):
                    cleared.append(directory.name)
        return cleared
