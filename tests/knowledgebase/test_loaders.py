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


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8"])
def test_text_with_a_bom_is_decoded_by_it(codec):
    text = "# Tïtle\r\nline two 😀\n"
    document = load("\ufeff".encode(codec) + text.encode(codec), "markdown")
    assert document.text == "# Tïtle\nline two 😀\n"


def test_utf16_without_a_bom_is_still_binary():
    with pytest.raises(LoadError, match="binary"):
        load("plain words".encode("utf-16-le"), "text")


def test_a_binary_that_starts_like_a_bom_is_still_binary():
    with pytest.raises(LoadError, match="binary"):
        load(b"\xff\xfe\x00\x00" + b"\x00" * 64, "text")


def test_odd_length_utf16_is_decoded_with_a_replacement():
    document = load("\ufeffabc".encode("utf-16-le") + b"x", "text")
    assert document.text.startswith("abc") and document.text.encode("utf-8")


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_kb_read_decodes_utf16_and_utf32_by_their_bom(tree, codec):
    from hermes_kb.agent.knowledgebase.readable import NotReadable, read_window
    from hermes_kb.agent.knowledgebase.scanner import IgnoreRules

    lines = [f"line {n} wörd" for n in range(1, 8)]
    root = tree({"notes.md": "\ufeff".encode(codec) + "\r\n".join(lines).encode(codec),
                 "blob.txt": b"\xff\xfe\x00\x00" + b"\x00" * 40})
    rules = IgnoreRules(root)
    window = read_window(root, "notes.md", rules, 1_000_000, start_line=3, max_lines=2)
    assert (window.text, window.end_line, window.total_lines) == ("line 3 wörd\nline 4 wörd", 4, 7)
    with pytest.raises(NotReadable, match="binary"):
        read_window(root, "blob.txt", rules, 1_000_000, start_line=1, max_lines=5)
