"""Notebooks, e-mail, tables, note vaults, org-mode and LaTeX: made by the real tools, searched and read
the way a user meets them, and bounded when malformed."""

import email.message
import json
import mailbox

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from hermes_kb.agent.knowledgebase.chunker import chunk_document
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.kinds import registry
from hermes_kb.agent.knowledgebase.kinds.document import LoadError
from hermes_kb.agent.knowledgebase.loaders import is_plain_text, load
from hermes_kb.agent.knowledgebase.kinds.registry import kind_of
from hermes_kb.tools.knowledgebase_tool import run_tool
from hermes_kb.tools.permissions import Permissions

CHUNKING = parse_knowledgebase({}).chunking


def notebook_bytes() -> bytes:
    notebook = new_notebook(metadata={"language_info": {"name": "python"}})
    notebook.cells = [
        new_markdown_cell("# Churn analysis\n\nWe load the customer table."),
        new_code_cell("import pandas as pd\ndf = pd.read_csv('customers.csv')\ndf.churned.mean()", outputs=[
            new_output("execute_result", data={"text/plain": "0.2718", "image/png": "iVBORw0KGgo" * 2000},
                       execution_count=1)]),
        new_markdown_cell("## Retention by plan\n\n" + "The premium plan keeps customers longest. " * 30),
        new_code_cell("df.groupby('plan').churned.mean().plot()", outputs=[
            new_output("display_data", data={"image/png": "AAAA" * 5000, "text/html": "<div>zebrafish</div>"}),
            new_output("stream", name="stdout", text="epoch 1 loss 0.5\n" * 1000)]),
    ]
    return nbformat.writes(notebook).encode()


def search(kb, query, **options):
    return kb.search(query, k=5, mode="keyword", **options).hits


def test_a_notebook_is_cells_not_json(tree, make_kb):
    kb = make_kb(tree({"nb.ipynb": notebook_bytes()}))
    kb.index()
    hit = search(kb, "premium plan")[0]
    assert hit.kind == "notebook" and hit.part == "cell 3" and hit.heading == "Churn analysis > Retention by plan"
    assert '{"cells"' not in hit.text
    code = search(kb, "read_csv")[0]
    assert code.part == "cell 2" and "```python\nimport pandas as pd" in code.text and "0.2718" in code.text
    output = load(notebook_bytes(), "notebook").text
    assert "iVBORw0KGgo" not in output and "zebrafish" not in output and search(kb, "zebrafish") == []  # rich outputs
    assert output.count("epoch 1 loss") < 200 and "… (output cut)" in output  # outputs capped


def test_kb_read_shows_a_notebooks_cells_and_the_cited_cell(tree, make_kb):
    kb = make_kb(tree({"nb.ipynb": notebook_bytes()}))
    kb.index()
    hit = search(kb, "premium plan")[0]
    window = run_tool("kb_read", kb, {"path": f"{hit.directory}/{hit.path}", "start_line": hit.start_line,
                                      "max_lines": 3}, Permissions(kb.config))
    assert window["text"].startswith("## Retention by plan") and '"cell_type"' not in window["text"]
    found = run_tool("kb_search", kb, {"query": "premium plan", "mode": "keyword"}, Permissions(kb.config))
    assert found["hits"][0]["part"] == "cell 3" and found["hits"][0]["location"].endswith("nb.ipynb cell 3")


