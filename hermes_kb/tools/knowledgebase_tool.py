"""kb_search, kb_read, kb_index, kb_status, kb_clear: the knowledgebase as model tools.

Thin adapters over the KnowledgeBase facade; user-causable failures come back
as `{"error": ...}` with the same sentence the CLI prints.
"""

from __future__ import annotations

import json
from typing import Callable

from hermes_kb.agent.knowledgebase.config import KnowledgebaseConfig
from hermes_kb.agent.knowledgebase.retriever import MODES
from hermes_kb.agent.knowledgebase.service import USER_ERRORS, KnowledgeBase

from .registry import ToolRegistry, error

TOOLSET = "knowledgebase"
MAX_HIT_CHARS = 1500
MAX_READ_LINES = 400

SCHEMAS = {
    "kb_search": {
        "description": (
            "Search the user's local knowledgebase (their indexed notes, docs, code and PDFs) with hybrid "
            "semantic + keyword search. Use it whenever the answer may be in the user's own files: project "
            "details, decisions, procedures, definitions, exact identifiers or numbers. Returns hits with ids "
            "[S1], [S2]..., path, line range, page and text; cite the ids you rely on. Use kb_read to see more "
            "of a file around a hit."),
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for: a question, keywords or an identifier"},
            "directory": {"type": "string", "description": "only this knowledgebase directory (name from kb_status)"},
            "k": {"type": "integer", "description": "number of hits, 1-20 (default 5)"},
            "mode": {"type": "string", "enum": list(MODES),
                     "description": "hybrid (default); keyword for exact identifiers or numbers; vector for meaning"},
        }, "required": ["query"]},
    },
    "kb_read": {
        "description": (
            "Read lines of a file inside an indexed knowledgebase directory, e.g. to see the context around a "
            "kb_search hit. Paths are as kb_search returns them. Says whether the file continues and where."),
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "file path relative to its knowledgebase directory"},
            "start_line": {"type": "integer", "description": "first line to read, 1-based (default 1)"},
            "max_lines": {"type": "integer", "description": f"lines to read, at most {MAX_READ_LINES} (default 120)"},
        }, "required": ["path"]},
    },
    "kb_index": {
        "description": (
            "Bring knowledgebase indexes up to date with the files on disk (only changed files are processed). "
            "Use when the user says files changed or asks to index a directory."),
        "parameters": {"type": "object", "properties": {
            "directory": {"type": "string", "description": "a configured directory name or path (default: all)"},
        }},
    },
    "kb_status": {
        "description": "List knowledgebase directories with file and chunk counts, last index time and staleness.",
        "parameters": {"type": "object", "properties": {}},
    },
    "kb_clear": {
        "description": ("Delete the index of one knowledgebase directory (the user's files are not touched). "
                        "Only when the user explicitly asks for it."),
        "parameters": {"type": "object", "properties": {
            "directory": {"type": "string", "description": "the directory name or path to clear"},
        }, "required": ["directory"]},
    },
}


def _search(kb: KnowledgeBase, args: dict) -> dict:
    k = max(1, min(int(args.get("k", 5)), 20))
    result = kb.search(args["query"], k=k, directory=args.get("directory"), mode=args.get("mode", "hybrid"))
    hits = []
    for n, hit in enumerate(result.hits, 1):
        text = hit.text if len(hit.text) <= MAX_HIT_CHARS else hit.text[:MAX_HIT_CHARS] + " …[truncated; use kb_read]"
        hits.append({"id": f"S{n}", "directory": hit.directory, "path": hit.path, "lines": f"{hit.start_line}-{hit.end_line}",
                     "page": hit.page, "heading": hit.heading, "score": hit.score, "found_by": hit.found_by, "text": text})
    return {"query": args["query"], "hits": hits, "warnings": result.warnings}


def _read(kb: KnowledgeBase, args: dict) -> dict:
    max_lines = max(1, min(int(args.get("max_lines", 120)), MAX_READ_LINES))
    window = kb.read(args["path"], start_line=int(args.get("start_line", 1)), max_lines=max_lines)
    data = window.to_dict()
    if window.end_line < window.total_lines:
        data["next"] = f"the file continues at line {window.end_line + 1} of {window.total_lines}"
    return data


def _index(kb: KnowledgeBase, args: dict) -> list:
    return [s.to_dict() for s in kb.index(args.get("directory"))]


def _status(kb: KnowledgeBase, args: dict) -> list:
    return kb.status()


def _clear(kb: KnowledgeBase, args: dict) -> dict:
    return {"cleared": kb.clear(args["directory"])}


HANDLERS: dict[str, Callable[[KnowledgeBase, dict], object]] = {
    "kb_search": _search, "kb_read": _read, "kb_index": _index, "kb_status": _status, "kb_clear": _clear,
}


def register_knowledgebase_tools(registry: ToolRegistry, kb_factory: Callable[[], KnowledgeBase],
                                 config_factory: Callable[[], KnowledgebaseConfig]) -> None:
    """kb_factory gives the session's KnowledgeBase (one per chat, so the model loads once)."""
    def available() -> bool:
        config = config_factory()
        return config.enabled and bool(config.directories)

    def adapt(run: Callable[[KnowledgeBase, dict], object]):
        def handler(args: dict, **_context) -> str:
            try:
                return json.dumps(run(kb_factory(), args), default=str)
            except USER_ERRORS as exc:
                return error(str(exc))
        return handler

    for name, run in HANDLERS.items():
        registry.register(name, TOOLSET, SCHEMAS[name], adapt(run), available)
