"""PDFs as a reader meets them: cited by the page the answer is on, headed by the outline, without
the running headers and footers every page repeats. Every PDF here is built by pymupdf in the test."""

from collections import Counter

import pymupdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_kb.agent.knowledgebase.chunker import chunk_document
from hermes_kb.agent.knowledgebase.config import ChunkingConfig
from hermes_kb.agent.knowledgebase.loaders import load

HEADER = "ACME Frobnicator Manual, revision 7"
FILLER = ("The housing is made of anodised aluminium and carries the serial plate on its left side. "
          "Keep the packaging until the unit has passed its first inspection. ")


def filler(sentences: int, topic: str) -> str:
    return " ".join(f"{topic} note {n}: {FILLER}" for n in range(sentences))


def write_page(pdf, body: list[str], number: int, running: bool = True) -> None:
    """A4 page: header and footer in the margins, the body as wrapped paragraphs from the top."""
    page = pdf.new_page(width=595, height=842)
    if running:
        page.insert_text((72, 40), HEADER, fontsize=9)
        page.insert_text((280, 815), f"Page {number}", fontsize=9)
    top = 72
    for paragraph in body:
        box = pymupdf.Rect(72, top, 523, 800)
        left = page.insert_textbox(box, paragraph, fontsize=10)
        assert left >= 0, "the test's paragraph does not fit its page"
        top = 800 - left + 14


def manual(tmp_path, running: bool = True, outline: bool = True):
    """Four pages; the answer to the torque question opens page 3, right after a full page 2.

    Page 1 is front matter labelled "i", so physical page 3 is printed as page "2": hits must cite 3.
    """
    pdf = pymupdf.open()
    write_page(pdf, ["Frobnicator manual", "Front matter and legal notices."], 1, running)
    # Sized so that chunks packed over the page break (the old way) put the answer in a chunk that
    # starts with the foot of page 2: that chunk was cited as page 2.
    write_page(pdf, ["1 Installation", filler(2, "Unpacking"), "1.1 Requirements", filler(8, "Site")], 2, running)
    write_page(pdf, ["The calibration torque for the flange bolts is 42 newton metres; tighten them crosswise.",
                     filler(3, "Mounting"),
                     "2 Maintenance", "Replace the quixotic gasket every 300 operating hours.",
                     filler(4, "Service")], 3, running)
    write_page(pdf, [filler(4, "Cleaning")], 4, running)
    if outline:
        pdf.set_toc([[1, "1 Installation", 2], [2, "1.1 Requirements", 2], [1, "2 Maintenance", 3]])
    pdf.set_page_labels([{"startpage": 0, "prefix": "", "style": "r", "firstpagenum": 1},
                         {"startpage": 1, "prefix": "", "style": "D", "firstpagenum": 1}])
    path = tmp_path / "docs" / "manual.pdf"
    path.parent.mkdir(exist_ok=True)
    pdf.save(path)
    return path


def top_hit(kb, query):
    hits = kb.search(query, k=3).hits
    assert hits, f"no hit for {query!r}"
    return hits[0]


def test_answer_right_after_a_page_break_is_cited_by_its_own_page(tmp_path, make_kb):
    path = manual(tmp_path)
    kb = make_kb(path.parent)
    kb.index()
    hit = top_hit(kb, "calibration torque flange bolts")
    assert "42 newton metres" in hit.text
    assert hit.page == 3  # physical and 1-based: the page is printed "2", the page before holds the text it follows
    assert hit.heading == "1 Installation > 1.1 Requirements"  # the section runs on over the break
    assert "Site note" not in hit.text  # nothing of page 2 rides along


def test_outline_heads_the_section_a_chunk_starts_in(tmp_path, make_kb):
    kb = make_kb(manual(tmp_path).parent)
    kb.index()
    hit = top_hit(kb, "quixotic gasket operating hours")
    assert (hit.page, hit.heading) == (3, "2 Maintenance")
    assert hit.text.startswith("2 Maintenance")
    front = top_hit(kb, "front matter legal notices")
    assert (front.page, front.heading) == (1, "")  # before the first outline entry: no heading


def test_running_header_and_footer_are_gone_from_hits_and_text(tmp_path, make_kb):
    path = manual(tmp_path)
    document = load(path.read_bytes(), "pdf")
    assert HEADER not in document.text and "Page 3" not in document.text
    kb = make_kb(path.parent)
    kb.index()
    for query in ("calibration torque flange bolts", "Cleaning note anodised aluminium"):
        hit = top_hit(kb, query)
        assert "ACME" not in hit.text and "Page " not in hit.text


