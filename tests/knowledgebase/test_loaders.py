import io

import pytest

from hermes_kb.agent.knowledgebase.loaders import LoadError, load


def test_undecodable_bytes_do_not_crash():
    document = load(b"caf\xe9 and \xff\xfe text\r\nline two", "text")
    assert "caf" in document.text and "line two" in document.text and "\r" not in document.text


def test_binary_is_rejected():
    with pytest.raises(LoadError, match="binary"):
        load(b"\x89PNG\x00\x00\x01", "text")


def test_html_keeps_text_and_headings_only():
    html = b"<html><head><style>p{}</style><script>var x=1</script></head><body><h2>Title</h2><p>Hello &amp; bye</p></body></html>"
    document = load(html, "html")
    assert "## Title" in document.text and "Hello & bye" in document.text
    assert "var x" not in document.text and "p{}" not in document.text


def test_pdf_pages(tmp_path):
    import pymupdf

    pdf = pymupdf.open()
    for n in range(3):
        pdf.new_page().insert_text((72, 72), f"Page number {n + 1} mentions zebra{n}")
    document = load(pdf.tobytes(), "pdf")
    assert len(document.page_starts) == 3
    assert document.text.index("zebra2") >= document.page_starts[2]


def test_corrupt_pdf_raises_load_error():
    with pytest.raises(LoadError, match="PDF"):
        load(b"%PDF-1.4\n this is not really a pdf", "pdf")


def test_docx_headings_become_markdown():
    import docx

    document = docx.Document()
    document.add_heading("Release notes", level=1)
    document.add_paragraph("The widget now supports quantum mode.")
    buffer = io.BytesIO()
    document.save(buffer)
    loaded = load(buffer.getvalue(), "docx")
    assert "# Release notes" in loaded.text and "quantum mode" in loaded.text
