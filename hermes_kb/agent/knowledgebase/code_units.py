"""Source code cut at its real syntax units, found with tree-sitter.

A unit is a named definition (`class: A`, `def: b`, `func: (s *Server) Start`, `impl: Display for
Point`) with the comments, decorators and attributes just above it, on whole lines; units nest.
`code_segments` turns one file into segments that tile it: a unit that fits the chunk size is one
segment, a larger one is opened up at the units nested in it (the methods of a class), and what lies
between units is a segment headed by the unit around it. Small neighbours are then packed together
as the chunker packs everything else; a packed chunk is headed by the first definition it begins
with, so a chunk that starts at a definition always names it last in its heading.

Grammars are the tree-sitter project's own prebuilt wheels (`tree-sitter-python`, ...), one small
package per language, loaded on first use: no grammar, a parser error, a minified file or one past
MAX_PARSE_BYTES returns None and the chunker falls back to its regular expressions.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Iterable

log = logging.getLogger(__name__)

MAX_PARSE_BYTES = 8_000_000  # past this a file is cut by the regex fallback (a syntax tree costs ~10x the text)
MAX_DEPTH = 12  # units nested deeper than this stay inside their parent
MAX_ERROR_SHARE = 0.5  # a parse whose ERROR nodes cover more of the file than this is not trusted
MINIFIED_LINE = 500  # mean characters per line past which a file is minified: units share lines, so no parse


@dataclass(frozen=True)
class _Grammar:
    module: str  # tree_sitter_<module>
    function: str  # the module's function returning the language pointer
    units: dict[str, str]  # node type -> the kind word in headings
    wrappers: frozenset[str] = frozenset()  # nodes around a unit that belong to it (decorators, export, template)


_C_UNITS = {"function_definition": "function", "struct_specifier": "struct", "union_specifier": "union",
            "enum_specifier": "enum", "type_definition": "typedef"}
_JS_UNITS = {"function_declaration": "function", "generator_function_declaration": "function",
             "class_declaration": "class", "method_definition": "method",
             "lexical_declaration": "", "variable_declaration": ""}  # "": the declaration's own keyword
_TS_UNITS = {**_JS_UNITS, "abstract_class_declaration": "class", "interface_declaration": "interface",
             "type_alias_declaration": "type", "enum_declaration": "enum", "internal_module": "namespace",
             "function_signature": "function",
             "module": "module"}
_JS_WRAPPERS = frozenset({"export_statement", "ambient_declaration"})

GRAMMARS: dict[str, _Grammar] = {
    "python": _Grammar("python", "language", {"function_definition": "def", "class_definition": "class"},
                       frozenset({"decorated_definition"})),
    "javascript": _Grammar("javascript", "language", _JS_UNITS, _JS_WRAPPERS),
    "typescript": _Grammar("typescript", "language_typescript", _TS_UNITS, _JS_WRAPPERS | {"expression_statement"}),
    "tsx": _Grammar("typescript", "language_tsx", _TS_UNITS, _JS_WRAPPERS | {"expression_statement"}),
    "go": _Grammar("go", "language", {"function_declaration": "func", "method_declaration": "func",
                                      "type_declaration": "type"}),
    "rust": _Grammar("rust", "language", {
        "function_item": "fn", "struct_item": "struct", "enum_item": "enum", "union_item": "union",
        "trait_item": "trait", "impl_item": "impl", "mod_item": "mod", "macro_definition": "macro_rules"}),
    "java": _Grammar("java", "language", {
        "class_declaration": "class", "interface_declaration": "interface", "enum_declaration": "enum",
        "record_declaration": "record", "annotation_type_declaration": "@interface",
        "method_declaration": "method", "constructor_declaration": "constructor"}),
    "c": _Grammar("c", "language", _C_UNITS),
    "cpp": _Grammar("cpp", "language", {**_C_UNITS, "class_specifier": "class", "namespace_definition": "namespace"},
                    frozenset({"template_declaration"})),
    "csharp": _Grammar("c_sharp", "language", {
        "class_declaration": "class", "struct_declaration": "struct", "interface_declaration": "interface",
        "enum_declaration": "enum", "record_declaration": "record", "namespace_declaration": "namespace",
        "method_declaration": "method", "constructor_declaration": "constructor"}),
    "ruby": _Grammar("ruby", "language", {"class": "class", "module": "module", "method": "def",
                                          "singleton_method": "def"}),
    "php": _Grammar("php", "language_php", {
        "class_declaration": "class", "interface_declaration": "interface", "trait_declaration": "trait",
        "enum_declaration": "enum", "function_definition": "function", "method_declaration": "function",
        "namespace_definition": "namespace"}),
    "shell": _Grammar("bash", "language", {"function_definition": "function"}),
}

# File kinds (kinds/registry.py) -> grammar; a file name can pick a closer grammar (.tsx, a C++ header).
KIND_GRAMMARS = {kind: kind for kind in GRAMMARS if kind != "tsx"}
# (kind, suffix) -> grammar: a .h may hold C++, and the C++ grammar parses C headers as well.
_BY_SUFFIX = {("typescript", ".tsx"): "tsx", ("c", ".h"): "cpp"}

_BODY_REQUIRED = {"struct_specifier", "union_specifier", "enum_specifier", "class_specifier", "mod_item",
                  "namespace_definition", "internal_module", "module"}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function", "class"}
_ATTACHED = {"attribute_item", "decorator"}  # attach above a unit like comments


@dataclass(frozen=True)
class Segment:
    """A span of the text: `heading` heads its chunks, `lead` (when set) its first one; `named` says
    the first chunk's heading was fixed by the definition it begins with."""
    start: int
    end: int
    heading: tuple[str, ...]
    lead: tuple[str, ...] | None = None
    named: bool = False
    header: bool = False  # the opening of a unit cut at its children (`class A:` and its docstring)
    scope: tuple[str, ...] = ()  # the unit whose body this is: only segments of one scope are packed together

    @property
    def first(self) -> tuple[str, ...]:
        return self.heading if self.lead is None else self.lead


