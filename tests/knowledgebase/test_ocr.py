"""OCR as a user meets it: a scanned PDF and a screenshot found by their words, cited like text and
marked `ocr`; recognised once (cache by the page's pixels); files waiting while no OCR is installed,
said by status, read when it is; hostile pictures one skip reason each."""

import struct
import zlib

import pymupdf
import pytest

from hermes_kb.agent.knowledgebase import ocr
from hermes_kb.agent.knowledgebase.kinds import registry
from hermes_kb.agent.knowledgebase.kinds.document import LoadError

pytestmark = pytest.mark.skipif(ocr.tessdata_dir() is None, reason="needs Tesseract's trained data (the ocr extra)")

INVOICE = ["Invoice 4471 from Rotterdam Pumps", "Warranty: the pump is covered for 24 months"]


def picture(lines: list[str], dpi: int = 200) -> pymupdf.Pixmap:
    """The lines printed on a page, then photographed: a pixmap with no text layer."""
    page = pymupdf.open().new_page(width=420, height=max(160, 40 + 40 * len(lines)))
    for n, line in enumerate(lines):
        page.insert_text((20, 50 + 40 * n), line, fontsize=16)
    return page.get_pixmap(dpi=dpi)


def scanned_pdf(lines: list[str]) -> bytes:
    pdf = pymupdf.open()
    page = pdf.new_page(width=420, height=max(160, 40 + 40 * len(lines)))
    page.insert_image(page.rect, stream=picture(lines).tobytes("png"))
    return pdf.tobytes()


def png(lines: list[str]) -> bytes:
    return picture(lines).tobytes("png")


def test_a_scan_and_a_screenshot_are_found_cited_and_marked_ocr(tree, make_kb):
    kb = make_kb(tree({"scanned.pdf": scanned_pdf(INVOICE), "page.png": png(["Error 0x80070005: access denied"]),
                       "notes.md": "# Notes\n\nNothing about pumps.\n"}))
    [summary] = kb.index()
    assert summary.skipped == []
    hit = kb.search("warranty pump Rotterdam", k=3, mode="keyword").hits[0]
    assert (hit.path, hit.part, "ocr" in hit.found_by) == ("scanned.pdf", "page 1", True)
    shot = kb.search("access denied", k=3, mode="keyword").hits[0]
    assert (shot.path, shot.kind, "ocr" in shot.found_by) == ("page.png", "image", True)
    notes = [h for h in kb.search("nothing about pumps", k=5, mode="keyword").hits if h.path == "notes.md"]
    assert notes and "ocr" not in notes[0].found_by
    window = kb.read(f"{shot.directory}/page.png")
    assert "access denied" in window.text.lower()


def test_pictures_and_scans_come_last_and_are_announced(tree, make_kb):
    from hermes_kb.agent.knowledgebase.indexer import index_directory

    text_pdf = pymupdf.open()
    text_pdf.new_page().insert_text((72, 72), "A manual with a text layer and no pictures.")
    kb = make_kb(tree({"z.md": "# Z\n\nlast by name\n", "a.png": png(INVOICE), "b.pdf": scanned_pdf(INVOICE),
                       "c.pdf": text_pdf.tobytes()}))
    seen = []

    class Recorder:
        def start(self, *args, **kwargs): pass
        def advance(self, **counts): pass
        def finish(self): pass
        def note(self, text): seen.append(text)

    directory = kb.targets(None)[0]
    with kb.backend.open(kb.index_path(directory), name=directory.name) as store:
        order = []
        real = store.write_file
        store.write_file = lambda path, *a, **k: order.append(path) or real(path, *a, **k)
        index_directory(directory, kb.config, store, kb.embedder, Recorder(), ocr=ocr.engine(None))
    assert order == ["c.pdf", "z.md", "a.png", "b.pdf"]  # scanned or not, found by the pictures on its pages
    assert any(note.startswith("Reading 1 picture and 1 scanned PDF by OCR") for note in seen), seen


