"""Formats that are lines of text: notes with YAML/TOML front matter (read as metadata on the lines it
took, so the note's lines stay the file's), CSV/TSV tables (rows of cells under their header), and
org-mode and LaTeX (their section commands become Markdown headings, line for line)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from pathlib import Path

from ..filters import DATE_KEYS, FileMetadata, front_matter_date
from .document import Document, LoadError, decode_text

MAX_TABLE_ROWS = 100_000
MAX_CELL_CHARS = 500


def table_cell(value: str) -> str:
    value = " ".join(value.split()).replace("|", "\\|")
    return value if len(value) <= MAX_CELL_CHARS else value[:MAX_CELL_CHARS - 1] + "…"


def read_table(data: bytes, kind: str) -> Document:
    text = decode_text(data)
    delimiter = "\t" if kind == "tsv" else ","
    if kind == "csv":
        try:
            delimiter = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
        except csv.Error:
            pass
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    lines, source_lines, header = [], [], None
    first_line, rows = 1, 0
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                first_line = reader.line_num + 1
                continue
            if rows >= MAX_TABLE_ROWS:
                lines.append(f"(rows after {MAX_TABLE_ROWS:,} are not indexed)")
                source_lines.append(first_line)
                break
            line = "| " + " | ".join(table_cell(cell) for cell in row) + " |"
            if header is None:
                header = line
            lines.append(line)
            source_lines.append(first_line)  # a quoted cell may span lines: the row starts here
            first_line = reader.line_num + 1
            rows += 1
    except csv.Error as exc:
        raise LoadError(f"unreadable {kind.upper()} (line {reader.line_num}: {exc})") from None
    if header is None:
        return Document("", kind)
    return Document("\n".join(lines) + "\n", kind, headings=((0, f"columns: {header.strip('| ')}"),),
                    source_lines=tuple(source_lines))


# --- note vaults: front matter and tags -----------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A(---|\+\+\+)[ \t]*\r?\n(.*?)\r?\n\1[ \t]*(?:\r?\n|\Z)", re.S)
# Not a tag: a heading's #s, an entity (&#39;), a URL's fragment, code, nor a link to a part of a
# page, `[engines](#engines)` or `href="#engines"` (npm's docs: every chunk of package.json was
# headed by "#engines #directoriesbin #local-paths").
_INLINE_TAG = re.compile(r"""(?<![\w#&/`\[])(?<!\]\()(?<!=["'])#([^\W\d][\w/-]*)""")
_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.M)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
MAX_FRONT_MATTER_CHARS = 64_000


def _yaml_without_aliases(text: str) -> object:
    """YAML as front matter writes it. Aliases are refused: a few lines of nested anchors expand
    exponentially once a value is turned into text (the "billion laughs")."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("aliases are not read in front matter")
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)  # noqa: S506 (a SafeLoader)


def front_matter(text: str) -> tuple[dict, int]:
    """(the YAML or TOML front matter of a note, the characters it spans); ({}, 0) when there is none
    or it does not parse (then it is left as text: nothing is lost)."""
    match = _FRONT_MATTER.match(text[:MAX_FRONT_MATTER_CHARS])
    if not match:
        return {}, 0
    try:
        if match.group(1) == "---":
            values = _yaml_without_aliases(match.group(2))
        else:
            import tomllib

            values = tomllib.loads(match.group(2))
    except Exception:  # YAML's and TOML's errors, and constructors a hostile note reaches
        return {}, 0
    return (values, match.end()) if isinstance(values, dict) else ({}, 0)


def _words(value: object) -> list[str]:
    """A tags or aliases value as written in vaults: a list, or one string split at commas and spaces."""
    items = value if isinstance(value, list) else re.split(r"[,\s]+", value) if isinstance(value, str) else []
    words = (" ".join(str(item).split())[:100].lstrip("#") for item in items[:50] if isinstance(item, (str, int, float)))
    return [word for word in words if word]


def inline_tags(body: str) -> tuple[str, ...]:
    """The body's inline #tags (outside code), each once."""
    return tuple(dict.fromkeys(tag.rstrip("/-") for tag in _INLINE_TAG.findall(_FENCE.sub("", body))))


# Folders whose notes write tags inline, found at a folder's root or above it (a vault's subfolder is
# in the vault): Obsidian's settings folder and Logseq's config.
VAULT_MARKERS = (".obsidian", "logseq/config.edn")


def in_a_vault(folder: Path) -> bool:
    return any(_exists(place / marker) for place in (folder, *folder.parents) for marker in VAULT_MARKERS)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a folder above that may not be looked into: no vault the user can have made there
        return False


def read_markdown(data: bytes, kind: str) -> Document:
    """A note's front matter read, not indexed as prose, on the same lines (so citations and kb_read
    keep the file's line numbers): its title, aliases and dates become lines of their own, and its
    tags join the note's first H1 (or a title line made of the front matter's title), so they head
    the note's chunks and count in search. Its tags, its inline #tags and its date are the file's
    metadata, which search filters read."""
    text = decode_text(data)
    values, end = front_matter(text)
    if not end:
        return Document(text, kind, metadata=FileMetadata(inline_tags=inline_tags(text)))
    block, body = text[:end], text[end:]
    tags = list(dict.fromkeys(_words(values.get("tags") or values.get("tag"))))
    inline = inline_tags(body)
    marks = " ".join(f"#{tag}" for tag in tags)
    title = " ".join(str(values.get("title") or "").split())
    lines = []
    heading = _H1.search(body)
    if heading is not None and marks:
        body = body[:heading.end(1)] + f" · {marks}" + body[heading.end(1):]
    elif title or marks:
        lines.append(f"# {title or 'Tags'}" + (f" · {marks}" if marks else ""))
    if title and heading is not None:
        lines.append(f"Title: {title}")
    aliases = _words(values.get("aliases") or values.get("alias"))
    if aliases:
        lines.append("Aliases: " + ", ".join(aliases))
    lines += [f"{key.capitalize()}: {str(values[key])[:100]}" for key in DATE_KEYS if values.get(key)]
    room = block.count("\n") + (not block.endswith("\n"))
    if len(lines) > room:
        lines = lines[:room - 1] + [" · ".join(lines[room - 1:])]
    rewritten = "\n".join(lines + [""] * (room - len(lines)))
    return Document(rewritten + ("\n" if block.endswith("\n") else "") + body, kind,
                    metadata=FileMetadata(tuple(tags), front_matter_date(values), inline_tags=inline))


_ORG_HEADING = re.compile(r"^(\*+)\s+(.*)$")
_ORG_TITLE = re.compile(r"^#\+title:\s*(.+)$", re.I)
_LATEX_SECTION = re.compile(r"^\s*\\(part|chapter|section|subsection|subsubsection|paragraph|title)\*?"
                            r"(?:\[[^\]]*\])?\{(.*)\}\s*$")
_LATEX_LEVELS = {"part": 1, "title": 1, "chapter": 1, "section": 2, "subsection": 3, "subsubsection": 4,
                 "paragraph": 5}


def _org_line(line: str) -> str:
    if match := _ORG_TITLE.match(line):
        return f"# {match.group(1).strip()}"
    if match := _ORG_HEADING.match(line):
        return f"{'#' * min(6, len(match.group(1)) + 1)} {match.group(2).strip()}"
    return line


def _latex_line(line: str) -> str:
    if match := _LATEX_SECTION.match(line):
        return f"{'#' * _LATEX_LEVELS[match.group(1)]} {match.group(2).strip()}"
    return line


def _line_mapped(convert: Callable[[str], str]) -> Callable[[bytes, str], Document]:
    """A format whose sections are lines of their own: those lines rewritten as Markdown headings,
    every other line as it is, so line numbers stay the file's."""
    def loader(data: bytes, kind: str) -> Document:
        return Document("\n".join(convert(line) for line in decode_text(data).split("\n")), kind)
    return loader


read_org = _line_mapped(_org_line)
read_latex = _line_mapped(_latex_line)
