"""Search filters: which files a search may answer from, by kind, path, tag and date.

A filter is decided per file, here, from the facets both backends keep (FileTable, read once per
index generation), so SQLite and PostgreSQL admit exactly the same files; the retriever then
searches only those files' chunks (keyword and vector passes alike), so a narrow filter still fills
its k results. Dates are a note's front matter date where it has one (`updated`, `modified`,
`date`, `created`, in that order), else the file's modification time.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from .index.vector_cache import spans

# A front matter's dates, the most telling first: "changed since" asks when a note last changed.
DATE_KEYS = ("updated", "modified", "date", "created")
MAX_TAG_CHARS = 100
_RELATIVE = re.compile(r"^\s*(\d{1,5})\s*(h|hours?|d|days?|w|weeks?|y|years?)\s*(?:ago)?\s*$", re.I)
_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_NAMED_DAYS = {"today": 0, "yesterday": 1}


class FilterError(ValueError):
    """A filter value the user gave that cannot be understood; the message says how to write it."""


@dataclass(frozen=True)
class FileMetadata:
    """What a loader learned about a file beyond its text (a note's front matter and #tags)."""
    tags: tuple[str, ...] = ()
    dated: float | None = None  # epoch seconds of its front matter date; None: its mtime stands
    recognised: tuple[int, ...] = ()  # the parts (PDF pages, 1-based) whose text OCR made; (1,) an image
    # A note's inline #tags: tags only where the folder writes them so (a vault; config's inline_tags),
    # which the reader cannot see, so the indexer decides (indexer.tags_read). Elsewhere `#deploys` in
    # prose is a chat channel's name, not a tag.
    inline_tags: tuple[str, ...] = ()


def pack_parts(parts: tuple[int, ...]) -> str:
    return ",".join(map(str, parts))


def unpack_parts(packed: str | None) -> frozenset[int]:
    return frozenset(int(part) for part in packed.split(",") if part.isdigit()) if packed else frozenset()


def normal_tag(tag: str) -> str:
    """`#Roadmap` and `roadmap` are one tag: the mark dropped, case folded, spaces trimmed."""
    return tag.strip().lstrip("#").strip().casefold()[:MAX_TAG_CHARS]


def pack_tags(tags: tuple[str, ...] | list[str]) -> str:
    """Tags as the stores keep them: normalised, one per line (a tag never holds a newline)."""
    return "\n".join(dict.fromkeys(t for t in map(normal_tag, tags) if t and "\n" not in t))


def unpack_tags(packed: str | None) -> tuple[str, ...]:
    return tuple(packed.split("\n")) if packed else ()


def date_value(value: object) -> float | None:
    """Epoch seconds of a front matter date as YAML, TOML or a string gives it; None when it is not one.
    A date without a time is that day's start, local time, as a person writing it means it."""
    try:
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        if isinstance(value, dt.datetime):
            return value.timestamp()
        if isinstance(value, dt.date):
            return dt.datetime(value.year, value.month, value.day).timestamp()
    except (ValueError, OverflowError, OSError):  # not a date, or one the platform's clock cannot place
        return None
    return None


def front_matter_date(values: dict) -> float | None:
    for key in DATE_KEYS:
        when = date_value(values.get(key))
        if when is not None:
            return when
    return None


def parse_when(text: object, now: dt.datetime | None = None) -> float | None:
    """A --since/--before value: an ISO date or date-time (`2026-11-30`, `2026-11-30T09:00`), a span
    back from now (`7d`, `2w`, `12h`, `1y`), `today` or `yesterday`; epoch seconds. None stays None."""
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if isinstance(text, (dt.date, dt.datetime)):
        return date_value(text)
    if not isinstance(text, str):
        raise FilterError(f"A date filter must be text such as 2026-11-30 or 7d, not {type(text).__name__}.")
    now = now or dt.datetime.now()
    word = text.strip().lower()
    if word in _NAMED_DAYS:
        day = (now - dt.timedelta(days=_NAMED_DAYS[word])).date()
        return dt.datetime(day.year, day.month, day.day).timestamp()
    relative = _RELATIVE.match(word)
    if relative:
        return now.timestamp() - int(relative.group(1)) * _UNIT_SECONDS[relative.group(2)[0].lower()]
    when = date_value(text)
    if when is None:
        raise FilterError(f"Cannot read {text!r} as a date; write 2026-11-30, 2026-11-30T09:00, 7d (days), "
                          f"2w (weeks), 12h (hours), today or yesterday.")
    return when


@dataclass(frozen=True)
class SearchFilter:
    """Every condition must hold; several tags mean all of them. A tag also admits its nested tags
    (`project` admits `project/alpha`), as note vaults nest them."""
    kind: str | None = None
    path_glob: str | None = None
    tags: tuple[str, ...] = ()
    since: float | None = None  # at or after (epoch seconds)
    before: float | None = None  # strictly before

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tuple(t for t in map(normal_tag, self.tags) if t))
        if self.since is not None and self.before is not None and self.since >= self.before:
            raise FilterError("The --since date must come before the --before date.")

    def __bool__(self) -> bool:
        return bool(self.kind or self.path_glob or self.tags or self.since is not None or self.before is not None)


