"""Loaders for the other files people keep: notebooks, e-mail, tables, notes with front matter,
slides, spreadsheets, e-books, org-mode and LaTeX.

Each turns a file's bytes into a `Document` the chunker already knows how to cut:

- A notebook's cells become Markdown (markdown cells as prose, code cells fenced in the notebook's
  language, text outputs fenced and capped; images, HTML and other rich outputs dropped), each cell
  a part, so a hit is cited as `cell N` and kb_read shows cells, not JSON.
- An e-mail (`.eml`) is its headers as a heading and its text (or HTML) body; attachments are named,
  and those of a kind this package reads are indexed beneath it. An `.mbox` is one part per message.
- A CSV/TSV file reads as rows of cells with its header as every chunk's heading, cited by the
  file's own lines.
- A note's YAML/TOML front matter is read as metadata (title, tags, aliases, dates) on the lines it
  took, so the note's lines stay the file's.
- Slides, sheets and EPUB chapters are parts (`slide N`, `sheet N`, `chapter N`), headed by their
  titles (the optional `office` extra: python-pptx, openpyxl, EbookLib).
- Org-mode and LaTeX keep their lines; their section commands become Markdown headings.

Imported by loaders.py, which registers these in its LOADERS table; never import this module first.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import defusedxml
from defusedxml import ElementTree as defused_tree

if TYPE_CHECKING:  # the email package loads with the first message: ~20 ms every command would pay
    from email.message import EmailMessage

from .filters import DATE_KEYS, FileMetadata, front_matter_date
from .loaders import Document, LoadError, check_archive, decode_text, html_document, missing_extra

MAX_OUTPUT_CHARS = 2_000  # of a code cell's text outputs: a training log is not worth 50 chunks
MAX_TABLE_ROWS = 100_000
MAX_CELL_CHARS = 500
MAX_MESSAGES = 20_000
MAX_ATTACHMENT_BYTES = 5_000_000
_TEXT_OUTPUTS = ("text/plain", "text/markdown")


_CARRIAGE_RETURN = re.compile(r"\r\n?")


def _newlines(text: str) -> str:
    """Text from inside a container (a JSON string, a MIME part, a slide) gets the one newline the
    rest of the index uses: decode_text normalises a file's own bytes, not what a parser hands back."""
    return _CARRIAGE_RETURN.sub("\n", text) if "\r" in text else text


# --- notebooks -----------------------------------------------------------------------------------

def _source(value: object) -> str:
    """nbformat keeps multi-line strings as lists of lines."""
    if isinstance(value, list):
        return "".join(str(part) for part in value)
    return value if isinstance(value, str) else ""


def _outputs(outputs: object) -> str:
    """A code cell's text outputs, read only until MAX_OUTPUT_CHARS are held (a 98 MB output list was
    joined whole before being cut, and peaked over the per-file bound)."""
    texts, held = [], 0
    for output in outputs if isinstance(outputs, list) else []:
        if held > MAX_OUTPUT_CHARS:
            break
        if not isinstance(output, dict):
            continue
        kind, found = output.get("output_type"), []
        if kind == "stream":
            found = [_source(output.get("text"))]
        elif kind == "error":
            found = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        elif kind in ("execute_result", "display_data") and isinstance(output.get("data"), dict):
            found = [_source(output["data"][mime]) for mime in _TEXT_OUTPUTS if mime in output["data"]]
        texts += found
        held += sum(len(text) for text in found)
    text = _newlines("\n".join(t.rstrip("\n") for t in texts if t.strip()))
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS].rstrip() + "\n… (output cut)"
    return text


