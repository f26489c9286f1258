"""KnowledgeBase: the one facade the CLI, the tools and the chat hook use.

It maps directory names to index files, opens stores per operation, and
loads the embedding model only when vectors are really needed (status and
keyword search never pay for it).

Over 500 lines because it is the one facade: its parts (the models it keeps, the directories it
knows, index runs, search, kb_read, status, clear) share one configuration, one backend and the
models and open indexes it keeps; what they decide lives elsewhere (which copy a search reads:
index/copies.py; how a search ranks: retriever.py; how a run writes: indexer.py).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from . import embeddings, reranker, typed_search
from . import ocr as ocr_engine
from .config import (
    ConfigError,
    DirectoryConfig,
    KnowledgebaseConfig,
    resolve_path,
    unique_name,
)
from .embeddings import EmbeddingError, ModelMismatchError, mismatch_message
from .filters import FilterError, SearchFilter, search_filter
from .index import copies, keyword_cache
from .index.backends import backend_for
from .index.contract import IndexBusy, IndexCorrupt, Store, StoreError
from .index.copies import OpenIndexes
from .index.local_files import index_files
from .kinds import registry
from .retriever import (
    QueryModel,
    SearchError,
    SearchOptions,
    SearchResult,
    SearchSource,
    conclude,
    search,
    well_formed,
)
from .scanner import IgnoreRules, scan

if TYPE_CHECKING:  # the indexer and the readers load when a run or a read needs them: a search does not
    from .indexer import IndexSummary, Progress

log = logging.getLogger(__name__)


LOW_COVERAGE = 0.5  # model_coverage of an index under this: status says the model cannot read most of it
# `[[Note]]`, `[[Note#Heading]]`, `[[Note|shown text]]`: a note vault's link, which kb_read can follow.
WIKILINK = re.compile(r"\[\[([^\]|#\n]+)(?:#([^\]|\n]*))?(?:\|[^\]\n]*)?\]\]")
HOST_FIELDS = ("root", "index_path")  # where an index and its folder are on this machine
MAX_QUERY_CHARS = 8_000  # a long pasted traceback fits; a 20 MB query cost 58 s and 2.6 GB
INLINE_REFRESH_BYTES = 256_000  # a changed file this small is re-indexed before its hit is returned


def _small_file(path: str) -> bool:
    try:
        return os.path.getsize(path) <= INLINE_REFRESH_BYTES
    except OSError:
        return False


class KnowledgebaseError(RuntimeError):
    """An operation the user asked for cannot be done; the message says why."""


# Everything a user (or a model's tool call) can cause: shown as one sentence, never a traceback.
USER_ERRORS = (ConfigError, KnowledgebaseError, SearchError, StoreError, EmbeddingError, ModelMismatchError, FilterError)


def expected_identity(config: embeddings.EmbeddingConfig) -> tuple[str, str]:
    """Model id and variant the configured backend gives a new index, without loading it."""
    if config.backend == "multilingual":
        return config.model, embeddings.MULTILINGUAL_VARIANT
    if config.backend != "local":
        return config.model, config.backend
    if config.model_path:
        return config.model, "custom"
    if config.model == "sentence-transformers/all-MiniLM-L6-v2" and embeddings.package_file(*embeddings.PIP_MODEL) \
            and embeddings.package_file(*embeddings.PIP_TOKENIZER):
        return config.model, embeddings.new_index_variant(config, embeddings.OFFLINE_VARIANT)
    return config.model, "fastembed-download"


# What moving an index to a variant buys, for the status line that suggests it.
VARIANT_GAINS = {embeddings.INT8_ACTIVATIONS_VARIANT: " (int8 activations: the model embeds 1.3-2x faster on this CPU)"}


def kept_variant(config: embeddings.EmbeddingConfig, new: tuple[str, str],
                 indexed: embeddings.ModelIdentity | None) -> tuple[str, str]:
    """(model id, variant) an index is searched and updated with: its own variant of the offline
    default while this machine can run it (int8 activations need OpenVINO), so a new default
    variant never turns an index's vector search off; `--full` moves it to `new`."""
    if indexed is None or indexed.model_id != new[0] or {indexed.variant, new[1]} - embeddings.OFFLINE_VARIANTS:
        return new
    return (indexed.model_id, indexed.variant) if embeddings.runs_variant(config, indexed.variant) else new


@dataclass(frozen=True)
class Orphan:
    index_path: Path
    root: str | None
    reason: str

    @property
    def name(self) -> str:
        """What `hermes kb clear` takes to remove it: the index file's own name."""
        return self.index_path.stem


@dataclass
class ReadResult:
    directory: str
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str
    parts: str | None = None  # the pages (slides, cells ...) the lines are on, for files cited by parts

    def to_dict(self) -> dict:
        data = self.__dict__ | {"continues": self.end_line < self.total_lines}
        return data if self.parts else {k: v for k, v in data.items() if k != "parts"}



