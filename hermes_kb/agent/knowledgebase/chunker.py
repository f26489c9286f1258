"""Split a Document into Chunks sized for the embedding model's window.

Every chunk's text is an exact slice of the document (so offsets and line
numbers point back into the file); what the model and FTS see in addition —
the heading path, or a `file: x.py | class: A | def: b` line for code —
lives in `heading`.

Sizes are counted in estimated word pieces (words and punctuation marks).
A chunk is what keyword search scores and what a hit shows; its vectors come
from windows of at most VECTOR_WINDOW estimated pieces inside it, and the
chunk's cosine is its best window's. all-MiniLM-L6-v2 was trained on 128
word pieces: on SciFact train, 128-piece windows inside 200-piece chunks beat
one vector per chunk (BM25 prefers the longer unit, the model the shorter;
docs/benchmarks.md).

How each kind is cut is its registry entry's `chunking` (kinds/registry.py), one layout function
each (_LAYOUTS); the packing and line bookkeeping they share is why they sit in one module.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

import regex

from .analysis import CLUSTERED, IDEOGRAPHIC
from .code_units import KIND_GRAMMARS, code_segments
from .config import ChunkingConfig
from .kinds import registry

if TYPE_CHECKING:  # a search reads chunks without loading the file readers
    from .kinds.document import Document

CHUNKER_VERSION = 11  # 5: PDFs cut at pages and outline sections; 6: code cut at tree-sitter syntax units (code_units.py);
# 7: HTML main content only, cited by the source file's lines; 8: notebooks, e-mail, tables, org-mode, LaTeX;
# 9: notes' tags and dates kept as file metadata (filters.py); pieces counted per script (_TOKEN);
# 10: a link to a part of a page (`[x](#x)`) is no inline tag; 11: a notebook's small cells join into chunks
VECTOR_WINDOW = 128  # estimated pieces per embedded window
WINDOW_OVERLAP = 20
MAX_WINDOWS = 32  # per chunk; a longer chunk (a large chunk_size) gets proportionally longer windows

# An estimated word piece, as the text has them in every script: a word with its combining marks
# (Devanagari's vowel signs are not \w: counted apart, a Hindi paragraph came out 3x English's
# pieces and 3x the chunks); one Han or kana character (written without spaces, a whole sentence
# was one "word": a Chinese chunk of 900 model pieces had one window, and the model read its first
# 256); up to four letters of a script written without spaces between words (Thai, Lao, Khmer,
# Myanmar: about a syllable); a punctuation mark.
_SPACELESS = IDEOGRAPHIC + CLUSTERED
_TOKEN = regex.compile(rf"[{IDEOGRAPHIC}]|(?:[{CLUSTERED}]\p{{M}}*){{1,4}}|(?:(?![{_SPACELESS}])[\w\p{{M}}])+|[^\w\s]")
# Cut points, coarsest first; a cut falls right after the separator. Text written without spaces
# (Chinese, Japanese, Thai ...) has its sentence marks (。！？；) and, last, any boundary between two of
# its characters (never before a combining mark): without them a Chinese file without line breaks
# was one chunk however long.
_SEPARATORS = (
    re.compile(r"\n[ \t]*\n"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；])"),
    re.compile(r"\s+"),
    regex.compile(rf"(?<=[{_SPACELESS}]\p{{M}}*)(?=(?!\p{{M}})[{_SPACELESS}])"),
)
_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)")
_HEADING = re.compile(r"^[ \t]{0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$")
_CODE_BOUNDARIES = {
    "python": re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)", re.M),
    "javascript": re.compile(
        r"^(?:export[ \t]+(?:default[ \t]+)?)?(?:async[ \t]+)?"
        r"(?:function\*?|class|interface|type|enum|const|let|var)[ \t]+([A-Za-z_$][\w$]*)", re.M),
}
_CODE_BOUNDARIES["typescript"] = _CODE_BOUNDARIES["javascript"]
_PY_METHOD = re.compile(r"^[ \t]+(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


@dataclass(frozen=True)
class Chunk:
    text: str
    start_char: int
    end_char: int
    start_line: int
    end_line: int
    page: int | None
    heading: str
    windows: tuple[tuple[int, int], ...] = ()  # spans of `text` embedded one by one; () is the whole text

    @property
    def embed_text(self) -> str:
        return f"{self.heading}\n{self.text}" if self.heading else self.text

    @property
    def embed_texts(self) -> list[str]:
        """What the model reads: each window with the heading, so every vector keeps its context."""
        if not self.windows:
            return [self.embed_text]
        prefix = f"{self.heading}\n" if self.heading else ""
        return [prefix + self.text[start:end] for start, end in self.windows]

    @property
    def content_hash(self) -> str:
        return hashlib.blake2b(self.embed_text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def estimate_tokens(text: str) -> int:
    """Word-piece estimate without loading a tokenizer: words and punctuation marks."""
    return len(_TOKEN.findall(text))


@dataclass
class _Segment:
    """A span that should stay together where it fits: a section or a code unit."""
    start: int
    end: int
    heading: str


class _Splitter:
    """Offset arithmetic over one text: token counts in O(log n), recursive cuts."""

    def __init__(self, text: str, protected: list[tuple[int, int]]):
        self.text = text
        self.token_starts = [m.start() for m in _TOKEN.finditer(text)]
        # Protected blocks merged where they overlap (a table left open across a fence) and sorted,
        # so a position is looked up in O(log n): a scan of the list per cut was quadratic, and a
        # 136 KB file of alternating table rows took 12 s.
        merged: list[list[int]] = []
        for s, e in sorted(protected):
            if merged and s < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.protected_starts = [s for s, _ in merged]
        self.protected_ends = [e for _, e in merged]

    def tokens(self, start: int, end: int) -> int:
        return bisect_left(self.token_starts, end) - bisect_left(self.token_starts, start)

    def _block_end(self, position: int) -> int | None:
        """End of the protected block strictly around position, if any."""
        index = bisect_left(self.protected_starts, position) - 1
        if index >= 0 and position < self.protected_ends[index]:
            return self.protected_ends[index]
        return None

    def _cuttable(self, position: int) -> bool:
        return self._block_end(position) is None

    def pieces(self, start: int, end: int, size: int, level: int = 0) -> list[tuple[int, int]]:
        """Spans covering [start, end), each within size unless nothing may cut it."""
        if self.tokens(start, end) <= size or level >= len(_SEPARATORS):
            return [(start, end)]
        cuts = [m.end() for m in _SEPARATORS[level].finditer(self.text, start, end)]
        cuts = [c for c in cuts if start < c < end and self._cuttable(c)]
        bounds = [start, *cuts, end]
        result: list[tuple[int, int]] = []
        for s, e in zip(bounds, bounds[1:]):
            result.extend(self.pieces(s, e, size, level + 1))
        return result

    def overlap_start(self, end: int, floor: int, overlap: int) -> int:
        """Where the next chunk should start so it repeats ~overlap tokens, at a word start."""
        if overlap <= 0:
            return end
        index = bisect_left(self.token_starts, end) - overlap
        if index <= 0:
            return floor
        position = max(self.token_starts[index], floor)
        # Prefer starting the repeat at a line, then a sentence, over mid-sentence.
        content_end = end  # the end without trailing blanks, found without copying the text before it
        while content_end > 0 and self.text[content_end - 1].isspace():
            content_end -= 1
        for boundary in (_SEPARATORS[1], _SEPARATORS[2]):
            match = boundary.search(self.text, position, content_end)
            if match and match.end() < content_end:
                position = match.end()
                break
        # Never start inside a fence or table: it would repeat half a block.
        block_end = self._block_end(position)
        if block_end is not None and position < end:
            # The first word at or past the block's end (or past `end`): every one before is inside.
            index = bisect_left(self.token_starts, min(block_end, end))
            if index >= len(self.token_starts):
                return end
            position = self.token_starts[index]
        return position

    def pack(self, start: int, end: int, size: int, overlap: int) -> list[tuple[int, int]]:
        """Greedy packing of pieces into chunks, each new chunk repeating the tail of the last."""
        pieces = self.pieces(start, end, size)
        spans: list[tuple[int, int]] = []
        chunk_start, chunk_end = pieces[0][0], pieces[0][0]
        for s, e in pieces:
            if chunk_end > chunk_start and self.tokens(chunk_start, e) > size:
                spans.append((chunk_start, chunk_end))
                chunk_start = self.overlap_start(chunk_end, spans[-1][0] + 1, min(overlap, size // 2))
                if self.tokens(chunk_start, e) > size:
                    chunk_start = s
            chunk_end = e
        spans.append((chunk_start, chunk_end))
        return self._absorb_tiny(spans, max(8, size // 8))

    def _absorb_tiny(self, spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
        """A lone heading or a last few words read better as part of their neighbour."""
        merged: list[tuple[int, int]] = []
        for span in spans:
            if merged and (self.tokens(*merged[-1]) < limit or self.tokens(*span) < limit):
                span = (merged.pop()[0], span[1])
            merged.append(span)
        return merged


def _markdown_segments(text: str) -> tuple[list[_Segment], list[tuple[int, int]]]:
    """Sections at headings outside fences; fences and tables are protected blocks."""
    segments: list[_Segment] = []
    protected: list[tuple[int, int]] = []
    path: list[tuple[int, str]] = []
    fence: str | None = None
    fence_start = table_start = 0
    in_table = False
    offset = 0
    section_start, section_heading = 0, ""
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        fence_match = _FENCE.match(line)
        if fence is not None:
            if fence_match and fence_match.group(1)[0] == fence[0] and len(fence_match.group(1)) >= len(fence):
                protected.append((fence_start, offset + len(line)))
                fence = None
        elif fence_match:
            fence, fence_start = fence_match.group(1), offset
        else:
            is_row = stripped.startswith("|")
            if is_row and not in_table:
                table_start = offset
            if in_table and not is_row:
                protected.append((table_start, offset))
            in_table = is_row
            heading = _HEADING.match(line.rstrip("\n"))
            if heading:
                if offset > section_start:
                    segments.append(_Segment(section_start, offset, section_heading))
                level = len(heading.group(1))
                path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, heading.group(2).strip())]
                section_start, section_heading = offset, " > ".join(title for _, title in path)
        offset += len(line)
    if fence is not None:
        protected.append((fence_start, offset))
    if in_table:
        protected.append((table_start, offset))
    if offset > section_start:
        segments.append(_Segment(section_start, offset, section_heading))
    return segments, protected


def _code_segments(text: str, kind: str) -> list[_Segment]:
    """Units start at top-level definitions, taking decorators and comments just above them."""
    starts = [0]
    names: dict[int, str] = {0: ""}
    for match in _CODE_BOUNDARIES[kind].finditer(text):
        begin = match.start()
        while begin > 0:
            previous_start = text.rfind("\n", 0, begin - 1) + 1
            previous = text[previous_start:begin].strip()
            if previous.startswith(("@", "#", "//", "/*", "*")) and previous:
                begin = previous_start
            else:
                break
        keyword = match.group(0).split()
        label = "class" if "class" in keyword else "def" if kind == "python" else "symbol"
        if begin > starts[-1]:
            starts.append(begin)
        names[starts[-1]] = f"{label}: {match.group(1)}"
    bounds = [*starts, len(text)]
    return [_Segment(s, e, names.get(s, "")) for s, e in zip(bounds, bounds[1:]) if e > s]


def _class_methods(text: str, segment: _Segment) -> tuple[list[int], list[str]]:
    """(end offsets, names) of the methods in a class segment, found once per segment: searching
    from the class's start again for every chunk was quadratic in a long class."""
    if not segment.heading.startswith("class: "):
        return [], []
    found = list(_PY_METHOD.finditer(text, segment.start, segment.end))
    return [m.end() for m in found], [m.group(1) for m in found]


