"""What `hermes kb index` shows while it works: a bar on a terminal, plain or JSON lines elsewhere.

All three read one IndexingEstimate, fed by the indexer's Progress calls (indexer.py), so the
terminal, a log and a script see the same counts and the same time left.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
from rich.text import Text

if TYPE_CHECKING:  # only named: a search need not load the indexer
    from hermes_kb.agent.knowledgebase import indexer

from .terminal import safe

PROGRESS_EVERY_S = 5.0  # how often a run whose output is not a terminal says where it is


def _duration(seconds: float) -> str:
    """Rounded the way people say it: ~40 s, ~3 min, ~1 h 20 min."""
    if seconds < 10:
        return f"{max(1, round(seconds))} s"
    if seconds < 60:
        return f"{round(seconds / 5) * 5} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    return f"{int(seconds // 3600)} h {round(seconds % 3600 / 60)} min"


class IndexingEstimate:
    """Counts of one index run and an honest estimate of what is left: chunks still to embed (known for
    files already chunked, extrapolated from bytes for the rest) divided by the chunk rate measured so far."""

    def __init__(self, directory: str, total_files: int, total_bytes: int, clock: Callable[[], float] = time.monotonic):
        self.directory, self.total_files, self.total_bytes, self.clock = directory, total_files, total_bytes, clock
        self.files = self.chunks = self.chunked_bytes = self.chunks_planned = 0
        self.first_chunks_at: float | None = None  # the model load before the first batch is not the rate
        self.chunks_before_rate = 0

    def advance(self, files: int = 0, chunks: int = 0, chunked_bytes: int = 0, chunks_planned: int = 0) -> None:
        self.files += files
        self.chunked_bytes += chunked_bytes
        self.chunks_planned += chunks_planned
        if chunks and self.first_chunks_at is None:
            self.first_chunks_at, self.chunks_before_rate = self.clock(), chunks
        self.chunks += chunks

    def chunks_expected(self) -> int | None:
        """All chunks of this run: those already planned, plus the rest at the chunks-per-byte seen so far."""
        if self.chunked_bytes >= self.total_bytes:
            return self.chunks_planned
        if not self.chunked_bytes:
            return None
        rest = (self.total_bytes - self.chunked_bytes) * self.chunks_planned / self.chunked_bytes
        return self.chunks_planned + round(rest)

    def chunks_per_second(self) -> float | None:
        if self.first_chunks_at is None:
            return None
        elapsed = self.clock() - self.first_chunks_at
        measured = self.chunks - self.chunks_before_rate
        return measured / elapsed if elapsed >= 1 and measured > 0 else None

    def seconds_left(self) -> float | None:
        expected, rate = self.chunks_expected(), self.chunks_per_second()
        if expected is None or rate is None:
            return None
        return max(0, expected - self.chunks) / rate

    def line(self) -> str:
        """40/101 files, 1200 chunks embedded, ~3 min left"""
        left = self.seconds_left()
        rate = self.chunks_per_second()
        parts = [f"{self.files}/{self.total_files} files", f"{self.chunks} chunks embedded"]
        if rate is not None:
            parts.append(f"{rate:.1f} chunks/s")
        parts.append(f"~{_duration(left)} left" if left is not None else "estimating time left")
        return ", ".join(parts)

    def compact(self) -> str:
        """The same on one terminal line: 40/101 files · 1200 chunks · 6.1/s · ~3 min left"""
        left, rate = self.seconds_left(), self.chunks_per_second()
        parts = [f"{self.files}/{self.total_files} files", f"{self.chunks} chunks"]
        if rate is not None:
            parts.append(f"{rate:.1f}/s")
        parts.append(f"~{_duration(left)} left" if left is not None else "estimating")
        return " · ".join(parts)

    def to_dict(self) -> dict:
        left = self.seconds_left()
        return {"directory": self.directory, "files_done": self.files, "files_total": self.total_files,
                "chunks_embedded": self.chunks, "chunks_expected": self.chunks_expected(),
                "chunks_per_second": self.chunks_per_second(),
                "seconds_left": None if left is None else round(left, 1)}


class _EstimateColumn(ProgressColumn):
    """Renders the estimate at every refresh, so the time left keeps moving while a batch embeds."""

    def __init__(self, estimate: IndexingEstimate):
        super().__init__()
        self.estimate = estimate

    def render(self, task) -> Text:
        return Text(self.estimate.compact(), no_wrap=True, overflow="ellipsis")


class RichProgress:
    """A bar that moves with chunks embedded, with files, rate and time left, on a terminal."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None
        self.estimate: IndexingEstimate | None = None
        self.task = None

    def start(self, directory: str, total_files: int, total_bytes: int = 0) -> None:
        self.estimate = IndexingEstimate(directory, total_files, total_bytes)
        if total_files == 0:
            return
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=16), _EstimateColumn(self.estimate),
                                 console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task(f"indexing {safe(directory)}", total=None)

    def advance(self, files: int = 0, chunks: int = 0, chunked_bytes: int = 0, chunks_planned: int = 0) -> None:
        if self.estimate is None:
            return
        self.estimate.advance(files, chunks, chunked_bytes, chunks_planned)
        if self.progress is not None:
            self.progress.update(self.task, completed=self.estimate.chunks, total=self.estimate.chunks_expected())

    def note(self, text: str) -> None:
        self.console.print(safe(text))

    def finish(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class LineProgress:
    """Output that is not a terminal (a log, a pipe, CI): one plain line every PROGRESS_EVERY_S seconds,
    or with --json one JSON object per line (events start, progress, finish), both on stderr."""

    def __init__(self, console: Console, as_json: bool, every_s: float | None = None):
        self.console, self.as_json = console, as_json
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.estimate: IndexingEstimate | None = None
        self.last_said = 0.0

    def _say(self, event: str) -> None:
        if self.as_json:
            self.console.print(json.dumps({"event": event, **self.estimate.to_dict()}), markup=False,
                               highlight=False, emoji=False, soft_wrap=True)
        elif event == "progress":
            self.console.print(f"{safe(self.estimate.directory)}: {self.estimate.line()}", highlight=False, soft_wrap=True)
        self.last_said = time.monotonic()

    def start(self, directory: str, total_files: int, total_bytes: int = 0) -> None:
        self.estimate = IndexingEstimate(directory, total_files, total_bytes)
        self.last_said = time.monotonic()
        if total_files:
            self._say("start")

    def advance(self, files: int = 0, chunks: int = 0, chunked_bytes: int = 0, chunks_planned: int = 0) -> None:
        if self.estimate is None:
            return
        self.estimate.advance(files, chunks, chunked_bytes, chunks_planned)
        if time.monotonic() - self.last_said >= self.every_s:
            self._say("progress")

    def note(self, text: str) -> None:
        if self.as_json:
            self.console.print(json.dumps({"event": "note", "text": text}), markup=False, highlight=False,
                               emoji=False, soft_wrap=True)
        else:
            self.console.print(safe(text), soft_wrap=True)

    def finish(self) -> None:
        if self.estimate is not None and self.estimate.total_files:
            self._say("finish")


def progress_for(err: Console, as_json: bool) -> Callable[[], indexer.Progress]:
    """The progress display that suits where stderr goes: a live bar on a terminal, lines elsewhere."""
    if err.is_terminal and not as_json:
        return lambda: RichProgress(err)
    return lambda: LineProgress(err, as_json)