def test_a_two_page_document_keeps_its_repeated_lines(tmp_path):
    pdf = pymupdf.open()
    for number in (1, 2):
        write_page(pdf, [filler(2, f"Part {number}")], number)
    document = load(pdf.tobytes(), "pdf")
    assert document.text.count(HEADER) == 2 and "Page 2" in document.text


def test_without_an_outline_pdf_chunks_have_no_heading(tmp_path):
    path = manual(tmp_path, outline=False)
    chunks = chunk_document(load(path.read_bytes(), "pdf"), "manual.pdf", ChunkingConfig())
    assert chunks and all(chunk.heading == "" for chunk in chunks)


@pytest.mark.parametrize("running", [True, False])
def test_no_pdf_chunk_crosses_a_page_break_between_pages_of_text(tmp_path, running):
    document = load(manual(tmp_path, running=running).read_bytes(), "pdf")
    chunks = chunk_document(document, "manual.pdf", ChunkingConfig(chunk_size=200, chunk_overlap=30))
    starts = document.page_starts
    for chunk in chunks:
        # Page 1 holds a dozen words: a tiny page may join the next, every other break is a cut.
        crossed = [start for start in starts[2:] if chunk.start_char < start < chunk.end_char]
        assert not crossed, chunk.text
        assert starts[chunk.page - 1] <= chunk.start_char or chunk.page == 2


def test_a_heading_wrapped_over_two_lines_is_found_by_its_destination(tmp_path):
    pdf = pymupdf.open()
    write_page(pdf, [filler(3, "Intro")], 1)
    write_page(pdf, [filler(2, "Before"), "3 A heading so long that the outline and the page\nbreak it differently",
                     "Zanzibar paragraph under the long heading."], 2)
    write_page(pdf, [filler(2, "After")], 3)
    data = pdf.tobytes()
    heading_top = next(block[1] for block in pymupdf.open(stream=data)[1].get_text("blocks") if block[4].startswith("3 A"))
    pdf.set_toc([[1, "3 A heading so long that the outline and the page break it differently", 2,
                  {"kind": pymupdf.LINK_GOTO, "page": 1, "to": pymupdf.Point(72, 842 - heading_top + 2)}]])
    document = load(pdf.tobytes(), "pdf")
    offset, path = document.headings[0]
    assert document.text[offset:].startswith("3 A heading so long")
    zanzibar = next(c for c in chunk_document(document, "x.pdf", ChunkingConfig()) if "Zanzibar" in c.text)
    assert zanzibar.heading == path and zanzibar.page == 2


def test_a_tiny_page_joins_the_next_and_is_cited_by_where_its_text_is():
    from hermes_kb.agent.knowledgebase.kinds.document import Document

    cover, body = "Cover\n\n", "Torque values for every flange are listed in the table below. " * 6 + "\n\n"
    document = Document(cover + body, "pdf", (0, len(cover)))
    chunks = chunk_document(document, "x.pdf", ChunkingConfig(chunk_size=200, chunk_overlap=30))
    assert len(chunks) == 1 and chunks[0].text.startswith("Cover") and chunks[0].page == 2


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.sampled_from("ab \n."), min_size=1, max_size=400),
       cuts=st.lists(st.integers(1, 400), max_size=5), titles=st.lists(st.integers(0, 400), max_size=4),
       size=st.integers(8, 80))
