import io

import pytest

from hermes_kb.agent.knowledgebase.kinds.document import LoadError

from hermes_kb.agent.knowledgebase.loaders import load


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
    window = read_window(root, "notes.md", rules, lambda kind: 1_000_000, start_line=3, max_lines=2)
    assert (window.text, window.end_line, window.total_lines) == ("line 3 wörd\nline 4 wörd", 4, 7)
    with pytest.raises(NotReadable, match="binary"):
        read_window(root, "blob.txt", rules, lambda kind: 1_000_000, start_line=1, max_lines=5)


@pytest.mark.parametrize("text, codec", [
    ("Le café était très bon. Où est la gare? Déjà vu, naïve, façade.\n", "cp1252"),
    ("Smart “quotes” and an em—dash cost 5€; it’s fine.\n", "cp1252"),
    ("Grüße aus München, schöne Straße.\n", "latin-1"),
    ("café\n", "latin-1"),
    ("Zażółć gęślą jaźń. Łódź jest pięknym miastem.\n", "cp1250"),
    ("Съешь же ещё этих мягких французских булок, да выпей чаю.\n", "cp1251"),
])
def test_text_that_is_not_utf8_is_decoded_in_its_own_encoding(text, codec):
    assert load(text.encode(codec), "text").text == text


def test_utf8_with_one_damaged_byte_stays_utf8():
    data = "Grüße aus München. ".encode() * 20 + b"\xff" + "Schöne Straße.\n".encode()
    text = load(data, "text").text
    assert "München" in text and text.endswith("Schöne Straße.\n") and text.count("\ufffd") == 1


def test_a_latin1_byte_far_into_an_ascii_file_is_decoded_by_the_text_around_it():
    data = b"plain ascii line\n" * 20_000 + "Le café était très bon.\n".encode("cp1252")
    assert load(data, "text").text.endswith("Le café était très bon.\n")


def test_binary_without_a_bom_is_still_refused_whatever_the_detector_would_say():
    with pytest.raises(LoadError, match="binary"):
        load("café".encode("cp1252") + b"\x00\x01\x02" + bytes(range(256)), "text")


def test_a_latin1_file_is_found_and_shown_right(tree, make_kb):
    lines = ["Menu du jour", "", "Le café crème est servi à 8 h.", "La crème brûlée coûte 6 €."]
    root = tree({"menu.txt": "\r\n".join(lines).encode("cp1252")})
    kb = make_kb(root)
    kb.index()
    hit = kb.search("café crème", k=1).hits[0]
    assert "Le café crème est servi à 8 h." in hit.text and "\ufffd" not in hit.text
    window = kb.read(str(root / "menu.txt"), start_line=3, max_lines=2)  # kb_read serves the lines indexed
    assert (window.text, window.total_lines) == ("Le café crème est servi à 8 h.\nLa crème brûlée coûte 6 €.", 4)