@dataclass
class _Unit:
    start_row: int  # with the comments and attributes right above it
    end_row: int  # inclusive
    start_byte: int
    end_byte: int
    label: str
    children: list["_Unit"]
    lead_row: int = 0  # the first row of the comments above it, blank lines between allowed
    def_row: int = 0  # the row of the definition itself (past decorators and comments)
    path: tuple[str, ...] = ()


class Layout:
    """How tree-sitter cut one file: the segments, and which definition a chunk begins at."""

    def __init__(self, segments: list[Segment], units: list[_Unit], line_starts: list[int]):
        self.segments = segments
        self._line_starts = line_starts

        def offset(row: int) -> int:
            return line_starts[min(row, len(line_starts) - 1)]

        flat: list[tuple[int, int, int, tuple[str, ...]]] = []
        stack = list(units)
        while stack:
            unit = stack.pop()
            flat.append((offset(unit.def_row), len(unit.path), offset(unit.lead_row), unit.path))
            stack.extend(unit.children)
        flat.sort()
        self._def_starts = [item[0] for item in flat]
        self._units = flat

    def begins(self, position: int) -> tuple[str, ...] | None:
        """The path of the definition a chunk starting at `position` begins with, when only its
        comments, decorators or blank lines come before it (the outermost of several on one line)."""
        line = self._line_starts[bisect_right(self._line_starts, position) - 1]
        index = bisect_left(self._def_starts, line)
        if index < len(self._units) and self._units[index][2] <= line:
            return self._units[index][3]
        return None


def grammar_name(kind: str, file_name: str) -> str | None:
    suffix = os.path.splitext(file_name)[1].lower()
    return _BY_SUFFIX.get((kind, suffix)) or KIND_GRAMMARS.get(kind)


@lru_cache(maxsize=None)
def _grammar_parts(grammar: str):
    """(Language, units Query, ERROR Query) for a grammar, or None when its package is missing."""
    spec = GRAMMARS[grammar]
    try:
        import tree_sitter
        module = importlib.import_module(f"tree_sitter_{spec.module}")
        language = tree_sitter.Language(getattr(module, spec.function)())
        units = tree_sitter.Query(language, "[" + " ".join(f"({t})" for t in spec.units) + "] @unit")
        errors = tree_sitter.Query(language, "(ERROR) @error")
    except Exception as exc:  # ImportError, or a grammar built for another tree-sitter ABI
        log.info("no tree-sitter grammar for %s (%s); its files are cut by the regex fallback", grammar, exc)
        return None
    return language, units, errors


_local = threading.local()  # a Parser is not safe to share between threads (a watcher and a search)


def _parser_parts(grammar: str):
    """(Parser, units Query, ERROR Query) for a grammar in this thread, or None without the grammar."""
    parts = _grammar_parts(grammar)
    if parts is None:
        return None
    parsers = _local.__dict__.setdefault("parsers", {})
    if grammar not in parsers:
        import tree_sitter
        parsers[grammar] = tree_sitter.Parser(parts[0])
    return parsers[grammar], parts[1], parts[2]


def available(kind: str, file_name: str = "") -> bool:
    grammar = grammar_name(kind, file_name)
    return grammar is not None and _parser_parts(grammar) is not None