def _fenced_from_failing_models(sources: list[SearchSource]) -> list[SearchSource]:
    """Each source whose model cannot embed the query, given that reason as its vector refusal."""
    failures: dict[int, EmbeddingError] = {}
    for source in sources:
        if source.vector_refusal or source.model is None or id(source.model) in failures:
            continue
        try:
            source.model.vector  # computed once, kept for the search itself
        except EmbeddingError as exc:
            failures[id(source.model)] = exc
    if not failures:
        return sources
    names: dict[int, list[str]] = {}
    for source in sources:
        names.setdefault(id(source.model), []).append(source.name)
    return [replace(source, vector_refusal=f"Keyword results only from {', '.join(names[id(source.model)])}: "
                                           f"{failures[id(source.model)]}")
            if id(source.model) in failures and not source.vector_refusal else source for source in sources]


class KnowledgeBase:
    def __init__(self, config: KnowledgebaseConfig, hermes_home: Path,
                 embedder_factory: Callable[[], embeddings.Embedder] | None = None,
                 judge: reranker.Judge | None = None):
        self.config = config
        self.hermes_home = hermes_home
        self.backend = backend_for(config.store, hermes_home)  # where indexes live: SQLite files or PostgreSQL
        # The knowledgebase's model comes from embedder_factory when one is given (tests, benchmarks);
        # a directory with its own embedding_model gets its own, each loaded once and shared.
        self._embedder_factory = embedder_factory
        self._embedders: dict[tuple[embeddings.EmbeddingConfig, str | None], embeddings.Embedder] = {}  # by variant too
        # What each model will be, known without loading it; an injected embedder must be asked.
        self._expected_identities: dict[embeddings.EmbeddingConfig, tuple[str, str]] = {}
        self._embedder_lock = threading.Lock()
        self.indexes = OpenIndexes(self.backend)  # read connections and copies kept between searches
        self.rerankers = reranker.Engines(hermes_home / "knowledgebase" / "models" / "openvino-cache", judge)

    def reconfigured(self, config: KnowledgebaseConfig) -> "KnowledgeBase":
        """This knowledgebase under another configuration (evaluation compares fusions over one index),
        sharing the models it has loaded: each takes seconds to load and tens of MB to hold."""
        other = KnowledgeBase(config, self.hermes_home, self._embedder_factory)
        other._embedders, other._expected_identities, other._embedder_lock = \
            self._embedders, self._expected_identities, self._embedder_lock
        other.rerankers = self.rerankers
        return other

    # --- helpers --------------------------------------------------------------------------
    def query_model(self, query: str, directory: DirectoryConfig | None = None, variant: str | None = None) -> QueryModel:
        """The query as a directory's model reads it: its vector and the share of it the model
        represents (1.0 when the model cannot say), fusion's trust in that vector."""
        def coverage(language: str) -> float:
            measure = getattr(self.embedder(directory, variant), "coverage", None)
            return float(measure(query, language)) if callable(measure) else 1.0
        return QueryModel(lambda: self.embedder(directory, variant).embed_query(query), coverage)

    def embedder(self, directory: DirectoryConfig | None = None, variant: str | None = None) -> embeddings.Embedder:
        """The model a directory (default: the knowledgebase) is embedded with, in `variant` (default:
        a new index's), loaded once, even when a background index run and a chat's search both ask first."""
        config = self.config.embedding if directory is None else self.config.embedding_for(directory)
        injected = self._injected(config)  # asked for its identity, never predicted: no variant to choose
        key = self._embedder_key(config, None if injected else variant or self._expected_identity(config)[1])
        with self._embedder_lock:
            if key not in self._embedders:
                self._embedders[key] = (self._embedder_factory() if injected
                                        else embeddings.create_embedder(config, self.hermes_home, key[1]))
            return self._embedders[key]

    def _injected(self, config: embeddings.EmbeddingConfig) -> bool:
        """Whether this model is the one handed to the knowledgebase (tests, benchmarks): it is what it
        is, one variant, asked rather than predicted."""
        return self._embedder_factory is not None and config == self.config.embedding

    def _embedder_key(self, config: embeddings.EmbeddingConfig, variant: str | None) -> tuple:
        """Where a loaded model is kept: by model and variant (an injected model has one)."""
        return config, None if self._injected(config) else variant

    def _serving_identity(self, directory: DirectoryConfig, indexed: embeddings.ModelIdentity | None) -> tuple[str, str]:
        """(model id, variant) an index with vectors of `indexed` is searched and updated with (kept_variant)."""
        config = self.config.embedding_for(directory)
        new = self._expected_identity(config)
        if self._injected(config):
            return new
        return kept_variant(config, new, indexed)

    def _expected_identity(self, config: embeddings.EmbeddingConfig) -> tuple[str, str]:
        """(model id, variant) a new index of this model gets, without loading the model where its
        configuration says (an injected one is asked)."""
        if config not in self._expected_identities:
            if self._injected(config):
                identity = self.embedder().identity
                self._expected_identities[config] = (identity.model_id, identity.variant)
            else:
                self._expected_identities[config] = expected_identity(config)
        return self._expected_identities[config]

    def targets(self, target: str | None) -> list[DirectoryConfig]:
        """No target: every configured directory. Otherwise a name, a configured path, or any folder."""
        if target is None:
            directories = self.known_directories()
            if not directories:
                raise KnowledgebaseError("No knowledgebase directories are configured; add some under "
                                         "knowledgebase.directories in config.yaml or pass a folder.")
            return directories
        known = self.known_directories()
        directory = self._named(target, known)
        if directory is not None:
            return [directory]
        try:
            return [self.config.ad_hoc(target, taken={d.name for d in known})]
        except ConfigError as exc:
            raise KnowledgebaseError(str(exc)) from None

    def indexed_target(self, target: str) -> DirectoryConfig | None:
        """A configured directory or a folder already indexed by hand, by name or path; None otherwise.

        This is the set a model's tool call may touch: unlike `targets`, it never makes up a new ad-hoc folder.
        """
        try:
            return self._named(target, self.known_directories())
        except KnowledgebaseError:
            return None

    def has_directories(self) -> bool:
        """Whether anything can be searched: listing folders indexed by hand opens their index files,
        which a configured directory makes unnecessary."""
        return bool(self.config.directories) or bool(self._ad_hoc_indexed())

    def known_directories(self) -> list[DirectoryConfig]:
        """Configured directories, then folders indexed by path; every name distinct."""
        return [*self.config.directories, *self._ad_hoc_indexed()]

    @staticmethod
    def _named(target: str, known: list[DirectoryConfig]) -> DirectoryConfig | None:
        """The known directory `target` names, by name first (as config.yaml's names always were: write
        ./docs for a folder that shares a name), then by path."""
        by_name = next((d for d in known if d.name == target), None)
        if by_name is not None or not target.strip():
            return by_name
        try:
            path = resolve_path(target, "a folder path")
        except ConfigError:
            return None  # not a path at all (a NUL byte, ...), so no folder anyone indexed
        return next((d for d in known if d.path == path), None)

    def _ad_hoc_indexed(self) -> list[DirectoryConfig]:
        """Folders indexed by path (not listed in config.yaml) still exist for search and status."""
        return [directory for directory, _ in self._unlisted_indexes() if directory is not None]

    def orphans(self) -> list[Orphan]:
        """Index files under HERMES_HOME that belong to no folder one can name: cut short before their
        first run wrote a file, unreadable, or their folder renamed or deleted. Status lists them and
        `hermes kb clear NAME` (the file's name) removes them."""
        return [orphan for _, orphan in self._unlisted_indexes() if orphan is not None]

    def _unlisted_indexes(self) -> list[tuple[DirectoryConfig | None, Orphan | None]]:
        configured = {self.index_path(d) for d in self.config.directories}
        configured_roots = {d.path: d.name for d in self.config.directories}
        taken = {d.name for d in self.config.directories}
        found: list[tuple[DirectoryConfig | None, Orphan | None]] = []
        try:
            unlisted = self.backend.unlisted()
        except StoreError as exc:  # a server out of reach: its configured directories each say so
            log.info("cannot list the indexes of folders indexed by path: %s", exc)
            unlisted = []
        for index in unlisted:
            path, name, root = index.path, index.name, index.root
            if path in configured:
                continue
            if index.problem:
                found.append((None, Orphan(path, None, index.problem)))
            elif not root:
                found.append((None, Orphan(path, None, "its first index run stopped before it wrote a file")))
            elif not Path(root).is_dir():
                found.append((None, Orphan(path, root, f"its folder {root} is gone (renamed or deleted)")))
            elif Path(root) in configured_roots:
                found.append((None, Orphan(path, root, f"its folder is configured as {configured_roots[Path(root)]} "
                                                       f"now, which has an index of its own")))
            elif not name or self.index_path(DirectoryConfig(Path(root), name)) != path:
                found.append((None, Orphan(path, root, "it no longer matches its folder's path")))
            else:
                directory = DirectoryConfig(path=Path(root), name=name if name not in taken else unique_name(Path(root), taken),
                                            index_path=path, chunking=self.config.chunking,
                                            inline_tags=self.config.inline_tags)
                taken.add(directory.name)
                found.append((directory, None))
        if self.backend.shared:  # on a shared server the rest are other hosts' indexes, not orphans
            found = [(directory, orphan) for directory, orphan in found if directory is not None]
        return found

    def index_path(self, directory: DirectoryConfig) -> Path:
        """The index's local path: its SQLite file, or where this machine keeps a server index's copies."""
        return self.backend.index_path(directory)

    def _refusal(self, directory: DirectoryConfig, store: Store, indexed: embeddings.ModelIdentity | None) -> str | None:
        """Why vector search is off for an index whose vectors are `indexed` (store.model_identity()), or None."""
        if indexed is None:
            return None
        if not store.has_window_vectors():
            return (f"The vectors of {directory.name} are from an older version of the index; run "
                    f"`hermes kb index {directory.name}` to rebuild them (keyword search works meanwhile).")
        try:
            model_id, variant = self._serving_identity(directory, indexed)
        except EmbeddingError as exc:
            return f"Vector search is off: {exc}"
        if (indexed.model_id, indexed.variant) != (model_id, variant):
            return mismatch_message(directory.name, indexed, f"{model_id} ({variant})")
        loaded = self._embedders.get(self._embedder_key(self.config.embedding_for(directory), variant))
        if loaded is not None and loaded.identity != indexed:
            return mismatch_message(directory.name, indexed, loaded.identity)
        return None

    # --- operations -----------------------------------------------------------------------
    def index(self, target: str | None = None, full: bool = False,
              progress: Callable[[], Progress] | None = None, wait: bool = True) -> list[IndexSummary]:
        """Sync directories; with wait=False a directory another process is indexing raises IndexBusy."""
        summaries = []
        for directory in self.targets(target):
            try:
                summaries.append(self.index_one(directory, full, progress, wait))
            except (StoreError, KnowledgebaseError) as exc:
                if target is not None:
                    raise
                # One bad directory is fenced off: the others are still indexed, and it says why.
                from .indexer import IndexSummary

                summaries.append(IndexSummary(directory.name, str(directory.path), error=str(exc)))
        return summaries

    def index_one(self, directory: DirectoryConfig, full: bool = False, progress: Callable[[], Progress] | None = None,
                   wait: bool = True, only: set[str] | None = None) -> IndexSummary:
        if not directory.path.is_dir():
            raise KnowledgebaseError(f"Directory {directory.path} ({directory.name}) does not exist; fix or remove "
                                     f"it in config.yaml.")
        from .indexer import NullProgress, index_directory

        path = self.index_path(directory)
        reporter = progress() if progress else NullProgress()
        with self.backend.guarded(path, directory.name):
            with self.backend.writer_lock(path, directory.name, wait=wait, create=True, on_wait=lambda: reporter.note(
                    f"Waiting for another process indexing {directory.name}...")):
                with self.backend.open(path, name=directory.name) as store:
                    # The index's own variant of the model until --full, which moves it to a new index's.
                    def model() -> embeddings.Embedder:
                        kept = None if full else store.model_identity()
                        return self.embedder(directory, self._serving_identity(directory, kept)[1])
                    return index_directory(directory, self.config, store, model, reporter, full, only, self._ocr())

    def _ocr(self) -> ocr_engine.Ocr | None:
        """OCR as this machine can do it, recognised pages kept under HERMES_HOME."""
        return ocr_engine.engine(self.hermes_home / "knowledgebase" / "ocr-cache")

    def search(self, query: str, k: int = 10, directory: str | None = None, mode: str = "hybrid",
               path_glob: str | None = None, kind: str | None = None, max_tokens: int | None = None,
               min_score: float | None = None, tags: Sequence[str] | str = (), since: object = None,
               before: object = None, rerank: str | None = None, intent: str | None = None) -> SearchResult:
        """Search; hits from small files that changed since indexing are re-indexed and searched again.
        kind, path_glob, tags, since and before narrow it to the files they admit (filters.py); dates
        are ISO dates, spans such as `7d`, or epoch seconds. `rerank` overrides the configured
        relevance stage for this search (reranker.MODES). `query` may also be a list of typed searches
        ([{"type": "lex"|"vec"|"hyde", "query": ...}], typed_search.py), fused into one list and
        judged against `intent`; `mode` is then each search's own."""
        if isinstance(query, (list, tuple)):
            return self._search_typed(query, intent, k=k, directory=directory, path_glob=path_glob, kind=kind,
                                      max_tokens=max_tokens, min_score=min_score, tags=tags, since=since,
                                      before=before, rerank=rerank)
        if not isinstance(query, str):
            raise KnowledgebaseError("The query must be text, or a list of typed searches.")
        if len(query) > MAX_QUERY_CHARS:
            raise KnowledgebaseError(f"The query is {len(query):,} characters long; at most {MAX_QUERY_CHARS:,} "
                                     f"are searched, so shorten it to the words that matter.")
        only = search_filter(registry.NAMES, kind, path_glob, tags, since, before)
        engine = self._judge(rerank, judging=mode != "keyword")
        arguments = dict(query=well_formed(query), k=k, directory=directory, mode=mode, only=only,
                         max_tokens=max_tokens, min_score=min_score, engine=engine)
        result = self._search(**arguments)
        stale: dict[str, set[str]] = {}
        for hit in result.hits:
            if hit.stale and _small_file(hit.abs_path):
                stale.setdefault(hit.directory, set()).add(hit.path)
        if not stale:
            return result
        for target in self.targets(directory):
            if target.name in stale:
                try:
                    self.index_one(target, wait=False, only=stale[target.name])  # those files, nothing else
                except IndexBusy:
                    log.info("%s is being indexed elsewhere; returning its changed hits flagged stale", target.name)
                except (StoreError, KnowledgebaseError) as exc:
                    log.warning("could not refresh %s before answering: %s", target.name, exc)
        return self._search(**arguments)

    def _judge(self, rerank: str | None, judging: bool) -> reranker.Reranker | None:
        """The relevance stage a search asks for (`rerank`, else the config's). Keywords alone are judged
        by nothing, so they load no model, as they load no embedder."""
        try:
            return self.rerankers.for_mode(rerank or self.config.rerank if judging else "off", self.config)
        except reranker.RerankError as exc:
            raise KnowledgebaseError(str(exc)) from None

    def _search_typed(self, searches: Sequence[object], intent: str | None, k: int, rerank: str | None,
                      max_tokens: int | None, **narrowing) -> SearchResult:
        """Each typed search as the search of its mode, unjudged; the fused list judged once (retriever.conclude)."""
        try:
            parsed = typed_search.parse(searches, MAX_QUERY_CHARS)
        except typed_search.TypedSearchError as exc:
            raise KnowledgebaseError(str(exc)) from None
        if intent is not None and (not isinstance(intent, str) or len(intent) > MAX_QUERY_CHARS):
            raise KnowledgebaseError(f"The intent must be text of at most {MAX_QUERY_CHARS:,} characters.")
        if len(parsed) == 1:  # one variant is exactly the search of its mode
            return self.search(parsed[0].query, k=k, mode=parsed[0].mode, max_tokens=max_tokens, rerank=rerank,
                               **narrowing)

        def run(search: typed_search.TypedQuery, candidates: int) -> SearchResult:
            return self.search(search.query, k=candidates, mode=search.mode, rerank="off", **narrowing)

        fused = typed_search.search_all(parsed, k, run)
        engine = self._judge(rerank, judging=any(search.mode != "keyword" for search in parsed))
        options = SearchOptions(k=k, max_tokens=max_tokens, reranker=engine, rerank_cache=self.rerankers.cache)
        return conclude(fused, fused.hits, well_formed(typed_search.judged_query(parsed, intent)), options)

    def _search(self, query: str, k: int, directory: str | None, mode: str, only: SearchFilter,
                max_tokens: int | None, min_score: float | None, engine: reranker.Reranker | None) -> SearchResult:
        targets = self.targets(directory)
        fenced: list[str] = []  # why an index was left out of this search, one sentence each
        options = SearchOptions(
            k=k, mode=mode, fusion=self.config.fusion, alpha=self.config.alpha, rrf_k=self.config.rrf_k,
            min_score=self.config.min_score if min_score is None else min_score,
            max_tokens=max_tokens, filter=only, keyword_row_budget=self.config.keyword_row_budget,
            reranker=engine, rerank_cache=self.rerankers.cache)
        for _ in range(len(targets) + 1):  # each retry has fenced off one more bad index
            with contextlib.ExitStack() as stack:
                sources = []
                # One per model and variant, however many indexes share it.
                models: dict[tuple[embeddings.EmbeddingConfig, str], QueryModel] = {}
                for target in targets:
                    try:
                        with self.backend.guarded(self.index_path(target), target.name):
                            source = self._source(target, stack, directory, query, models)
                    except StoreError as exc:
                        if directory is not None:
                            raise
                        fenced.append(str(exc))
                        targets = [t for t in targets if t is not target]
                        continue
                    if source is not None:
                        sources.append(source)
                if not sources:
                    if fenced:
                        raise KnowledgebaseError(" ".join(fenced))
                    raise KnowledgebaseError("Nothing is indexed yet; run `hermes kb index` first.")
                try:
                    result = self._search_or_keywords(sources, query, options)
                    culprit = None
                except self.backend.query_errors() as exc:
                    culprit = self._damaged(sources)  # the query met damage in one of them: which?
                    if culprit is None:
                        raise StoreError(f"Search failed in an index: {exc}.") from None
            if culprit is None:
                result.warnings.extend(fenced)
                return result
            self.indexes.forget(culprit[2])  # its snapshot is closed now; a fixed file gets a fresh connection
            if directory is not None:
                raise culprit[1]
            fenced.append(str(culprit[1]))
            targets = [t for t in targets if t.name != culprit[0]]
        raise KnowledgebaseError(" ".join(fenced))

    def _search_or_keywords(self, sources: list[SearchSource], query: str, options: SearchOptions) -> SearchResult:
        """A model that fails now (damaged, unreachable) costs only the indexes embedded with it: they
        answer by keywords, said once per model, and folders on other models keep their vectors."""
        if options.mode != "keyword":
            sources = _fenced_from_failing_models(sources)
        return search(sources, query, options)

    def _source(self, target: DirectoryConfig, stack: contextlib.ExitStack, directory: str | None, query: str,
                models: dict[tuple[embeddings.EmbeddingConfig, str], QueryModel]) -> SearchSource | None:
        path = self.index_path(target)
        store = self.indexes.reader(path)
        if store is None:
            if directory is not None:
                raise KnowledgebaseError(f"{target.name} is not indexed yet; run `hermes kb index {directory}`.")
            return None
        indexed = store.model_identity()
        refusal = self._refusal(target, store, indexed)
        try:
            variant = self._serving_identity(target, indexed)[1]
        except EmbeddingError:
            variant = ""  # the refusal says why: its vectors are not searched
        key = (self.config.embedding_for(target), embeddings.query_variant(variant))
        if key not in models:
            models[key] = self.query_model(query, target, key[1] or None)
        model = models[key]
        if self.backend.shared:
            self.indexes.catch_up_keywords(path, store)
        stack.enter_context(store.snapshot())
        vectors, keywords = self.indexes.searched(path, store)
        return SearchSource(target.name, str(target.path), store, refusal, vectors, keywords,
                            lambda: self.indexes.file_table(path, store), model)

    @staticmethod
    def _damaged(sources: list[SearchSource]) -> tuple[str, IndexCorrupt, Path] | None:
        """After a query failed inside SQLite: the first source whose file fails its quick check."""
        for source in sources:
            path = source.store.path
            problems = source.store.integrity_problems()
            if problems:
                return source.name, IndexCorrupt(
                    f"The index of {source.name} ({path}) is corrupt ({problems[0]}); it was left out. Run "
                    f"`hermes kb doctor {source.name} --repair` to rebuild it (your files are untouched)."), path
        return None

    def read(self, path: str, start_line: int = 1, max_lines: int = 80, directory: str | None = None,
             part: int | None = None) -> ReadResult:
        """A window of a file the index includes; nothing else, whatever the path or its links say.
        `part` reads a page (slide, cell, message ...) of a file cited by parts, as citations give it.

        `path` is relative to `directory`, or, without one, either DIRECTORY/PATH as citations show it
        or a path inside some indexed directory; one that names files in two directories is refused
        with both, never answered with whichever comes first."""
        if start_line < 1 or max_lines < 1:
            raise KnowledgebaseError("start_line and max_lines must be at least 1.")
        link = WIKILINK.fullmatch(path.strip())
        if link is not None:
            return self._follow(link.group(1).strip(), (link.group(2) or "").strip(), max_lines, directory)
        if directory is not None:
            candidates = [(self._known_or_refuse(directory), path)]
        else:
            known = self.targets(None)
            head, _, rest = path.partition("/")
            candidates = [(d, path) for d in known] + [(d, rest) for d in known if rest and d.name == head]
        from . import readable

        found: dict[tuple[str, str], ReadResult] = {}
        for where, inner in candidates:
            rel = self._inside(where, inner)
            if rel is None:
                continue
            try:
                rules = IgnoreRules(where.path, *self.config.ignore_args(where))
                window = readable.read_window(where.path, rel, rules, self.config.size_cap, start_line, max_lines,
                                              self._ocr(), part)
            except readable.NotReadable as exc:
                raise KnowledgebaseError(f"Cannot read {path}: {exc}.") from None
            if window is not None:
                found.setdefault((where.name, window.rel_path), ReadResult(
                    where.name, window.rel_path, window.start_line or start_line, window.end_line, window.total_lines,
                    window.text, window.parts))
        if len(found) > 1:
            names = ", ".join(f"{name}/{rel}" for name, rel in found)
            raise KnowledgebaseError(f"{path} names more than one indexed file ({names}); give one of these, "
                                     f"or the directory.")
        if found:
            return next(iter(found.values()))
        raise KnowledgebaseError(f"{path} is not a file inside an indexed directory.")

    def _follow(self, name: str, heading: str, max_lines: int, directory: str | None) -> ReadResult:
        """A `[[wikilink]]` read as a note vault means it: the indexed file whose name (without its
        extension) or path is `name`, from its `#heading` when one is given."""
        wanted = name.lower().removesuffix(".md")
        matches = []
        for where in ([self._known_or_refuse(directory)] if directory else self.targets(None)):
            path = self.index_path(where)
            if not self.backend.exists(path):
                continue
            with self.backend.open(path, create=False, name=where.name) as store:
                for rel in store.files():
                    stem = rel.lower().rsplit(".", 1)[0] if "." in rel.rsplit("/", 1)[-1] else rel.lower()
                    if wanted in (stem, stem.rsplit("/", 1)[-1]):
                        matches.append((where, rel))
        if not matches:
            raise KnowledgebaseError(f"[[{name}]] names no indexed note.")
        if len(matches) > 1:
            raise KnowledgebaseError(f"[[{name}]] names more than one note ({', '.join(f'{d.name}/{r}' for d, r in matches)});"
                                     f" read one of them by its path.")
        where, rel = matches[0]
        start = 1
        if heading:
            whole = self.read(rel, 1, 100_000, directory=where.name)
            pattern = re.compile(rf"^#+\s+{re.escape(heading)}\s*#*\s*$", re.I)
            start = next((n for n, line in enumerate(whole.text.splitlines(), 1) if pattern.match(line)), 1)
        return self.read(rel, start, max_lines, directory=where.name)

    def _known_or_refuse(self, directory: str) -> DirectoryConfig:
        chosen = self.indexed_target(directory)
        if chosen is None:
            raise KnowledgebaseError(f"{directory} is not a knowledgebase directory the user has indexed "
                                     f"(kb_status lists them).")
        return chosen

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

    def status(self, target: str | None = None, host_paths: bool = True) -> list[dict]:
        """One row per directory (and per orphaned index when no target is given); a directory whose
        index cannot be read gets a `problem` sentence instead of failing the others. Without
        `host_paths` (a gateway's members, another machine's client) no row names a folder of this
        machine: no root, index path or OCR data folder."""
        rows = []
        try:
            directories = self.targets(target)
        except KnowledgebaseError:
            if target is not None or not self.orphans():
                raise
            directories = []  # nothing configured, but a first run under way (or cut short) is worth listing
        ocr_reader = ocr_engine.describe(with_folder=host_paths)
        for directory in directories:
            path = self.index_path(directory)
            row = {"name": directory.name, "root": str(directory.path), "index_path": str(path),
                   "indexed": False, "indexing": False, "driver": self.backend.describe(), "ocr_reader": ocr_reader,
                   "health": "ok"}
            try:
                with self.backend.guarded(path, directory.name):
                    row["indexed"] = self.backend.exists(path)
                    row["indexing"] = self.backend.being_indexed(path)
                    if row["indexed"]:
                        row.update(self._index_status(directory, path, row["indexing"]))
            except StoreError as exc:
                row.update(health="corrupt" if isinstance(exc, IndexCorrupt) else "error", problem=str(exc))
            if not directory.path.is_dir():
                row.update(health="missing", problem=f"The folder {directory.path} of {directory.name} does not exist; "
                                                     f"fix or remove it in config.yaml.")
            rows.append(row)
        if target is None:
            rows.extend({"name": o.name, "root": o.root, "index_path": str(o.index_path), "indexed": True,
                         "indexing": self.backend.being_indexed(o.index_path), "driver": self.backend.describe(),
                         "health": "orphaned",
                         "problem": f"The index {o.name} belongs to no folder: {o.reason}; `hermes kb clear {o.name}` "
                                    f"removes it."} for o in self.orphans())
        if not host_paths:
            rows = [{k: v for k, v in row.items() if k not in HOST_FIELDS} for row in rows]
        return rows

    def _index_status(self, directory: DirectoryConfig, path: Path, indexing: bool) -> dict:
        row: dict = {}
        with self.backend.open(path, create=False, name=directory.name) as store:
            meta = store.all_meta()
            known = store.files()
            row.update(store.counts())
            identity = store.model_identity()
            row["model"] = f"{identity.model_id} ({identity.variant}, {identity.dim}d)" if identity else None
            row["vector_search"] = self._refusal(directory, store, identity) or "ok"
            if identity is not None and row["vector_search"] == "ok":
                row.update(self._variant_advice(directory, identity))
            if store.reembed_pending():
                row["chunks_without_vectors"] = store.chunks_without_vectors()
                finish = ("the index run under way is embedding them" if indexing
                          else f"`hermes kb index {directory.name}` finishes them")
                row["vector_search"] = (f"{row['chunks_without_vectors']} chunks of {directory.name} still wait for "
                                        f"vectors (keyword search has them); {finish}.")
            coverage = meta.get("model_coverage")
            if coverage is not None and float(coverage) < LOW_COVERAGE and row["vector_search"] == "ok" and identity:
                row["vector_search"] = (
                    f"{identity.model_id} represents little of this index's text (coverage {float(coverage):.2f}: "
                    f"mostly a script or language it never learned), so hybrid search leans on keywords. For "
                    f"multilingual vectors, set `embedding_model: multilingual` in this directory's entry of "
                    f"config.yaml (or for every directory), then `hermes kb index {directory.name} --full`.")
            for kind, (module, _) in copies.DERIVED_COPIES.items():
                row[kind], changes = module.serving_state(store)  # current, stale or corrupt
                if changes is not None:  # a vector copy kept a few changes behind, searched with them
                    row[f"{kind}_changes"] = changes
            if row["keyword_cache"] == "stale" and keyword_cache.over_limit(store):
                row["keyword_cache"] = "off"
            row["size_bytes"] = store.size_bytes()
            waiting = sum(1 for f in known.values() if (f.error or "").startswith(ocr_engine.MISSING))
            reasons = collections.Counter(f.error for f in known.values()
                                          if f.error and not f.error.startswith(ocr_engine.MISSING))
            if reasons:  # each skip's own reason, the commonest first
                row["skipped"] = [{"reason": reason, "files": count} for reason, count in reasons.most_common(5)]
            if waiting:
                row["waiting_for_ocr"] = waiting
                row["ocr"] = (f"{waiting} file{'s' * (waiting > 1)} of {directory.name} (scans, pictures) wait for OCR: "
                              f"{ocr_engine.HOW_TO_ENABLE}, then `hermes kb index {directory.name}`.")
        updated = float(meta.get("updated_at", 0) or 0)
        row["last_indexed"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(updated)) if updated else None
        row["changed_on_disk"] = self._changed_on_disk(directory, known, path)
        return row

    def _variant_advice(self, directory: DirectoryConfig, identity: embeddings.ModelIdentity) -> dict:
        """An index kept on an older variant of its model than a new index would get here: said, with
        how to move it (kept_variant)."""
        try:
            model_id, variant = self._expected_identity(self.config.embedding_for(directory))
        except EmbeddingError:
            return {}
        if identity.model_id != model_id or identity.variant == variant:
            return {}
        return {"model_variant": (f"{directory.name} is embedded with {identity.variant}; new indexes here get "
                                  f"{variant}{VARIANT_GAINS.get(variant, '')}: `hermes kb index {directory.name} "
                                  f"--full` re-embeds it (keyword search answers while it runs).")}

    def indexed_files(self, directory: DirectoryConfig) -> dict:
        """The files the index of `directory` holds, by relative path ({} when it is not indexed)."""
        path = self.index_path(directory)
        with self.backend.guarded(path, directory.name):
            if not self.backend.exists(path):
                return {}
            with self.backend.open(path, create=False, name=directory.name) as store:
                return store.files()

    def _changed_on_disk(self, directory: DirectoryConfig, known: dict, index_path: Path) -> int | None:
        """Stat-only count of files added, modified or deleted since the last index."""
        if not directory.path.is_dir():
            return None
        scanned = scan(directory.path, ignore_paths=index_files(index_path), **self.config.scan_rules(directory))
        present = {f.rel_path for f in scanned.files}
        changed = sum(1 for f in scanned.files
                      if f.rel_path not in known or (known[f.rel_path].size, known[f.rel_path].mtime_ns) != (f.size, f.mtime_ns))
        return changed + sum(1 for p in known if p not in present)

    def clear(self, target: str | None = None) -> list[str]:
        cleared = []
        for name, path in self.clear_targets(target):
            self.indexes.forget(path)
            try:
                # Refused, not queued: waiting let a run report "400 added" for an index deleted the moment
                # it ended, with clear's "Cleared" printed before it.
                with self.backend.guarded(path, name), self.backend.writer_lock(path, name, wait=False):
                    if self.backend.remove(path):
                        cleared.append(name)
            except IndexBusy:
                raise KnowledgebaseError(f"{name} is being indexed right now; nothing was cleared. Clear it once "
                                         f"that run ends (Ctrl-C stops a run in the foreground)."
                                         + (f" Cleared before it: {', '.join(cleared)}." if cleared else "")) from None
        return cleared

    def clear_targets(self, target: str | None) -> list[tuple[str, Path]]:
        """(name, index file) of what `clear` would delete: directories, or an orphaned index by its name."""
        if target is not None:
            orphan = next((o for o in self.orphans() if target in (o.name, str(o.index_path))), None)
            if orphan is not None:
                return [(orphan.name, orphan.index_path)]
        return [(d.name, self.index_path(d)) for d in self.targets(target)]
