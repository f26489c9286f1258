import json
import os

import pytest

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.service import KnowledgeBase
from hermes_kb.tools.knowledgebase_tool import register_knowledgebase_tools
from hermes_kb.tools.registry import MAX_RESULT_CHARS, ToolRegistry


@pytest.fixture
def registry(tree, make_kb, tmp_path):
    lines = "\n".join(f"line {i}: the quick brown fox {i}" for i in range(1, 301))
    root = tree({"notes/fox.md": "# Fox\n\n" + lines + "\n", "secret-inside.md": "ok"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read")
    os.symlink(outside / "secret.txt", root / "link-out.txt")
    kb = make_kb(root)
    kb.index()
    registry = ToolRegistry()
    register_knowledgebase_tools(registry, lambda: kb, lambda: kb.config)
    return registry, root, outside


def call(registry, name, **args):
    return json.loads(registry.dispatch(name, json.dumps(args)))


def test_kb_search_returns_cited_hits(registry):
    reg, _, _ = registry
    result = call(reg, "kb_search", query="quick brown fox 150", k=3, mode="keyword")
    assert [h["id"] for h in result["hits"]] == ["S1", "S2", "S3"][:len(result["hits"])]
    assert result["hits"][0]["path"] == "notes/fox.md" and "-" in result["hits"][0]["lines"]


def test_kb_read_window_says_where_the_file_continues(registry):
    reg, _, _ = registry
    result = call(reg, "kb_read", path="notes/fox.md", start_line=10, max_lines=5)
    assert result["text"].splitlines()[0] == "line 8: the quick brown fox 8"
    assert (result["start_line"], result["end_line"], result["total_lines"]) == (10, 14, 302)
    assert result["continues"] and "continues at line 15" in result["next"]


@pytest.mark.parametrize("path", ["../outside/secret.txt", "notes/../../outside/secret.txt", "link-out.txt", "/etc/passwd"])
def test_kb_read_refuses_escapes(registry, path):
    reg, _, outside = registry
    result = call(reg, "kb_read", path=path)
    assert "not a file inside an indexed directory" in result["error"]


def test_kb_read_refuses_absolute_path_outside(registry):
    reg, _, outside = registry
    assert "error" in call(reg, "kb_read", path=str(outside / "secret.txt"))


def test_kb_read_accepts_absolute_path_inside(registry):
    reg, root, _ = registry
    assert call(reg, "kb_read", path=str(root / "secret-inside.md"))["text"] == "ok"


def test_status_index_clear(tree, make_kb):
    kb = make_kb(tree({"a.md": "fox", "b.md": "dog"}))
    kb.index()
    reg = ToolRegistry()
    register_knowledgebase_tools(reg, lambda: kb, lambda: kb.config, ask=lambda question: "delete the index" in question)
    assert call(reg, "kb_status")[0]["files"] == 2
    assert call(reg, "kb_index")[0]["unchanged"] == 2
    assert call(reg, "kb_clear", directory="docs") == {"cleared": ["docs"]}
    assert "not indexed yet" in call(reg, "kb_search", query="fox", directory="docs")["error"]


@pytest.mark.parametrize("name, arguments, fragment", [
    ("kb_search", "{}", "kb_search needs a query"),
    ("kb_search", '{"query": 5}', "argument 'query' must be of type string"),
    ("kb_search", '{"query": "x", "mode": "fuzzy"}', "must be one of hybrid, vector, keyword"),
    ("kb_search", '{"query": "x", "colour": 1}', "unknown argument 'colour'"),
    ("kb_search", "not json", "not valid JSON"),
    ("kb_search", "[1, 2]", "must be a JSON object"),
    ("kb_search", '{"query": ""}', "empty"),
    ("kb_read", '{"path": "notes/fox.md", "start_line": 0}', "at least 1"),
    ("nope", "{}", "unknown tool 'nope'"),
])
def test_bad_calls_become_error_results(registry, name, arguments, fragment):
    reg, _, _ = registry
    result = json.loads(reg.dispatch(name, arguments))
    assert fragment in result["error"]


def test_raising_handler_and_oversized_results_are_contained():
    registry = ToolRegistry()
    registry.register("boom", "t", {"description": "", "parameters": {"type": "object", "properties": {}}},
                      lambda args, **kw: (_ for _ in ()).throw(ValueError("bad thing")))
    registry.register("big", "t", {"description": "", "parameters": {"type": "object", "properties": {}}},
                      lambda args, **kw: "x" * (MAX_RESULT_CHARS * 2))
    assert "bad thing" in json.loads(registry.dispatch("boom", "{}"))["error"]
    big = json.loads(registry.dispatch("big", "{}"))
    assert big["truncated"] and len(big["result"]) == MAX_RESULT_CHARS


def test_tools_hidden_when_knowledgebase_disabled_or_empty(hermes_home, tree, make_kb):
    registry = ToolRegistry()
    config = parse_knowledgebase({"enabled": False, "directories": ["/tmp"]})
    register_knowledgebase_tools(registry, lambda: KnowledgeBase(config, hermes_home), lambda: config)
    assert registry.schemas() == []
    assert "not available" in json.loads(registry.dispatch("kb_status", "{}"))["error"]
    empty = ToolRegistry()
    kb = make_kb()
    register_knowledgebase_tools(empty, lambda: kb, lambda: kb.config)
    assert empty.schemas() == []
    kb.index(str(tree({"notes.md": "# Notes\n\nIndexed by hand.\n"})))  # no config: a folder indexed by path
    assert {s["function"]["name"] for s in empty.schemas()} == {"kb_search", "kb_read", "kb_index", "kb_status"}


@pytest.fixture
def two_directories(tree, make_kb, tmp_path):
    alpha = tree({"__init__.py": "ALPHA = 1\n", "guide.md": "# Guide\n\nAlpha guide.\n"}, root=tmp_path / "alpha")
    beta = tree({"__init__.py": "BETA = 2\n", "alpha/notes.md": "# Notes\n\nBeta's alpha folder.\n"},
                root=tmp_path / "beta")
    kb = make_kb(alpha, beta)
    kb.index()
    registry = ToolRegistry()
    register_knowledgebase_tools(registry, lambda: kb, lambda: kb.config)
    return registry


def test_kb_read_takes_the_path_a_citation_shows(two_directories):
    hit = call(two_directories, "kb_search", query="alpha guide", k=1, mode="keyword")["hits"][0]
    assert hit["cite"] == "alpha/guide.md"
    read = call(two_directories, "kb_read", path=hit["cite"])
    assert read["directory"] == "alpha" and "Alpha guide." in read["text"]
    assert "ALPHA" in call(two_directories, "kb_read", path="__init__.py", directory="alpha")["text"]
    assert "BETA" in call(two_directories, "kb_read", path="beta/__init__.py")["text"]


def test_kb_read_never_guesses_between_directories(two_directories):
    error = call(two_directories, "kb_read", path="__init__.py")["error"]
    assert "alpha/__init__.py" in error and "beta/__init__.py" in error
    # beta holds alpha/notes.md and a directory is named alpha: only one of the two readings is a file
    assert "Beta's alpha folder." in call(two_directories, "kb_read", path="alpha/notes.md")["text"]
    assert "not a knowledgebase directory" in call(two_directories, "kb_read", path="x.md", directory="gamma")["error"]
    assert "not a file" in call(two_directories, "kb_read", path="../beta/__init__.py", directory="alpha")["error"]
