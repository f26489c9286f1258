"""One source-id scheme for a whole conversation: [S3] always means one passage.

The injected block, kb_search results and MCP answers all take their ids from
the conversation's `Citations`, so a passage keeps its id however it reached
the model, and an id never names two passages. A host that keeps the
conversation but not this process (Hermes's `--resume`, a gateway restart)
replays the history; `restore` reads the ids already sent back out of it, so
numbering continues instead of starting over at [S1].
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Iterable

from .kinds import registry


def part_label(kind: str, number: int) -> str:
    """Formats whose parts a person finds by number: a chunk stays inside one part and is cited by it
    (`page 3`, `cell 4`, `message 12`), since lines of converted text mean nothing in the file."""
    return f"{registry.named(kind).part} {number}"


PassageKey = tuple[str, str, int, int, int | None]  # directory, path, start line, end line, page
# A passage is one chunk: lines of a text file, or lines of a page's extracted text. Two chunks of one
# PDF page are two passages with two ids (one id for both left a reader unable to tell which text was
# cited, and kept the page's other chunk from ever being sent once one was).

# A source line of a cited block, as render_block writes it: `[S3] docs/deploy.md lines 4-9 § Heading (score 0.71)`
# or `[S3] docs/manual.pdf page 2 (lines 40-61) (score 0.64)` (blocks before the lines were added say only
# the page); the path is greedy, so a name holding " lines 1-3" stays a name.
_LABEL = re.compile(r"^\[S(\d+)\] ([^/\n§]+)/([^\n§]+) (?:lines (\d+)-(\d+)|((?:" + "|".join(sorted({kind.part for kind in registry.FILE_KINDS})) + r") "
                    r"(\d+))(?: \(lines (\d+)-(\d+)\))?)(?: § [^\n]*)? \(score [\d.]+\)$", re.M)
_CITED = re.compile(r"\[\s*S\d+(?:\s*[,;]\s*S\d+)*\s*\]")  # [S3], [S1, S4] in an answer


def cited_ids(answer: str) -> list[str]:
    """The source ids an answer cites, in order, once each."""
    return list(dict.fromkeys(re.findall(r"S\d+", " ".join(_CITED.findall(answer)))))


def passage_key(directory: str, path: str, start_line: int, end_line: int, page: int | None) -> PassageKey:
    return (directory, path, int(start_line), int(end_line), int(page) if page else None)


@dataclass
class Citations:
    """The ids given out in one conversation. Thread-safe: the hook and tool calls may race."""

    ids: dict[PassageKey, str] = field(default_factory=dict)
    records: dict[str, dict] = field(default_factory=dict)  # "S3" -> what it cites (source_record shape)
    next_id: int = 1

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def id_for(self, key: PassageKey, record: dict | None = None) -> str:
        """The passage's id: the one it already has, else the next free one."""
        with self._lock:
            source_id = self.ids.get(key)
            if source_id is None:
                source_id = self.ids[key] = f"S{self.next_id}"
                self.next_id += 1
            if record is not None:
                self.records[source_id] = {**record, "id": source_id}
            return source_id

    def known(self, key: PassageKey) -> bool:
        with self._lock:
            return key in self.ids

    def forget(self, key: PassageKey) -> None:
        """A passage handed an id but then not sent after all (a block cut to fit): the id is not
        reused, so nothing already sent can change meaning, but the passage may be sent later."""
        with self._lock:
            source_id = self.ids.pop(key, None)
            self.records.pop(source_id, None)

    def clear(self) -> None:
        with self._lock:
            self.ids.clear()
            self.records.clear()
            self.next_id = 1

    def restore(self, blocks: Iterable[str], results: Iterable[dict] = ()) -> int:
        """Take back the ids given out earlier: from cited blocks this conversation was sent and from
        kb_search results (parsed JSON); returns how many. The caller vouches that both are ours. An
        id already naming another passage is never given a second one."""
        found = 0
        for block in blocks:
            for match in _LABEL.finditer(block):
                number, directory, path, start, end, part, page, part_start, part_end = match.groups()
                key = passage_key(directory, path, int(start or part_start or 0), int(end or part_end or 0),
                                  int(page) if page else None)
                found += self._take(int(number), key, part)
        for result in results:
            found += sum(self._take(n, key, part) for n, key, part in _result_passages(result))
        return found

    def _take(self, number: int, key: PassageKey, part: str | None = None) -> int:
        with self._lock:
            self.next_id = max(self.next_id, number + 1)
            source_id = f"S{number}"
            if key in self.ids or source_id in self.ids.values():
                return 0
            self.ids[key] = source_id
            directory, path, start, end, page = key
            self.records.setdefault(source_id, {"id": source_id, "directory": directory, "path": path,
                                                "start_line": start, "end_line": end, "page": page, "part": part})
            return 1

    def footer(self, answer: str, absolute: bool = True) -> str | None:
        """`Sources:` lines for the ids an answer cites that this conversation gave out, each with
        where a person opens it (its absolute path:line unless `absolute` is off); None when it cites none."""
        lines = []
        for source_id in cited_ids(answer):
            record = self.records.get(source_id)
            if record is None:
                continue
            where = record.get("part") or (f"page {record['page']}" if record.get("page")
                                           else f"lines {record['start_line']}-{record['end_line']}")
            opens = f" — {record['location']}" if absolute and record.get("location") else ""
            lines.append(f"[{source_id}] {record['directory']}/{record['path']} {where}{opens}")
        return "Sources:\n" + "\n".join(lines) if lines else None


def _result_passages(result: dict) -> list[tuple[int, PassageKey, str | None]]:
    """(id, passage, part) of each hit of a kb_search result."""
    hits = result.get("hits") if isinstance(result, dict) else None
    pairs = []
    for hit in hits if isinstance(hits, list) else []:
        try:
            first, _, last = str(hit.get("lines", "0-0")).partition("-")
            key = passage_key(hit["directory"], hit["path"], int(first), int(last or first), hit.get("page"))
            part = hit.get("part") if isinstance(hit.get("part"), str) else None
            pairs.append((int(str(hit["id"]).removeprefix("S")), key, part))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return pairs
