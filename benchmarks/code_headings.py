"""Do code chunks that begin at a definition carry a heading that names it?

For every source file under a directory (default: the installed `rich` package), chunk it with the
project's chunker and count the chunks whose first line of code (skipping blank lines, decorators
and comments) opens a definition whose name differs from the last symbol of the chunk's heading
(`# file: console.py | class: Console | def: _detect_color_system` ends with `_detect_color_system`;
Python files are judged by `ast`, and must carry the whole path).
Also times the chunking of the whole directory.

    .venv/bin/python -m benchmarks.code_headings [DIR] [--show N] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import time
from pathlib import Path

from hermes_kb.agent.knowledgebase.chunker import chunk_document
from hermes_kb.agent.knowledgebase.config import ChunkingConfig
try:
    from hermes_kb.agent.knowledgebase.code_units import KIND_GRAMMARS as CODE_KINDS
except ImportError:  # the chunker before tree-sitter, for a before/after comparison
    CODE_KINDS = {"python": "python", "javascript": "javascript", "typescript": "typescript"}
from hermes_kb.agent.knowledgebase.kinds.document import LoadError
from hermes_kb.agent.knowledgebase.loaders import load
from hermes_kb.agent.knowledgebase.kinds.registry import kind_of

# A line that opens a named definition, per language family: (kind word, name).
_DEFINITION = re.compile(
    r"^\s*(?:(?:export|default|public|private|protected|internal|static|abstract|final|sealed|partial|async|"
    r"unsafe|pub(?:\([\w:]+\))?|extern|inline|virtual|override|readonly|declare|open)\s+)*"
    r"(def|class|function|func|fn|interface|struct|enum|trait|module|namespace|record)(?:[ \t]+|[ \t]*\*[ \t]*)"
    r"(?:\([^)]*\)\s*)?(?:self\.)?([A-Za-z_$][\w$\\]*)")
_SKIP = ("@", "#", "//", "/*", "*", "--")


def first_code_line(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(_SKIP):
            return line
    return ""


def heading_symbol(heading: str) -> str:
    """The name in the heading's last part: `def: b` -> b, `class A > def b` -> b."""
    last = heading.split(" | ")[-1]
    return re.split(r"[\s:.>\\]+", last.strip())[-1] if last else ""


def opened_definition(text: str) -> str | None:
    line = first_code_line(text)
    match = _DEFINITION.match(line)
    return match.group(2) if match and not line.rstrip().endswith(";") else None  # not `struct x;`


def python_definitions(text: str) -> dict[int, tuple[str, ...]] | None:
    """Python's own parser as the oracle: each line a def/class (or one of its decorators) is on ->
    the definition's path (`class: A`, `def: b`); None when the file does not parse (Python 2)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    lines: dict[int, tuple[str, ...]] = {}

    def visit(node: ast.AST, path: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = (*path, ("class: " if isinstance(child, ast.ClassDef) else "def: ") + child.name)
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                for line in range(first, child.lineno + 1):
                    lines.setdefault(line, inner)
                visit(child, inner)
            else:
                visit(child, path)

    visit(tree, ())
    return lines


def _first_code_line_number(chunk) -> int | None:
    for number, line in enumerate(chunk.text.splitlines(), chunk.start_line):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return number
    return None


def mismatches(root: Path, config: ChunkingConfig) -> tuple[list[dict], int, int, float]:
    """(mismatched chunks, chunks starting at a definition, files, seconds spent chunking).

    Python files that parse are judged by `ast` (a def/class line, not one quoted in a docstring) and
    must carry the definition's whole path; other files by the first code line's keyword and name."""
    found: list[dict] = []
    at_definition = files = 0
    elapsed = 0.0
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            kind = kind_of(name)
            if kind not in CODE_KINDS:
                continue
            path = Path(directory, name)
            try:
                document = load(path.read_bytes(), kind)
            except (LoadError, OSError):
                continue
            started = time.perf_counter()
            chunks = chunk_document(document, name, config)
            elapsed += time.perf_counter() - started
            files += 1
            oracle = python_definitions(document.text) if kind == "python" else None
            for chunk in chunks:
                if oracle is not None:
                    number = _first_code_line_number(chunk)
                    expected = oracle.get(number) if number is not None else None
                    if expected is None:
                        continue
                    opened, wrong = expected[-1].split(": ")[-1], chunk.heading.split(" | ")[1:] != list(expected)
                else:
                    opened = opened_definition(chunk.text)
                    if opened is None:
                        continue
                    wrong = heading_symbol(chunk.heading) != re.split(r"[\\.:]+", opened)[-1]
                at_definition += 1
                if wrong:
                    found.append({"file": str(path.relative_to(root)), "lines": f"{chunk.start_line}-{chunk.end_line}",
                                  "opens": opened, "heading": chunk.heading})
    return found, at_definition, files, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__import__("rich").__file__).parent
    parser.add_argument("root", nargs="?", type=Path, default=default)
    parser.add_argument("--show", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    found, at_definition, files, elapsed = mismatches(args.root, ChunkingConfig())
    if args.json:
        print(json.dumps({"files": files, "chunks_at_definition": at_definition, "mismatched": len(found),
                          "chunk_seconds": round(elapsed, 3), "examples": found[:args.show]}))
    else:
        print(f"{files} files, {at_definition} chunks begin at a definition, {len(found)} headed by another symbol; "
              f"chunking took {elapsed:.2f} s")
        for item in found[:args.show]:
            print(f"  {item['file']}:{item['lines']} opens {item['opens']!r}, headed {item['heading']!r}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
