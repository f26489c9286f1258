"""Keep indexes fresh while files change: watchdog events, debounced, then an incremental sync.

Events only mark a directory dirty; once it has been quiet for the debounce
window, one incremental index run (a stat-only diff, then the changed files)
brings it up to date. An editor's save — temp file, rename, several writes —
or a burst of a hundred writes therefore ends in one run. Waiting uses a
condition variable; an idle watcher wakes every `check_s` (2 s) for one `stat`
per folder and nothing else.

Folders that go away. The index describes a path, but inotify follows an
inode: after a delete the watch is dead, after a rename it keeps reporting the
moved folder's files under the old path, and when a parent folder is renamed
the watched folder hears nothing at all. So each check stats every folder's
path and compares its device and inode with those it attached to:

- gone (deleted, or renamed away — the same thing, since the index describes
  the path): the watch is dropped and `on_missing` hears one sentence naming
  the folder, once per disappearance; the other folders keep syncing. Its index
  is kept as it is (searches already drop hits whose file is gone).
- back, or replaced by another folder at that path (a re-clone, `mv new old`,
  a restore): a fresh watch is attached, `on_return` hears so, and the folder is
  synced after the debounce window, so whatever changed while it was away
  reaches the index.

When every folder is gone. With `grace_s=None` (the chat's watcher) it waits
for ever, one stat per folder per check: a chat must not end, or lose its
watcher, because a folder was moved for a while. With a grace period
(`hermes kb watch` passes `WATCH_GRACE_S`, 60 s) it gives up once every folder
— or the one folder the user asked for — has been missing that long: `wait()`
returns the sentence and the command prints it and exits 1. Exiting was chosen
over waiting because a foreground watcher with nothing to watch is the very
failure this replaces — a process that looks alive and keeps nothing fresh;
an exit status tells the person at the terminal, a script, or a supervisor
(`Restart=on-failure`) that something is wrong. The grace covers the brief
absences that are not mistakes: a branch switch, a re-clone, a folder swap, a
restore from backup.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from .config import DirectoryConfig
from .indexer import IndexSummary
from .scanner import IgnoreRules
from .service import USER_ERRORS, KnowledgeBase

log = logging.getLogger(__name__)

_IGNORED_EVENTS = {"opened", "closed_no_write"}
CHECK_S = 2.0  # how often each folder's path is stat'ed to notice it vanished, came back or was replaced
WATCH_GRACE_S = 60.0  # `hermes kb watch` gives up once every folder has been missing this long


class _DirectoryHandler(FileSystemEventHandler):
    def __init__(self, directory: DirectoryConfig, rules: IgnoreRules, index_file: Path,
                 mark: Callable[[str], None], check_soon: Callable[[], None]):
        self.directory, self.rules, self.mark, self.check_soon = directory, rules, mark, check_soon
        self.root = os.path.realpath(directory.path)  # refreshed at each attach
        self.index_prefix = str(index_file)  # the index, its journal, lock and vector cache all start so

    def _relevant(self, path: str, is_dir: bool) -> bool:
        real = os.path.realpath(path) if os.path.exists(path) else os.path.abspath(path)
        if real.startswith(self.index_prefix) or not real.startswith(self.root + os.sep):
            return False
        return not self.rules.ignored(os.path.relpath(real, self.root).replace(os.sep, "/"), is_dir)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _IGNORED_EVENTS:
            return
        paths = [os.fsdecode(p) for p in (event.src_path, getattr(event, "dest_path", "") or "") if p]
        if event.event_type in {"deleted", "moved"} and any(
                os.path.abspath(p) in (self.root, str(self.directory.path)) for p in paths):
            self.check_soon()  # the folder itself went away: say so now, not at the next check
            return
        if any(self._relevant(p, event.is_directory) for p in paths):
            self.mark(self.directory.name)


@dataclass
class _Folder:
    """One watched folder and what the watcher knows about it."""

    directory: DirectoryConfig
    handler: _DirectoryHandler
    watch: ObservedWatch | None = None
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the folder the watch is attached to
    missing: bool = False  # said so already; cleared when it comes back
    unwatchable: str = ""  # the last attach error said, so a failing attach is reported once


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if os.path.isdir(path) else None


def _describe(directory: DirectoryConfig) -> str:
    return f"{directory.path} ({directory.name})"


class KnowledgebaseWatcher:
    """Watches every given directory; `on_sync` hears each run's summary (or error).

    `on_missing` and `on_return` hear one sentence when a folder vanishes from its path and when
    it is back. With `grace_s` set, the watcher gives up once every folder has been missing that
    long and `wait()` returns why; with None it waits for the folders for ever.
    """

    def __init__(self, kb: KnowledgeBase, directories: list[DirectoryConfig], debounce_s: float,
                 on_sync: Callable[[IndexSummary], None] | None = None,
                 on_error: Callable[[str], None] | None = None,
                 on_missing: Callable[[str], None] | None = None,
                 on_return: Callable[[str], None] | None = None,
                 grace_s: float | None = None, check_s: float | None = None):
        self.kb, self.debounce_s, self.grace_s = kb, debounce_s, grace_s
        self.check_s = CHECK_S if check_s is None else check_s
        self.directories = {directory.name: directory for directory in directories}
        self.on_sync = on_sync or (lambda summary: None)
        self.on_error = on_error or (lambda message: log.warning("watch sync failed: %s", message))
        self.on_missing = on_missing or (lambda message: log.warning("%s", message))
        self.on_return = on_return or (lambda message: log.info("%s", message))
        self._dirty: dict[str, float] = {}
        self._wake = threading.Condition()
        self._stopping = False
        self._check_due = 0.0
        self._gone_since: float | None = None
        self._finished = threading.Event()
        self.gave_up: str | None = None
        self._observer = Observer()
        self._folders: dict[str, _Folder] = {}
        self._worker = threading.Thread(target=self._run, name="kb-watch-sync", daemon=True)
        self.runs = 0

    def _mark(self, name: str) -> None:
        with self._wake:
            self._dirty[name] = time.monotonic()
            self._wake.notify()

    def _check_soon(self) -> None:
        with self._wake:
            self._check_due = 0.0
            self._wake.notify()

    def start(self) -> None:
        for directory in self.directories.values():
            ignore = IgnoreRules(directory.path, *self.kb.config.ignore_args(directory))
            handler = _DirectoryHandler(directory, ignore, self.kb.index_path(directory), self._mark, self._check_soon)
            self._folders[directory.name] = _Folder(directory, handler)
        self._observer.start()
        self._check(initial=True)  # attach what is there; say which folders are missing
        self._worker.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._observer.stop()
        self._observer.join(timeout=5)
        if self._worker.is_alive():
            self._worker.join(timeout=30)
        self._finished.set()

    def wait(self, timeout: float | None = None) -> str | None:
        """Block until the watcher gives up (returns why) or is stopped (returns None)."""
        self._finished.wait(timeout)
        return self.gave_up

    # --- folders coming and going -------------------------------------------------------
    def _check(self, initial: bool = False) -> None:
        """Stat every folder's path: drop watches on folders that went away, attach to ones that came back."""
        for name, folder in self._folders.items():
            identity = _identity(folder.directory.path)
            if identity is not None and identity == folder.identity:
                continue
            replaced = folder.watch is not None
            if replaced:
                self._detach(folder)
            if identity is None:
                if not folder.missing:
                    folder.missing = True
                    self.on_missing(f"Folder {_describe(folder.directory)} is missing (deleted or renamed); "
                                    f"its index is kept and watching resumes when it is back at that path.")
                continue
            if not self._attach(folder, identity):
                continue
            if folder.missing:
                folder.missing = False
                self.on_return(f"Folder {_describe(folder.directory)} is back; watching and syncing it again.")
                self._mark(name)
            elif replaced or not initial:
                self._mark(name)  # another folder now stands at that path (or a failed attach finally worked)
        self._mind_the_grace()

    def _attach(self, folder: _Folder, identity: tuple[int, int]) -> bool:
        folder.handler.root = os.path.realpath(folder.directory.path)
        try:
            folder.watch = self._observer.schedule(folder.handler, str(folder.directory.path), recursive=True)
        except OSError as exc:  # gone again in between, or the system's limit on inotify watches
            if _identity(folder.directory.path) is not None and str(exc) != folder.unwatchable:
                folder.unwatchable = str(exc)
                self.on_error(f"Cannot watch {_describe(folder.directory)}: {exc}")
            return False
        folder.identity, folder.unwatchable = identity, ""
        return True

    def _detach(self, folder: _Folder) -> None:
        watch, folder.watch, folder.identity = folder.watch, None, None
        try:
            self._observer.unschedule(watch)
        except (KeyError, OSError) as exc:  # watchdog already dropped it when the folder was deleted
            log.debug("unscheduling %s: %s", folder.directory.path, exc)

    def _mind_the_grace(self) -> None:
        if not all(folder.missing for folder in self._folders.values()):
            self._gone_since = None
            return
        now = time.monotonic()
        self._gone_since = self._gone_since or now
        if self.grace_s is not None and now - self._gone_since >= self.grace_s:
            folders = list(self._folders.values())
            what = (f"Folder {_describe(folders[0].directory)} has" if len(folders) == 1 else
                    f"Every watched folder ({', '.join(_describe(f.directory) for f in folders)}) has")
            self.gave_up = f"{what} been missing for over {self.grace_s:g} s, so there is nothing left to watch."
            self._finished.set()

    # --- the sync loop ------------------------------------------------------------------
    def _next_due(self) -> tuple[str | None, float | None]:
        """The directory quiet for longest past the window, or how long until one is."""
        now = time.monotonic()
        if not self._dirty:
            return None, None
        name, last = min(self._dirty.items(), key=lambda item: item[1])
        wait = last + self.debounce_s - now
        return (name, None) if wait <= 0 else (None, wait)

    def _run(self) -> None:
        with self._wake:
            self._check_due = time.monotonic() + self.check_s
        while not self.gave_up:
            with self._wake:
                while True:
                    if self._stopping:
                        return
                    name, wait = self._next_due()
                    if name is not None:
                        del self._dirty[name]
                        break
                    until_check = self._check_due - time.monotonic()
                    if until_check <= 0:
                        self._check_due = time.monotonic() + self.check_s
                        break
                    self._wake.wait(timeout=until_check if wait is None else min(wait, until_check))
            if name is None:
                self._check()
            else:
                self._sync(name)

    def _sync(self, name: str) -> None:
        folder = self._folders[name]
        if folder.watch is None:
            return  # a late event from a folder that went away; the check says so and syncs it when back
        try:
            for summary in self.kb.index(str(self.directories[name].path)):
                self.runs += 1
                self.on_sync(summary)
        except USER_ERRORS as exc:
            if _identity(folder.directory.path) is None:
                self._check()  # it vanished under the sync: one "missing" sentence, not an error per event
            else:
                self.on_error(str(exc))
