"""HTML as a docs site ships it: main content only, headings that mean sections, citations into the
source lines a person opens (kb_read agreeing with them)."""

from __future__ import annotations

import textwrap

from hermes_kb.agent.knowledgebase.chunker import chunk_document
from hermes_kb.agent.knowledgebase.config import ChunkingConfig
from hermes_kb.agent.knowledgebase.loaders import load

# The shape of a DocBook page (PostgreSQL's manual): a navigation table, a reference entry whose
# sections are h2 under the page <title>, a Note box with its own h3, a navigation footer.
DOCBOOK = textwrap.dedent("""\
    <?xml version="1.0" encoding="UTF-8"?>
    <html><head><title>CREATE INDEX</title><link rel="stylesheet" href="s.css"/></head>
    <body><div class="navheader"><table><tr><th>CREATE INDEX</th></tr><tr>
    <td><a href="a.html">Prev</a></td><td><a href="b.html">Up</a></td><td><a href="c.html">Home</a></td>
    <td><a href="d.html">Next</a></td></tr></table><hr/></div>
    <div class="refentry"><div class="refsect1"><h2>Synopsis</h2>
    <pre>CREATE INDEX name ON table</pre></div>
    <div class="refsect1"><h2>Description</h2>
    <p>
       CREATE INDEX constructs an index on the specified column
       of the specified relation.
    </p>
    <div class="note"><h3 class="title">Note</h3><p>Use CONCURRENTLY to avoid locking out writes.</p></div>
    <p>The zeppelin keyword sits on its own source line.</p>
    </div></div>
    <div class="toc"><dl><dt><a href="x1.html">31.1. Publication</a></dt><dt><a href="x2.html">31.2. Subscription</a></dt>
    <dt><a href="x3.html">31.3. Conflicts</a></dt></dl></div>
    <div class="navfooter"><a href="a.html">Prev</a> <a href="b.html">Up</a> <a href="c.html">Home</a></div>
    </body></html>
    """)


def _chunks(html: str):
    return chunk_document(load(html.encode(), "html"), "page.html", ChunkingConfig(chunk_size=512))


def test_site_chrome_and_link_lists_are_not_content():
    text = load(DOCBOOK.encode(), "html").text
    for chrome in ("Prev", "Home", "Next", "31.2. Subscription"):
        assert chrome not in text
    assert "CREATE INDEX constructs an index" in text


def test_a_reference_page_sits_under_its_title_and_a_note_is_no_section():
    text = load(DOCBOOK.encode(), "html").text
    assert text.startswith("# CREATE INDEX\n") and "## Synopsis" in text and "## Description" in text
    assert "### Note" not in text and "Note:" in text
    headings = {chunk.heading for chunk in _chunks(DOCBOOK)}
    assert headings <= {"CREATE INDEX", "CREATE INDEX > Synopsis", "CREATE INDEX > Description"}


def test_citations_are_lines_of_the_source_file():
    source = DOCBOOK.splitlines()
    for chunk in _chunks(DOCBOOK):
        assert 1 <= chunk.start_line <= chunk.end_line <= len(source)
        cited = "\n".join(source[chunk.start_line - 1:chunk.end_line])
        for line in chunk.text.splitlines():
            words = line.lstrip("# ").split()
            if words and not line.startswith("#") and words != ["Note:"]:
                assert words[0] in cited, (line, chunk.start_line, chunk.end_line)
    line = next(n for n, text in enumerate(source, 1) if "zeppelin" in text)
    zeppelin = next(c for c in _chunks(DOCBOOK) if "zeppelin" in c.text)
    assert zeppelin.start_line <= line == zeppelin.end_line


def test_a_page_with_everything_on_one_line_cites_that_line():
    page = "<html><head><title>T</title></head><body><nav>a b c</nav><h1>One</h1><p>alpha beta</p></body></html>"
    assert [(c.start_line, c.end_line) for c in _chunks(page)] == [(1, 1)]