def _code_context(file_name: str, segment: _Segment, start: int, methods: tuple[list[int], list[str]]) -> str:
    """`# file: x.py | class: A | def: b` — where in the file a code chunk sits."""
    parts = [f"file: {file_name}"]
    if segment.heading:
        parts.append(segment.heading)
        ends, names = methods
        index = bisect_right(ends, max(start, segment.start) + 1) - 1  # the last method begun by then
        if index >= 0:
            parts.append(f"def: {names[index]}")
    return "# " + " | ".join(parts)


def _plain_title(text: str) -> str:
    """A plain-text file whose first line is short and stands alone reads as titled by it.

    Every chunk carries the title as its heading (embedded and keyword-indexed
    with it), so a passage deep in a note still says what the note is about;
    Markdown sections get the same from their heading path.
    """
    first, _, rest = text.lstrip().partition("\n")
    first = first.strip()
    if first and len(first) <= 200 and (not rest.strip() or rest.startswith("\n") or set(rest.split("\n")[0].strip()) <= set("=-~#*")):
        return first
    return ""


def _merge_small(segments: list[_Segment], splitter: _Splitter, limit: int, size: int,
                 breaks: frozenset[int] = frozenset()) -> list[_Segment]:
    """Fold a segment under `limit` tokens into its successor, keeping the more specific heading;
    never across `breaks` (where a part begins: a slide is cited as itself, not as its neighbour)."""
    merged: list[_Segment] = []
    for segment in segments:
        if merged and segment.start not in breaks and splitter.tokens(merged[-1].start, merged[-1].end) < limit \
                and splitter.tokens(merged[-1].start, segment.end) <= size:
            previous = merged.pop()
            heading = segment.heading if splitter.tokens(previous.start, previous.end) < limit else previous.heading
            segment = _Segment(previous.start, segment.end, heading or previous.heading)
        merged.append(segment)
    return merged