def _notebook(data: bytes, kind: str) -> Document:
    try:
        notebook = json.loads(decode_text(data))
    except (ValueError, RecursionError) as exc:
        raise LoadError(f"not a notebook: invalid JSON ({str(exc)[:80]})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise LoadError("not a notebook: no list of cells (nbformat 4 writes one)")
    metadata = notebook.get("metadata") if isinstance(notebook.get("metadata"), dict) else {}
    info = metadata.get("language_info") if isinstance(metadata.get("language_info"), dict) else {}
    first_word = (str(info.get("name") or "").split() or [""])[0]
    language = re.sub(r"[^\w+#.-]", "", first_word)[:20] or "python"  # the fence's info word
    text = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        source = _newlines(_source(cell.get("source"))).strip("\n")
        if cell.get("cell_type") == "code":
            body = f"```{language}\n{source}\n```\n" if source.strip() else ""
            output = _outputs(cell.get("outputs"))
            if output:
                body += f"\nOutput:\n```text\n{output.replace('```', '` ` `')}\n```\n"
        else:
            body = source + "\n" if source.strip() else ""
        if not body:
            continue
        text.append(body)
    return _parts(text, "notebook")


# --- e-mail ----------------------------------------------------------------------------------------

def _parse_message(data: bytes) -> EmailMessage:
    import email
    import email.policy

    try:
        return email.message_from_bytes(data, policy=email.policy.default)
    except Exception as exc:  # the parser is lenient; a header it still cannot take is this file's skip reason
        raise LoadError(f"unreadable e-mail ({exc})") from None


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except Exception:  # a header the policy cannot parse at all: left out rather than failing the file
        value = ""
    return " ".join(str(value or "").split())


def _body(message: EmailMessage) -> str:
    try:
        part = message.get_body(preferencelist=("plain", "html"))
        if part is None:
            return ""
        content = part.get_content()
    except Exception:  # an unknown charset or a broken transfer encoding
        payload = message.get_payload(decode=True) if not message.is_multipart() else b""
        return decode_text(payload or b"") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    return html_document(content).text if part.get_content_type() == "text/html" else content


def _attachments(message: EmailMessage) -> list[str]:
    """Each attachment named, with its text beneath when its kind is one this package reads (never
    another e-mail: a message nesting messages costs one level of parsing, not many)."""
    from .loaders import load
    from .scanner import file_kind

    sections = []
    for part in message.iter_attachments():
        name = " ".join(str(part.get_filename() or "unnamed").split())[:200]
        try:
            payload = part.get_payload(decode=True) or b""
        except Exception:
            payload = b""
        kind = file_kind(name)
        text = ""
        if kind not in ("email", "mbox") and len(payload) <= MAX_ATTACHMENT_BYTES:
            try:
                text = load(payload, kind).text.strip()
            except LoadError:
                text = ""
        sections.append(f"## Attachment: {name} ({len(payload):,} bytes)\n\n{text}\n" if text
                        else f"Attachment: {name} ({len(payload):,} bytes, not indexed)\n")
    return sections


def _message_markdown(message: EmailMessage) -> str:
    subject = _header(message, "Subject") or "(no subject)"
    sender, to, date = _header(message, "From"), _header(message, "To"), _header(message, "Date")
    # The subject and sender head every passage's citation; recipients and date, which made that label a
    # whole header line in every block, are the message's first line instead (still searched).
    heading = f"# {subject}" + (f" (from {sender})" if sender else "")
    sent = " · ".join(part for part in (f"to {to}" if to else "", date) if part)
    body = _body(message).strip()
    return _newlines("\n\n".join([heading, *([sent] if sent else []), body, *_attachments(message)]).strip()) + "\n"


def _email(data: bytes, kind: str) -> Document:
    return Document(_message_markdown(_parse_message(data)), "markdown")


# An mbox separates messages with a line starting "From " (mboxo/mboxrd). mailbox.mbox reads from a
# path with locking; the file is already in memory, within max_file_bytes, so it is split here.
_MBOX_SEPARATOR = re.compile(rb"^From [^\r\n]*\r?\n", re.M)


def _mbox(data: bytes, kind: str) -> Document:
    bounds = [m.start() for m in _MBOX_SEPARATOR.finditer(data)]
    if not bounds:
        raise LoadError("not an mbox: no line starting with 'From ' separates messages")
    if len(bounds) > MAX_MESSAGES:
        raise LoadError(f"holds {len(bounds):,} messages, over the {MAX_MESSAGES:,} an mbox may hold here; split it")
    messages = []
    for begin, end in zip(bounds, [*bounds[1:], len(data)]):
        raw = data[begin:end].split(b"\n", 1)[1] if b"\n" in data[begin:end] else b""
        raw = re.sub(rb"^>(>*From )", rb"\1", raw, flags=re.M)  # mboxrd's quoted From lines
        messages.append(_message_markdown(_parse_message(raw)))
    return _parts(messages, "mbox")


# --- tables ----------------------------------------------------------------------------------------

def _cell(value: str) -> str:
    value = " ".join(value.split()).replace("|", "\\|")
    return value if len(value) <= MAX_CELL_CHARS else value[:MAX_CELL_CHARS - 1] + "…"


def _table(data: bytes, kind: str) -> Document:
    text = decode_text(data)
    delimiter = "\t" if kind == "tsv" else ","
    if kind == "csv":
        try:
            delimiter = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
        except csv.Error:
            pass
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    lines, source_lines, header = [], [], None
    first_line, rows = 1, 0
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                first_line = reader.line_num + 1
                continue
            if rows >= MAX_TABLE_ROWS:
                lines.append(f"(rows after {MAX_TABLE_ROWS:,} are not indexed)")
                source_lines.append(first_line)
                break
            line = "| " + " | ".join(_cell(cell) for cell in row) + " |"
            if header is None:
                header = line
            lines.append(line)
            source_lines.append(first_line)  # a quoted cell may span lines: the row starts here
            first_line = reader.line_num + 1
            rows += 1
    except csv.Error as exc:
        raise LoadError(f"unreadable {kind.upper()} (line {reader.line_num}: {exc})") from None
    if header is None:
        return Document("", "markdown")
    return Document("\n".join(lines) + "\n", "table", headings=((0, f"columns: {header.strip('| ')}"),),
                    source_lines=tuple(source_lines))


# --- note vaults: front matter and tags -----------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A(---|\+\+\+)[ \t]*\r?\n(.*?)\r?\n\1[ \t]*(?:\r?\n|\Z)", re.S)
# Not a tag: a heading's #s, an entity (&#39;), a URL's fragment, code, nor a link to a part of a
# page, `[engines](#engines)` or `href="#engines"` (npm's docs: every chunk of package.json was
# headed by "#engines #directoriesbin #local-paths").
_INLINE_TAG = re.compile(r"""(?<![\w#&/`\[])(?<!\]\()(?<!=["'])#([^\W\d][\w/-]*)""")
_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.M)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
MAX_FRONT_MATTER_CHARS = 64_000


