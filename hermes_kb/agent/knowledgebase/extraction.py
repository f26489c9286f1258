"""One bound on every extraction: a file's text is read under a per-file budget the code enforces.

Each format used to guard its own amplification (an archive's declared sizes, a PDF's streams), and a
format that forgot one (a UTF-16 DTD, a spreadsheet's declared dimension, an e-book spine naming one
chapter 2,000 times) took gigabytes and ended the whole run. Here the budget is the mechanism, not an
estimate (Apache Tika's forked parser is the model):

- formats that are parsed (HTML, office files, e-books, mail, notebooks, ...) are read in a worker
  process (pebble's pool, spawned: the indexer has other threads) under an address-space limit and
  a wall-time limit; a worker that runs over either is killed and the next file gets a fresh one;
- every loader's text is counted after decoding and expansion against a character budget;
- plain text (bounded by the scanner's size cap, decoded in one linear pass) and PDFs and pictures
  (pymupdf's streams are checked before they are inflated, and OCR runs in its own capped workers)
  are read in this process, their characters counted the same way, a MemoryError there caught.

A file over budget is one `skipped FILE: ...` line naming the limit; every other file is indexed.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .kinds import registry
from .kinds.document import LoadError

if TYPE_CHECKING:  # the readers load with the first file to read: a rescan with nothing changed never needs them
    from .kinds.document import Document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """What reading one file may take: far above what ordinary files need (the PostgreSQL manual's
    1,169 pages take 6.3 ms each in the worker, docs/benchmarks.md "Extraction budget"), far below
    what ends a run."""
    seconds: float = 120.0
    memory_bytes: int = 1_500_000_000  # the worker's whole address space, libraries included (~0.3 GB)
    characters: int = 32_000_000  # a 100 MB document's worth of text; PDFs had this cap already

    def over_memory(self) -> str:
        return f"over the per-file budget: reading it needed more than {self.memory_bytes // 1_000_000:,} MB"

    def over_characters(self, count: int) -> str:
        return (f"over the per-file budget: its text ran past {self.characters:,} characters "
                f"({count:,}); split the file")


DEFAULT_BUDGET = Budget()


def bounded_kinds() -> frozenset[str]:
    """Kinds whose reader parses a format (read in the worker): not plain text, not PDF or pictures."""
    return frozenset(kind.name for kind in registry.FILE_KINDS if kind.bounded)


def limit_memory(limit: int) -> None:
    """This process's address space capped at `limit` (a worker's, inside its task: a worker that
    failed to start would leave pebble's task waiting; one whose task fails answers that task)."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: the time and character caps still hold
        pass


def _load_in_worker(data: bytes, kind: str, budget: Budget) -> Document | str:
    """In the worker: the document, or the sentence saying which budget it went over. The readers
    are imported before the limit is set: it bounds what the file costs, not the libraries."""
    from . import loaders

    registry.named(kind).read_function()
    limit_memory(budget.memory_bytes)
    try:
        document = loaders.load(data, kind)
    except MemoryError:
        return budget.over_memory()
    if len(document.text) > budget.characters:
        return budget.over_characters(len(document.text))
    return document


def _stop(pool) -> None:
    pool.stop()
    pool.join()


class Extractor:
    """One index run's reader of files: the worker starts with the first parsed file and is kept for
    the run (a spawned interpreter costs ~0.5 s), replaced after a file that killed it."""

    def __init__(self, budget: Budget | None = None):
        self.budget = budget or DEFAULT_BUDGET
        self._pool = None
        self._finalizer = None

    def load(self, data: bytes, kind: str, ocr=None) -> Document:
        from . import loaders

        if registry.named(kind).bounded:
            return self._in_worker(data, kind)
        try:
            document = loaders.load(data, kind, ocr)
        except MemoryError:
            raise LoadError("over the per-file budget: this process ran out of memory reading it") from None
        if len(document.text) > self.budget.characters:
            raise LoadError(self.budget.over_characters(len(document.text)))
        return document

    def _in_worker(self, data: bytes, kind: str) -> Document:
        import pebble

        if self._pool is None:
            self._pool = pebble.ProcessPool(max_workers=1, context=multiprocessing.get_context("spawn"))
            self._finalizer = weakref.finalize(self, _stop, self._pool)
        future = self._pool.schedule(_load_in_worker, (data, kind, self.budget), timeout=self.budget.seconds)
        try:
            outcome = future.result()
        except concurrent.futures.TimeoutError:
            raise LoadError(f"over the per-file budget: reading it took more than {self.budget.seconds:g} s") from None
        except pebble.ProcessExpired as exc:  # killed: the kernel's OOM killer, or a library's abort
            log.warning("the worker reading a %s file died (exit code %s)", kind, exc.exitcode)
            raise LoadError(f"over the per-file budget: the worker reading it died (exit code {exc.exitcode}); "
                            f"it may need more than {self.budget.memory_bytes // 1_000_000:,} MB") from None
        except MemoryError:  # raised in the worker outside the loader (handing the document back)
            raise LoadError(self.budget.over_memory()) from None
        if isinstance(outcome, str):
            raise LoadError(outcome)
        return outcome

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._pool = self._finalizer = None