_CELL_FENCE = re.compile(r"```([\w+#.-]+)\n")
_NOTEBOOK_LANGUAGES = {"c++": "cpp", "c#": "csharp", "node": "javascript", "bash": "shell", "sh": "shell"}


def _notebook_code_units(text: str, segments: list[_Segment], protected: list[tuple[int, int]], size: int,
                         file_name: str) -> tuple[list[_Segment], list[tuple[int, int]]]:
    """A notebook's code cells longer than a chunk, cut at their syntax units as a source file of the
    cell's language is (each piece headed by the cell's section, then the unit: `Setup > def: load`);
    a cell that fits stays one fenced block. Returns the segments and the fences still kept whole."""
    counter = _Splitter(text, [])
    kept, cuts = [], []
    for start, end in protected:
        opening = _CELL_FENCE.match(text, start)
        closing = text.rfind("\n```", start, end)
        language = opening and _NOTEBOOK_LANGUAGES.get(opening.group(1).lower(), opening.group(1).lower())
        layout = None
        if opening and closing > opening.end() and language in KIND_GRAMMARS and counter.tokens(start, end) > size:
            body = opening.end()
            layout = code_segments(text[body:closing + 1], language, file_name,
                                   lambda a, b, body=body: counter.tokens(body + a, body + b), size)
        if layout is None:
            kept.append((start, end))
        else:
            cuts.append((body, [(body + u.start, body + u.end, u.heading) for u in layout.segments]))
    if not cuts:
        return segments, protected
    out = []
    for segment in segments:
        position = segment.start
        for body, units in cuts:
            if not segment.start <= body < segment.end:
                continue
            out.append(_Segment(position, units[0][0], segment.heading))
            out += [_Segment(a, b, " > ".join(filter(None, (segment.heading, *path)))) for a, b, path in units]
            position = units[-1][1]
        out.append(_Segment(position, segment.end, segment.heading))
    return [segment for segment in out if segment.end > segment.start], kept