def _yaml_without_aliases(text: str) -> object:
    """YAML as front matter writes it. Aliases are refused: a few lines of nested anchors expand
    exponentially once a value is turned into text (the "billion laughs")."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("aliases are not read in front matter")
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)  # noqa: S506 (a SafeLoader)


def front_matter(text: str) -> tuple[dict, int]:
    """(the YAML or TOML front matter of a note, the characters it spans); ({}, 0) when there is none
    or it does not parse (then it is left as text: nothing is lost)."""
    match = _FRONT_MATTER.match(text[:MAX_FRONT_MATTER_CHARS])
    if not match:
        return {}, 0
    try:
        if match.group(1) == "---":
            values = _yaml_without_aliases(match.group(2))
        else:
            import tomllib

            values = tomllib.loads(match.group(2))
    except Exception:  # YAML's and TOML's errors, and constructors a hostile note reaches
        return {}, 0
    return (values, match.end()) if isinstance(values, dict) else ({}, 0)


def _words(value: object) -> list[str]:
    """A tags or aliases value as written in vaults: a list, or one string split at commas and spaces."""
    items = value if isinstance(value, list) else re.split(r"[,\s]+", value) if isinstance(value, str) else []
    words = (" ".join(str(item).split())[:100].lstrip("#") for item in items[:50] if isinstance(item, (str, int, float)))
    return [word for word in words if word]


def note_tags(values: dict, body: str) -> list[str]:
    """Front matter tags, then the body's inline #tags (outside code), each once."""
    prose = _FENCE.sub("", body)
    inline = [tag.rstrip("/-") for tag in _INLINE_TAG.findall(prose)]
    return list(dict.fromkeys(_words(values.get("tags") or values.get("tag")) + inline))


def _markdown(data: bytes, kind: str) -> Document:
    """A note's front matter read, not indexed as prose, on the same lines (so citations and kb_read
    keep the file's line numbers): its title, aliases and dates become lines of their own, and its
    tags join the note's first H1 (or a title line made of the front matter's title), so they head
    the note's chunks and count in search. Its tags (with the inline #tags of a note without front
    matter) and its date are the file's metadata, which search filters read."""
    text = decode_text(data)
    values, end = front_matter(text)
    if not end:
        return Document(text, kind, metadata=FileMetadata(tuple(note_tags({}, text))))
    block, body = text[:end], text[end:]
    tags = note_tags(values, body)
    marks = " ".join(f"#{tag}" for tag in tags)
    title = " ".join(str(values.get("title") or "").split())
    lines = []
    heading = _H1.search(body)
    if heading is not None and marks:
        body = body[:heading.end(1)] + f" · {marks}" + body[heading.end(1):]
    elif title or marks:
        lines.append(f"# {title or 'Tags'}" + (f" · {marks}" if marks else ""))
    if title and heading is not None:
        lines.append(f"Title: {title}")
    aliases = _words(values.get("aliases") or values.get("alias"))
    if aliases:
        lines.append("Aliases: " + ", ".join(aliases))
    lines += [f"{key.capitalize()}: {str(values[key])[:100]}" for key in DATE_KEYS if values.get(key)]
    room = block.count("\n") + (not block.endswith("\n"))
    if len(lines) > room:
        lines = lines[:room - 1] + [" · ".join(lines[room - 1:])]
    rewritten = "\n".join(lines + [""] * (room - len(lines)))
    return Document(rewritten + ("\n" if block.endswith("\n") else "") + body, kind,
                    metadata=FileMetadata(tuple(tags), front_matter_date(values)))