def test_a_page_is_recognised_once_whatever_the_file_is_called(tree, make_kb, monkeypatch):
    calls = []
    real = ocr.WorkerPool.schedule  # a page sent to an OCR worker
    monkeypatch.setattr(ocr.WorkerPool, "schedule", lambda pool, *args: calls.append(1) or real(pool, *args))
    root = tree({"a.pdf": scanned_pdf(INVOICE)})
    kb = make_kb(root)
    kb.index()
    assert calls == [1]
    kb.index(full=True)
    (root / "a.pdf").rename(root / "renamed.pdf")
    (root / "copy.pdf").write_bytes(scanned_pdf(INVOICE))
    kb.index()
    assert calls == [1]  # a --full run, a rename and a duplicate reuse the recognised page
    [hit] = kb.search("Rotterdam", k=5, mode="keyword").hits  # the same text twice is one hit
    assert {hit.path, *(place.path for place in hit.also_in)} == {"renamed.pdf", "copy.pdf"}
    assert hit.also_in[0].label().endswith(".pdf page 1")


def test_without_ocr_pictures_wait_and_status_says_how_to_enable_it(tree, make_kb, monkeypatch):
    monkeypatch.setattr(ocr, "tessdata_dir", lambda: None)
    kb = make_kb(tree({"scanned.pdf": scanned_pdf(INVOICE), "page.png": png(INVOICE)}))
    [summary] = kb.index()
    assert sorted(reason.split(";")[0] for _, reason in summary.skipped) == [
        "waits for OCR: 1 scanned page", "waits for OCR: an image"]
    [row] = kb.status()
    assert row["waiting_for_ocr"] == 2 and "pip install 'hermes-knowledgebase[ocr]'" in row["ocr"]
    assert row["ocr_reader"].startswith("none; install the `ocr` extra")
    monkeypatch.undo()
    [summary] = kb.index()  # nothing changed on disk: the waiting files are read because OCR is here now
    [row] = kb.status()
    assert summary.skipped == [] and "waiting_for_ocr" not in row and "Tesseract, languages eng" in row["ocr_reader"]
    assert len(kb.search("Rotterdam", k=5, mode="keyword").hits) == 2


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("data, reason", [
    (_png_header(20_000, 20_000), "decompression bomb"),  # 400M pixels declared, 64 bytes given
    (_png_header(100_000, 100_000), "unreadable image"),  # MuPDF refuses it before us
    (png(INVOICE)[:200], "unreadable image|decompression bomb|no text found"),  # truncated
    (b"GIF89a not really", "unreadable image|decompression bomb"),  # a header of random dimensions
    (picture([]).tobytes("png"), "no text found"),
])
def test_hostile_or_empty_pictures_are_one_skip_reason(data, reason, tmp_path):
    with pytest.raises(LoadError, match=reason) as caught:
        registry.named("image").read_function()(data, "image", ocr.engine(tmp_path))
    assert "\n" not in str(caught.value)


def test_a_scanned_page_declaring_a_huge_picture_is_not_decoded(tmp_path):
    pdf = pymupdf.open(stream=scanned_pdf(INVOICE))
    [image] = pdf[0].get_images(full=True)
    for key in ("Width", "Height"):
        pdf.xref_set_key(image[0], key, "20000")  # 400 million pixels declared, a few KB of data
    with pytest.raises(LoadError, match="decompression bomb"):
        registry.named("pdf").read_function()(pdf.tobytes(), "pdf", ocr.engine(tmp_path))


def scanned_book(pages: list[list[str]]) -> bytes:
    pdf = pymupdf.open()
    for lines in pages:
        page = pdf.new_page(width=420, height=max(160, 40 + 40 * len(lines)))
        page.insert_image(page.rect, stream=picture(lines).tobytes("png"))
    return pdf.tobytes()


def test_a_scanned_book_is_read_page_by_page_in_order_by_the_workers():
    from hermes_kb.agent.knowledgebase.loaders import load

    words = ["Rotterdam", "Hamburg", "Antwerp", "Marseille", "Lisbon", "Genoa"]
    document = load(scanned_book([[f"Chapter {n}: the port of {word}"] for n, word in enumerate(words, 1)]), "pdf",
                    ocr.engine(None))
    assert document.metadata.recognised == (1, 2, 3, 4, 5, 6)
    starts = document.page_starts  # where each page begins
    for n, word in enumerate(words):  # each page's text where that page begins, whichever worker read it
        assert word in document.text[starts[n]:starts[n + 1] if n + 1 < len(starts) else None]


