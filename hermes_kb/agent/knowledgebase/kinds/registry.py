"""Every file kind the index knows, each one object that says everything about it: the extensions that
name it, the function that reads it, how its text is cut, the size cap it gets, whether OCR may read
it, what its numbered parts are called and how its passages are cited.

The scanner, the readers (loaders.py), the extraction bound, the chunker, citations, snippets and
kb_read all ask this list; a new kind is one entry here and, when it needs one, a reader module
beside this one. Readers are named, not imported ("pdf:read_pdf"): the scanner reads this module on
every command, and a status or a search should not pay for pymupdf, defusedxml and the e-mail
package.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Callable

PLAIN_READER = "document:read_plain"
NOTE_READER = "text:read_markdown"  # a note's lines are its file's lines: front matter is rewritten line for line


@dataclass(frozen=True)
class FileKind:
    name: str
    extensions: tuple[str, ...] = ()
    # "module:function" in this package; the function takes (bytes, kind) (and the OCR engine when `ocr`)
    reader: str = PLAIN_READER
    # How the chunker cuts the text (chunker.chunk_document): "code" at syntax units, "markdown" at
    # headings (and at parts, where a kind has them), "notebook" as cells, "pdf" at outline entries
    # and pages, "table" as rows under their header, "plain" by size alone.
    chunking: str = "plain"
    # Large as a rule (a scanned manual, a slide deck, a year of mail), and the reader bounds its own
    # memory: capped by max_document_bytes rather than max_file_bytes.
    large: bool = False
    # The reader takes the OCR engine; `ocr_probe` says whether one file needs it (read after the rest)
    # and `read_ahead` starts its OCR early, each "module:function" when the kind has one.
    ocr: bool = False
    ocr_probe: str | None = None
    read_ahead: str | None = None
    part: str = "page"  # what one of the numbered parts a reader marks is called in citations and kb_read
    # Cited lines are lines of the text made from the file (a Word document, an e-mail's decoded parts, a
    # picture's recognised text), not lines an editor would open: located by path alone.
    rendered: bool = False
    prose: bool = False  # snippets show sentences around the words found, not structured lines

    @property
    def lines_are_the_files(self) -> bool:
        """Whether the text's lines are the file's own lines (kb_read streams the file itself) rather
        than a format converted."""
        return self.reader in (PLAIN_READER, NOTE_READER)

    @property
    def bounded(self) -> bool:
        """Read in the bounded extraction worker (extraction.py): a parsed format. Plain text needs no
        parser, and PDFs and pictures are bounded by their own stream caps and the OCR workers."""
        return not self.lines_are_the_files and not self.ocr

    @property
    def cap_setting(self) -> str:
        """The setting that caps this kind's files, for the sentence that says a file was too large."""
        return "max_document_bytes" if self.large else "max_file_bytes"

    def read_function(self) -> Callable:
        return _function(self.reader)


def _code(name: str, *extensions: str) -> FileKind:
    return FileKind(name, extensions, chunking="code")


# Kinds whose parts are numbered (a cell, a message, a slide): their readers split the text there.
_PARTED = dict(chunking="markdown", large=True, prose=True)

FILE_KINDS: tuple[FileKind, ...] = (
    FileKind("markdown", (".md", ".markdown", ".mdx"), reader=NOTE_READER, chunking="markdown", prose=True),
    FileKind("text", (".txt", ".text", ".log"), prose=True),
    FileKind("rst", (".rst",), prose=True),
    FileKind("csv", (".csv",), reader="text:read_table", chunking="table"),
    FileKind("tsv", (".tsv",), reader="text:read_table", chunking="table"),
    FileKind("org", (".org",), reader="text:read_org", chunking="markdown", prose=True),
    FileKind("latex", (".tex", ".ltx"), reader="text:read_latex", chunking="markdown", prose=True),
    FileKind("notebook", (".ipynb",), reader="notebook:read_notebook", chunking="notebook", large=True, part="cell"),
    FileKind("email", (".eml",), reader="mail:read_email", chunking="markdown", rendered=True, prose=True),
    FileKind("mbox", (".mbox",), reader="mail:read_mbox", part="message", **_PARTED),
    # Source cut at its syntax units by tree-sitter (code_units.py); the kind is the language.
    _code("python", ".py", ".pyi"),
    _code("javascript", ".js", ".mjs", ".cjs", ".jsx"),
    _code("typescript", ".ts", ".tsx", ".mts", ".cts"),
    _code("go", ".go"),
    _code("rust", ".rs"),
    _code("java", ".java"),
    _code("c", ".c", ".h"),
    _code("cpp", ".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx"),
    _code("csharp", ".cs"),
    _code("ruby", ".rb", ".rake"),
    _code("php", ".php"),
    _code("shell", ".sh", ".bash", ".zsh"),
    FileKind("json", (".json",)),
    FileKind("yaml", (".yaml", ".yml")),
    FileKind("toml", (".toml",)),
    FileKind("html", (".html", ".htm"), reader="html:read_html", chunking="markdown", prose=True),
    FileKind("pdf", (".pdf",), reader="pdf:read_pdf", chunking="pdf", large=True, ocr=True,
             ocr_probe="pdf:needs_ocr", prose=True),
    FileKind("docx", (".docx",), reader="office:read_docx", chunking="markdown", large=True, rendered=True, prose=True),
    FileKind("odt", (".odt",), reader="office:read_odt", chunking="markdown", large=True, rendered=True, prose=True),
    FileKind("pptx", (".pptx",), reader="office:read_pptx", part="slide", **_PARTED),
    FileKind("xlsx", (".xlsx", ".xlsm"), reader="office:read_xlsx", part="sheet", **{**_PARTED, "prose": False}),
    FileKind("ods", (".ods",), reader="office:read_ods", part="sheet", **{**_PARTED, "prose": False}),
    FileKind("epub", (".epub",), reader="office:read_epub", part="chapter", **_PARTED),
    # Pictures, read by OCR (ocr.py): screenshots, photos of whiteboards, scanned letters.
    FileKind("image", (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp", ".gif"), reader="image:read_image",
             large=True, ocr=True, ocr_probe="image:needs_ocr", read_ahead="image:read_ahead", rendered=True),
)

_BY_NAME = {kind.name: kind for kind in FILE_KINDS}
EXTENSIONS = {extension: kind.name for kind in FILE_KINDS for extension in kind.extensions}
NAMES = tuple(sorted(_BY_NAME))  # what `--kind` may filter on
# A kind nobody registered (a Document made by hand, an old index's kind): read and cut as plain text.
_UNKNOWN = FileKind("unregistered")


def named(name: str) -> FileKind:
    return _BY_NAME.get(name, _UNKNOWN)


def kind_of(file_name: str) -> str:
    """Unknown extensions are text; the reader rejects them if they turn out binary."""
    dot = file_name.rfind(".")
    # splitext's rule (leading dots start no extension), without its cost: one call per file a scan meets.
    if dot <= 0 or not file_name[:dot].strip("."):
        return "text"
    return EXTENSIONS.get(file_name[dot:].lower(), "text")


@cache
def _function(reference: str) -> Callable:
    module, _, function = reference.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def hook(reference: str | None) -> Callable | None:
    return None if reference is None else _function(reference)
