"""Fuzz target: every loader (first byte picks the kind), then the chunker on what it returns.

The loaders are called directly, past the safety net in `load()`, so a parser bug shows here.
Only LoadError may come out of a loader; a loaded text must be storable (valid UTF-8) and its
chunks exact slices of it.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile

import _harness  # the repository on sys.path

with _harness.instrumented():
    from hermes_kb.agent.knowledgebase.chunker import chunk_document
    from hermes_kb.agent.knowledgebase.config import ChunkingConfig
    from hermes_kb.agent.knowledgebase.kinds import registry
    from hermes_kb.agent.knowledgebase.kinds.document import LoadError
    from hermes_kb.agent.knowledgebase.loaders import load
    for file_kind in registry.FILE_KINDS:  # the readers load lazily: imported here, so they are instrumented
        file_kind.read_function()
    try:
        import docx  # noqa: F401  (imported here so python-docx is instrumented too)
    except ImportError:
        pass

KINDS = [*registry.NAMES, "unknown"]
CHUNKING = ChunkingConfig(chunk_size=48, chunk_overlap=8)  # small: more cuts per input


def test_one_input(data: bytes) -> None:
    if not data:
        return
    kind = KINDS[data[0] % len(KINDS)]
    try:
        document = registry.named(kind).read_function()(data[1:], kind) if kind in registry.NAMES else load(data[1:], kind)
    except LoadError as exc:
        assert str(exc), "a LoadError needs a message: it is the skip reason"
        return
    document.text.encode("utf-8")  # a lone surrogate would fail in SQLite and JSON
    assert list(document.page_starts) == sorted(document.page_starts)
    for chunk in chunk_document(document, f"fuzz.{kind}", CHUNKING):
        assert chunk.text == document.text[chunk.start_char:chunk.end_char]
        assert 1 <= chunk.start_line <= chunk.end_line


def _docx() -> bytes:
    """The smallest package python-docx opens: a document part with a heading and a paragraph."""
    body = ('<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
            '<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Title</w:t></w:r></w:p>'
            '<w:p><w:r><w:t>Some words here.</w:t></w:r></w:p></w:body></w:document>')
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", (
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'wordprocessingml.document.main+xml"/></Types>'))
        archive.writestr("_rels/.rels", (
            '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'officeDocument" Target="word/document.xml"/></Relationships>'))
        archive.writestr("word/document.xml", body)
    return buffer.getvalue()


def _odf(part: str, inner: str) -> bytes:
    """A minimal OpenDocument file: content.xml is all its loaders read."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("content.xml", (
            '<?xml version="1.0"?><office:document-content '
            'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
            'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
            'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0">'
            f"<office:body><office:{part}>{inner}</office:{part}></office:body></office:document-content>"))
    return buffer.getvalue()


def _pdf() -> bytes:
    import pymupdf

    pdf = pymupdf.open()
    pdf.new_page(width=200, height=100).insert_text((10, 40), "Fuzz page one")
    pdf.new_page(width=200, height=100).insert_text((10, 40), "Page two")
    return pdf.tobytes(deflate=True)


def seeds() -> list[bytes]:
    text = {
        "markdown": "# Title\n\nSome *text*.\n\n```py\ncode\n```\n\n| a | b |\n|---|---|\n",
        "python": "import os\n\n@dec\ndef f(x):\n    return x\n\nclass A:\n    def m(self):\n        pass\n",
        "javascript": "export default async function g() {}\nconst x = 1;\nclass B {}\n",
        "html": "<html><style>x</style><h2>Head</h2><p>Hello &amp; <b>bye</b></p><script>1</script></html>",
        "text": "Title\n=====\n\nplain words.\r\nline two\rline three\n",
        "json": '{"a": [1, 2, {"b": null}]}',
        "yaml": "a: 1\nb: [x, y]\n",
    }
    out = [bytes([KINDS.index(kind)]) + body.encode("utf-8") for kind, body in text.items()]
    out.append(bytes([KINDS.index("text")]) + "\ufeffutf16 words\r\n".encode("utf-16-le"))
    out.append(bytes([KINDS.index("docx")]) + _docx())
    out.append(bytes([KINDS.index("odt")]) + _odf("text", '<text:h text:outline-level="2">H</text:h>'
                                                          '<text:p>a<text:s text:c="3"/>b<text:tab/></text:p>'))
    out.append(bytes([KINDS.index("ods")]) + _odf("spreadsheet", '<table:table table:name="S"><table:table-row>'
                                                                 '<table:table-cell table:number-columns-repeated="4">'
                                                                 '<text:p>x</text:p></table:table-cell></table:table-row>'
                                                                 '</table:table>'))
    notebook = {"cells": [{"cell_type": "markdown", "source": ["# Notes\n", "text"]},
                          {"cell_type": "code", "source": "print(1)", "outputs": [
                              {"output_type": "stream", "text": ["1\n"]},
                              {"output_type": "execute_result", "data": {"text/plain": "2"}}]}],
                "metadata": {"language_info": {"name": "python"}}}
    out.append(bytes([KINDS.index("notebook")]) + json.dumps(notebook).encode())
    mail = ("From: a@example.org\nTo: b@example.org\nSubject: Plan\nMIME-Version: 1.0\n"
            "Content-Type: multipart/mixed; boundary=X\n\n--X\nContent-Type: text/plain\n\nHello\n"
            "--X\nContent-Type: text/html\n\n<p>Hi</p>\n--X--\n")
    out.append(bytes([KINDS.index("email")]) + mail.encode())
    out.append(bytes([KINDS.index("mbox")]) + ("From a@example.org Mon Jan 1 00:00:00 2024\n" + mail).encode())
    for kind, make in (("xlsx", _xlsx), ("pptx", _pptx), ("epub", _epub)):
        try:
            out.append(bytes([KINDS.index(kind)]) + make())
        except ImportError:  # the office extra missing: that loader is still fuzzed from the other seeds
            pass
    try:
        out.append(bytes([KINDS.index("pdf")]) + _pdf())
    except Exception:  # pymupdf missing: the PDF loader is still fuzzed from the other seeds
        pass
    return out


def _xlsx() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["name", "value"])
    book.active.append(["a", 1])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _pptx() -> bytes:
    import pptx

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Plan"
    slide.placeholders[1].text = "Ship it"
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _epub() -> bytes:
    """A one-chapter e-book whose spine names the chapter twice (each is read once)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", (
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="c.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'))
        archive.writestr("c.opf", (
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="i">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="i">x</dc:identifier>'
            '<dc:title>T</dc:title></metadata><manifest><item id="c1" href="c1.xhtml" '
            'media-type="application/xhtml+xml"/></manifest><spine><itemref idref="c1"/><itemref idref="c1"/></spine>'
            '</package>'))
        archive.writestr("c1.xhtml", '<html xmlns="http://www.w3.org/1999/xhtml"><body><p>Chapter</p></body></html>')
    return buffer.getvalue()


if __name__ == "__main__":
    from _harness import fuzz_main

    fuzz_main(test_one_input)
    sys.exit(0)