@pytest.mark.parametrize("setting, value, reason", [
    ("PAGE_SECONDS_CAP", 0.05, "OCR gave up on it after 0.05 s"),
    ("WORKER_MEMORY_BYTES", 60_000_000, "OCR needed more than 60 MB for it"),
])
def test_a_page_ocr_cannot_finish_costs_that_file_one_line_and_nothing_else(tree, make_kb, monkeypatch,
                                                                             setting, value, reason):
    # A page of 40 lines: recognised in ~1 s, so no worker beats the 0.05 s cap, however warm.
    page = INVOICE + [f"Clause {n}: the pump warranty covers parts and labour" for n in range(38)]
    root = tree({"page.png": png(page), "scan.pdf": scanned_pdf(page), "notes.md": "# Notes\n\nRotterdam office.\n"})
    kb = make_kb(root)
    monkeypatch.setattr(ocr, setting, value)
    [summary] = kb.index()
    assert sorted(path for path, _ in summary.skipped) == ["page.png", "scan.pdf"]
    assert all(reason in why for _, why in summary.skipped), summary.skipped
    assert [h.path for h in kb.search("Rotterdam", k=5, mode="keyword").hits] == ["notes.md"]
    monkeypatch.undo()
    kb.index(full=True)  # nothing was cached from the failures: read again, they are found
    assert {h.path for h in kb.search("Rotterdam", k=5, mode="keyword").hits} == {"notes.md", "page.png", "scan.pdf"}


def test_a_long_ocr_job_says_its_rate_and_what_is_left():
    from hermes_kb.agent.knowledgebase.indexer import OcrReport

    said, now = [], [0.0]
    report = OcrReport(type("Notes", (), {"note": lambda self, text: said.append(text)})(), "scans/book.pdf",
                       clock=lambda: now[0])
    for done in range(1, 201):  # 200 pages at 2 s a page
        now[0] = 2.0 * done
        report(done, 200)
    assert said[0] == "OCR of scans/book.pdf: 5 of 200 pages, 0.50 pages/s, about 6 min left"
    assert said[-1] == "OCR of scans/book.pdf: 195 of 200 pages, 0.50 pages/s, about 10 s left"
    assert len(said) == 39  # every 10 s, none for the last page (the run's summary says it)


