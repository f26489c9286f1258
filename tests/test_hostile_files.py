"""Files built to hurt an index run (issue #50's probes, at sizes that still show each mechanism): the
one per-file budget, and each amplification fixed at its cause."""

from __future__ import annotations

import io
import json
import sys
import time
import zipfile

import pytest

from hermes_kb.agent.knowledgebase import extraction, loaders
from hermes_kb.agent.knowledgebase.extraction import Budget, Extractor
from hermes_kb.agent.knowledgebase.kinds.document import LoadError
from hermes_kb.agent.knowledgebase.loaders import load
from hermes_kb.agent.knowledgebase.secret_scan import redact

ODF_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
          'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"')


def odt(content: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content)
    return buffer.getvalue()


def entity_bomb(levels: int = 5) -> str:
    """`&e5;` expands 10^levels times; a comment pads expat's amplification allowance."""
    entities = '<!ENTITY e0 "lolololololol">' + "".join(
        f'<!ENTITY e{i} "{f"&e{i - 1};" * 10}">' for i in range(1, levels + 1))
    return (f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE d [{entities}]><!-- {"x" * 4000} -->'
            f'<office:document-content {ODF_NS}><office:body><office:text><text:p>&e{levels};</text:p>'
            f'</office:text></office:body></office:document-content>')


def test_a_dtd_in_utf16_content_xml_is_refused_after_decoding():
    with pytest.raises(LoadError, match="DTD or XML entities"):
        load(odt(entity_bomb().encode("utf-16")), "odt")
    plain = (f'<?xml version="1.0" encoding="UTF-16"?><office:document-content {ODF_NS}><office:body><office:text>'
             f'<text:p>Quarterly figures</text:p></office:text></office:body></office:document-content>')
    assert "Quarterly figures" in load(odt(plain.encode("utf-16")), "odt").text