# --- office files and e-books (the optional `office` extra) ------------------------------------------

def _library(module: str, package: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise LoadError(missing_extra(package, module, "office")) from None


def _parts(sections: list[str], kind: str) -> Document:
    """Sections (slides, sheets, chapters) joined, each a numbered part."""
    starts, offset, texts = [], 0, []
    for section in sections:
        section = _newlines(section) + "\n"
        starts.append(offset)
        texts.append(section)
        offset += len(section)
    return Document("".join(texts), kind, page_starts=tuple(starts))


def _pptx(data: bytes, kind: str) -> Document:
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
                if shape is title_shape:
                    continue
                if shape.has_text_frame:
                    lines += [p.text.strip() for p in shape.text_frame.paragraphs if p.text.strip()]
                if getattr(shape, "has_table", False) and shape.has_table:
                    lines += ["| " + " | ".join(_cell(c.text) for c in row.cells) + " |" for row in shape.table.rows]
            if slide.has_notes_slide:
                notes = slide.notes_slide.notes_text_frame.text.strip() if slide.notes_slide.notes_text_frame else ""
                if notes:
                    lines += ["", f"Speaker notes: {' '.join(notes.split())}"]
            slides.append("\n".join(lines) + "\n")
    except LoadError:
        raise
    except Exception as exc:  # python-pptx surfaces zip, XML and part errors directly
        raise LoadError(f"unreadable PowerPoint file ({exc})") from None
    return _parts(slides, "pptx")


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
        cells = [_cell("" if value is None else str(value)) for value in row]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            yield cells


def _xlsx(data: bytes, kind: str) -> Document:
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
    return _parts(sheets, "xlsx")


def _epub(data: bytes, kind: str) -> Document:
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
    return _parts(chapters, "epub")


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
    return _cell("\n".join(_odf_text(p) for p in cell.iter(_odf("text", "p"))))


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


def _odt(data: bytes, kind: str) -> Document:
    body = _odf_body(data, "OpenDocument text", "text")

    def walk() -> Document:
        lines: list[str] = []
        _odf_blocks(body, lines)
        return Document(re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n", "markdown")  # as DOCX
    return _walked(walk, "OpenDocument text")


def _ods(data: bytes, kind: str) -> Document:
    """One part per sheet, as an Excel workbook reads."""
    body = _odf_body(data, "OpenDocument spreadsheet", "spreadsheet")

    def walk() -> Document:
        return _parts(_sheet_sections((table.get(_odf("table", "name"), ""),
                                       map(_odf_row, table.iter(_odf("table", "table-row"))))
                                      for table in body.iter(_odf("table", "table"))), kind)
    return _walked(walk, "OpenDocument spreadsheet")


# --- org-mode and LaTeX ----------------------------------------------------------------------------

_ORG_HEADING = re.compile(r"^(\*+)\s+(.*)$")
_ORG_TITLE = re.compile(r"^#\+title:\s*(.+)$", re.I)
_LATEX_SECTION = re.compile(r"^\s*\\(part|chapter|section|subsection|subsubsection|paragraph|title)\*?"
                            r"(?:\[[^\]]*\])?\{(.*)\}\s*$")
_LATEX_LEVELS = {"part": 1, "title": 1, "chapter": 1, "section": 2, "subsection": 3, "subsubsection": 4,
                 "paragraph": 5}


def _org_line(line: str) -> str:
    if match := _ORG_TITLE.match(line):
        return f"# {match.group(1).strip()}"
    if match := _ORG_HEADING.match(line):
        return f"{'#' * min(6, len(match.group(1)) + 1)} {match.group(2).strip()}"
    return line


def _latex_line(line: str) -> str:
    if match := _LATEX_SECTION.match(line):
        return f"{'#' * _LATEX_LEVELS[match.group(1)]} {match.group(2).strip()}"
    return line


def _line_mapped(convert: Callable[[str], str]) -> Callable[[bytes, str], Document]:
    """A format whose sections are lines of their own: those lines rewritten as Markdown headings,
    every other line as it is, so line numbers stay the file's."""
    def loader(data: bytes, kind: str) -> Document:
        return Document("\n".join(convert(line) for line in decode_text(data).split("\n")), "markdown")
    return loader


EXTRA_LOADERS: dict[str, Callable[[bytes, str], Document]] = {
    "markdown": _markdown, "notebook": _notebook, "email": _email, "mbox": _mbox, "csv": _table, "tsv": _table,
    "org": _line_mapped(_org_line), "latex": _line_mapped(_latex_line),
    "pptx": _pptx, "xlsx": _xlsx, "epub": _epub, "odt": _odt, "ods": _ods,
}