def test_english_from_the_extra_does_not_hide_chinese_installed_beside_it(tmp_path, monkeypatch):
    extra, debian = tmp_path / "venv" / "share" / "tessdata", tmp_path / "debian" / "5" / "tessdata"
    for folder, languages in ((extra, ["eng"]), (debian, ["eng", "chi_sim", "osd"])):
        folder.mkdir(parents=True)
        for language in languages:
            (folder / f"{language}.traineddata").write_bytes(b"x")
    monkeypatch.delenv("TESSDATA_PREFIX", raising=False)
    monkeypatch.setattr(ocr.sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setattr(ocr, "_DEBIAN", str(tmp_path / "debian" / "*" / "tessdata"))
    monkeypatch.setattr(ocr, "_OTHER_PLACES", ())
    assert ocr.tessdata_dir() == debian and ocr.languages_in(debian) == "eng+chi_sim"
    (debian / "chi_sim.traineddata").unlink()
    assert ocr.tessdata_dir() == extra  # the same languages: this environment's own comes first
    monkeypatch.setenv("TESSDATA_PREFIX", str(debian))
    assert ocr.tessdata_dir() == debian  # named by the user: always


@pytest.mark.parametrize("reader", [name for name in ocr.READERS
                                    if ocr.importlib.util.find_spec(ocr.READERS[name].module) is not None])
def test_each_build_of_tesseract_reads_a_scan_into_cited_lines(reader, tmp_path):
    from hermes_kb.agent.knowledgebase.loaders import load

    engine = replace_reader(ocr.engine(tmp_path), reader)
    try:
        document = load(scanned_pdf(INVOICE), "pdf", engine)
    finally:
        engine.close()
    read = [line.strip().lower() for line in document.text.splitlines() if line.strip()]
    assert read == [line.lower() for line in INVOICE]  # each printed line one line, in order (case may slip)
    assert document.metadata.recognised == (1,)


def replace_reader(engine: ocr.Ocr, reader: str) -> ocr.Ocr:
    from dataclasses import replace

    return replace(engine, reader=reader)


def test_a_scan_losing_some_pages_is_indexed_and_says_which(tree, make_kb):
    pdf = pymupdf.open(stream=scanned_book([["Chapter 1: the port of Rotterdam"], ["Chapter 2: the port of Hamburg"]]))
    [image] = pdf[1].get_images(full=True)
    for key in ("Width", "Height"):
        pdf.xref_set_key(image[0], key, "20000")  # page 2 declares a decompression bomb
    kb = make_kb(tree({"book.pdf": pdf.tobytes()}))
    [summary] = kb.index()
    assert summary.skipped == []
    [(path, reason)] = summary.partly_read
    assert path == "book.pdf" and reason.startswith("1 of 2 pages not read (page 2: not read: a picture of 20000 x 20000")
    assert "--full" not in reason  # a picture refused for its size is refused again: no point retrying
    assert [h.path for h in kb.search("Rotterdam", k=5, mode="keyword").hits] == ["book.pdf"]


@pytest.mark.skipif(min(ocr.WORKERS, ocr.os.cpu_count() or 1) < 2, reason="one OCR worker reads one page at a time")
def test_a_folder_of_pictures_keeps_every_ocr_worker_busy_and_reads_each_once(tree, make_kb, monkeypatch):
    ports = ["Rotterdam", "Hamburg", "Antwerp", "Marseille"]
    scheduled = []  # at each page sent to a worker: how many sent before were still being read
    real = ocr.WorkerPool.schedule

    def schedule(pool, *args):
        scheduled.append(sum(not future.done() for future in pool.sent))
        future = real(pool, *args)
        pool.sent = [*getattr(pool, "sent", []), future]
        return future

    monkeypatch.setattr(ocr.WorkerPool, "sent", [], raising=False)
    monkeypatch.setattr(ocr.WorkerPool, "schedule", schedule)
    kb = make_kb(tree({f"{n}.png": png([f"Shipment {n} arrives in {port}"]) for n, port in enumerate(ports)}))
    [summary] = kb.index()
    assert summary.added == 4 and summary.skipped == []
    assert len(scheduled) == 4 and max(scheduled) >= 1  # each picture once; a second one under way beside the first
    for n, port in enumerate(ports):
        assert [h.path for h in kb.search(port, k=5, mode="keyword").hits] == [f"{n}.png"]


def test_a_password_protected_pdf_is_one_line_and_the_rest_is_indexed(tree, make_kb):
    pdf = pymupdf.open(stream=scanned_pdf(INVOICE))
    locked = pdf.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="secret", owner_pw="owner")
    kb = make_kb(tree({"locked.pdf": locked, "notes.md": "# Notes\n\nRotterdam office.\n"}))
    [summary] = kb.index()
    [(path, reason)] = summary.skipped
    assert path == "locked.pdf" and "password" in reason and "\n" not in reason
    assert [h.path for h in kb.search("Rotterdam", k=5, mode="keyword").hits] == ["notes.md"]


def test_a_long_scan_keeps_few_pages_waiting_and_gives_up_on_pages_that_never_finish(monkeypatch, tmp_path):
    from hermes_kb.agent.knowledgebase.kinds.pdf import text_blocks

    waiting = []  # at each page sent to a worker: how many sent before were not read yet
    real = ocr.WorkerPool.schedule

    def schedule(pool, *args):
        pool.sent = [future for future in getattr(pool, "sent", []) if not future.done()]
        waiting.append(len(pool.sent))
        future = real(pool, *args)
        pool.sent.append(future)
        return future

    monkeypatch.setattr(ocr.WorkerPool, "schedule", schedule)
    book = pymupdf.open(stream=scanned_book([[f"Page {n} of the ledger"] for n in range(1, 25)]))
    engine = ocr.engine(tmp_path)
    try:
        read = list(engine.read(iter(book), text_blocks, len(book)))
        assert all(isinstance(page, list) for page in read) and len(waiting) == 24
        assert max(waiting) <= 2 * engine.pool.workers  # rendered pages waiting: a few, however long the scan
        monkeypatch.setattr(ocr, "PAGE_SECONDS_CAP", 0.01)
        cold = ocr.Ocr(engine.tessdata, engine.language, None, reader=engine.reader)  # no cache: every page read
        sent_before = len(waiting)
        dense = pymupdf.open(stream=scanned_book([[f"Clause {n}.{line}: the pump warranty covers parts and labour"
                                                   for line in range(30)] for n in range(12)]))  # ~1 s a page
        read = list(cold.read(iter(dense), text_blocks, len(dense)))
        cold.close()
    finally:
        engine.close()
    assert all(isinstance(page, str) for page in read)
    assert len(waiting) - sent_before <= ocr.GIVE_UP_AFTER + 2 * engine.pool.workers  # not 24 pages of waiting
    assert read[-1] == f"not tried: OCR gave up on {ocr.GIVE_UP_AFTER} pages in a row"


