"""Bring one directory's index in line with the files on disk.

Order of work: stat-only diff, then hash only files whose stat moved, then
load/chunk only files whose content moved, written one transaction per file at
once (keyword-searchable), with the vectors it can reuse; the vectors of new
chunk texts follow in batches. Deletions go last so a renamed file can reuse
its old vectors.

Keyword first: embedding is the slow part (minutes for a few thousand files),
so chunks reach FTS5 before their vectors, and hybrid search meanwhile ranks
them by what exists. The model runs in a thread of its own from the first
batch on, on every core but one while files are still read, so reading,
chunking and writing them go on beside it; vectors are written by the run's
own thread as batches finish. Until every chunk has its vectors the index carries the
re-embed journal (`reembed_pending`), so a run cut short is finished by the
next one, whatever the files' stat says.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Protocol

import numpy as np

from . import ocr as ocr_engine
from .analysis import looks_like_code
from .chunker import chunk_document, chunker_signature
from .config import DirectoryConfig, KnowledgebaseConfig
from .embeddings import (
    Embedder,
    EmbeddingError,
    ModelMismatchError,
    cosine_baseline,
    mismatch_message,
)
from .extraction import Extractor
from .file_access import read_inside
from .index import keyword_cache, vector_cache
from .index.contract import FileRefused, FileRow, Store, StoreError
from .index.local_files import index_files
from .filters import FileMetadata
from .kinds.document import cured_skip
from .kinds.text import in_a_vault
from .ocr import Ocr
from .scanner import ScannedFile, scan

log = logging.getLogger(__name__)

EMBED_BATCH_CHUNKS = 64  # chunks per embedding pass and vector write; also windows per embed call
IN_FLIGHT_BATCHES = 2  # batches handed to the model thread ahead of the vectors written: one runs, one waits
KEYWORD_AHEAD_CHUNKS = 20_000  # chunks written ahead of their vectors (their texts wait in memory: ~30 MB)
REPORTED_SKIPS = "reported_skips"  # meta key: skips already told to the user, not repeated while they stay the same
CODE_SAMPLE = 400  # chunks read after a run that changed something, for the index's share of code (fusion)
OCR_LAST = frozenset({"image"})
OCR_NOTE_EVERY_S = 10.0  # how often a long OCR job says how far it has got
SECRETS_VERSION = 1  # part of the chunking signature: a change re-chunks every file (vectors are reused)


class Progress(Protocol):
    """What an index run reports, so a display can move with the work and estimate what is left.

    `start` gives the files to read and their bytes. `advance` is called with keywords only:
    `files` finished (written, unchanged or skipped); `chunked_bytes` of those files read and
    chunked into `chunks_planned` chunks (so chunks still to come can be estimated from bytes
    left); `chunks` that got their vectors (embedded, or reused), reported per embedding batch so a
    single big file moves the display too.
    """

    def start(self, directory: str, total_files: int, total_bytes: int = 0) -> None: ...
    def advance(self, files: int = 0, chunks: int = 0, chunked_bytes: int = 0, chunks_planned: int = 0) -> None: ...
    def note(self, text: str) -> None: ...
    def finish(self) -> None: ...


class NullProgress:
    def start(self, directory: str, total_files: int, total_bytes: int = 0) -> None: pass
    def advance(self, files: int = 0, chunks: int = 0, chunked_bytes: int = 0, chunks_planned: int = 0) -> None: pass
    def note(self, text: str) -> None: log.info(text)
    def finish(self) -> None: pass


@dataclass
class IndexSummary:
    directory: str
    root: str
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    resumed: int = 0  # of the unchanged: files an interrupted run had written and this one finished
    skipped: list[tuple[str, str]] = field(default_factory=list)
    chunks_embedded: int = 0  # chunks given new vectors; with chunks_reused, every chunk this run wrote
    texts_embedded: int = 0  # what the model embedded: a text repeated across chunks counts once
    chunks_reused: int = 0
    secrets_redacted: list[tuple[str, int]] = field(default_factory=list)  # (path, secrets removed)
    partly_read: list[tuple[str, str]] = field(default_factory=list)  # (path, what of it was not read), indexed
    seconds: float = 0.0
    error: str | None = None  # the directory could not be indexed at all (the others were)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["skipped"] = [{"path": p, "reason": r} for p, r in self.skipped]
        data["secrets_redacted"] = [{"path": p, "count": n} for p, n in self.secrets_redacted]
        data["partly_read"] = [{"path": p, "reason": r} for p, r in self.partly_read]
        return data


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


@dataclass
class _Waiting:
    """A chunk written without vectors, and the texts its vectors come from."""
    chunk_id: int
    content_hash: str
    embed_texts: list[str]


class OcrReport:
    """A file's OCR progress as notes, with its rate and what is left, every OCR_NOTE_EVERY_S (a
    scanned book takes minutes; a picture or a short scan says nothing more than the run's notice)."""

    def __init__(self, progress: Progress, path: str, clock: Callable[[], float] = time.monotonic):
        self.progress, self.path, self.clock = progress, path, clock
        self.started = self.last = clock()

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if now - self.last < OCR_NOTE_EVERY_S or not 0 < done < total:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        left = (total - done) / rate
        said = f"{max(1, round(left / 60))} min" if left >= 90 else f"{max(1, round(left))} s"
        self.progress.note(f"OCR of {self.path}: {done} of {total} pages, {rate:.2f} pages/s, about {said} left")


