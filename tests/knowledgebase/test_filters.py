"""Search filters (tag, kind, path, date) as a user meets them: applied inside each retriever, so a
narrow filter still fills k; the same answers from the memory-mapped copies and from the store's
own indexes; one sentence for a value that cannot be read."""

import datetime as dt
import io
import os

import numpy as np
import pytest
from rich.console import Console

from hermes_kb.agent.knowledgebase.index import encoding, vector_cache
from hermes_kb.agent.knowledgebase.chunker import CHUNKER_VERSION
from hermes_kb.agent.knowledgebase.filters import FileTable, FilterError, SearchFilter, pack_tags, parse_when, search_filter
from hermes_kb.agent.knowledgebase.loaders import load
from hermes_kb.agent.knowledgebase.kinds import registry
from hermes_kb.agent.knowledgebase.service import USER_ERRORS
from hermes_kb.hermes_cli.kb_command import run_kb
from hermes_kb.tools.knowledgebase_tool import TOOL_ERRORS, run_tool
from hermes_kb.tools.permissions import Permissions

NOW = dt.datetime(2026, 12, 3, 12, 0)
OLD = dt.datetime(2024, 1, 15).timestamp()


def admits(search_filter, path="a.md", kind="markdown", tags=(), when=NOW.timestamp()) -> bool:
    table = FileTable([(1, path, kind, pack_tags(tags), when, 10, 12, 3)], lambda ids: {})
    chunks = table.admitted(search_filter).tolist()
    assert chunks in ([], [10, 11, 12])
    return chunks == [10, 11, 12]


@pytest.mark.parametrize("text, expected", [
    ("2026-11-30", dt.datetime(2026, 11, 30).timestamp()),
    ("2026-11-30T09:30", dt.datetime(2026, 11, 30, 9, 30).timestamp()),
    ("7d", NOW.timestamp() - 7 * 86400),
    ("2 weeks ago", NOW.timestamp() - 14 * 86400),
    ("12h", NOW.timestamp() - 12 * 3600),
    ("today", dt.datetime(2026, 12, 3).timestamp()),
    ("yesterday", dt.datetime(2026, 12, 2).timestamp()),
    (None, None),
])
def test_dates_are_read_as_people_write_them(text, expected):
    assert parse_when(text, NOW) == expected


@pytest.mark.parametrize("text", ["last tuesday", "2026-13-40", "7 fortnights", "-3d"])
def test_a_date_that_cannot_be_read_says_how_to_write_one(text):
    with pytest.raises(FilterError, match="write 2026-11-30"):
        parse_when(text, NOW)


def test_a_filter_admits_by_every_condition_and_nested_tags():
    project = SearchFilter(tags=("#Project",))
    assert admits(project, tags=("Project/Alpha",)) and admits(project, tags=("project",))
    assert not admits(project, tags=("projects",)) and not admits(project)
    both = SearchFilter(tags=("a", "b"))
    assert admits(both, tags=("b", "a")) and not admits(both, tags=("a",))
    recent = SearchFilter(since=NOW.timestamp() - 86400, before=NOW.timestamp() + 1)
    assert admits(recent) and not admits(recent, when=OLD)
    assert admits(SearchFilter(path_glob="docs/*.md"), path="docs/sub/x.md")  # * crosses folders, as before
    assert not admits(SearchFilter(path_glob="docs/*.md"), path="Docs/x.md")
    assert not admits(SearchFilter(kind="pdf"))
    assert not SearchFilter() and SearchFilter(kind="pdf")


def test_chunk_ids_come_from_ranges_and_from_files_whose_ids_are_scattered():
    rows = [(1, "a.md", "markdown", "x", 0.0, 5, 7, 3), (2, "b.md", "markdown", "x", 0.0, 1, 9, 2),
            (3, "c.md", "markdown", "", 0.0, 20, 20, 1)]
    table = FileTable(rows, lambda ids: {2: np.array([1, 9])} if ids == [2] else {})
    assert table.admitted(SearchFilter(tags=("x",))).tolist() == [1, 5, 6, 7, 9]
    assert table.admitted(SearchFilter(path_glob="c.*")).tolist() == [20]


def test_filter_values_are_checked_before_any_search():
    with pytest.raises(FilterError, match="Unknown kind 'markdwn'"):
        search_filter(registry.NAMES, kind="markdwn")
    with pytest.raises(FilterError, match="come before"):
        search_filter(registry.NAMES, since="2026-12-01", before="2026-11-01")
    assert search_filter(registry.NAMES, tags="roadmap, q3").tags == ("roadmap", "q3")
    assert issubclass(FilterError, USER_ERRORS)