def rearranged_in_blocks(pixmap: pymupdf.Pixmap, block: int = 8) -> pymupdf.Pixmap:
    """The probe's recipe: every aligned block's pixels reversed, so any rendering that averages whole
    blocks (a 24-dpi key of a 192-dpi picture) is unchanged while the text is destroyed."""
    gray = pymupdf.Pixmap(pymupdf.csGRAY, pixmap)
    width, height, samples = gray.width, gray.height, bytearray(gray.samples)
    for top in range(0, height - height % block, block):
        for left in range(0, width - width % block, block):
            cells = [(top + y) * width + left + x for y in range(block) for x in range(block)]
            values = [samples[i] for i in cells]
            for i, value in zip(cells, reversed(values)):
                samples[i] = value
    return pymupdf.Pixmap(pymupdf.csGRAY, width, height, bytes(samples), False)


def test_a_picture_crafted_to_collide_at_low_resolution_gets_its_own_text(tree, make_kb, hermes_home):
    private = picture(["VAULT CODE 7741 OPENS THE DOOR"], dpi=192)
    crafted = rearranged_in_blocks(private)
    # One pixel a little darker: invisible in any averaged rendering (the old key), another key now.
    nudged = pymupdf.Pixmap(pymupdf.csGRAY, private)
    nudged.set_pixel(5, 5, (250,))
    engine = ocr.engine(hermes_home / "knowledgebase" / "ocr-cache")
    pages = [pymupdf.open(stream=p.tobytes("png"))[0] for p in (private, crafted, nudged)]
    keys = {engine.key(ocr._rendering(page)) for page in pages}
    assert len(keys) == 3
    # Whichever is indexed first, in two folders under one home, each gets its own text.
    public = make_kb(tree({"crafted.png": crafted.tobytes("png")}, root=hermes_home.parent / "public"))
    public.index()
    vault = make_kb(tree({"private.png": private.tobytes("png")}, root=hermes_home.parent / "vault"))
    vault.index()
    assert [h.path for h in vault.search("VAULT CODE 7741", mode="keyword", directory="vault").hits] == ["private.png"]
    assert not public.search("VAULT CODE 7741", mode="keyword", directory="public").hits


def test_ocr_work_per_file_is_capped_and_the_summary_says_so(monkeypatch):
    """One picture drawn on every page at a new offset is a new page to read each time: a file gets a
    budget of pages and of time, and its other pages are said not read."""
    from hermes_kb.agent.knowledgebase.loaders import load

    book = scanned_book([[f"Page {n} of the harbour log"] for n in range(1, 5)])
    monkeypatch.setattr(ocr, "FILE_PAGES_CAP", 2)
    document = load(book, "pdf", ocr.engine(None))
    assert "2 of 4 pages not read" in document.left_out and "OCR reads at most 2 pages of one file" in document.left_out
    assert document.metadata.recognised == (1, 2)
    monkeypatch.setattr(ocr, "FILE_PAGES_CAP", 500)
    monkeypatch.setattr(ocr, "FILE_SECONDS_CAP", 0)
    with pytest.raises(LoadError, match="4 scanned pages not read: not tried: OCR spent its 0 s on this file"):
        load(book, "pdf", ocr.engine(None))