def code_segments(text: str, kind: str, file_name: str, tokens: Callable[[int, int], int],
                  size: int) -> Layout | None:
    """Segments tiling `text`, or None when tree-sitter cannot be used (the caller falls back)."""
    grammar = grammar_name(kind, file_name)
    parts = _parser_parts(grammar) if grammar else None
    if parts is None:
        return None
    if len(text) > MINIFIED_LINE * (text.count("\n") + 1):
        return None
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > MAX_PARSE_BYTES:
        return None
    try:
        units = _units(data, grammar, *parts)
    except Exception:  # a grammar bug on a strange file must not cost the file: the regex path takes it
        log.warning("tree-sitter failed on %s; falling back to regex chunking", file_name, exc_info=True)
        return None
    if units is None:
        return None
    line_starts = [0]
    position = text.find("\n")
    while position >= 0:
        line_starts.append(position + 1)
        position = text.find("\n", position + 1)
    line_starts.append(len(text))

    def offset(row: int) -> int:
        return line_starts[min(row, len(line_starts) - 1)]

    segments: list[Segment] = []
    _build(units, 0, len(text), (), False, offset, tokens, size, segments)
    return Layout(_pack(segments, tokens, size), units, line_starts)


def _units(data: bytes, grammar: str, parser, unit_query, error_query) -> list[_Unit] | None:
    import tree_sitter

    tree = parser.parse(data)
    if tree is None:
        return None
    root = tree.root_node
    if root.has_error:
        errors = tree_sitter.QueryCursor(error_query).captures(root).get("error", [])
        covered, reach = 0, 0
        for node in sorted(errors, key=lambda n: n.start_byte):  # nested ERRORs counted once
            if node.end_byte > reach:
                covered += node.end_byte - max(node.start_byte, reach)
                reach = node.end_byte
        if root.type == "ERROR" or covered > MAX_ERROR_SHARE * max(1, len(data)):
            return None
    spec = GRAMMARS[grammar]
    found = tree_sitter.QueryCursor(unit_query).captures(root).get("unit", [])
    units: list[_Unit] = []
    for node in found:
        label = _label(node, spec, data)
        if label is None:
            continue
        top = node
        while top.parent is not None and top.parent.type in spec.wrappers:
            top = top.parent
        start_row, lead_row = _attached_start(top)
        units.append(_Unit(start_row, top.end_point.row, top.start_byte, top.end_byte, label, [],
                           lead_row, node.start_point.row))
    return _nest(units)


def _nest(units: list[_Unit]) -> list[_Unit]:
    """Children under parents by byte range; one node reached twice (a wrapper) is kept once."""
    roots: list[_Unit] = []
    stack: list[tuple[_Unit, int]] = []
    seen: set[tuple[int, int]] = set()
    for unit in sorted(units, key=lambda u: (u.start_byte, -u.end_byte)):
        if (unit.start_byte, unit.end_byte) in seen:
            continue
        seen.add((unit.start_byte, unit.end_byte))
        while stack and unit.start_byte >= stack[-1][0].end_byte:
            stack.pop()
        if not stack:
            unit.path = (unit.label,)
            roots.append(unit)
            stack.append((unit, 0))
        elif stack[-1][1] + 1 < MAX_DEPTH:
            unit.path = (*stack[-1][0].path, unit.label)
            stack[-1][0].children.append(unit)
            stack.append((unit, stack[-1][1] + 1))
    return roots


def _attached_start(node) -> tuple[int, int]:
    """(attached, lead): the first row of the comments and attributes directly above a node (no
    blank line between; not a comment trailing code), and the first row of those above it when
    blank lines may come between (a chunk starting there still begins at this definition)."""
    attached = lead = node.start_point.row
    detached = False
    previous = node.prev_sibling
    while previous is not None and ("comment" in previous.type or previous.type in _ATTACHED):
        before = previous.prev_sibling
        if before is not None and before.end_point.row >= previous.start_point.row:
            break  # a comment trailing a line of code belongs to that code
        detached = detached or previous.end_point.row < lead - 1
        lead = previous.start_point.row
        if not detached:
            attached = lead
        previous = before
    return attached, lead


