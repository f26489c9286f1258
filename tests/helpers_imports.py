"""A package's own import graph, read from its source: what the layout tests check (no cycle, and
who may import whom)."""

from __future__ import annotations

import ast
from pathlib import Path


def sibling_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of `folder` -> the modules of the same folder it imports (`from .x import ...`,
    `from . import x`), wherever in the module the import stands."""
    graph = {}
    for module in folder.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported |= {node.module} if node.module else {alias.name for alias in node.names}
        graph[module.stem] = imported
    return graph


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    """AssertionError naming the first import cycle found."""
    done, visiting = set(), []

    def visit(name: str) -> None:
        assert name not in visiting, f"import cycle: {' -> '.join([*visiting, name])}"
        if name not in done:
            visiting.append(name)
            for other in graph.get(name, ()):
                visit(other)
            visiting.pop()
            done.add(name)
    for name in graph:
        visit(name)
