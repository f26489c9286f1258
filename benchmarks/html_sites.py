"""HTML documentation sites as the indexer chunks them: how much is site chrome, and do citations hold.

For each folder of HTML pages (a docs site as installed, e.g. Debian's postgresql-doc-15 and
python3-doc), every page is loaded and chunked exactly as `hermes kb index` does, nothing embedded:

- boilerplate share: chunks whose lines are mostly lines that repeat across the site's pages
  (a footer, a sidebar: prose is on one page), or short chunks holding a navigation bar's words
  (three of Prev / Up / Home / Next, index / modules / previous / next). Measured on the text, not
  on the markup, so it does not share the extractor's rules.
- citation accuracy: chunks whose cited line range of the source file holds the chunk's text
  (its first words of prose, tags stripped), and chunks cited past the file's last line.
- .svg/.css files in the folder, which are not text (and no longer indexed).

    python benchmarks/html_sites.py /usr/share/doc/postgresql-doc-15/html /usr/share/doc/python3-dev/html
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report  # noqa: E402
from hermes_kb.agent.knowledgebase.chunker import chunk_document  # noqa: E402
from hermes_kb.agent.knowledgebase.config import ChunkingConfig  # noqa: E402
from hermes_kb.agent.knowledgebase.loaders import load  # noqa: E402
from hermes_kb.agent.knowledgebase.scanner import BUILTIN_EXCLUDES  # noqa: E402

REPEATED_SHARE = 0.2  # a line on a fifth of the pages or more is the site's, not the page's
BOILERPLATE_SHARE = 0.5  # a chunk with at least this share of repeated lines is chrome
# A navigation bar's words, in the generators these sites come from (DocBook: Prev Up Home Next;
# Sphinx: index modules next previous): a short chunk holding three of them is a navigation bar.
NAV_WORDS = frozenset("prev previous next up home index modules contents".split())
NAV_CHUNK_WORDS = 40
_TAG = re.compile(r"<[^>]*>")


def _words(text: str) -> str:
    """Text without tags or whitespace: markup splits words at inline tags (`f<code>(x)</code>`)."""
    return "".join(html.unescape(_TAG.sub("", text)).split())


def _probe(chunk_text: str) -> str | None:
    """The first words of the chunk's prose: what its cited lines must hold."""
    for line in chunk_text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            words = " ".join(line.split()[:6])
            return words if len(words) >= 12 else None
    return None


def measure(site: Path) -> dict:
    pages = sorted(site.rglob("*.html"))
    config = ChunkingConfig()
    chunked: list[tuple[Path, list]] = []
    repeated = Counter()
    started = time.perf_counter()
    for page in pages:
        data = page.read_bytes()
        chunks = chunk_document(load(data, "html"), page.name, config)
        chunked.append((page, chunks))
        repeated.update({line.strip() for chunk in chunks for line in chunk.text.splitlines() if line.strip()})
    seconds = time.perf_counter() - started
    site_lines = {line for line, count in repeated.items() if count >= REPEATED_SHARE * len(pages)}
    total = chrome = held = probed = beyond = 0
    for page, chunks in chunked:
        source = page.read_text(encoding="utf-8", errors="replace").split("\n")
        for chunk in chunks:
            total += 1
            lines = [line.strip() for line in chunk.text.splitlines() if line.strip()]
            words = re.findall(r"\w+", chunk.text.lower())
            navigation = len(words) <= NAV_CHUNK_WORDS and len(NAV_WORDS & set(words)) >= 3
            if navigation or (lines and sum(line in site_lines for line in lines) >= BOILERPLATE_SHARE * len(lines)):
                chrome += 1
            if chunk.end_line > len(source):
                beyond += 1
            probe = _probe(chunk.text)
            if probe is None:
                continue
            probed += 1
            cited = _words("\n".join(source[chunk.start_line - 1:chunk.end_line]))
            held += "".join(probe.split()) in cited
    styling = sum(1 for path in site.rglob("*") if path.suffix in (".svg", ".css"))
    return {"site": str(site), "pages": len(pages), "chunks": total, "boilerplate": chrome, "probed": probed,
            "held": held, "beyond": beyond, "styling_files": styling, "seconds": seconds,
            "styling_indexed": not {"*.svg", "*.css"} <= set(BUILTIN_EXCLUDES)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sites", nargs="+", type=Path)
    parser.add_argument("--label", default="", help="what code was measured (shown in the table)")
    parser.add_argument("--no-write", action="store_true", help="do not append to docs/benchmark-log.md")
    args = parser.parse_args(argv)
    rows = []
    for site in args.sites:
        m = measure(site)
        rows.append([args.label, m["site"], m["pages"], m["chunks"],
                     f"{m['boilerplate']} ({m['boilerplate'] / max(1, m['chunks']):.1%})",
                     f"{m['held']}/{m['probed']} ({m['held'] / max(1, m['probed']):.1%})", m["beyond"],
                     f"{m['styling_files']} ({'indexed' if m['styling_indexed'] else 'excluded'})",
                     f"{m['seconds']:.1f}"])
    report("HTML docs sites: boilerplate and citations", ["code", "site", "pages", "chunks", "boilerplate chunks",
                                                          "cited lines hold the text", "cited past the end",
                                                          ".svg/.css", "load+chunk s"],
           rows, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