def _cut_at_parts(segments: list[_Segment], part_starts: tuple[int, ...]) -> list[_Segment]:
    """Markdown sections cut again where a part (a cell, a message) begins, under the same heading:
    a chunk then starts inside one part, the one it is cited by."""
    if not part_starts:
        return segments
    out = []
    for segment in segments:  # part_starts ascend: each segment's own by bisection (a scan of all was quadratic)
        inside = list(part_starts[bisect_right(part_starts, segment.start):bisect_left(part_starts, segment.end)])
        bounds = [segment.start, *inside, segment.end]
        out.extend(_Segment(a, b, segment.heading) for a, b in zip(bounds, bounds[1:]))
    return out


def _outlined_segments(document: Document) -> list[_Segment]:
    """A segment per page, cut again where an outline section begins: a chunk then never spans a
    page break (the page it cites is the page its text is on, even right after a break) nor two
    sections (its heading is the outline path that contains it)."""
    offsets = [offset for offset, _ in document.headings]
    bounds = sorted({0, len(document.text), *document.page_starts, *offsets})
    segments = []
    for start, end in zip(bounds, bounds[1:]):
        index = bisect_right(offsets, start) - 1
        segments.append(_Segment(start, end, document.headings[index][1] if index >= 0 else ""))
    return segments