def _text(node, data: bytes) -> str:
    return data[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _declarator_name(node, data: bytes) -> str | None:
    """C/C++: the name inside `*name(args)`, `ns::Box<T>::get`, `operator==`."""
    while node is not None:
        inner = node.child_by_field_name("declarator")
        if inner is None:
            if node.type in ("reference_declarator", "pointer_declarator", "parenthesized_declarator"):
                named = [c for c in node.named_children if "declarator" in c.type or "identifier" in c.type]
                if named:
                    node = named[-1]
                    continue
            break
        node = inner
    if node is None:
        return None
    return " ".join(_text(node, data).split()).split("(")[0] or None


def _label(node, spec: _Grammar, data: bytes) -> str | None:
    """`kind: name` for a unit node, or None when it is not a named definition."""
    kind = node.type
    word = spec.units.get(kind)
    if word is None:
        return None
    if kind in _BODY_REQUIRED and node.child_by_field_name("body") is None:
        return None
    name = None
    if kind in ("lexical_declaration", "variable_declaration"):
        if node.parent is None or node.parent.type not in ("program", "export_statement", "statement_block"):
            return None
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        value = declarators[0].child_by_field_name("value") if declarators else None
        if value is None or value.type not in _FUNCTION_VALUES:
            return None
        word = node.children[0].type if node.children else "const"
        name = declarators[0].child_by_field_name("name")
        return f"{word}: {_text(name, data)}" if name is not None else None
    if kind == "function_definition" and spec.module in ("c", "cpp"):
        name = _declarator_name(node.child_by_field_name("declarator"), data)
    elif kind == "type_definition":
        body = node.child_by_field_name("type")
        if body is None or body.child_by_field_name("body") is None:
            return None  # `typedef int id;` is not worth a unit of its own
        declarators = [c for c in node.children_by_field_name("declarator")]
        name = _declarator_name(declarators[-1], data) if declarators else None
    elif kind == "method_declaration" and spec.module == "go":
        receiver = node.child_by_field_name("receiver")
        method = node.child_by_field_name("name")
        if method is None:
            return None
        receiver_text = " ".join(_text(receiver, data).split()) + " " if receiver is not None else ""
        name = receiver_text + _text(method, data)
    elif kind == "type_declaration":
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
        names = [c.child_by_field_name("name") for c in specs]
        name = ", ".join(_text(n, data) for n in names if n is not None)
    elif kind == "impl_item":
        target, trait = node.child_by_field_name("type"), node.child_by_field_name("trait")
        if target is None:
            return None
        name = (f"{_text(trait, data)} for " if trait is not None else "") + _text(target, data)
    elif kind == "singleton_method":
        target, method = node.child_by_field_name("object"), node.child_by_field_name("name")
        if method is None:
            return None
        name = (f"{_text(target, data)}." if target is not None else "") + _text(method, data)
    else:
        named = node.child_by_field_name("name")
        name = _text(named, data) if named is not None else None
    if not name:
        return None
    name = " ".join(name.split())
    return f"{word}: {name[:200]}"


def _build(units: Iterable[_Unit], start: int, end: int, path: tuple[str, ...], opens: bool,
           offset: Callable[[int], int], tokens: Callable[[int, int], int], size: int,
           out: list[Segment]) -> None:
    """Segments for [start, end): gaps headed by `path`, units whole or opened at their children.
    `opens`: the first gap starts at the unit whose path this is (its header: `class A:` and docstring)."""
    cursor = start
    for unit in units:
        unit_start, unit_end = offset(unit.start_row), min(offset(unit.end_row + 1), end)
        if unit_start < cursor or unit_end <= unit_start:
            continue  # shares a line with what came before: it stays inside that
        if unit_start > cursor:
            out.append(Segment(cursor, unit_start, path, named=opens and cursor == start,
                               header=opens and cursor == start, scope=path))
        label = (*path, unit.label)
        if unit.children and tokens(unit_start, unit_end) > size:
            _build(unit.children, unit_start, unit_end, label, True, offset, tokens, size, out)
        else:
            out.append(Segment(unit_start, unit_end, label, named=True, scope=path))
        cursor = unit_end
    if cursor < end:
        out.append(Segment(cursor, end, path, named=opens and cursor == start, header=opens and cursor == start,
                           scope=path))


def _pack(segments: list[Segment], tokens: Callable[[int, int], int], size: int) -> list[Segment]:
    """Fold small neighbours of one scope together (the methods of a class, never a class's last method
    with the function after the class): the packed chunk is headed by the first definition it begins
    with (code before that definition takes its heading; code with none keeps where it starts). A
    class's opening never joins what comes before it: it opens its own chunk, with its first member
    when small (the chunk holding `class A` is headed `class: A`). A tiny closing gap (`}`, `end`)
    joins the unit before it; small loose code (imports, a comment) the unit after it."""
    small = max(8, size // 4)
    packed: list[Segment] = []
    for segment in segments:
        if not packed or segment.header:
            packed.append(segment)
            continue
        previous = packed[-1]
        before = tokens(previous.start, previous.end)
        same_scope = previous.scope == segment.scope
        if same_scope and before < size and tokens(previous.start, segment.end) <= size:  # one chunk for both
            first = segment.first if segment.named and not previous.named else previous.first
            packed[-1] = Segment(previous.start, segment.end, first, None, previous.named or segment.named,
                                 scope=previous.scope)
        elif not segment.named and tokens(segment.start, segment.end) < small:  # a closing brace
            packed[-1] = replace(previous, end=segment.end)
        elif same_scope and before < small and (previous.header or not previous.named):  # opens the next's chunk
            first = segment.first if segment.named and not previous.named else previous.first
            packed[-1] = Segment(previous.start, segment.end, segment.heading, first, previous.named or segment.named,
                                 scope=segment.scope)
        else:
            packed.append(segment)
    return packed