def test_a_notes_tags_and_date_are_its_metadata():
    note = "---\ntags: [Roadmap, q3]\ncreated: 2025-01-02\nupdated: 2026-11-20T10:00:00\n---\n# Plan\n\nThe #infra/db work.\n"
    meta = load(note.encode(), "markdown").metadata
    assert meta.tags == ("Roadmap", "q3") and meta.inline_tags == ("infra/db",)  # the indexer decides on inline ones
    assert meta.dated == dt.datetime(2026, 11, 20, 10).timestamp()  # the last change, not the creation
    plain = load(b"# Log\n\nFixed the #bug in `#define`.\n\n```\n#not-a-tag\n```\n", "markdown").metadata
    assert plain.inline_tags == ("bug",) and plain.tags == () and plain.dated is None
    linked = load(b'---\ntitle: package.json\n---\nSee [engines](#engines), <a href="#local-paths">paths</a>, '
                  b"<a href='#bin'>bin</a> and the #release tag.\n", "markdown")
    assert linked.metadata.inline_tags == ("release",)  # not its links
    assert linked.text.startswith("# package.json\n")  # an inline #word heads nothing: it is in the text already
    odd = load(b'---\ndate: 0001-01-01\nupdated: someday\ntags: ["two\\nlines", 7]\n---\nbody\n', "markdown").metadata
    assert odd.dated is None and odd.tags == ("two lines", "7")  # no date the clock cannot place; tags one line


NOTES = {"standup.md": "# Standup\n\nPosted the release notes in #deploys after the #infra/db move.\n",
         "plan.md": "---\ntags: [roadmap]\n---\n# Plan\n\nThe #infra/db work, then the release.\n"}


@pytest.mark.parametrize("where, setting, inline", [
    ("a folder of notes", None, False),
    ("an Obsidian vault", None, True),  # .obsidian at the vault's root, the folder below it
    ("a Logseq graph", None, True),
    ("a folder of notes", "on", True),
    ("an Obsidian vault", "off", False),
])
def test_inline_hashtags_are_tags_where_the_folder_writes_tags_so(tree, make_kb, where, setting, inline):
    """`#deploys` in prose outside a vault is a chat channel's name; in a vault it is a tag; the
    directory's inline_tags says it where the folder cannot."""
    files = {f"notes/{name}": text for name, text in NOTES.items()}
    if where == "an Obsidian vault":
        files[".obsidian/app.json"] = "{}"
    elif where == "a Logseq graph":
        files["logseq/config.edn"] = "{}"
    root = tree(files)
    kb = make_kb(root / "notes", **({"inline_tags": setting} if setting else {}))
    kb.index()
    found = {tag: sorted(h.path for h in kb.search("release", k=5, min_score=0, tags=[tag]).hits)
             for tag in ("deploys", "infra/db", "roadmap")}
    assert found["roadmap"] == ["plan.md"]  # front matter's tags count everywhere
    assert found["deploys"] == (["standup.md"] if inline else [])
    assert found["infra/db"] == (["plan.md", "standup.md"] if inline else [])


def test_changing_inline_tags_rereads_the_notes(tree, make_kb):
    root = tree({f"notes/{name}": text for name, text in NOTES.items()})
    make_kb(root / "notes").index()
    kb = make_kb(root / "notes", inline_tags="on")
    summary = kb.index()[0]
    assert summary.changed == 2  # nothing on disk changed, what a #word is did
    assert [h.path for h in kb.search("release", k=5, min_score=0, tags=["deploys"]).hits] == ["standup.md"]


def vault(tree, notes: int = 60, tagged: int = 5):
    """`notes` notes about quarterly reports; the `tagged` last ones, tagged finance, match the query
    worst, so an unfiltered top 5 holds none of them."""
    files = {}
    for n in range(notes):
        strong = n < notes - tagged
        body = ("quarterly report " * 6 if strong else "the quarterly report, briefly. ") + f"note {n}\n"
        front = "---\ntags: [finance]\nupdated: 2026-11-28\n---\n" if not strong else ""
        files[f"notes/n{n:02}.md"] = front + f"# Note {n}\n\n{body}"
    files["code/report.py"] = "def quarterly_report():\n    return 'quarterly report'\n"
    root = tree(files)
    for n in range(notes - tagged):
        os.utime(root / f"notes/n{n:02}.md", (OLD, OLD))
    return root


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_a_narrow_filter_still_fills_k(tree, make_kb, mode):
    kb = make_kb(vault(tree))
    kb.index()  # min_score 0: the tagged notes are the weakest matches, and vector mode must still find them
    assert not any(h.path >= "notes/n55" for h in kb.search("quarterly report", k=5, mode=mode, min_score=0).hits)
    hits = kb.search("quarterly report", k=5, mode=mode, min_score=0, tags=["finance"]).hits
    assert sorted(h.path for h in hits) == [f"notes/n{n}.md" for n in range(55, 60)]
    assert [h.path for h in kb.search("quarterly report", k=5, mode=mode, min_score=0, since="2026-11-01").hits] != []
    dated = {h.path for h in kb.search("quarterly report", k=10, mode=mode, min_score=0, before="2026-11-01").hits}
    assert dated and not dated & {f"notes/n{n}.md" for n in range(55, 60)}  # their front matter date counts
    assert {h.path for h in kb.search("quarterly report", k=5, mode=mode, min_score=0, kind="python").hits} == {"code/report.py"}


