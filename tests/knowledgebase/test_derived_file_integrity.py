"""Damaged and half-written derived caches (`.vectors`, `.terms`): detected, never trusted, repaired."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.index import derived_file, keyword_cache, vector_cache
from hermes_kb.agent.knowledgebase.index.keyword_cache import KeywordCache
from hermes_kb.agent.knowledgebase.index.store import IndexStore
from hermes_kb.agent.knowledgebase.index.vector_cache import VectorCache

MODULES = {"vector": (vector_cache, VectorCache, "knn"), "keyword": (keyword_cache, KeywordCache, "search")}

DOCS = {
    "a.md": "# Alpha\n\nkiwi banana mango smoothie recipe with fresh fruit\n",
    "b.md": "# Beta\n\nrust borrow checker lifetimes and ownership rules\n",
    "c.md": "# Gamma\n\nsourdough starter hydration and kiwi bread\n",
    "d.md": "# Delta\n\nmango chutney with chilli, a recipe for rust-coloured sauce\n",
}
QUERIES = ("kiwi mango", "rust ownership", "sourdough recipe", "chutney")


def flip(path, at: int, count: int = 16) -> None:
    """Overwrite bytes in place, the size unchanged."""
    with open(path, "r+b") as handle:
        handle.seek(at)
        data = handle.read(count)
        handle.seek(at)
        handle.write(bytes(b ^ 0xFF for b in data))


def results(kb, mode):
    return [[(h.path, h.chunk_id, round(h.score, 5)) for h in kb.search(q, mode=mode).hits] for q in QUERIES]


def corpus(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("kind", MODULES)
def test_a_copy_damaged_in_the_middle_is_refused_reported_and_rebuilt(tmp_path, make_kb, monkeypatch, kind):
    module, opener, method = MODULES[kind]
    field, mode = f"{kind}_cache", "vector" if kind == "vector" else "keyword"
    root = corpus(tmp_path)
    make_kb(root).index()
    kb = make_kb(root)
    index = kb.index_path(kb.config.directories[0])
    copy = module.cache_path(index)
    with IndexStore(index, create=False) as store:
        generation = store.generation()
    assert module.verify(copy) is None and module.state(copy, generation) == "current"
    assert kb.status()[0][field] == "current"
    good = copy.read_bytes()

    # What the source of truth (sqlite-vec / FTS5) answers, with no copy at all.
    copy.unlink()
    expected = results(make_kb(root), mode)
    assert any(expected)

    copy.write_bytes(good)
    flip(copy, (derived_file.HEADER_BYTES + len(good)) // 2)  # the middle of what follows the header
    assert copy.stat().st_size == len(good)
    problem = module.verify(copy)
    assert problem and "fail their checksum" in problem and str(copy) in problem
    assert module.state(copy, generation) == "corrupt"
    assert module.read_generation(copy) is None
    with pytest.raises(ValueError):
        opener(copy)
    assert make_kb(root).status()[0][field] != "current"  # the facade shows "stale" until it asks `state`
    monkeypatch.setattr(opener, method, lambda *a, **k: pytest.fail("a damaged copy was searched"))
    assert results(make_kb(root), mode) == expected
    monkeypatch.undo()

    summary = make_kb(root).index()[0]  # nothing changed on disk: the generation is the same
    assert summary.added == summary.changed == summary.removed == 0
    assert module.verify(copy) is None and module.state(copy, generation) == "current"
    assert copy.read_bytes() == good  # rebuilt from the index, byte for byte
    assert make_kb(root).status()[0][field] == "current"
    assert results(make_kb(root), mode) == expected


@pytest.mark.parametrize("kind", MODULES)
def test_damage_anywhere_is_named(tmp_path, make_kb, kind):
    """Every array, the checksum table and the header: a flip in any of them fails the full check."""
    module = MODULES[kind][0]
    root = corpus(tmp_path)
    kb = make_kb(root)
    kb.index()
    copy = module.cache_path(kb.index_path(kb.config.directories[0]))
    good = copy.read_bytes()
    with open(copy, "rb") as handle:
        info = derived_file._parse_header(handle.read(derived_file.HEADER_BYTES), module.MAGIC)
    places, size = module._places_of(info)
    assert size == len(good)
    targets = {name: offset + dtype.itemsize * length // 2 for name, (offset, dtype, length) in places.items() if length}
    targets["header"] = len(module.MAGIC) + 3
    assert {"checksums", "ids"} <= set(targets)
    for name, at in targets.items():
        copy.write_bytes(good)
        flip(copy, at, 1)
        assert module.verify(copy), name
        assert module.read_generation(copy) is None, name
    copy.write_bytes(good)
    assert module.verify(copy) is None


def test_a_large_copy_is_checked_in_part_when_mapped_and_whole_by_the_index_run(tmp_path, monkeypatch):
    """Above QUICK_FULL_BYTES the mapping checks the arrays searches index with (and a sample); the
    full check (verify, and the index run before it keeps a copy) reads every block."""
    monkeypatch.setattr(derived_file, "CHECK_BLOCK", 4096)
    monkeypatch.setattr(derived_file, "QUICK_FULL_BYTES", 0)
    monkeypatch.setattr(derived_file, "SAMPLE_BLOCKS", 0)
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(400, 48)).astype(np.float32)
    path = tmp_path / "x.vectors"
    vector_cache.build(path, "gen-1", 48, 400, iter([(np.arange(400) << 5, vectors)]))
    good = path.read_bytes()
    with open(path, "rb") as handle:
        info = derived_file._parse_header(handle.read(derived_file.HEADER_BYTES), vector_cache.MAGIC)
    places, _ = vector_cache._places_of(info)

    offset, dtype, length = places["quantized"]
    flip(path, offset + length // 2)  # no search reads all of it: only the full check sees this
    assert vector_cache.read_generation(path) == "gen-1"
    assert vector_cache.state(path, "gen-1") == "current"
    VectorCache(path)
    assert vector_cache.read_generation(path, full=True) is None
    assert "quantized" in vector_cache.verify(path)
    assert vector_cache.state(path, "gen-1", full=True) == "corrupt"

    path.write_bytes(good)
    offset, dtype, length = places["sorted_rows"]
    flip(path, offset + dtype.itemsize * length // 2)  # searches index with these: checked on every mapping
    assert vector_cache.read_generation(path) is None
    with pytest.raises(ValueError, match="sorted_rows"):
        VectorCache(path)


@pytest.mark.parametrize("kind", MODULES)
def test_a_copy_from_the_previous_version_is_stale_not_corrupt(tmp_path, make_kb, kind):
    module = MODULES[kind][0]
    root = corpus(tmp_path)
    kb = make_kb(root)
    kb.index()
    index = kb.index_path(kb.config.directories[0])
    copy = module.cache_path(index)
    with IndexStore(index, create=False) as store:
        generation = store.generation()
    old = module.MAGIC[:-2] + b"1\n"  # the magic of the layout before checksums
    with open(copy, "r+b") as handle:
        handle.write(old)
    assert module.state(copy, generation) == "stale"
    assert "another version" in module.verify(copy)
    kb.index()
    assert module.state(copy, generation) == "current"


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("kind", MODULES)
def test_a_stale_temporary_is_listed_and_removed_by_the_next_run(tmp_path, make_kb, kind):
    module = MODULES[kind][0]
    root = corpus(tmp_path)
    kb = make_kb(root)
    kb.index()
    index = kb.index_path(kb.config.directories[0])
    copy = module.cache_path(index)
    dead = copy.with_name(f"{copy.name}.tmp{dead_pid()}")
    dead.write_bytes(b"\0" * 5000)
    mine = copy.with_name(f"{copy.name}.tmp{os.getpid()}")  # a build of this very process, in progress
    mine.write_bytes(b"")
    alive = copy.with_name(f"{copy.name}.tmp{os.getppid()}")  # a live process, recently written: in progress
    alive.write_bytes(b"")
    old_alive = copy.with_name(f"{copy.name}.tmp1")  # a live pid, but untouched for hours: dead, the pid reused
    old_alive.write_bytes(b"")
    os.utime(old_alive, (time.time() - 7200, time.time() - 7200))
    assert module.leftovers(index) == sorted([dead, old_alive])
    kb.index()  # nothing changed: the copy is not rebuilt, but its leftovers go
    assert not dead.exists() and not old_alive.exists() and mine.exists() and alive.exists()
    assert module.leftovers(index) == []
    mine.unlink()
    alive.unlink()

    dead.write_bytes(b"\0")
    (root / "e.md").write_text("# Epsilon\n\nnew kiwi note\n")
    kb.index()  # a rebuild removes them too
    assert not dead.exists() and sorted(p.name for p in copy.parent.glob(f"{copy.name}*")) == [copy.name]


def _old_copies(tmp_path):
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 48)).astype(np.float32)
    vector_path = tmp_path / "i.sqlite.vectors"
    vector_cache.build(vector_path, "gen-1", 48, 300, iter([(np.arange(300) << 5, vectors)]))
    terms_path = tmp_path / "i.sqlite.terms"
    rows = [(i, *keyword_cache.chunk_terms(f"kiwi w{i % 7} mango w{i % 11}", "")) for i in range(1, 301)]
    keyword_cache.build(terms_path, "gen-1", iter(rows))
    return {"vector": (vector_path, vectors), "keyword": (terms_path, rows)}


KILLED_BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from hermes_kb.agent.knowledgebase.index import keyword_cache, vector_cache

    kind, path, marker = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

    def batches():
        rng = np.random.default_rng(4)
        yield np.arange(150) << 5, rng.normal(size=(150, 48)).astype(np.float32)
        marker.write_text("half written")
        time.sleep(120)  # killed here, half-way through the matrix
        yield np.arange(150, 300) << 5, rng.normal(size=(150, 48)).astype(np.float32)

    if kind == "vector":
        vector_cache.build(path, "gen-2", 48, 300, batches())
    else:
        real = keyword_cache.write_header
        def stalled(handle, *args):  # every array written, the header and checksums not yet
            handle.flush()
            marker.write_text("half written")
            time.sleep(120)
            real(handle, *args)
        keyword_cache.write_header = stalled
        rows = [(i, *keyword_cache.chunk_terms(f"kiwi w{i % 5}", "")) for i in range(1, 301)]
        keyword_cache.build(path, "gen-2", iter(rows))
""")