def test_kb_read_serves_the_cited_source_lines(tree, make_kb):
    root = tree({"page.html": DOCBOOK})
    kb = make_kb(root)
    kb.index()
    hit = next(h for h in kb.search("zeppelin keyword", k=3, mode="keyword").hits if h.path == "page.html")
    window = kb.read("page.html", start_line=hit.start_line, max_lines=hit.end_line - hit.start_line + 1)
    assert "zeppelin" in window.text and "Prev" not in window.text
    assert window.total_lines == len(DOCBOOK.splitlines())
    assert "zeppelin" not in kb.read("page.html", start_line=1, max_lines=5).text


def test_stylesheets_and_pictures_are_not_indexed(tree, make_kb):
    root = tree({"page.html": DOCBOOK, "s.css": "body { color: red }\n", "logo.svg": "<svg><text>x</text></svg>\n",
                 "app.js.map": '{"version":3}\n'})
    kb = make_kb(root)
    summary = kb.index()[0]
    assert summary.added == 1


# npm's docs repeat each shared option verbatim on every command page that takes it (448 of 1,308
# chunks): one search listed the same block from five pages and pushed the page that answers down.
FUND_OPTION = "#### `fund`\n\n* Default: true\n* Type: Boolean\n\nWhen true, display the message at the end of each install saying how many packages are looking for funding.\n"
NPM_LIKE = {
    **{f"commands/npm-{name}.md": f"# npm-{name}\n\n## Description\n\n{about} " + " ".join(f"{name}{j}" for j in range(250))
       + f"\n\n## Configuration\n\n{FUND_OPTION}"
       for name, about in (("ci", "Clean install a project."), ("dedupe", "Reduce duplication in the package tree."),
                           ("link", "Symlink a package folder."), ("update", "Update packages."))},
    "commands/npm-fund.md": "# npm-fund\n\nRetrieve funding information: list which dependencies are looking for "
                            "funding, with the URLs where their maintainers accept it.\n",
}


def test_a_block_repeated_verbatim_across_pages_is_one_hit_naming_the_others(tree, make_kb, hermes_home, stub_embedder):
    import json

    from rich.console import Console

    from hermes_kb.hermes_cli.kb_command import run_kb
    from hermes_kb.tools.knowledgebase_tool import register_knowledgebase_tools
    from hermes_kb.tools.registry import ToolRegistry

    root = tree(NPM_LIKE)
    kb = make_kb(root)
    kb.index()
    for mode in ("keyword", "hybrid"):
        hits = kb.search("which dependencies are looking for funding", k=5, mode=mode).hits
        repeated = [h for h in hits if "`fund`" in h.text]
        assert len(repeated) == 1 and len(repeated[0].also_in) == 3, mode  # one hit for the four copies
        assert {p.path for p in repeated[0].also_in} | {repeated[0].path} == \
            {f"commands/npm-{n}.md" for n in ("ci", "dedupe", "link", "update")}
        assert "commands/npm-fund.md" in [h.path for h in hits[:2]], mode

    out = Console(record=True, width=200)
    assert run_kb(["search", "funding", "--mode", "keyword"], lambda: kb, out, Console(record=True), confirm=lambda _: False) == 0
    assert "the same text is also in" in out.export_text() and "3 more" not in out.export_text()
    out = Console(record=True, width=200)
    run_kb(["search", "funding", "--mode", "keyword", "--json"], lambda: kb, out, Console(record=True), confirm=lambda _: False)
    assert sorted(len(h["also_in"]) for h in json.loads(out.export_text())["hits"]) == [0, 3]

    registry = ToolRegistry()
    register_knowledgebase_tools(registry, lambda: kb, lambda: kb.config)
    found = json.loads(registry.dispatch("kb_search", json.dumps({"query": "funding", "mode": "keyword"})))["hits"]
    assert sorted(len(h.get("also_in", [])) for h in found) == [0, 3]
    assert all(place.startswith("docs:commands/npm-") for h in found for place in h.get("also_in", []))
