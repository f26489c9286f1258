"""`/kb index` off the chat's path: a run in a thread of its own, visible in `/kb status`.

Hermes calls a slash command's handler on the thread that reads the
terminal (REPL) or on its event loop (gateway); an index run of minutes must
block neither. One run at a time per process: a second `/kb index` while one
works says where the first one is instead of starting a rival writer.
"""

from __future__ import annotations

import atexit
import io
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console

from .index_progress import IndexingEstimate


def text_console(buffer: io.StringIO) -> Console:
    """Plain text for a chat message: no colour, no terminal codes, no emoji substitution."""
    return Console(file=buffer, width=100, force_terminal=False, no_color=True, highlight=False, emoji=False,
                   soft_wrap=True)


@dataclass
class _Run:
    line: str
    output: io.StringIO = field(default_factory=io.StringIO)
    errors: io.StringIO = field(default_factory=io.StringIO)
    estimates: list[IndexingEstimate] = field(default_factory=list)  # one per directory, as each starts
    finished: float | None = None
    stopping: threading.Event = field(default_factory=threading.Event)  # `/kb stop` asked for it

    def progress(self) -> "_Tracked":
        return _Tracked(self)

    def latest_progress(self) -> str:
        if not self.estimates:
            return "starting (scanning the files)"
        estimate = self.estimates[-1]
        return f"{estimate.directory}: {estimate.line()}"

    def result(self) -> str:
        return (self.output.getvalue().strip() + "\n" + self.errors.getvalue().strip()).strip() or "done"


class _Tracked:
    """The progress display of a run nobody watches live: it keeps the estimate /kb status reads, and
    its notes go to the run's result."""

    def __init__(self, run: _Run):
        self.run = run
        self.estimate: IndexingEstimate | None = None

    def start(self, directory: str, total_files: int, total_bytes: int = 0) -> None:
        self._stop_if_asked()
        self.estimate = IndexingEstimate(directory, total_files, total_bytes)
        self.run.estimates.append(self.estimate)

    def advance(self, files: int = 0, chunks: int = 0, chunked_bytes: int = 0, chunks_planned: int = 0) -> None:
        self._stop_if_asked()
        if self.estimate is not None:
            self.estimate.advance(files, chunks, chunked_bytes, chunks_planned)

    def note(self, text: str) -> None:
        self.run.errors.write(text + "\n")

    def _stop_if_asked(self) -> None:
        """The run stops as Ctrl-C stops one in the foreground: between files (the indexer reports each),
        every file written so far kept, and the next run goes on from there."""
        if self.run.stopping.is_set():
            raise KeyboardInterrupt

    def finish(self) -> None:
        pass


class BackgroundIndex:
    """The process's one background index run and the last finished one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: _Run | None = None
        self._last: _Run | None = None
        self._exit_hooked = False

    def start(self, line: str, work: Callable[[Console, Console, Callable[[], "_Tracked"]], int],
              announce: Callable[[str], None] | None = None) -> str:
        """Run `work(out, err, progress_factory)` in a thread; the sentence to show now. `announce` gets the
        run's result when it ends (the REPL prints it; a gateway has no channel, so /kb status shows it)."""
        with self._lock:
            if self._running is not None:
                return (f"An index run is already under way (/kb {self._running.line}: "
                        f"{self._running.latest_progress()}); /kb status shows its progress.")
            run = self._running = _Run(line)
            if not self._exit_hooked:
                atexit.register(self._quitting)
                self._exit_hooked = True

        def body() -> None:
            try:
                work(text_console(run.output), text_console(run.errors), run.progress)
            except Exception as exc:  # a failure is reported like any result, never lost in a thread
                run.errors.write(f"error: {exc}\n")
            finally:
                run.finished = time.time()
                with self._lock:
                    self._running, self._last = None, run
            if announce is not None:
                announce(f"📚 /kb {line} finished:\n{run.result()}")
        threading.Thread(target=body, name="kb-background-index", daemon=True).start()
        return f"Indexing in the background (/kb {line}); /kb status shows its progress."

    def _stop_running(self) -> _Run | None:
        """Ask the run under way, if any, to stop at its next file; the run asked."""
        with self._lock:
            running = self._running
        if running is not None:
            running.stopping.set()
        return running

    def stop(self) -> str:
        """`/kb stop`: the run under way ends at its next file; its result says so when it does."""
        running = self._stop_running()
        if running is None:
            return "No /kb index is running."
        return (f"Stopping /kb {running.line} after the file it is on; what it indexed is kept, and the next "
                f"/kb index goes on from there.")

    def _quitting(self) -> None:
        """At exit (Ctrl-C at the prompt, /exit): a run still going ends with the process; say so."""
        running = self._stop_running()
        if running is not None:
            sys.stderr.write(f"The background /kb {running.line} stopped as Hermes quit; what it indexed is kept, "
                             f"and the next /kb index goes on from there.\n")

    def describe(self) -> str | None:
        """For /kb status: the run under way with its latest progress, or how the last one ended."""
        with self._lock:
            running, last = self._running, self._last
        if running is not None:
            return f"/kb {running.line} is running: {running.latest_progress()}"
        if last is not None:
            when = time.strftime("%H:%M:%S", time.localtime(last.finished))
            return f"last /kb {last.line} (finished {when}):\n{last.result()}"
        return None

    def wait(self, timeout: float) -> bool:
        """Tests and shutdown: True once no run is under way."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._running is None:
                    return True
            time.sleep(0.05)
        return False
