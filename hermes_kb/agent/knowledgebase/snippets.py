"""The few lines of a hit a person reads first: the part that matched, with the query's words marked.

A chunk is up to ~1,200 characters; a result list shows ~300 of each. The start of a chunk is
often not where the query's words are (a word at the end of a paragraph was invisible), so the
window is the one holding the most distinct query terms, as the keyword search's own analyzer
finds them (`analysis.term_spans`: stems, CJK bigrams). Prose is shown as one flat line without
its markup (heading markers, emphasis, link targets); code, lists and tables keep their lines.
Offsets are into `Snippet.text`, so `--json` readers mark the same words a terminal does.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import regex

from . import analysis
from .kinds import registry

PROSE_CHARS = 300
LINES = 6
LINE_CHARS = 100
LEAD_CHARS = 60  # context kept before the first marked word, when the window does not start the chunk
ELLIPSIS = "…"

_STRUCTURED_LINE = re.compile(r"\s*([-*+•]\s|\d+[.)]\s|```|\||>\s)")
# Markup that reads as debris in one flat line: heading markers, underlines, emphasis, link targets, tags.
_PROSE_MARKUP = (
    (re.compile(r"^\s{0,3}#{1,6}\s+", re.M), ""),
    (re.compile(r"^\s*([=\-~^*#])\1{2,}\s*$", re.M), ""),
    (re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),
    (re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(\s[^<>\n]*)?/?>"), ""),
)


@dataclass
class Snippet:
    text: str
    highlights: list[tuple[int, int]] = field(default_factory=list)  # [start, end) offsets into `text`

    def lines(self) -> list[tuple[str, list[tuple[int, int]]]]:
        """Each line with its highlights in that line's own offsets (for a terminal's styling)."""
        out, offset = [], 0
        for line in self.text.split("\n"):
            end = offset + len(line)
            out.append((line, [(max(s, offset) - offset, min(e, end) - offset)
                               for s, e in self.highlights if s < end and e > offset]))
            offset = end + 1
        return out


def make(text: str, kind: str, words: Sequence[str], languages: Sequence[str] = ()) -> Snippet:
    """The snippet of a hit's `text` for a query whose words (stopwords left out) are `words`;
    `languages`: the stemmers its index recorded (analysis.term_spans)."""
    lines = textwrap.dedent(text.expandtabs(4)).strip("\n").splitlines()
    structured = not registry.named(kind).prose or sum(1 for line in lines if _STRUCTURED_LINE.match(line)) >= 2
    return _lines_snippet(lines, words, languages) if structured else _prose_snippet(text, words, languages)


def _prose_snippet(text: str, words: Sequence[str], languages: Sequence[str]) -> Snippet:
    for pattern, replacement in _PROSE_MARKUP:
        text = pattern.sub(replacement, text)
    flat = " ".join(text.split())
    spans = analysis.term_spans(flat, words, languages)
    start = _best_start(flat, spans, PROSE_CHARS)
    end = start + PROSE_CHARS
    if end < len(flat):
        end = _cut_back(flat, end, start)
    shown = flat[start:end]
    prefix = ELLIPSIS if start else ""
    shown = prefix + shown + (ELLIPSIS if end < len(flat) else "")
    shift = len(prefix) - start
    return Snippet(shown, [(s + shift, e + shift) for s, e, _ in spans if s >= start and e <= end])


def _best_start(flat: str, spans: list[tuple[int, int, str]], width: int) -> int:
    """The window start holding the most distinct terms (then the most matches); the chunk's start
    when it is as good, so a snippet begins mid-text only when that shows more of the match."""
    best, best_score = 0, _window_score(spans, 0, width)
    for s, _, _ in spans:
        start = _lead_in(flat, s)
        score = _window_score(spans, start, start + width)
        if score > best_score:
            best, best_score = start, score
    return best


def _window_score(spans, start: int, end: int) -> tuple[int, int]:
    inside = [term for s, e, term in spans if s >= start and e <= end]
    return len(set(inside)), len(inside)


def _lead_in(flat: str, match_start: int) -> int:
    """Where to begin showing a match: its sentence's start if that is near, else a word boundary a
    little before it, never inside a word or a grapheme."""
    floor = max(0, match_start - LEAD_CHARS)
    sentence = max(flat.rfind(". ", floor, match_start), flat.rfind("? ", floor, match_start),
                   flat.rfind("! ", floor, match_start))
    if sentence >= 0:
        return sentence + 2
    if floor == 0:
        return 0
    space = flat.find(" ", floor, match_start)
    return space + 1 if space >= 0 else _grapheme_floor(flat, floor)


def _cut_back(flat: str, end: int, start: int) -> int:
    """End the window at a word boundary (or a grapheme boundary in text without spaces)."""
    space = flat.rfind(" ", max(start, end - 25), end + 1)
    return space if space > start else _grapheme_floor(flat, end)


def _grapheme_floor(text: str, at: int) -> int:
    """The last grapheme boundary at or before `at`: a vowel sign is never cut from its letter."""
    position = 0
    for match in regex.finditer(r"\X", text):
        if match.end() > at:
            return position
        position = match.end()
    return position


def _lines_snippet(lines: list[str], words: Sequence[str], languages: Sequence[str]) -> Snippet:
    """Code and lists keep their lines: the LINES-line window with the most matched terms, each line
    cut to LINE_CHARS (around its first match, when that lies further right)."""
    kept = [line.rstrip() for line in lines if line.strip()]
    per_line = [analysis.term_spans(line, words, languages) for line in kept]
    first, best = 0, (-1, -1)
    for i in range(max(1, len(kept) - LINES + 1)):
        inside = [term for spans in per_line[i:i + LINES] for *_, term in spans]
        score = (len(set(inside)), len(inside))
        if score > best:
            first, best = i, score
    out: list[str] = []
    marks: list[tuple[int, int]] = []
    offset = 0

    def add(line: str, spans=()) -> None:
        nonlocal offset
        marks.extend((s + offset, e + offset) for s, e in spans)
        out.append(line)
        offset += len(line) + 1

    if first:
        add(ELLIPSIS)
    for line, spans in zip(kept[first:first + LINES], per_line[first:first + LINES]):
        shown, shift = _cut_line(line, spans)
        add(shown, [(s + shift, e + shift) for s, e, _ in spans if 0 <= s + shift and e + shift <= len(shown)])
    if len(kept) > first + LINES:
        add(ELLIPSIS)
    return Snippet("\n".join(out), marks)


def _cut_line(line: str, spans: list[tuple[int, int, str]]) -> tuple[str, int]:
    """(the line as shown, the shift of its offsets): whole when short, else the part with its first match."""
    if len(line) <= LINE_CHARS:
        return line, 0
    begin = 0
    if spans and spans[0][1] > LINE_CHARS - 1:
        begin = _grapheme_floor(line, max(0, spans[0][0] - LEAD_CHARS // 2))
    head = ELLIPSIS if begin else ""
    body = line[begin:_grapheme_floor(line, begin + LINE_CHARS - 1 - len(head))]
    return head + body + (ELLIPSIS if begin + len(body) < len(line) else ""), len(head) - begin