def _merge_tiny_pages(segments: list[_Segment], page_starts: tuple[int, ...], splitter: _Splitter,
                      limit: int, size: int) -> list[_Segment]:
    """A whole page with next to no text (a title page, a lone caption) joins the next page of the
    same section; a short section, or a section's first lines at the foot of a page, stays alone
    under its own heading and page."""
    breaks = set(page_starts)
    merged: list[_Segment] = []
    for segment in segments:
        previous = merged[-1] if merged else None
        if previous and previous.start in breaks and segment.start in breaks and previous.heading == segment.heading \
                and splitter.tokens(previous.start, previous.end) < limit and splitter.tokens(previous.start, segment.end) <= size:
            merged[-1] = _Segment(previous.start, segment.end, segment.heading)
        else:
            merged.append(segment)
    return merged


def _page_of(page_starts: tuple[int, ...], start: int, end: int) -> int | None:
    """The 1-based page holding most of [start, end): a chunk that spans a break (a tiny page joined
    to the next) is cited where its text mostly is, not where its first characters are."""
    if not page_starts:
        return None

    def share(page: int) -> int:
        page_start = page_starts[page - 1] if page else 0  # page 0: any text before the first page
        page_end = page_starts[page] if page < len(page_starts) else end
        return min(end, page_end) - max(start, page_start)

    return max(range(bisect_right(page_starts, start), bisect_right(page_starts, end - 1) + 1), key=share)


@dataclass
class _Layout:
    """How one document is cut before packing: its segments, the splitter that packs them, and for code
    the headings of each segment's first chunk (`leads`) and tree-sitter's cut or the regex fallback."""
    segments: list[_Segment]
    base: _Splitter
    leads: list[str] | None = None
    units: object = None  # code_units' layout when tree-sitter cut the code
    regex_code: bool = False  # cut at top-level definitions found by regular expressions


def _code_layout(document: Document, file_name: str, size: int) -> _Layout:
    text = document.text
    base = _Splitter(text, [])
    units = code_segments(text, document.kind, file_name, base.tokens, size)
    if units is not None:
        return _Layout([_Segment(u.start, u.end, _unit_heading(file_name, u.heading)) for u in units.segments], base,
                       leads=[_unit_heading(file_name, u.first) for u in units.segments], units=units)
    if document.kind in _CODE_BOUNDARIES:
        return _Layout(_merge_small(_code_segments(text, document.kind), base, size, size), base, regex_code=True)
    return _Layout([_Segment(0, len(text), _unit_heading(file_name, ()))], base)