def test_pdf_chunks_are_slices_cited_by_their_pages_and_headed_by_the_outline(text, cuts, titles, size):
    from hermes_kb.agent.knowledgebase.kinds.document import Document

    starts = tuple(sorted({0, *(c for c in cuts if c < len(text))}))
    headings = tuple((offset, f"Section {n}") for n, offset in enumerate(sorted(t for t in titles if t < len(text))))
    document = Document(text, "pdf", starts, headings)
    chunks = chunk_document(document, "x.pdf", ChunkingConfig(chunk_size=size, chunk_overlap=size // 4))
    covered = set()
    for chunk in chunks:
        assert chunk.text == text[chunk.start_char:chunk.end_char] and chunk.text.strip() == chunk.text
        covered.update(range(chunk.start_char, chunk.end_char))
        pages = Counter(sum(1 for s in starts if s <= i) for i in range(chunk.start_char, chunk.end_char))
        assert chunk.page == min(pages, key=lambda page: (-pages[page], page))
        inside = [n for n, (offset, _) in enumerate(headings) if offset <= chunk.start_char]
        # Headed by the section it starts in (a tiny page joins only a next page of the same section).
        assert chunk.heading == (headings[inside[-1]][1] if inside else "")
        assert not any(chunk.start_char < offset < chunk.end_char for offset, _ in headings)
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_thousands_of_bookmarks_on_one_page_load_in_linear_time():
    import time

    lines = 3000
    pdf = pymupdf.open()
    page = pdf.new_page(width=3000, height=20000)
    page.insert_textbox(pymupdf.Rect(5, 5, 2995, 19995), "\n".join(f"line {n} text" for n in range(lines)), fontsize=3)
    pdf.set_toc([[1, f"Entry {n}", 1] for n in range(lines)])
    data = pdf.tobytes(deflate=True)
    started = time.perf_counter()
    document = load(data, "pdf")
    assert len(document.headings) == lines
    assert time.perf_counter() - started < 2.5  # a scan of the page per bookmark took 4.9 s here, now 0.2 s


def test_a_table_laid_out_in_columns_reads_as_rows():
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 60), "The header of the cache file:", fontsize=10)
    rows = [("2", "CARD16", "MAJOR_VERSION"), ("4", "CARD32", "ALIAS_LIST_OFFSET"), ("4", "CARD32", "GLOB_LIST_OFFSET")]
    for n, row in enumerate(rows):
        for x, cell in zip((72, 120, 200), row):
            page.insert_text((x, 90 + 14 * n), cell, fontsize=10)
    page.insert_text((72, 160), "A paragraph of prose follows the table,\nwritten on two lines.", fontsize=10)
    text = load(pdf.tobytes(), "pdf").text
    assert "| 4 | CARD32 | ALIAS_LIST_OFFSET |" in text and "| 2 | CARD16 | MAJOR_VERSION |" in text
    assert "A paragraph of prose follows the table,\nwritten on two lines." in text  # prose keeps its lines


def test_pieces_of_one_line_are_one_line_not_table_cells():
    """OCR (and some PDF writers) give a line in pieces a little apart: joined as text, without a
    space between characters of a script written without spaces; only real column gaps make cells."""
    pdf = pymupdf.open()
    page = pdf.new_page()
    for n, (left, right) in enumerate((("Invoice 4471", "is due in May"), ("Pumps were", "shipped to Rotterdam"))):
        y = 60 + 14 * n
        page.insert_text((72, y), left, fontsize=10)
        page.insert_text((72 + pymupdf.get_text_length(left, fontsize=10) + 4, y), right, fontsize=10)
    for n, (left, right) in enumerate((("黑豹队的防守", "只丢了三百分"), ("在联赛中排名", "第六名"))):
        y = 120 + 16 * n
        page.insert_text((72, y), left, fontsize=11, fontname="china-s")
        page.insert_text((72 + 11 * len(left) + 16, y), right, fontsize=11, fontname="china-s")  # 1.3 line heights
    text = load(pdf.tobytes(), "pdf").text
    assert "Invoice 4471 is due in May\nPumps were shipped to Rotterdam" in text
    assert "黑豹队的防守只丢了三百分\n在联赛中排名第六名" in text and "|" not in text


def test_kb_read_takes_the_page_a_citation_gives_and_says_which_pages_lines_are_on(tmp_path, make_kb):
    """Issue #52, 7: citations give a PDF page, kb_read took only lines and did not say which page its
    lines were on, so the model needed another search to read page 3."""
    from hermes_kb.agent.knowledgebase.service import KnowledgebaseError
    from hermes_kb.tools.knowledgebase_tool import run_tool
    from hermes_kb.tools.permissions import Permissions

    path = manual(tmp_path)
    kb = make_kb(path.parent)
    kb.index()
    hit = top_hit(kb, "calibration torque flange bolts")
    page = kb.read("docs/manual.pdf", part=hit.page)
    assert page.parts == "page 3" and "42 newton metres" in page.text and "Cleaning note" not in page.text
    assert "Site note" not in page.text  # page 2 is not part of it
    by_lines = kb.read("docs/manual.pdf", start_line=1, max_lines=500)
    assert by_lines.parts == "pages 1-4"
    with pytest.raises(KnowledgebaseError, match="it has 4 pages, so there is no page 9"):
        kb.read("docs/manual.pdf", part=9)
    (path.parent / "plain.md").write_text("# Plain\n\nA note.\n")
    kb.index()
    with pytest.raises(KnowledgebaseError, match="cited by lines, not by pages"):
        kb.read("docs/plain.md", part=1)
    result = run_tool("kb_read", kb, {"path": "docs/manual.pdf", "page": 3}, Permissions(kb.config))
    assert result["parts"] == "page 3" and "42 newton metres" in result["text"]
