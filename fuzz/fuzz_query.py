"""Fuzz target: KnowledgeBase.search over a small index, random queries in every mode.

Input layout: byte 0 picks the mode and k, byte 1 is flags (bit 0: undecodable bytes stay as
lone surrogates, as a JSON `\\udcff` would arrive; bit 1: the text after the first tab is a
path_glob; bit 2: a kind filter; bit 3: min_score 0; bit 4: the text after a \\x1e is `since`;
bit 5: the text after a \\x1d is `tags`, split at commas), the rest is the query. Only the
service's USER_ERRORS may come out; a result never has more than k hits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import _harness  # the repository on sys.path

with _harness.instrumented():
    from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
    from hermes_kb.agent.knowledgebase.service import USER_ERRORS, KnowledgeBase
from tests.conftest import StubEmbedder  # noqa: E402

MODES = ("keyword", "hybrid", "vector")
KINDS = ("markdown", "python", "text", "pdf")
DOCUMENTS = {
    "notes/fox.md": "# Foxes\n\nThe quick brown fox jumps over the lazy dog.\n\n## Diet\n\nFoxes eat berries, mice "
                    "and insects. \"Quoted phrase\" and NEAR/OR/AND words, C++ and e-mail@example.com.\n",
    "notes/sqlite.md": "# SQLite\n\nFTS5 uses bm25 ranking; MATCH 'a* OR b'. Vectors via sqlite-vec.\n",
    "code/app.py": "class Store:\n    def search(self, query):\n        return [q for q in query if q]\n\n"
                   "def writer_lock(path):\n    pass\n",
    "docs/unicode.txt": "Ünïcödé text, 日本語のテキスト, emoji 😀, and RTL עברית.\n",
    "docs/long.txt": " ".join(f"word{n}" for n in range(600)) + "\n",
}
_STATE: dict = {}


def knowledge_base() -> KnowledgeBase:
    """Built once per process: indexing is the slow part and queries never change the index."""
    if "kb" not in _STATE:
        base = Path(tempfile.mkdtemp(prefix="kb-fuzz-index-"))
        atexit.register(shutil.rmtree, base, ignore_errors=True)
        home, docs = base / "home", base / "docs"
        home.mkdir()
        for rel, text in DOCUMENTS.items():
            (docs / rel).parent.mkdir(parents=True, exist_ok=True)
            (docs / rel).write_text(text, encoding="utf-8")
        os.environ.setdefault("HERMES_HOME", str(home))
        embedder = StubEmbedder()
        kb = KnowledgeBase(parse_knowledgebase({"directories": [str(docs)]}), home, embedder_factory=lambda: embedder)
        kb.index()
        _STATE["kb"] = kb
    return _STATE["kb"]


def decode(data: bytes) -> dict:
    data = data + b"\x00" * max(0, 2 - len(data))
    head, flags, rest = data[0], data[1], data[2:]
    text = rest.decode("utf-8", "surrogateescape" if flags & 1 else "replace")
    path_glob, since, tags = None, None, ()
    if flags & 32:
        text, _, tags = text.partition("\x1d")
    if flags & 16:
        text, _, since = text.partition("\x1e")
    if flags & 2:
        text, _, path_glob = text.partition("\t")
    return {"query": text, "mode": MODES[head % 3], "k": 1 + (head // 3) % 12, "path_glob": path_glob,
            "kind": KINDS[(head >> 4) % len(KINDS)] if flags & 4 else None,
            "min_score": 0.0 if flags & 8 else None, "since": since, "tags": tags}


def test_one_input(data: bytes) -> None:
    case = decode(data)
    try:
        result = knowledge_base().search(**case)
    except USER_ERRORS as exc:
        assert str(exc), "a user error needs a sentence"
        return
    assert len(result.hits) <= case["k"], (len(result.hits), case["k"])


def seeds() -> list[bytes]:
    queries = ["fox", "quick brown fox", '"Quoted phrase"', "foxes NEAR berries", "a* OR b", "C++",
               "e-mail@example.com", "日本語", "😀", "-fox", "NOT", "AND OR", "(", "\"", "*", "^fox", "col:fox",
               "writer_lock", "word599 word1"]
    out = [bytes([mode, 0]) + q.encode("utf-8") for q in queries for mode in (0, 1, 2)]
    out += [bytes([0, 2]) + b"fox\tnotes/*.md", bytes([1, 2]) + b"store\t**/[a-", bytes([2, 6]) + b"x\t*",
            bytes([0, 1]) + b"bad \xff\xfe", bytes([1, 8]) + b"", bytes([1, 16]) + b"fox\x1e7d",
            bytes([0, 48]) + b"fox\x1dfinance,#a/b\x1e2026-13-01", bytes([2, 16]) + b"fox\x1e99999y"]
    return out


if __name__ == "__main__":
    from _harness import fuzz_main

    knowledge_base()  # index before instrumenting, so coverage starts with the first query
    fuzz_main(test_one_input)
    sys.exit(0)
