"""Keep indexes fresh while files change: watchdog events, debounced, then an incremental sync.

Events only mark a directory dirty; once it has been quiet for the debounce
window, one incremental index run (a stat-only diff, then the changed files)
brings it up to date. An editor's save — temp file, rename, several writes —
or a burst of a hundred writes therefore ends in one run. Waiting uses a
condition variable, so an idle watcher costs no CPU.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from .config import DirectoryConfig
from .indexer import IndexSummary
from .scanner import IgnoreRules
from .service import USER_ERRORS, KnowledgeBase

log = logging.getLogger(__name__)

_IGNORED_EVENTS = {"opened", "closed_no_write"}


class _DirectoryHandler(FileSystemEventHandler):
    def __init__(self, directory: DirectoryConfig, rules: IgnoreRules, index_file: Path, mark: Callable[[str], None]):
        self.directory, self.rules, self.mark = directory, rules, mark
        self.root = os.path.realpath(directory.path)
        self.index_prefix = str(index_file)  # the index, its journal, lock and vector cache all start so

    def _relevant(self, path: str, is_dir: bool) -> bool:
        real = os.path.realpath(path) if os.path.exists(path) else os.path.abspath(path)
        if real.startswith(self.index_prefix) or not real.startswith(self.root + os.sep):
            return False
        return not self.rules.ignored(os.path.relpath(real, self.root).replace(os.sep, "/"), is_dir)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _IGNORED_EVENTS:
            return
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        if any(p and self._relevant(os.fsdecode(p), event.is_directory) for p in paths):
            self.mark(self.directory.name)


class KnowledgebaseWatcher:
    """Watches every given directory; `on_sync` hears each run's summary (or error)."""

    def __init__(self, kb: KnowledgeBase, directories: list[DirectoryConfig], debounce_s: float,
                 on_sync: Callable[[IndexSummary], None] | None = None,
                 on_error: Callable[[str], None] | None = None):
        self.kb, self.debounce_s = kb, debounce_s
        self.directories = {directory.name: directory for directory in directories}
        self.on_sync = on_sync or (lambda summary: None)
        self.on_error = on_error or (lambda message: log.warning("watch sync failed: %s", message))
        self._dirty: dict[str, float] = {}
        self._wake = threading.Condition()
        self._stopping = False
        self._observer = Observer()
        self._worker = threading.Thread(target=self._run, name="kb-watch-sync", daemon=True)
        self.runs = 0

    def _mark(self, name: str) -> None:
        with self._wake:
            self._dirty[name] = time.monotonic()
            self._wake.notify()

    def start(self) -> None:
        for directory in self.directories.values():
            rules = IgnoreRules(directory.path, (*self.kb.config.exclude, *directory.exclude))
            handler = _DirectoryHandler(directory, rules, self.kb.index_path(directory), self._mark)
            self._observer.schedule(handler, str(directory.path), recursive=True)
        self._observer.start()
        self._worker.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._observer.stop()
        self._observer.join(timeout=5)
        self._worker.join(timeout=30)

    def _next_due(self) -> tuple[str | None, float | None]:
        """The directory quiet for longest past the window, or how long until one is."""
        now = time.monotonic()
        if not self._dirty:
            return None, None
        name, last = min(self._dirty.items(), key=lambda item: item[1])
        wait = last + self.debounce_s - now
        return (name, None) if wait <= 0 else (None, wait)

    def _run(self) -> None:
        while True:
            with self._wake:
                name, wait = self._next_due()
                while name is None and not self._stopping:
                    self._wake.wait(timeout=wait)  # None: sleep until an event arrives
                    name, wait = self._next_due()
                if self._stopping:
                    return
                del self._dirty[name]
            self._sync(name)

    def _sync(self, name: str) -> None:
        try:
            for summary in self.kb.index(str(self.directories[name].path)):
                self.runs += 1
                self.on_sync(summary)
        except USER_ERRORS as exc:
            self.on_error(str(exc))