def _pdf_layout(document: Document, file_name: str, size: int) -> _Layout:
    base = _Splitter(document.text, [])
    return _Layout(_merge_tiny_pages(_outlined_segments(document), document.page_starts, base, max(8, size // 8), size),
                   base)


def _table_layout(document: Document, file_name: str, size: int) -> _Layout:
    """Rows under their header, which heads every chunk."""
    return _Layout(_outlined_segments(document), _Splitter(document.text, []))


def _markdown_layout(document: Document, file_name: str, size: int) -> _Layout:
    """Markdown text; a notebook's cells, an mbox's messages, slides, sheets and chapters are its parts.
    A notebook's small cells join until a chunk is full (cited by the cell most of it is in); slides,
    sheets, chapters and messages stay parts of their own."""
    text = document.text
    segments, protected = _markdown_segments(text)
    notebook = registry.named(document.kind).chunking == "notebook"
    if notebook:
        segments, protected = _notebook_code_units(text, segments, protected, size, file_name)
    base = _Splitter(text, protected)
    limit, breaks = (size, frozenset()) if notebook else (max(8, size // 4), frozenset(document.page_starts))
    return _Layout(_merge_small(_cut_at_parts(segments, document.page_starts), base, limit, size, breaks), base)


def _plain_layout(document: Document, file_name: str, size: int) -> _Layout:
    return _Layout([_Segment(0, len(document.text), _plain_title(document.text))], _Splitter(document.text, []))


# kinds/registry.py's `chunking` of each kind -> how its text is cut
_LAYOUTS = {"code": _code_layout, "pdf": _pdf_layout, "table": _table_layout, "markdown": _markdown_layout,
            "notebook": _markdown_layout, "plain": _plain_layout}


def chunk_document(document: Document, file_name: str, config: ChunkingConfig) -> list[Chunk]:
    """The one entry point: cut as the kind's registry entry says, pack, then attach lines, pages and
    headings."""
    text = document.text
    if not text.strip():
        return []
    size, overlap = config.chunk_size, config.chunk_overlap
    layout = _LAYOUTS[registry.named(document.kind).chunking](document, file_name, size)
    segments, base, leads, regex_code = layout.segments, layout.base, layout.leads, layout.regex_code
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    chunks: list[Chunk] = []
    for number, segment in enumerate(segments):
        methods = _class_methods(text, segment) if regex_code else ([], [])
        heading = leads[number] if leads is not None else segment.heading
        for start, end in base.pack(segment.start, segment.end, size, overlap):
            # Trim blank edges so offsets and line ranges hug the real content.
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if start >= end:
                continue
            if regex_code:
                heading = _code_context(file_name, segment, start, methods)
            elif layout.units is not None and (begun := layout.units.begins(start)) is not None:
                heading = _unit_heading(file_name, begun)  # a chunk that begins at a definition names it
            page = _page_of(document.page_starts, start, end)
            first_line, last_line = bisect_right(line_starts, start), bisect_right(line_starts, end - 1)
            if document.source_lines:  # converted text (HTML): cite the lines of the file a person opens
                first_line, last_line = document.source_lines[first_line - 1], document.source_lines[last_line - 1]
                last_line = max(first_line, last_line)
            chunks.append(Chunk(
                text=text[start:end], start_char=start, end_char=end, start_line=first_line, end_line=last_line,
                page=page, heading=heading, windows=_windows(base, start, end),
            ))
            heading = segment.heading
    return chunks


def _unit_heading(file_name: str, path: tuple[str, ...]) -> str:
    """`# file: x.py | class: A | def: b`, the same line the regex fallback writes."""
    return "# " + " | ".join([f"file: {file_name}", *path])


def _windows(base: _Splitter, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """Spans of one chunk, relative to its start, packed like chunks but at the model's training length."""
    tokens = base.tokens(start, end)
    if tokens <= VECTOR_WINDOW:
        return ()
    size = max(VECTOR_WINDOW, -(-tokens // (MAX_WINDOWS // 2)))
    spans = []
    for s, e in base.pack(start, end, size, WINDOW_OVERLAP)[:MAX_WINDOWS]:
        while s < e and base.text[s].isspace():
            s += 1
        while e > s and base.text[e - 1].isspace():
            e -= 1
        if s < e:
            spans.append((s - start, e - start))
    return tuple(spans) if len(spans) > 1 else ()


def chunker_signature(config: ChunkingConfig) -> str:
    """Changes whenever re-chunking would give different chunks."""
    return f"v{CHUNKER_VERSION}:size={config.chunk_size}:overlap={config.chunk_overlap}"