class FileTable:
    """Every indexed file's facets and chunk ids, as arrays: a filter is judged for all files at once
    (2,000 files in well under a millisecond), and the admitted files' chunk ids come from id ranges,
    since a file's chunks are written together and take consecutive ids. Built from the rows a
    store's `file_facets` gives, once per index generation (the caller keeps it)."""

    def __init__(self, rows: Iterable[Sequence], scattered: Callable[[list[int]], dict[int, np.ndarray]],
                 generation: str = ""):
        """`rows`: (file id, path, kind, packed tags, date, first chunk id, last chunk id, chunks);
        `scattered(file_ids)`: the chunk ids of files whose ids are not one range."""
        rows = list(rows)
        self.generation = generation
        self.paths = [row[1] for row in rows]
        self.kinds = np.array([row[2] for row in rows], dtype=object)
        self.when = np.array([row[4] for row in rows], dtype=np.float64)
        first = np.array([row[5] for row in rows], dtype=np.int64)
        last = np.array([row[6] for row in rows], dtype=np.int64)
        count = np.array([row[7] for row in rows], dtype=np.int64)
        self.first, self.stop = first, last + 1
        self.ranged = self.stop - first == count
        loose = np.flatnonzero(~self.ranged)  # positions of files whose chunk ids are not one range
        by_id = scattered([int(rows[i][0]) for i in loose]) if len(loose) else {}
        self.scattered = {int(i): by_id.get(int(rows[i][0]), np.empty(0, dtype=np.int64)) for i in loose}
        holders: dict[str, list[int]] = {}
        for position, row in enumerate(rows):
            for tag in unpack_tags(row[3]):
                holders.setdefault(tag, []).append(position)
        self.tagged = {tag: np.array(positions, dtype=np.int64) for tag, positions in holders.items()}

    def admitted_files(self, search_filter: SearchFilter) -> np.ndarray:
        """Positions of the files the filter admits."""
        keep = np.ones(len(self.paths), dtype=bool)
        if search_filter.kind:
            keep &= self.kinds == search_filter.kind
        if search_filter.since is not None:
            keep &= self.when >= search_filter.since
        if search_filter.before is not None:
            keep &= self.when < search_filter.before
        if search_filter.path_glob:
            pattern = re.compile(fnmatch.translate(search_filter.path_glob))
            keep &= np.fromiter((pattern.match(path) is not None for path in self.paths), dtype=bool, count=len(self.paths))
        for wanted in search_filter.tags:
            holding = np.zeros(len(self.paths), dtype=bool)
            for tag, positions in self.tagged.items():
                if tag == wanted or tag.startswith(wanted + "/"):
                    holding[positions] = True
            keep &= holding
        return np.flatnonzero(keep)

    def admitted(self, search_filter: SearchFilter) -> np.ndarray:
        """The chunk ids of the files the filter admits, ascending."""
        files = self.admitted_files(search_filter)
        ranged = files[self.ranged[files]]
        parts = [spans(self.first[ranged], self.stop[ranged])]
        parts += [self.scattered[int(i)] for i in files[~self.ranged[files]]]
        return np.sort(np.concatenate(parts))


def search_filter(kinds: tuple[str, ...], kind: str | None = None, path_glob: str | None = None,
                  tags: object = (), since: object = None, before: object = None) -> SearchFilter:
    """A filter from what a user or a model typed: tags as a list or one comma-separated string,
    dates as parse_when reads them; FilterError says what is wrong."""
    if kind is not None and kind not in kinds:
        raise FilterError(f"Unknown kind {kind!r}; the kinds are {', '.join(kinds)}.")
    if isinstance(tags, str):
        tags = tags.split(",")
    if not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags):
        raise FilterError("Tags must be text: a list of tags, or one string of tags separated by commas.")
    if path_glob is not None and not isinstance(path_glob, str):
        raise FilterError("The path filter must be a glob pattern such as 'docs/*.md'.")
    return SearchFilter(kind=kind, path_glob=path_glob or None, tags=tuple(tags),
                        since=parse_when(since), before=parse_when(before))