class _Run:
    """State of one sync; kept out of module globals so runs never share anything."""

    def __init__(self, directory: DirectoryConfig, config: KnowledgebaseConfig, store: Store,
                 embedder_factory: Callable[[], Embedder], progress: Progress, full: bool, only: set[str] | None,
                 ocr: Ocr | None = None):
        self.directory, self.config, self.store, self.ocr = directory, config, store, ocr
        self.extractor = Extractor()  # its worker process starts with the first file of a parsed format
        self.embedder_factory, self.progress, self.full, self.only = embedder_factory, progress, full, only
        self.embedder: Embedder | None = None
        self.baseline_due = False  # pinned to a model this run: its cosine baseline is measured at the end
        self.summary = IndexSummary(directory.name, str(directory.path))
        self.waiting: list[_Waiting] = []
        self.in_flight: deque[tuple[dict[str, list[_Waiting]], list[int], Future]] = deque()  # windows per text
        self.model_thread: ThreadPoolExecutor | None = None
        self.model_failure: Exception | None = None  # raised once every file is keyword-searchable
        self.journal_was_open = store.reembed_pending()  # a run before this one left chunks without vectors
        self.passing_skips: list[tuple[str, str]] = []  # skips not recorded in the files table: told once
        self.inline_tags = reads_inline_tags(directory)

    def _embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = self.embedder_factory()
            indexed = self.store.model_identity()
            if indexed is not None and indexed != self.embedder.identity:
                if not self.full:
                    raise ModelMismatchError(mismatch_message(self.directory.name, indexed, self.embedder.identity))
                self.store.drop_vectors()
                indexed = None
            if indexed is None:
                if self.embedder.sends_text_off_machine:
                    embedding = self.config.embedding_for(self.directory)
                    self.progress.note(f"Note: the {embedding.backend} backend sends the text of every "
                                       f"indexed file to {embedding.base_url}.")
                self.store.pin_model(self.embedder.identity)
                self.baseline_due = True
        return self.embedder

    def _measure_baseline(self) -> None:
        """The model's cosine baseline (embeddings.cosine_baseline), which vector scores are measured
        from, recorded once its vectors are written: when the index is pinned to a model, and once for
        an index embedded before baselines were recorded (a model that cannot load now is left for a
        later run, as are indexes waiting for `--full` with another model)."""
        if not self.baseline_due and (self.store.meta("cosine_baseline") is not None
                                      or self.store.model_identity() is None):
            return
        with contextlib.suppress(ModelMismatchError, EmbeddingError):
            self.store.set_meta(cosine_baseline=round(cosine_baseline(self._embedder()), 4))

    def _cured(self, row: FileRow) -> bool:
        """A skip whose cure has arrived, read again whatever its stat: a file left to wait for OCR, now
        that OCR is there, or one that needed a library now installed (loaders.cured_skip)."""
        return (self.ocr is not None and (row.error or "").startswith(ocr_engine.MISSING)) or cured_skip(row.error)

    def embed_waiting(self, wait: bool = True, batches: int | None = None) -> None:
        """Vectors for the chunks written without them, a batch at a time (progress moves, a crash
        loses one batch); a text repeated across chunks is embedded once. Up to `batches` batches go
        to the model thread (the rest keep waiting); `wait` writes every batch handed over before
        returning, else only those already done."""
        by_hash: dict[str, list[_Waiting]] = {}
        for item in self.waiting:
            by_hash.setdefault(item.content_hash, []).append(item)
        # Beside the reading (no wait), calls a quarter the size: the one still queued when the last file
        # is written runs on one core fewer, so it should be short.
        planned = _batches([(digest, items[0].embed_texts) for digest, items in by_hash.items()],
                           EMBED_BATCH_CHUNKS if wait else EMBED_BATCH_CHUNKS // 4)
        cut = len(planned) if batches is None else batches
        handed, kept = planned[:cut], planned[cut:]
        if self.model_failure is not None:  # the chunks stay in the re-embed journal for the next run
            handed, kept = [], []
        self.waiting = [item for batch in kept for digest, _ in batch for item in by_hash[digest]]
        if handed:
            embedder = self._embedder()  # here, not in the model thread: it may pin or refuse the model
            if self.model_thread is None:
                self.model_thread = ThreadPoolExecutor(1, thread_name_prefix="kb-embed")
            # Files still to read (a call that does not wait): the model leaves a core to this thread, or
            # every file would be keyword-searchable later (SciFact: 24 s against 12 s).
            embed = embedder.embed_documents if wait else getattr(embedder, "embed_documents_leaving_a_core",
                                                                  embedder.embed_documents)
            for batch in handed:
                future = self.model_thread.submit(embed, [text for _, windows in batch for text in windows])
                self.in_flight.append(({digest: by_hash[digest] for digest, _ in batch}, [len(w) for _, w in batch],
                                       future))
        self.write_vectors(wait)
        if wait and self.model_failure is not None:
            raise self.model_failure

    def write_vectors(self, wait: bool) -> None:
        """Writes the vectors of finished batches, in order (all of them when `wait`). A model error
        stops the batches behind it and is kept for `embed_waiting(wait=True)` to raise: the files
        still to read are written first, keyword-searchable as when the model is slow."""
        while self.in_flight and (wait or self.in_flight[0][2].done()):
            items, windows, future = self.in_flight.popleft()
            try:
                flat = future.result()
            except Exception as exc:  # noqa: BLE001  (whatever the model raised, as a run without the thread did)
                self.model_failure = exc
                self.stop_model_thread()
                return
            vectors = dict(zip(items, np.split(flat, np.cumsum(windows)[:-1])))
            self.store.add_vectors({item.chunk_id: vectors[digest] for digest, group in items.items() for item in group})
            self.progress.advance(chunks=sum(len(group) for group in items.values()))
            self.summary.texts_embedded += len(items)
            self.summary.chunks_embedded += sum(len(group) for group in items.values())

    def stop_model_thread(self) -> None:
        """Batches not started are dropped (their chunks stay in the re-embed journal); a running one
        finishes first."""
        for _, _, future in self.in_flight:
            future.cancel()
        self.in_flight.clear()
        if self.model_thread is not None:
            self.model_thread.shutdown(wait=True)
            self.model_thread = None

    def _bytes(self, file: ScannedFile) -> bytes:
        """The file's content, opened without following links out of the root: a file swapped for a
        symlink after the scan cannot pull outside text into the index (or to an embedding service)."""
        return read_inside(str(self.directory.path), file.rel_path, self.config.size_cap(file.kind),
                           admit=lambda real_rel: not self.rules.excluded(real_rel))

    def _announce_ocr(self, files: list[ScannedFile]) -> None:
        pictures = sum(file.kind in OCR_LAST for file in files)
        what = [f"{count} {name}{'s' * (count > 1)}" for count, name in
                ((pictures, "picture"), (len(files) - pictures, "scanned PDF")) if count]
        self.progress.note(f"Reading {' and '.join(what)} by OCR, about "
                           f"{ocr_engine.READERS[self.ocr.reader].seconds_per_page} s a page on one core, "
                           f"{self.ocr.pool.workers} at a time, unless recognised before "
                           f"(every other file is searchable already).")

    def read_ahead(self, files: list[ScannedFile]) -> None:
        """OCR of the next pictures started while this one is read, so every OCR worker has a page."""
        from .loaders import read_ahead

        for file in files:
            with contextlib.suppress(OSError):  # an unreadable file is reported at its turn
                read_ahead(self._bytes(file), file.kind, self.ocr)

    def process(self, file: ScannedFile, row: FileRow | None, rechunk: bool, defer_ocr: bool = False,
                unfinished: bool = False) -> bool:
        """Reads, chunks and writes the file; False, doing nothing, when `defer_ocr` and reading it takes
        OCR (the run comes back to it after every other file). `unfinished`: an interrupted run wrote it
        without all its vectors; it is redone, and called unchanged (resumed) if it is."""
        rechunk = rechunk or unfinished
        if defer_ocr and file.kind in OCR_LAST:
            return False
        try:
            data = self._bytes(file)
        except OSError as exc:
            self.passing_skips.append((file.rel_path, f"unreadable ({exc.strerror})"))
            self.progress.advance(files=1, chunked_bytes=file.size)
            return True
        digest = content_hash(data)
        if row is not None and row.content_hash == digest and not rechunk and not self._cured(row):
            self.store.touch_file(row.id, file.size, file.mtime_ns)
            self.summary.unchanged += 1
            self.progress.advance(files=1, chunked_bytes=file.size)
            return True
        # The readers load with the first file to read: a rescan that finds nothing changed never needs them.
        from .kinds.document import LoadError
        from .loaders import needs_ocr
        from .secret_scan import redact

        if defer_ocr and needs_ocr(data, file.kind):
            return False
        try:
            ocr = replace(self.ocr, on_page=OcrReport(self.progress, file.rel_path)) if self.ocr else None
            document = self.extractor.load(data, file.kind, ocr)  # under the per-file budget
            if document.left_out:
                self.summary.partly_read.append((file.rel_path, document.left_out))
            if not self.rules.allows_secrets(file.rel_path):
                redacted = redact(document.text)
                if redacted.found:
                    document = replace(document, text=redacted.text)
                    self.summary.secrets_redacted.append((file.rel_path, len(redacted.found)))
            chunks = chunk_document(document, file.abs_path.name, self.directory.chunking)
        except LoadError as exc:
            # Recorded with its stat so an unchanged broken file is not retried every run.
            self.store.write_file(file.rel_path, file.size, file.mtime_ns, digest, file.kind, [], None, error=str(exc))
            self.summary.skipped.append((file.rel_path, str(exc)))  # said once: unchanged, it is not read again
            self.progress.advance(files=1, chunked_bytes=file.size)
            return True
        self.progress.advance(chunked_bytes=file.size, chunks_planned=len(chunks))
        known: dict[str, np.ndarray] = {}
        if chunks:
            self._embedder()  # the model check comes first: on a model change it drops every reusable vector
            known = self.store.vectors_by_hash([c.content_hash for c in chunks])
        if len(known) < len({c.content_hash for c in chunks}) and not self.store.reembed_pending():
            self.store.set_meta(reembed_pending=1)  # the journal: these chunks wait for vectors
        try:
            ids = self.store.write_file(file.rel_path, file.size, file.mtime_ns, digest, file.kind, chunks,
                                        [known.get(c.content_hash) for c in chunks],
                                        metadata=tags_read(document.metadata, self.inline_tags))
        except FileRefused as exc:
            self.passing_skips.append((file.rel_path, str(exc)))
            self.progress.advance(files=1)
            return True
        reused = 0
        for chunk_id, chunk in zip(ids, chunks):
            if chunk.content_hash in known:
                reused += 1
            else:
                self.waiting.append(_Waiting(chunk_id, chunk.content_hash, chunk.embed_texts))
        self.summary.chunks_reused += reused
        self.progress.advance(chunks=reused)
        if row is None:
            self.summary.added += 1
        elif unfinished and row.content_hash == digest:
            self.summary.unchanged += 1
            self.summary.resumed += 1
        else:
            self.summary.changed += 1
        self.progress.advance(files=1)
        if len(self.waiting) >= KEYWORD_AHEAD_CHUNKS:
            self.embed_waiting()
        elif len(self.waiting) >= EMBED_BATCH_CHUNKS and len(self.in_flight) < IN_FLIGHT_BATCHES:
            self.embed_waiting(wait=False, batches=IN_FLIGHT_BATCHES - len(self.in_flight))  # the model stays busy
        else:
            self.write_vectors(wait=False)
        return True

    def run(self) -> IndexSummary:
        started = time.perf_counter()
        root = self.directory.path
        scanned = scan(root, ignore_paths=index_files(self.store.path), **self.config.scan_rules(self.directory))
        self.rules = scanned.rules
        if self.only is not None:
            scanned.files = [f for f in scanned.files if f.rel_path in self.only]
            scanned.skipped = [s for s in scanned.skipped if s[0] in self.only]
        self.passing_skips.extend(scanned.skipped)
        existing = self.store.files()
        if self.only is not None:
            existing = {path: row for path, row in existing.items() if path in self.only}
        # A re-embed cut short left files whose chunks have no vectors: they are redone, whatever their stat.
        unfinished = self.store.files_without_vectors() if self.store.reembed_pending() else set()
        # Whether #words are tags is part of what a file's reading gives: a change re-reads every file.
        signature = (f"{chunker_signature(self.directory.chunking)}:secrets={SECRETS_VERSION}"
                     + ("" if self.inline_tags else ":inline_tags=off"))
        if not existing:
            self.store.set_meta(chunker=signature)
        rechunk = self.full or self.store.meta("chunker") != signature
        if not self.store.has_window_vectors():
            self.store.drop_vectors()  # one vector per chunk, from before windows: every chunk is re-embedded
            rechunk = True
        todo: list[tuple[ScannedFile, FileRow | None]] = []
        for file in scanned.files:
            row = existing.get(file.rel_path)
            if row is not None and not rechunk and row.size == file.size and row.mtime_ns == file.mtime_ns \
                    and file.rel_path not in unfinished and not self._cured(row):
                self.summary.unchanged += 1  # a file skipped when it changed is not reported again
            else:
                todo.append((file, row))
        if todo and self.store.meta("root") != str(root):
            # Written first: a folder indexed by path is found by searches (and status) from its first
            # written file on, not only once the run has finished embedding.
            self.store.set_meta(root=str(root))
        self.progress.start(self.directory.name, len(todo), sum(file.size for file, _ in todo))
        try:
            # Files that take OCR last (seconds a page): every other file is keyword-searchable before.
            later = [(file, row) for file, row in todo
                     if not self.process(file, row, rechunk, self.ocr is not None, file.rel_path in unfinished)]
            if later:
                self._announce_ocr([file for file, _ in later])
            ahead = self.ocr.pool.workers - 1 if later else 0  # pictures under way beside this one
            for position, (file, row) in enumerate(later):
                if ahead and file.kind in OCR_LAST:
                    self.read_ahead([next_file for next_file, _ in later[position + 1:position + 1 + ahead]])
                self.process(file, row, rechunk, unfinished=file.rel_path in unfinished)
            self.embed_waiting()
            self._measure_baseline()
            present = {f.rel_path for f in scanned.files}
            self.summary.removed = self.store.delete_files([p for p in existing if p not in present])
            # Every chunk this run wrote has its vectors now. Chunks an earlier run left without them were
            # redone if their files were in this run (an unreadable or partial run's other files were not).
            if self.store.reembed_pending() and (not self.journal_was_open or (
                    self.only is None and not self.store.files_without_vectors())):
                self.store.finish_reembed()
            self.summary.skipped[:0] = self._not_yet_reported(self.passing_skips)
            written = self.summary.added + self.summary.changed + self.summary.resumed + self.summary.removed
            sample = self.store.sample_texts(CODE_SAMPLE) if written or self.store.meta("code_share") is None else None
            self.store.set_meta(root=str(root), chunker=signature, updated_at=time.time(),
                                **(self._sample_figures(sample) if sample is not None else {}))
            self.store.tidy(bulk=written > 100)
            for copy, name, fallback in ((vector_cache, "vector", "sqlite-vec"), (keyword_cache, "keyword", "FTS5")):
                try:
                    copy.refresh(self.store)
                except (OSError, ValueError, StoreError) as exc:
                    # The index itself is complete; searches use the fallback until a rebuild succeeds.
                    self.progress.note(f"The {name} cache of {self.directory.name} was not rebuilt ({exc}); "
                                       f"{name} search stays correct but uses the slower {fallback}.")
        finally:
            self.stop_model_thread()
            self.extractor.close()
            if self.ocr is not None:
                self.ocr.close()
            self.progress.finish()
        self.summary.seconds = round(time.perf_counter() - started, 3)
        return self.summary


    def _sample_figures(self, sample: list[str]) -> dict[str, float]:
        """What fusion and status read about the index as a whole, from a sample of its chunks: the
        share that is program source, and how much of its text the model represents (when the run
        loaded one that can say: model_coverage)."""
        figures = {"code_share": round(sum(map(looks_like_code, sample)) / max(1, len(sample)), 4)}
        measure = getattr(self.embedder, "coverage", None)
        if callable(measure) and sample:
            figures["model_coverage"] = round(sum(measure(text) for text in sample) / len(sample), 4)
        return figures

    def _not_yet_reported(self, skips: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Skips the user has not been told about (or all of them with --full); remembered for the next run,
        so a rescan or a watch sync does not repeat the same oversized file or broken link every time."""
        try:
            told = {tuple(item) for item in json.loads(self.store.meta(REPORTED_SKIPS) or "[]")}
        except (ValueError, TypeError):
            told = set()
        if self.full:
            told = set()
        if self.only is None:  # a partial run sees only some skips: it must not forget the others
            self.store.set_meta(**{REPORTED_SKIPS: json.dumps(sorted(set(skips)))})
        return [skip for skip in skips if tuple(skip) not in told]


def _batches(items: list, windows_per_batch: int) -> list[list]:
    """(hash, windows) items cut into groups of about windows_per_batch windows: one embedding call each,
    so progress moves while a big file is embedded."""
    batches: list[list] = [[]]
    size = 0
    for item in items:
        if size >= windows_per_batch:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += len(item[1])
    return [batch for batch in batches if batch]


def index_directory(directory: DirectoryConfig, config: KnowledgebaseConfig, store: Store,
                    embedder_factory: Callable[[], Embedder], progress: Progress | None = None,
                    full: bool = False, only: set[str] | None = None, ocr: Ocr | None = None) -> IndexSummary:
    """Sync one directory into its open store (only the files in `only`, relative paths, when given:
    a search refreshing its stale hits must not index a hundred unrelated new files); the caller
    holds the writer lock."""
    return _Run(directory, config, store, embedder_factory, progress or NullProgress(), full, only, ocr).run()


def reads_inline_tags(directory: DirectoryConfig) -> bool:
    """Whether a note's `#word` is a tag in this folder: as configured, or (auto) where the folder is
    in an Obsidian or Logseq vault, whose notes write tags so. Elsewhere `#deploys` is a chat channel's
    name in prose, and a search filtered by tags should not find it."""
    if directory.inline_tags != "auto":
        return directory.inline_tags == "on"
    return in_a_vault(directory.path)


def tags_read(metadata: FileMetadata, inline: bool) -> FileMetadata:
    """The file's tags as the index keeps them: front matter's, then its inline ones where they count."""
    if not metadata.inline_tags:
        return metadata
    tags = tuple(dict.fromkeys(metadata.tags + metadata.inline_tags)) if inline else metadata.tags
    return replace(metadata, tags=tags, inline_tags=())