def mbox_bytes(tmp_path) -> bytes:
    box = mailbox.mbox(tmp_path / "inbox.mbox")
    for subject, body, attachment in [
        ("Pump warranty", "The pump warranty in Rotterdam runs until March.", b"Serial number PX-4471.\n"),
        ("Lunch", "Pizza on Friday?\nFrom the kitchen team", None),
    ]:
        message = email.message.EmailMessage()
        message["From"], message["To"], message["Subject"] = "ana@example.org", "team@example.org", subject
        message["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
        message.set_content(body)
        if attachment:
            message.add_attachment(attachment, maintype="text", subtype="plain", filename="serial.txt")
        box.add(message)
    box.flush()
    box.close()
    return (tmp_path / "inbox.mbox").read_bytes()


def test_an_mbox_is_one_part_per_message_headed_by_its_headers(tree, make_kb, tmp_path):
    kb = make_kb(tree({"inbox.mbox": mbox_bytes(tmp_path)}))
    kb.index()
    hit = search(kb, "warranty Rotterdam")[0]
    assert hit.part == "message 1" and hit.heading.startswith("Pump warranty (from ana@example.org)")  # a short label
    assert "to team@example.org · Tue, 01 Dec 2026" in hit.text  # recipients and date: the message's first line
    assert search(kb, "PX-4471")[0].part == "message 1"  # the text attachment is indexed under its message
    lunch = search(kb, "pizza")[0]
    assert lunch.part == "message 2" and "From the kitchen team" in lunch.text  # a body line, not a separator


def test_an_eml_with_an_html_body_and_an_unreadable_attachment(tree, make_kb):
    message = email.message.EmailMessage()
    message["Subject"], message["From"] = "Quarterly numbers", "cfo@example.org"
    message.add_alternative("<html><body><nav>Home | Inbox</nav><p>Revenue grew <b>12%</b>.</p></body></html>",
                            subtype="html")
    message.add_attachment(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, maintype="image", subtype="png", filename="chart.png")
    kb = make_kb(tree({"q.eml": message.as_bytes()}))
    kb.index()
    hit = search(kb, "revenue grew")[0]
    assert hit.heading.startswith("Quarterly numbers (from cfo@example.org")
    assert "Revenue grew 12%." in hit.text and "Inbox" not in hit.text
    assert "Attachment: chart.png (108 bytes, not indexed)" in hit.text


def test_a_csv_reads_as_rows_under_its_header_cited_by_its_lines(tree, make_kb):
    rows = "\n".join(f"host{n},rack{n % 7},{'decommissioned' if n == 450 else 'active'}" for n in range(1, 600))
    kb = make_kb(tree({"hosts.csv": "name,rack,state\n" + rows + "\n", "t.tsv": "a\tb\nleft\tright\n"}))
    kb.index()
    hit = search(kb, "decommissioned")[0]
    assert hit.kind == "csv" and hit.heading == "columns: name | rack | state"
    assert "| host450 | rack2 | decommissioned |" in hit.text
    assert hit.start_line <= 451 <= hit.end_line  # the file's own line of host450
    window = run_tool("kb_read", kb, {"path": "docs/hosts.csv", "start_line": 451, "max_lines": 1},
                      Permissions(kb.config))
    assert window["text"] == "| host450 | rack2 | decommissioned |"
    assert search(kb, "right")[0].heading == "columns: a | b"


def test_a_vaults_front_matter_is_metadata_heading_the_note(tree, make_kb):
    note = ("---\ntitle: Roadmap Q3\ntags: [roadmap, q3]\naliases: [Q3 plan]\ndate: 2026-07-01\nowner: ana\n---\n\n"
            "The #infra work ships first.\n\n## Milestones\n\nSearch v2 in August.\n")
    kb = make_kb(tree({"roadmap.md": note}))
    kb.index()
    hit = search(kb, "August")[0]
    assert hit.heading == "Roadmap Q3 · #roadmap #q3 > Milestones"  # inline #words are in the text already
    assert "owner" not in hit.text and "tags:" not in hit.text and "Aliases: Q3 plan" in hit.text
    assert search(kb, "roadmap")[0].path == "roadmap.md"
    assert load(note.encode(), "markdown").text.count("\n") == note.count("\n")  # lines stay the file's
    assert is_plain_text("markdown")  # so kb_read still streams the file itself


@pytest.mark.parametrize("note", [
    "---\ntitle: [unclosed\n---\nbody text\n",  # YAML that does not parse: left as it is
    "---\n- a list\n---\nbody\n",  # not a mapping
    "---\nno closing line\n",
])
def test_front_matter_that_is_not_metadata_is_left_as_text(note):
    assert load(note.encode(), "markdown").text == note


def test_org_and_latex_sections_become_headings_on_their_own_lines():
    org = load(b"#+TITLE: Ops notes\n* Backups\nNightly at 2am.\n** Restore\nUse the script.\n", "org")
    chunk = chunk_document(org, "notes.org", CHUNKING)[0]
    assert chunk.heading == "Ops notes > Backups > Restore" and chunk.end_line == 5
    tex = load(b"\\title{Fast Search}\n\\section{Introduction}\nWe index.\n\\subsection*{Method}\nBM25.\n", "latex")
    assert chunk_document(tex, "paper.tex", CHUNKING)[0].heading == "Fast Search > Introduction > Method"


def test_every_new_kind_has_its_extension():
    assert [kind_of(name) for name in ("a.ipynb", "a.eml", "a.mbox", "a.csv", "a.tsv", "a.org", "a.tex")] == [
        "notebook", "email", "mbox", "csv", "tsv", "org", "latex"]


@pytest.mark.parametrize("kind, data", [
    ("notebook", b"{not json"),
    ("notebook", b'{"cells": 5}'),
    ("notebook", b"[" * 100_000),
    ("mbox", b"no separator at all\n"),
    ("csv", b'a,b\n"unclosed,\x00\n'),
])
def test_malformed_files_are_one_skip_reason(kind, data):
    try:
        document = load(data, kind)
    except LoadError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        chunk_document(document, f"x.{kind}", CHUNKING)  # or text that chunks


def test_hostile_notebooks_and_mailboxes_stay_bounded():
    cells = [{"cell_type": "code", "source": "x", "outputs": [{"output_type": "stream", "text": "y" * 10_000_000}]}]
    text = registry.named("notebook").read_function()(json.dumps({"cells": cells}).encode(), "notebook").text
    assert len(text) < 3_000
    many = b"".join(b"From a@b Mon Jan 1 00:00:00 2026\nSubject: %d\n\nx\n" % n for n in range(20_001))
    with pytest.raises(LoadError, match="over the 20,000"):
        load(many, "mbox")
    nested = email.message.EmailMessage()
    nested["Subject"] = "outer"
    nested.set_content("outer body")
    inner = email.message.EmailMessage()
    inner["Subject"] = "inner"
    inner.set_content("inner body")
    nested.add_attachment(inner.as_bytes(), maintype="application", subtype="octet-stream", filename="fwd.eml")
    assert "fwd.eml" in load(nested.as_bytes(), "email").text  # named, never parsed as a second message


def test_kb_read_follows_a_wikilink_to_its_note_and_heading(tree, make_kb):
    kb = make_kb(tree({"Roadmap.md": "# Roadmap\n\nSee [[Budget#Hardware|the budget]].\n",
                       "finance/Budget.md": "# Budget\n\n## Staff\n\nTwo hires.\n\n## Hardware\n\nFour servers.\n",
                       "a/Dup.md": "one\n", "b/Dup.md": "two\n"}))
    kb.index()
    note = kb.read("[[Budget#Hardware|the budget]]", max_lines=3)
    assert (note.path, note.start_line, note.text) == ("finance/Budget.md", 7, "## Hardware\n\nFour servers.")
    assert kb.read("[[finance/budget]]").start_line == 1
    window = run_tool("kb_read", kb, {"path": "[[Budget]]"}, Permissions(kb.config))
    assert window["path"] == "finance/Budget.md"
    for link, message in (("[[Nowhere]]", "names no indexed note"), ("[[Dup]]", "names more than one note")):
        with pytest.raises(Exception, match=message):
            kb.read(link)


def pptx_bytes() -> bytes:
    import io

    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for title, body, notes in [("Q3 results", "Revenue grew in every region", "Mention the Lisbon office"),
                               ("Hiring plan", "Two platform engineers", "")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    table = deck.slides[1].shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    for (r, c), text in {(0, 0): "role", (0, 1): "start", (1, 0): "SRE", (1, 1): "October"}.items():
        table.cell(r, c).text = text
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_bytes() -> bytes:
    import io

    import openpyxl

    book = openpyxl.Workbook()
    book.active.title = "Hosts"
    book.active.append(["name", "rack", "state"])
    for n in range(1, 40):
        book.active.append([f"host{n}", n % 5, "retired" if n == 33 else "active"])
    people = book.create_sheet("People")
    people.append(["name", "team"])
    people.append(["Ana", "storage"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def epub_bytes(tmp_path) -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("Field guide")
    chapters = []
    for n, (title, text) in enumerate([("Birds", "The heron waits at the river."),
                                       ("Trees", "The alder grows near water.")], 1):
        chapter = epub.EpubHtml(title=title, file_name=f"c{n}.xhtml")
        chapter.content = f"<html><body><h1>{title}</h1><p>{text}</p></body></html>"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = chapters
    epub.write_epub(tmp_path / "guide.epub", book)
    return (tmp_path / "guide.epub").read_bytes()


def test_slides_sheets_and_chapters_are_parts_headed_by_their_titles(tree, make_kb, tmp_path):
    kb = make_kb(tree({"deck.pptx": pptx_bytes(), "inventory.xlsx": xlsx_bytes(), "guide.epub": epub_bytes(tmp_path)}))
    summary = kb.index()[0]
    assert summary.skipped == []
    notes = search(kb, "Lisbon")[0]
    assert (notes.part, notes.heading) == ("slide 1", "Q3 results") and "Speaker notes: Mention the Lisbon" in notes.text
    assert notes.text.count("Q3 results") == 1  # the title heads its slide once, not again as body text
    table = search(kb, "October")[0]
    assert table.part == "slide 2" and "| SRE | October |" in table.text
    sheet = search(kb, "retired")[0]
    assert (sheet.part, sheet.heading) == ("sheet 1", "Sheet Hosts (columns: name | rack | state)")
    assert "| host33 | 3 | retired |" in sheet.text
    assert search(kb, "storage")[0].part == "sheet 2"
    chapter = search(kb, "alder")[0]
    assert (chapter.part, chapter.heading) == ("chapter 2", "Trees")


@pytest.mark.parametrize("kind", ["pptx", "xlsx", "epub"])
def test_broken_office_files_are_one_skip_reason(kind):
    for data in (b"PK\x03\x04 not really a zip", b"plain text"):
        with pytest.raises(LoadError):
            load(data, kind)


def test_front_matter_aliases_cannot_expand():
    laughs = "---\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + n)}: &{chr(98 + n)} [*{chr(97 + n)}, *{chr(97 + n)}, *{chr(97 + n)}, *{chr(97 + n)}, *{chr(97 + n)}]\n"
        for n in range(12)) + "tags: *m\ndate: *m\n---\nbody\n"
    assert load(laughs.encode(), "markdown").text == laughs  # refused whole: left as text, in bounded time


def odt_bytes(tmp_path) -> bytes:
    """An OpenDocument text written by odfpy: headings, a list, a table, runs of spaces."""
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableRow
    from odf.text import H, List, ListItem, P, S

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Field guide"))
    intro = P(text="Herons wade")
    intro.addElement(S(c=3))
    intro.addText("in shallow water.")
    document.text.addElement(intro)
    document.text.addElement(H(outlinelevel=2, text="Kit"))
    kit = List()
    for item in ("binoculars", "waders"):
        entry = ListItem()
        entry.addElement(P(text=item))
        kit.addElement(entry)
    document.text.addElement(kit)
    table = Table()
    for cells in (("bird", "season"), ("heron", "spring")):
        row = TableRow()
        for value in cells:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    document.save(str(tmp_path / "guide.odt"))
    return (tmp_path / "guide.odt").read_bytes()


def ods_bytes(tmp_path) -> bytes:
    """An OpenDocument spreadsheet written by odfpy: two sheets, one with a cell repeated to the edge."""
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    book = OpenDocumentSpreadsheet()
    for name, rows in (("Stock", [("item", "count"), ("bolts", "40"), ("nuts", "12")]), ("Prices", [("item", "eur"), ("bolts", "0.1")])):
        sheet = Table(name=name)
        for cells in rows:
            row = TableRow()
            for value in cells:
                cell = TableCell(valuetype="string")
                cell.addElement(P(text=value))
                row.addElement(cell)
            row.addElement(TableCell(numbercolumnsrepeated=16_000))  # empty cells to the sheet's edge
            sheet.addElement(row)
        book.spreadsheet.addElement(sheet)
    book.save(str(tmp_path / "stock.ods"))
    return (tmp_path / "stock.ods").read_bytes()


def test_opendocument_text_and_sheets_read_as_docx_and_xlsx_do(tree, make_kb, tmp_path):
    text = load(odt_bytes(tmp_path), "odt").text
    assert text.startswith("# Field guide\n") and "Herons wade   in shallow water." in text
    assert "## Kit" in text and "- binoculars" in text and "| heron | spring |" in text
    kb = make_kb(tree({"guide.odt": odt_bytes(tmp_path), "stock.ods": ods_bytes(tmp_path)}))
    [summary] = kb.index()
    assert summary.skipped == []
    hit = search(kb, "waders")[0]
    assert (hit.path, hit.heading) == ("guide.odt", "Field guide > Kit")
    hit = search(kb, "bolts eur")[0]
    assert (hit.path, hit.part) == ("stock.ods", "sheet 2") and hit.heading.startswith("Sheet Prices (columns: item | eur)")
    assert len(search(kb, "nuts")[0].text) < 200  # the 16,000 empty cells are not text
    hit = search(kb, "waders")[0]
    window = run_tool("kb_read", kb, {"path": f"{hit.directory}/{hit.path}", "start_line": hit.start_line,
                                      "max_lines": hit.end_line - hit.start_line + 1}, Permissions(kb.config))
    assert "waders" in window["text"] and "<text:" not in window["text"]  # the text, as it was cited


@pytest.mark.parametrize("content", [
    b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]><x>&b;</x>',
    b"<not xml",
    b'<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"/>',
    b'<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    b'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
    + b"<text:section>" * 5000 + b"</text:section>" * 5000 + b"</office:text></office:body></office:document-content>",
])
@pytest.mark.parametrize("kind", ["odt", "ods"])
def test_hostile_opendocument_files_are_one_skip_reason(kind, content, tmp_path):
    import zipfile

    path = tmp_path / f"x.{kind}"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("content.xml", content)
    for data in (path.read_bytes(), b"PK\x03\x04 not really a zip"):
        try:
            registry.named(kind).read_function()(data, kind)
        except LoadError as exc:
            assert str(exc) and "\n" not in str(exc)


def test_a_long_code_cell_is_cut_at_its_functions_under_the_cells_heading():
    functions = "\n\n".join(
        f"def step_{name}(rows):\n    \"\"\"Stage {name} of the pipeline.\"\"\"\n" + "".join(
            f"    rows = [r for r in rows if r.get('{name}_{i}') is not None]  # filter {i}\n" for i in range(25))
        + "    return rows" for name in ("load", "clean", "score", "report"))
    notebook = new_notebook(metadata={"language_info": {"name": "python"}})
    notebook.cells = [new_markdown_cell("# Pipeline\n\nThe stages, in order."), new_code_cell(functions),
                      new_code_cell("step_load([])")]
    chunks = chunk_document(load(nbformat.writes(notebook).encode(), "notebook"), "nb.ipynb", CHUNKING)
    headed = {c.heading for c in chunks}
    assert {"Pipeline > def: step_score", "Pipeline > def: step_report"} <= headed
    scored = [c for c in chunks if "def step_score" in c.text]
    assert len(scored) == 1 and "def step_report" not in scored[0].text and scored[0].page == 2  # cell 2
    assert any("```python\nstep_load([])\n```" in c.text for c in chunks)  # a short cell stays whole (joined, not cut)


def test_a_file_skipped_for_a_missing_library_is_read_once_the_library_is_there(tree, make_kb):
    """Issue #52, 2: a deck skipped before `pip install '...[office]'` stayed unread (its stat had not
    changed) and status called it binary or unreadable. The skip names the module; a run that finds
    it importable reads the file again, and status says each skip's own reason."""
    from hermes_kb.agent.knowledgebase.kinds.office import _library
    from hermes_kb.agent.knowledgebase.kinds.document import LoadError, cured_skip

    with pytest.raises(LoadError) as missing:
        _library("no_such_module_xyz", "Foo")
    assert "(the Python module no_such_module_xyz is not installed)" in str(missing.value)
    assert not cured_skip(str(missing.value)) and not cured_skip(None) and not cured_skip("encrypted")
    root = tree({"deck.pptx": pptx_bytes(), "a.md": "# A\n\nalpha\n", "broken.pdf": b"%PDF-1.4 not really"})
    kb = make_kb(root)
    kb.index()
    path = kb.index_path(kb.config.directories[0])
    with kb.backend.open(path) as store:  # as a run before the extra was installed left it
        stat = (root / "deck.pptx").stat()
        store.write_file("deck.pptx", stat.st_size, stat.st_mtime_ns, "old", "pptx", [], None,
                         error=str(LoadError(_missing_pptx())))
    [row] = kb.status()
    assert {skip["reason"] for skip in row["skipped"]} >= {_missing_pptx()}
    [summary] = kb.index()
    assert summary.changed == 1 and summary.unchanged == 2
    assert kb.search("Lisbon office", mode="keyword").hits[0].path == "deck.pptx"
    assert _missing_pptx() not in str(kb.status()[0].get("skipped"))


def _missing_pptx() -> str:
    from hermes_kb.agent.knowledgebase.kinds.document import missing_extra

    return missing_extra("PowerPoint", "pptx", "office")
