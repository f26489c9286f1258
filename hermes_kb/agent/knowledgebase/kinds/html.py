"""HTML pages (and e-mails' HTML bodies): the main text as Markdown-like lines, each remembering its
source line; site chrome, tables of contents and link lists left out."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser

from .document import Document, decode_text

_BOILERPLATE_TAGS = frozenset({"nav", "footer", "aside"})
_BOILERPLATE_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "complementary"})
# class/id words of site chrome in the generators docs come from (DocBook, Sphinx, MkDocs, Docusaurus,
# javadoc, rustdoc): navigation bars, breadcrumbs, sidebars, footers, tables of contents.
_BOILERPLATE_WORDS = frozenset("""
navheader navfooter navbar navigation nav breadcrumb breadcrumbs sidebar sphinxsidebar related footer
toc toctree-wrapper md-sidebar md-header md-footer theme-doc-sidebar-container pagination skip-link
headerlink sidebar-wrapper table-of-contents indexdiv genindextable
""".split())
_ADMONITION_WORDS = frozenset("note tip warning caution important admonition hint seealso attention danger error".split())
_ADMONITION_TITLES = re.compile(r"^(?:#+ )?((?:note|tip|warning|caution|important|hint|see also|attention|danger)\b.{0,40})$",
                                re.IGNORECASE)
# A block this full of links, with at least this many, is a table of contents or an index, not prose.
LINK_DENSITY = 0.6
MIN_LINKS = 3


class _TextExtractor(HTMLParser):
    """A page's main text with markdown headings, each output line remembering the source line it
    came from. Site chrome is left out by structure: <nav>/<footer>/<aside>, ARIA landmarks and the
    class names doc generators give navigation; blocks made mostly of links (tables of contents,
    back-of-book indexes) are dropped when they close. Headings inside admonitions stay text."""

    _SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    _BLOCK = {"p", "div", "li", "tr", "br", "section", "article", "pre", "table", "ul", "ol", "blockquote",
              "dl", "dt", "dd", "main", "header", "figure", "figcaption", "td", "th"}
    _LINK_BLOCKS = {"ul", "ol", "dl", "table", "div", "tbody"}
    # A lookup, not tag[1].isdigit(): "h²" passes isdigit() and int() refuses it (found by fuzzing).
    _HEADING_LEVELS = {f"h{level}": level for level in range(1, 7)}
    _VOID = {"br", "img", "hr", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[tuple[str, int]] = []  # (text, source line where it starts); see _mark
        self._skip: list[str] = []  # open elements whose text is left out
        self._skipping: Counter[str] = Counter()  # the same, counted by tag: an end tag's lookup is O(1)
        # [tag, index into parts, and the running totals below when it opened] per open block: a block's
        # own counts are the totals' growth since, so text costs the same at any depth (touching every
        # open block made a page of 40k nested <div> take 32 s, quadratic).
        self._blocks: list[list] = []
        self._chars = self._link_chars = self._link_count = 0  # text chars, of them inside links, links seen
        self._links = 0  # depth of open <a>
        self._admonitions: list[str] = []
        self.title: tuple[str, int] | None = None
        self._in_title = False
        self.has_h1 = False

    @staticmethod
    def _chrome(tag: str, attributes: dict) -> bool:
        if tag in _BOILERPLATE_TAGS or (attributes.get("role") or "").lower() in _BOILERPLATE_ROLES:
            return True
        words = set((attributes.get("class") or "").lower().split()) | {(attributes.get("id") or "").lower()}
        return bool(words & _BOILERPLATE_WORDS)

    def handle_starttag(self, tag: str, attrs) -> None:
        line = self.getpos()[0]
        if tag == "title" and self.title is None:
            self._in_title, self.title = True, ("", line)
        if self._skip:
            if tag not in self._VOID:
                self._skip_open(tag)
            return
        attributes = {name: value for name, value in attrs}
        if tag in self._SKIP or self._chrome(tag, attributes):
            if tag not in self._VOID:
                self._skip_open(tag)
            return
        words = set((attributes.get("class") or "").lower().split())
        if words & _ADMONITION_WORDS:
            self._admonitions.append(tag)
        if tag == "a":
            self._links += 1
            self._link_count += 1
        elif tag in self._HEADING_LEVELS:
            level = self._HEADING_LEVELS[tag]
            self.has_h1 |= level == 1 and not self._admonitions
            self._mark("\n\n" if self._admonitions else "\n\n" + "#" * level + " ", line)
        elif tag in self._BLOCK:
            self._mark("\n", line)
        if tag in self._LINK_BLOCKS:
            self._blocks.append([tag, len(self.parts), self._chars, self._link_chars, self._link_count])

    def handle_startendtag(self, tag: str, attrs) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self._VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        line = self.getpos()[0]
        if tag == "title":
            self._in_title = False
        if self._skip:
            if self._skipping[tag]:  # close up to the matching element (browsers forgive missing end tags)
                while True:
                    closed = self._skip.pop()
                    self._skipping[closed] -= 1
                    if closed == tag:
                        break
            return
        if tag == "a":
            self._links = max(0, self._links - 1)
        if self._admonitions and tag == self._admonitions[-1]:
            self._admonitions.pop()
        if tag in self._HEADING_LEVELS or tag in self._BLOCK:
            self._mark("\n", line)
        if tag in self._LINK_BLOCKS and self._blocks and self._blocks[-1][0] == tag:
            _, start, chars_then, link_chars_then, links_then = self._blocks.pop()
            chars, link_chars = self._chars - chars_then, self._link_chars - link_chars_then
            links = self._link_count - links_then
            if links >= MIN_LINKS and chars and link_chars >= LINK_DENSITY * chars:
                del self.parts[start:]
                self._mark("\n", line)

    def _skip_open(self, tag: str) -> None:
        self._skip.append(tag)
        self._skipping[tag] += 1

    def _mark(self, text: str, line: int) -> None:
        """Structure the extractor adds (line breaks, heading markers): its newlines are not the
        source's, so the text after them still starts on `line`."""
        self.parts.append((text, -line))

    def handle_data(self, data: str) -> None:
        if self._in_title and self.title is not None:
            self.title = (self.title[0] + data, self.title[1])
        if self._skip:
            return
        self.parts.append((data, self.getpos()[0]))
        size = len(data.strip())
        self._chars += size
        if self._links:
            self._link_chars += size

    def parse_marked_section(self, i: int, report: int = 1) -> int:
        """`<![x ...`: the stdlib raises AssertionError on any keyword but CDATA, IF and a few more
        (found by fuzz/fuzz_loaders.py); a browser reads it as a bogus comment up to the next '>'."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i + 3)
            return -1 if end < 0 else end + 1

    def lines(self) -> list[tuple[str, int]]:
        """(line, source line) for every output line, blank runs cut to one, admonition titles as text."""
        lines: list[tuple[str, int]] = []
        current, source, line = "", None, 1
        for text, position in self.parts:
            added, line = position < 0, abs(position)
            for n, piece in enumerate(text.split("\n")):
                if n:
                    lines.append((current.strip(), source or line))
                    current, source = "", None
                if piece.strip() and source is None:
                    source = line if added else line + n  # a data newline is a source line
                current += piece
        lines.append((current.strip(), source or line))
        kept: list[tuple[str, int]] = []
        for text, line in lines:
            if text.startswith("#"):
                text = " ".join(text.split())  # a heading on one line, its no-break spaces plain
            if _ADMONITION_TITLES.match(text) and not text.endswith(":"):
                text = text.lstrip("#").strip() + ":"
            if text == "#" * len(text) and text:
                continue  # a heading with no text
            if not text and (not kept or not kept[-1][0]):
                continue
            kept.append((text, line))
        while kept and not kept[-1][0]:
            kept.pop()
        return kept


def read_html(data: bytes, kind: str) -> Document:
    return html_document(decode_text(data), kind)


def html_document(text: str, kind: str = "html") -> Document:
    """An HTML page's main content as Markdown-like text (also an e-mail's HTML body)."""
    extractor = _TextExtractor()
    extractor.feed(text)
    extractor.close()
    lines = extractor.lines()
    title = " ".join((extractor.title or ("", 1))[0].split())  # no-break spaces made plain too
    if title and not extractor.has_h1:  # a reference page's sections (Synopsis, Notes) sit under its title
        first = next((n for n, (text, _) in enumerate(lines) if text.startswith("#")), None)
        if first is not None and lines[first][0].lstrip("#").strip() == title.replace("\xa0", " "):
            lines[first] = (f"# {title}", lines[first][1])  # the page's own title heading, made its top
        else:
            lines = [(f"# {title}", extractor.title[1]), ("", extractor.title[1]), *lines]
    if not lines:
        return Document("", kind)
    return Document("\n".join(text for text, _ in lines) + "\n", kind,
                    source_lines=tuple(line for _, line in lines))