@pytest.mark.parametrize("kind", MODULES)
def test_a_build_killed_mid_write_keeps_the_old_copy_and_its_temporary_is_cleaned_next_time(tmp_path, kind):
    module, opener, _ = MODULES[kind]
    path, _ = _old_copies(tmp_path)[kind]
    index = tmp_path / "i.sqlite"
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, kind, str(path), str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the build did not start"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    temporary = path.with_name(f"{path.name}.tmp{child.pid}")
    assert temporary.exists() and temporary.stat().st_size > 0

    # The old copy is untouched and usable.
    assert module.read_generation(path) == "gen-1" and module.verify(path) is None
    copy = opener(path)
    if kind == "vector":
        assert len(copy.knn(np.ones(48, np.float32), 3)) == 3
    else:
        assert len(copy.search(["kiwi"], 5)) == 5
    # The half-written temporary would never pass as a copy, and it is listed as a leftover.
    assert module.verify(temporary) is not None
    assert module.leftovers(index) == [temporary]

    # The next build of that cache removes it.
    if kind == "vector":
        rng = np.random.default_rng(5)
        vector_cache.build(path, "gen-3", 48, 10, iter([(np.arange(10) << 5, rng.normal(size=(10, 48)))]))
    else:
        keyword_cache.build(path, "gen-3", iter([(1, *keyword_cache.chunk_terms("kiwi", ""))]))
    assert not temporary.exists() and module.leftovers(index) == []
    assert module.read_generation(path) == "gen-3"


def test_remove_leftovers_is_what_clear_calls(tmp_path):
    index = tmp_path / "i.sqlite"
    pid = dead_pid()
    made = [vector_cache.cache_path(index).with_name(f"i.sqlite.vectors.tmp{pid}"),
            keyword_cache.cache_path(index).with_name(f"i.sqlite.terms.tmp{pid}")]
    for path in made:
        path.write_bytes(b"x")
    unrelated = tmp_path / "i.sqlite.vectors.tmpx"
    unrelated.write_bytes(b"x")
    assert vector_cache.remove_leftovers(index) == [made[0]]
    assert keyword_cache.remove_leftovers(index) == [made[1]]
    assert not any(p.exists() for p in made) and unrelated.exists()