def test_a_filter_nothing_matches_says_so(tree, make_kb):
    kb = make_kb(vault(tree, notes=6, tagged=1))
    kb.index()
    result = kb.search("quarterly report", tags=["nonexistent"])
    assert result.hits == [] and result.warnings == ["No indexed file matches the filters; nothing was searched."]


def test_the_stores_own_indexes_filter_as_the_copies_do(tree, make_kb, stub_embedder):
    """Without a current copy (another process writing), SQLite's FTS5 and sqlite-vec answer: the
    same chunks, restricted the same way."""
    kb = make_kb(vault(tree))
    kb.index()
    directory = kb.targets(None)[0]
    store = kb.backend.open(kb.index_path(directory), name=directory.name)
    copy = vector_cache.VectorCache(vector_cache.cache_path(kb.index_path(directory)))
    allowed = store.file_facets().admitted(SearchFilter(tags=("finance",)))
    query = stub_embedder.embed_query("quarterly report")
    from_copy = copy.knn(query, 3, allowed)
    from_store = store.knn(query, 3, allowed)
    assert [i for i, _ in from_copy] == [i for i, _ in from_store] and len(from_copy) == 3
    assert set(i for i, _ in from_copy) <= set(allowed.tolist())
    keyword = store.keyword(["quarterly", "report"], 10, allowed)
    assert len(keyword) == 5 and {i for i, _ in keyword} == set(allowed.tolist())
    store.close()


def test_a_shortlisted_filter_ranks_only_its_rows(monkeypatch, tmp_path):
    """Past EXACT_SCAN_ROWS a filter's rows are shortlisted among themselves: k allowed chunks come
    back even though the query's own nearest vector (chunk 2) is filtered out."""
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(3000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(1, 3001, dtype=np.int64) << encoding.WINDOW_BITS
    path = tmp_path / "v.cache"
    vector_cache.build(path, "g", 32, len(ids), [(ids, vectors)])
    monkeypatch.setattr(vector_cache, "EXACT_SCAN_ROWS", 100)
    monkeypatch.setattr(vector_cache, "MIN_SHORTLIST", 50)
    copy = vector_cache.VectorCache(path)
    allowed = np.arange(1, 3001, 7, dtype=np.int64)  # 429 chunks, 2 not among them
    found = [i for i, _ in copy.knn(vectors[1], 10, allowed)]
    exact = [i for i, _ in encoding.exact_knn(copy.vectors_for, vectors[1], 10, allowed)]
    assert len(found) == 10 and set(found) <= set(allowed.tolist())
    assert len(set(found) & set(exact)) >= 7 and found[0] == exact[0]


def test_filters_reach_the_tool_and_the_cli(tree, make_kb):
    kb = make_kb(vault(tree))
    kb.index()
    found = run_tool("kb_search", kb, {"query": "quarterly report", "tags": ["finance"], "path_glob": "notes/*", "k": 5},
                     Permissions(kb.config))
    assert len(found["hits"]) == 5 and all(h["path"] >= "notes/n55" for h in found["hits"])
    with pytest.raises(TOOL_ERRORS, match="Cannot read 'someday' as a date"):
        run_tool("kb_search", kb, {"query": "report", "since": "someday"}, Permissions(kb.config))
    with pytest.raises(TOOL_ERRORS, match="tags must be a list"):
        run_tool("kb_search", kb, {"query": "report", "tags": [1, 2]}, Permissions(kb.config))
    out, err = (Console(file=io.StringIO(), width=200) for _ in range(2))
    assert run_kb(["search", "quarterly", "report", "--tag", "finance", "--since", "30d", "--json"], lambda: kb, out, err) == 0
    assert '"notes/n59.md"' in out.file.getvalue()
    assert run_kb(["search", "report", "--before", "next week"], lambda: kb, out, err) == 1
    assert "Cannot read 'next week' as a date" in err.file.getvalue()


def test_an_index_from_before_tags_gets_them_on_its_next_run_without_re_embedding(tree, make_kb):
    kb = make_kb(vault(tree, notes=8, tagged=2))
    kb.index()
    directory = kb.targets(None)[0]
    store = kb.backend.open(kb.index_path(directory), name=directory.name)
    store.conn.execute("ALTER TABLE files DROP COLUMN tags")
    store.conn.execute("ALTER TABLE files DROP COLUMN dated")
    store.set_meta(chunker=store.meta("chunker").replace(f"v{CHUNKER_VERSION}:", "v8:"))  # as the release before tags left it
    store.close()
    kb.indexes.forget(kb.index_path(directory))
    assert kb.search("quarterly report", tags=["finance"]).hits == []  # readable meanwhile, just untagged
    [summary] = kb.index()
    assert summary.chunks_embedded == 0
    assert len(kb.search("quarterly report", tags=["finance"]).hits) == 2
