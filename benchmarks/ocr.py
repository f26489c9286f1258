"""OCR on real printed pages: the character error rate against the pages' own text layers, pages/s
and peak RSS, at 150 and 300 dpi; then a search check and the cache's effect on a `--full` run.

Pages are the text-rich pages of the PDFs under /usr/share/doc (Debian's own manuals), their text
layers read by the index's block reader (tables as `| a | b |` rows) as the truth, rendered to
pictures at each dpi and read back as the index reads them (ocr.py: each installed build of Tesseract
in worker processes, one and then ocr.WORKERS at once). The search check builds three folders, the
PDFs as they are, the same PDFs made of page pictures (300 dpi scans) and the same pages as PNG files,
indexes them with the default model, and asks the first two a phrase from 40 chunks of the text-layer
index: a question it answers (the page in the top 5) should still be answered from scans.

    python benchmarks/ocr.py --pages 8
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pymupdf  # noqa: E402

from hermes_kb.agent.knowledgebase import ocr  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.kinds.pdf import _page_blocks, text_blocks  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402
from benchmarks._report import peak_rss_mb, report  # noqa: E402

PDFS = sorted(glob.glob("/usr/share/doc/*/*.pdf") + glob.glob("/usr/share/doc/*/*/*.pdf"))
MIN_PAGE_CHARS = 800
# A table of contents' dot leaders: OCR reads them as dots and letters ("..... cece eee"), and its page
# numbers apart from their titles, so such a page's error rate measures the leaders, not the text.
LEADERS = re.compile(r"(?:\. ?){6,}")
XQUAD_ZH = Path(__file__).resolve().parents[2] / "shared" / "eval" / "xquad" / "zh"


def chinese_pages(count: int) -> tuple[list[str], list[bytes]]:
    """`count` A4 pages of printed Chinese (XQuAD's zh paragraphs, two a page) as 300-dpi pictures,
    with the text each holds (no spaces: Tesseract puts some between Han characters)."""
    paragraphs = [json.loads(line)["text"] for line in (XQUAD_ZH / "corpus.jsonl").read_text().splitlines()[:2 * count]]
    truths, pictures = [], []
    for first in range(0, len(paragraphs), 2):
        text = "\n\n".join(paragraphs[first:first + 2])
        page = pymupdf.open().new_page(width=595, height=842)
        page.insert_textbox(pymupdf.Rect(50, 50, 545, 792), text, fontname="china-s", fontsize=11)
        truths.append("".join(page.get_text().split()))
        pictures.append(page.get_pixmap(dpi=300).tobytes("png"))
    return truths, pictures


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, a row at a time in numpy (insertions are a running minimum along the
    row): a benchmark-only helper, not worth a dependency."""
    if not a or not b:
        return len(a) or len(b)
    codes_b = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    index = np.arange(len(b) + 1)
    row = index.copy()
    for n, char in enumerate(a, 1):
        substitute = row[:-1] + (codes_b != ord(char))
        best = np.minimum(np.r_[n, np.minimum(row[1:] + 1, substitute)], n + index)
        row = np.minimum.accumulate(best - index) + index
    return int(row[-1])


def normal(text: str) -> str:
    return " ".join(text.split())


def pages(per_pdf: int) -> list[tuple[str, int]]:
    chosen = []
    for path in PDFS:
        with pymupdf.open(path) as pdf:
            rich = [n for n, page in enumerate(pdf) if len(page.get_text()) >= MIN_PAGE_CHARS]
        chosen += [(path, n) for n in rich[:per_pdf]]
    return chosen


def recognise_all(engine: ocr.Ocr, pictures: list[bytes], workers: int) -> list[str]:
    """The pictures read as the index reads scanned pages: Ocr.read, `workers` processes at once."""
    images = [pymupdf.open(stream=picture) for picture in pictures]
    reading = replace(engine, pool=ocr.WorkerPool(workers))
    try:
        return ["\n".join(line for _, _, lines in read for line in lines)
                for read in reading.read((image[0] for image in images), text_blocks)]
    finally:
        reading.close()
        for image in images:
            image.close()


def children_peak_rss_mb() -> float:
    """The largest OCR worker's peak RSS (the workers are separate processes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def scan_of(path: str, dpi: int) -> bytes:
    """The PDF as a scanner would return it: each page a picture, no text layer."""
    scan = pymupdf.open()
    with pymupdf.open(path) as pdf:
        for page in pdf:
            copy = scan.new_page(width=page.rect.width, height=page.rect.height)
            copy.insert_image(copy.rect, stream=page.get_pixmap(dpi=dpi, colorspace="gray").tobytes("png"))
    return scan.tobytes(deflate=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=8, help="text-rich pages per PDF")
    parser.add_argument("--questions", type=int, default=40, help="0: the error rates only, no search check")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    engine = ocr.engine(None)
    if engine is None or not PDFS:
        sys.exit("needs Tesseract's trained data (pip install '.[ocr]') and PDFs under /usr/share/doc")
    sample = pages(args.pages)
    rows = []
    for reader in [name for name in ocr.READERS if name == "mupdf" or ocr.best_reader() == name]:
        for dpi in (150, 300):
            truths, pictures = [], []
            for path, number in sample:
                with pymupdf.open(path) as pdf:
                    truths.append(normal("\n".join(line for block in _page_blocks(pdf[number]) for line in block.lines)))
                    pictures.append(pdf[number].get_pixmap(dpi=dpi).tobytes("png"))
            prose = [not LEADERS.search(truth) for truth in truths]
            for workers in sorted({1, ocr.WORKERS}):
                started = time.perf_counter()
                read = recognise_all(replace(engine, reader=reader), pictures, workers)
                seconds = time.perf_counter() - started
                errors = [edit_distance(truth, normal(text)) / len(truth) for truth, text in zip(truths, read)]
                rows.append([reader, f"{dpi} dpi", workers, len(sample), f"{100 * statistics.mean(errors):.2f}%",
                             f"{100 * statistics.median(errors):.2f}%", f"{100 * max(errors):.2f}%",
                             f"{100 * statistics.mean(e for e, kept in zip(errors, prose) if kept):.2f}% ({sum(prose)})",
                             f"{len(sample) / seconds:.2f}", f"{peak_rss_mb():.0f} MB", f"{children_peak_rss_mb():.0f} MB"])
    report(f"OCR of printed pages ({len(PDFS)} PDFs under /usr/share/doc, language {engine.language}, "
           f"data {engine.tessdata}; read by the index's workers)",
           ["Tesseract", "picture at", "workers", "pages", "CER mean", "CER median", "CER worst",
            "CER mean, pages without dot leaders", "pages/s", "peak RSS (indexer)", "peak RSS (a worker)"], rows,
           write=not args.no_write)
    if "chi_sim" in engine.language and (XQUAD_ZH / "corpus.jsonl").is_file():
        rows = []
        truths, pictures = chinese_pages(args.pages)
        started = time.perf_counter()
        read = recognise_all(engine, pictures, ocr.WORKERS)
        seconds = time.perf_counter() - started
        errors = [edit_distance(truth, "".join(text.split())) / len(truth) for truth, text in zip(truths, read)]
        rows.append(["300 dpi", ocr.WORKERS, len(truths), f"{100 * statistics.mean(errors):.2f}%",
                     f"{100 * statistics.median(errors):.2f}%", f"{100 * max(errors):.2f}%", f"{len(truths) / seconds:.2f}"])
        report(f"OCR of printed Chinese (XQuAD zh paragraphs set in pymupdf's china-s font, language "
               f"{engine.language}, data {engine.tessdata}; spaces ignored)",
               ["picture at", "workers", "pages", "CER mean", "CER median", "CER worst", "pages/s"], rows,
               write=not args.no_write)
    if not args.questions:
        return
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for folder in ("text", "scans", "pictures"):
            (root / folder).mkdir()
        pages_in_all = 0
        for path in PDFS:
            name = Path(path).name
            (root / "text" / name).write_bytes(Path(path).read_bytes())
            (root / "scans" / name).write_bytes(scan_of(path, 300))
            with pymupdf.open(path) as pdf:  # the same pages as picture files: OCR of one file after another
                for number, page in enumerate(pdf, 1):
                    (root / "pictures" / f"{Path(path).stem}-{number:03}.png").write_bytes(
                        page.get_pixmap(dpi=300, colorspace="gray").tobytes("png"))
                    pages_in_all += 1
        indexes = {}
        timings = {}
        for folder in ("text", "scans", "pictures"):
            kb = KnowledgeBase(parse_knowledgebase({"directories": [str(root / folder)]}), root / f"home-{folder}")
            started = time.perf_counter()
            kb.index()
            timings[folder] = time.perf_counter() - started
            indexes[folder] = kb
        started = time.perf_counter()
        indexes["scans"].index(full=True)
        full_again = time.perf_counter() - started
        directory = indexes["text"].config.directories[0]
        with IndexStore(indexes["text"].index_path(directory), create=False) as store:
            hits = [row for row in store.chunks(list(range(1, store.chunk_total() + 1))).values()
                    if len(row.text.split()) > 30]
        random.Random(7).shuffle(hits)
        answered = {"text": 0, "scans": 0}
        asked = 0
        for hit in hits[: args.questions]:
            words = hit.text.split()
            start = len(words) // 3
            question = " ".join(words[start:start + 8])
            asked += 1
            for folder in answered:
                top = indexes[folder].search(question, k=5).hits
                answered[folder] += any(h.path == hit.path and h.page == hit.page for h in top)
    report(f"OCR'd copies answer what the text layers answer (hybrid, top 5, the same page; {pages_in_all} pages, "
           f"read by {engine.reader})",
           ["questions", "answered from text layers", "answered from 300-dpi scans", "first index of the scans",
            "`--full` again (cached OCR)", "first index of the pages as PNG files", "first index of the text PDFs"],
           [[asked, answered["text"], answered["scans"],
             f"{timings['scans']:.1f} s ({pages_in_all / timings['scans']:.2f} pages/s)", f"{full_again:.1f} s",
             f"{timings['pictures']:.1f} s ({pages_in_all / timings['pictures']:.2f} pages/s)",
             f"{timings['text']:.1f} s"]], write=not args.no_write)


if __name__ == "__main__":
    main()