def xlsx_with_declared_dimension(rows: int) -> bytes:
    """One cell per row under a dimension claiming every column of the sheet (A1:XFD...)."""
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    sheet = book.active
    for row in range(1, rows + 1):
        sheet.cell(row=row, column=1, value=f"item {row}")
    sheet.cell(row=1_048_576, column=1, value="the last row")
    buffer = io.BytesIO()
    book.save(buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                data = data.replace(b'<dimension ref="A1:A1048576"/>', f'<dimension ref="A1:XFD{rows}"/>'.encode())
                assert b"XFD" in data
            target.writestr(item, data)
    return out.getvalue()


def test_a_spreadsheets_declared_dimension_pads_nothing():
    started = time.perf_counter()
    text = load(xlsx_with_declared_dimension(300), "xlsx").text
    assert "item 300" in text and "the last row" in text
    assert len(text) < 20_000  # padded to 16,384 cells a row it was ~15 M characters
    assert time.perf_counter() - started < 60  # a lone cell in row 1,048,576 no longer costs a padded row each


def epub_listing_one_chapter(times: int) -> bytes:
    spine = "".join('<itemref idref="c1"/>' for _ in range(times))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml",
                         '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
                         '<rootfiles><rootfile full-path="content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
        archive.writestr("content.opf",
                         '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
                         '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">x</dc:identifier>'
                         '<dc:title>T</dc:title><dc:language>en</dc:language></metadata>'
                         '<manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/></manifest>'
                         f'<spine>{spine}</spine></package>')
        archive.writestr("c1.xhtml", '<html xmlns="http://www.w3.org/1999/xhtml"><body><p>The only chapter.</p></body></html>')
    return buffer.getvalue()


def test_an_ebook_spine_naming_one_chapter_many_times_reads_it_once():
    pytest.importorskip("ebooklib")
    text = load(epub_listing_one_chapter(200), "epub").text
    assert text.count("The only chapter.") == 1


def test_html_nested_deep_reads_in_linear_time():
    """Counts the extractor's executed lines, not seconds: a count is the same on every machine, where a
    timed ratio failed CI once on a noisy neighbour."""
    def lines_run(depth: int) -> int:
        page = ("<div><a href='#'>x</a>" * depth + "text " * 10 + "</div>" * depth).encode()
        count = 0

        def in_loaders(frame, event, arg):
            if frame.f_code.co_filename != loaders.__file__:
                return None

            def each_line(frame, event, arg):
                nonlocal count
                count += event == "line"
                return each_line
            return each_line

        sys.settrace(in_loaders)
        try:
            load(page, "html")
        finally:
            sys.settrace(None)
        return count

    # Quadratic (every open block touched per text and link): 4x the depth ran ~16x the lines; linear ~4x.
    assert lines_run(8_000) < 5 * lines_run(2_000)


def test_a_file_over_the_character_budget_is_one_skip_and_the_run_goes_on(tree, make_kb, monkeypatch):
    monkeypatch.setattr(extraction, "DEFAULT_BUDGET", Budget(characters=2_000))
    root = tree({"big.html": "<html><body>" + "<p>long page text</p>" * 500 + "</body></html>",
                 "small.html": "<html><body><p>the zeppelin schedule</p></body></html>",
                 "note.md": "# Note\n\nthe zeppelin crew\n"})
    kb = make_kb(root)
    summary = kb.index()[0]
    assert summary.added == 2
    assert [(path, reason.split(":")[0]) for path, reason in summary.skipped] == [("big.html", "over the per-file budget")]
    assert "2,000 characters" in summary.skipped[0][1]
    assert {h.path for h in kb.search("zeppelin", mode="keyword").hits} == {"small.html", "note.md"}


def test_a_worker_out_of_memory_or_time_is_that_files_skip_and_the_next_file_gets_a_fresh_worker():
    page = b"<html><body><p>fine</p></body></html>"
    starved = Extractor(Budget(memory_bytes=32_000_000))  # below what the worker holds already: no page fits
    with pytest.raises(LoadError, match="over the per-file budget: .*(needed more than 32 MB|died)"):
        starved.load(b"<html><body>" + b"<p>words of a long page</p>" * 100_000 + b"</body></html>", "html")
    starved.close()
    slow = Extractor(Budget(seconds=0.05))
    deep = ("<div>" * 200_000 + "x" + "</div>" * 200_000).encode()
    try:
        with pytest.raises(LoadError, match="took more than 0.05 s"):
            slow.load(deep, "html")
        slow.budget = Budget()
        assert "fine" in slow.load(page, "html").text  # a fresh worker after the killed one
    finally:
        slow.close()


def test_a_standalone_npm_token_is_redacted_and_its_look_alikes_stay():
    token = "npm_" + "aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"
    text = f"publish with {token} then\nnpm_config_registry=https://r.example npm_package_name npm_lifecycle_event"
    redacted = redact(text)
    assert token not in redacted.text and redacted.found == ("NPM Token",)
    assert "npm_config_registry" in redacted.text and "npm_package_name" in redacted.text


# --- resolve once: a link swapped between the check and the run names nothing new -------------------

@pytest.fixture
def swapped_link(tree, tmp_path, monkeypatch):
    """An indexed folder reached through a link, and a hook that repoints the link at an unindexed
    private folder right after the check has resolved it (the race, made deterministic)."""
    from hermes_kb.agent.knowledgebase.service import KnowledgeBase

    public = tree({"plan.md": "# Plan\n\nThe zeppelin launch is on Friday.\n"}, root=tmp_path / "public")
    private = tree({"diary.md": "# Diary\n\nThe vault code is PINEAPPLE-42.\n"}, root=tmp_path / "private")
    link = tmp_path / "link"
    link.symlink_to(public)
    checked = KnowledgeBase.indexed_target

    def check_then_swap(self, target):
        found = checked(self, target)
        if link.resolve() == public:
            link.unlink()
            link.symlink_to(private)
        return found

    monkeypatch.setattr(KnowledgeBase, "indexed_target", check_then_swap)
    return link, public, private


def test_a_gateway_members_index_runs_on_the_folder_the_check_judged(swapped_link, write_config, stub_embedder):
    from hermes_kb import hermes_plugin
    from hermes_kb.agent.knowledgebase.service import KnowledgeBase

    link, public, private = swapped_link
    write_config({"directories": [{"path": str(public), "name": "public"}]})
    plugin = hermes_plugin.KnowledgebasePlugin(
        make_kb=lambda config, home: KnowledgeBase(config, home, embedder_factory=lambda: stub_embedder))
    plugin.kb().index()
    plugin.run_slash(f"index {link}", member=True, announce=None)
    assert plugin.background.wait(60)
    kb = plugin.kb()
    assert [d.name for d in kb.known_directories()] == ["public"]
    assert not kb.search("PINEAPPLE-42", mode="keyword").hits


def test_the_kb_index_tool_runs_on_the_folder_the_check_judged(swapped_link, make_kb):
    from hermes_kb.tools.knowledgebase_tool import register_knowledgebase_tools
    from hermes_kb.tools.registry import ToolRegistry

    link, public, private = swapped_link
    kb = make_kb(public)
    kb.index()
    registry = ToolRegistry()
    register_knowledgebase_tools(registry, lambda: kb, lambda: kb.config)
    result = json.loads(registry.dispatch("kb_index", {"directory": str(link)}))
    assert result[0]["directory"] == "public"
    assert [d.name for d in kb.known_directories()] == ["public"]
    assert not kb.search("PINEAPPLE-42", mode="keyword").hits


def test_a_deep_made_up_path_is_judged_in_one_walk(tree, make_kb):
    """kb_read and kb:// paths: the ignore rules checked once down the path (cubic before: 4 KB took 14 s)."""
    from hermes_kb.agent.knowledgebase.scanner import IgnoreRules
    from hermes_kb.mcp_server import parse_uri

    root = tree({"a/.gitignore": "secret*\n", "a/note.md": "# Note\n"})
    rules = IgnoreRules(root)
    deep = "a/" + "b/" * 2000 + "note.md"
    started = time.perf_counter()
    assert not rules.excluded(deep) and rules.excluded("a/" + "b/" * 2000 + "secret.md")
    assert time.perf_counter() - started < 5
    kb = make_kb(root)
    kb.index()
    with pytest.raises(Exception, match="not|no file"):
        kb.read(deep)
    with pytest.raises(ValueError, match="at most 8,000"):
        parse_uri("kb://docs/" + "b/" * 6000)


def test_clear_during_a_run_of_the_same_folder_is_refused_and_loses_nothing(tree, make_kb):
    from hermes_kb.agent.knowledgebase.service import KnowledgebaseError

    kb = make_kb(tree({"a.md": "# A\n\nthe zeppelin manual\n"}))
    kb.index()
    directory = kb.known_directories()[0]
    with kb.backend.writer_lock(kb.index_path(directory), directory.name):  # a run under way
        with pytest.raises(KnowledgebaseError, match="being indexed right now; nothing was cleared"):
            kb.clear(directory.name)
    assert kb.search("zeppelin", mode="keyword").hits
    assert kb.clear(directory.name) == [directory.name]


def test_a_notebook_of_many_tiny_cells_is_joined_into_few_chunks():
    """1M one-line cells made 1M chunks (~7 h of embedding on 2 cores); joined, they fill chunks."""
    from hermes_kb.agent.knowledgebase.chunker import chunk_document
    from hermes_kb.agent.knowledgebase.config import ChunkingConfig

    cells = [{"cell_type": "markdown", "source": f"step {n} done"} for n in range(5_000)]
    document = load(json.dumps({"cells": cells, "metadata": {}}).encode(), "notebook")
    started = time.perf_counter()
    chunks = chunk_document(document, "log.ipynb", ChunkingConfig())
    assert len(chunks) <= 500 and "step 4999 done" in chunks[-1].text
    assert all(f"step {c.page - 1} done" in c.text for c in chunks)  # each cited by a cell it holds
    assert time.perf_counter() - started < 30  # cutting at 5,000 cells no longer scans every cell per section
