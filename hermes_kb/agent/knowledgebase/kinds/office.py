"""Office files and e-books: Word documents (the `docx` extra); slides, spreadsheets and EPUB
chapters as numbered parts headed by their titles (the `office` extra: python-pptx, openpyxl,
EbookLib); OpenDocument text and spreadsheets read with the standard library and defusedxml."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from io import BytesIO

import defusedxml
from defusedxml import ElementTree as defused_tree

from .document import (
    Document,
    LoadError,
    check_archive,
    decode_text,
    missing_extra,
    parts,
)
from .html import html_document
from .text import MAX_TABLE_ROWS, table_cell


def read_docx(data: bytes, kind: str) -> Document:
    try:
        import docx
    except ImportError:
        raise LoadError(missing_extra("DOCX", "docx", "docx")) from None
    check_archive(data)
    try:  # python-docx surfaces zip and xml errors directly, while opening and while reading parts
        document = docx.Document(BytesIO(data))
        # python-docx looks a paragraph's style up by XPath over the whole style sheet each time
        # (`paragraph.style`): 450k paragraphs took 517 s. One table of style names, read once, is linear.
        style_names = {style.style_id: style.name or "" for style in document.styles}
        lines = []
        for paragraph in document.paragraphs:
            style = style_names.get(paragraph._p.style, "")
            level = style.removeprefix("Heading ").strip()
            prefix = "#" * int(level) + " " if style.startswith("Heading ") and level.isdigit() else ""
            lines.append(prefix + paragraph.text)
    except Exception as exc:
        raise LoadError(f"unreadable DOCX ({exc})") from None
    return Document("\n\n".join(line for line in lines if line.strip()) + "\n", kind)


def _library(module: str, package: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise LoadError(missing_extra(package, module, "office")) from None


def read_pptx(data: bytes, kind: str) -> Document:
    pptx = _library("pptx", "PowerPoint")
    check_archive(data)
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        slides = []
        for number, slide in enumerate(deck.slides, 1):
            title_shape = slide.shapes.title
            title = " ".join((title_shape.text_frame.text if title_shape is not None and title_shape.has_text_frame
                              else "").split()) or f"Slide {number}"
            lines = [f"# {title}", ""]
            for shape in slide.shapes:
                # python-pptx hands out a new proxy per access: the title is known by its shape id
                if title_shape is not None and shape.shape_id == title_shape.shape_id:
                    continue
                if shape.has_text_frame:
                    lines += [p.text.strip() for p in shape.text_frame.paragraphs if p.text.strip()]
                if getattr(shape, "has_table", False) and shape.has_table:
                    lines += ["| " + " | ".join(table_cell(c.text) for c in row.cells) + " |" for row in shape.table.rows]
            if slide.has_notes_slide:
                notes = slide.notes_slide.notes_text_frame.text.strip() if slide.notes_slide.notes_text_frame else ""
                if notes:
                    lines += ["", f"Speaker notes: {' '.join(notes.split())}"]
            slides.append("\n".join(lines) + "\n")
    except LoadError:
        raise
    except Exception as exc:  # python-pptx surfaces zip, XML and part errors directly
        raise LoadError(f"unreadable PowerPoint file ({exc})") from None
    return parts(slides, kind)


def _sheet_sections(sheets: Iterable[tuple[str, Iterable[list[str]]]]) -> list[str]:
    """(name, rows of cell texts) of each sheet as a section headed by its first row, empty rows left
    out, at most MAX_TABLE_ROWS rows in all (said in the text)."""
    sections, rows_left = [], MAX_TABLE_ROWS
    for name, rows in sheets:
        lines, header = [], None
        for cells in rows:
            if not any(cells):
                continue
            if rows_left == 0:
                lines.append(f"(rows after {MAX_TABLE_ROWS:,} are not indexed)")
                break
            line = "| " + " | ".join(cells) + " |"
            header = header or line
            lines.append(line)
            rows_left -= 1
        if header is not None:
            sections.append(f"# Sheet {name} (columns: {header.strip('| ')})\n\n" + "\n".join(lines) + "\n")
    return sections


def _sheet_rows(sheet) -> Iterator[list[str]]:
    """A read-only sheet's rows as cell texts, trailing empty cells trimmed. The sheet's declared
    dimension is not trusted: openpyxl pads every row to it (`A1:XFD10000` made each one-cell row
    16,384 cells, 491 M characters from 80 KB), so rows come as the file holds them, and a run of
    missing rows (a lone cell in row 1,048,576) is never materialised."""
    sheet.reset_dimensions()
    for row in sheet.iter_rows(values_only=True):
        cells = [table_cell("" if value is None else str(value)) for value in row]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            yield cells


def read_xlsx(data: bytes, kind: str) -> Document:
    openpyxl = _library("openpyxl", "Excel")
    check_archive(data)
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        sheets = _sheet_sections((sheet.title, _sheet_rows(sheet)) for sheet in book.worksheets)
        book.close()
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"unreadable Excel file ({exc})") from None
    return parts(sheets, kind)


def read_epub(data: bytes, kind: str) -> Document:
    epub = _library("ebooklib.epub", "EPUB")
    ebooklib = _library("ebooklib", "EPUB")
    check_archive(data)
    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
        by_id = {item.get_id(): item for item in book.get_items_of_type(ebooklib.ITEM_DOCUMENT)}
        chapters = []
        for item_id in dict.fromkeys(item_id for item_id, _ in book.spine):  # each chapter once, however often listed
            item = by_id.get(item_id)
            if item is None:
                continue
            text = html_document(decode_text(item.get_content())).text.strip()
            if text:
                chapters.append(text + "\n")
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"unreadable EPUB ({exc})") from None
    return parts(chapters, kind)


# --- OpenDocument (LibreOffice) text and spreadsheets: the standard library's XML --------------------
# odfpy, the one library for these, builds its own DOM of the whole file and would be a new dependency
# for two walks over content.xml, whose few elements the OpenDocument standard fixes.

_ODF = {"office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
        "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
        "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0"}
MAX_REPEATED_CELLS = 50  # a cell "repeated" 16,384 times (to the sheet's edge) is written once per this many


def _odf(prefix: str, name: str) -> str:
    return f"{{{_ODF[prefix]}}}{name}"


def _odf_body(data: bytes, what: str, part: str):
    """The office:body's `part` element (office:text, office:spreadsheet) of an OpenDocument file."""
    import zipfile
    import zlib
    from xml.etree import ElementTree

    check_archive(data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            content = archive.read("content.xml")
        # defusedxml refuses a DTD from expat's own handler, after decoding, whatever the encoding (a
        # byte search missed a UTF-16 `<!ENTITY`, and expat expanded 28 KB into 600 M characters).
        body = defused_tree.fromstring(content, forbid_dtd=True).find(f"{_odf('office', 'body')}/{_odf('office', part)}")
    except LoadError:
        raise
    except defusedxml.DefusedXmlException:
        raise LoadError(f"{what} declares a DTD or XML entities, which OpenDocument never does; not read") from None
    except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, ValueError, OSError, EOFError, zlib.error,
            NotImplementedError, RuntimeError) as exc:  # RuntimeError: an encrypted entry
        raise LoadError(f"unreadable {what} ({exc})") from None
    if body is None:
        raise LoadError(f"unreadable {what} (no office:{part} in content.xml)")
    return body


def _odf_text(element) -> str:
    """A paragraph's text: its spans and links, and ODF's elements for runs of spaces, tabs and line breaks."""
    parts = [element.text or ""]
    for child in element:
        if child.tag == _odf("text", "s"):
            count = child.get(_odf("text", "c"), "1")
            parts.append(" " * min(int(count) if count.isdigit() else 1, 100))
        elif child.tag == _odf("text", "tab"):
            parts.append("\t")
        elif child.tag == _odf("text", "line-break"):
            parts.append("\n")
        else:
            parts.append(_odf_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _odf_cell(cell) -> str:
    return table_cell("\n".join(_odf_text(p) for p in cell.iter(_odf("text", "p"))))


def _odf_row(row) -> list[str]:
    cells = []
    for cell in row:
        if cell.tag not in (_odf("table", "table-cell"), _odf("table", "covered-table-cell")):
            continue
        repeated = cell.get(_odf("table", "number-columns-repeated"), "1")
        text = _odf_cell(cell)
        cells += [text] * (min(int(repeated), MAX_REPEATED_CELLS) if repeated.isdigit() and text else 1)
    while cells and not cells[-1].strip():
        cells.pop()
    return cells


def _odf_blocks(element, lines: list[str]) -> None:
    """An ODT body as Markdown lines: headings at their outline level, list items, tables as rows."""
    for child in element:
        if child.tag == _odf("text", "h"):
            level = child.get(_odf("text", "outline-level"), "1")
            title = " ".join(_odf_text(child).split())
            if title:
                lines += ["", "#" * min(int(level) if level.isdigit() else 1, 6) + " " + title, ""]
        elif child.tag == _odf("text", "p"):
            lines.append(_odf_text(child))
        elif child.tag == _odf("text", "list-item"):
            before = len(lines)
            _odf_blocks(child, lines)
            if len(lines) > before:
                lines[before] = "- " + lines[before]
        elif child.tag == _odf("table", "table"):
            lines += ["", *("| " + " | ".join(cells) + " |" for cells in map(_odf_row, child.iter(_odf("table", "table-row")))
                            if cells), ""]
        elif child.tag not in (_odf("text", "tracked-changes"), _odf("text", "sequence-decls")):
            _odf_blocks(child, lines)  # sections, lists, frames: their paragraphs


def _walked(walk: Callable[[], Document], what: str) -> Document:
    try:
        return walk()
    except RecursionError:  # elements nested thousands deep: no real document
        raise LoadError(f"unreadable {what} (nested too deeply)") from None


def read_odt(data: bytes, kind: str) -> Document:
    body = _odf_body(data, "OpenDocument text", "text")

    def walk() -> Document:
        lines: list[str] = []
        _odf_blocks(body, lines)
        return Document(re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n", kind)  # as DOCX
    return _walked(walk, "OpenDocument text")


def read_ods(data: bytes, kind: str) -> Document:
    """One part per sheet, as an Excel workbook reads."""
    body = _odf_body(data, "OpenDocument spreadsheet", "spreadsheet")

    def walk() -> Document:
        return parts(_sheet_sections((table.get(_odf("table", "name"), ""),
                                       map(_odf_row, table.iter(_odf("table", "table-row"))))
                                      for table in body.iter(_odf("table", "table"))), kind)
    return _walked(walk, "OpenDocument spreadsheet")


