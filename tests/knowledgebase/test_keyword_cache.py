import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.index import keyword_cache, vector_cache
from hermes_kb.agent.knowledgebase.chunker import Chunk
from hermes_kb.agent.knowledgebase.analysis import index_tokens, query_words, tokens
from hermes_kb.agent.knowledgebase.index.keyword_cache import KeywordCache, cache_path, read_generation
from hermes_kb.agent.knowledgebase.index.local_files import remove_index
from hermes_kb.agent.knowledgebase.index.store import IndexStore

TEXT = ("Café owners' NAÏVE résumés: running shoes, foo_bar and 3D-printed cells; "
        "the connections connected and generalization of apoptosis in 2019.")


def random_texts(count: int, seed: int = 5) -> list[tuple[str, str]]:
    """(text, heading) pairs over a Zipf-like vocabulary, lengths varied so BM25 scores rarely tie."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(300)] + ["kiwi", "mango", "cells", "cell", "running", "protein"]
    weights = 1 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    texts = []
    for _ in range(count):
        body = " ".join(rng.choice(vocabulary, size=int(rng.integers(5, 80)), p=weights))
        heading = " ".join(rng.choice(vocabulary, size=int(rng.integers(0, 4))))
        texts.append((body, heading))
    return texts


def fill(store: IndexStore, texts: list[tuple[str, str]], per_file: int = 25) -> None:
    for begin in range(0, len(texts), per_file):
        chunks = [Chunk(t, 0, len(t), i + 1, i + 1, None, h) for i, (t, h) in enumerate(texts[begin:begin + per_file])]
        store.write_file(f"f{begin}.txt", 1, 1, f"h{begin}", "text", chunks, None)


def test_words_are_the_terms_fts5_stores(tmp_path):
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, [(TEXT, "")])
        store.conn.execute("CREATE VIRTUAL TABLE vocabulary USING fts5vocab(chunks_fts, row)")
        stored = {term for (term,) in store.conn.execute("SELECT term FROM vocabulary")}
    assert set(index_tokens(TEXT)[0]) == stored
    assert tokens("Café foo_bar RUNNING 3D") == ["cafe", "foo", "bar", "run", "3d"]


def test_the_cache_ranks_exactly_as_fts5_bm25(tmp_path):
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, random_texts(400))
        keyword_cache.refresh(store)
        cache = KeywordCache(cache_path(store.path))
        for query in ("kiwi", "mango cells w3", "running protein w1 w2 w250", "kiwi kiwi cell cells", "absent"):
            terms = query_words(query)
            expected = store.keyword(terms, 1000)
            found = cache.search(terms, 1000)
            assert [i for i, _ in found] == [i for i, _ in expected], query
            assert np.allclose([s for _, s in found], [s for _, s in expected], rtol=1e-5)
            assert cache.search(terms, 3) == found[:3]


def test_index_runs_keep_the_keyword_cache_current_and_search_uses_it(tmp_path, make_kb, monkeypatch):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nkiwi banana mango smoothie recipe\n")
    (root / "b.md").write_text("# Beta\n\nrust borrow checker lifetimes\n")
    kb = make_kb(root)
    kb.index()
    index = kb.index_path(kb.config.directories[0])
    with IndexStore(index) as store:
        assert read_generation(cache_path(index)) == store.generation()
    assert kb.status()[0]["keyword_cache"] == "current"
    searched = []
    monkeypatch.setattr(KeywordCache, "search", lambda self, *a, _real=KeywordCache.search: searched.append(a) or _real(self, *a))
    assert kb.search("mango smoothie", mode="keyword").hits[0].path == "a.md"
    assert searched, "a current cache answers keyword searches"

    # A write outside an index run makes the cache stale: FTS5 answers, still right.
    searched.clear()
    (root / "c.md").write_text("# Gamma\n\nsourdough starter hydration\n")
    stat = (root / "c.md").stat()
    with IndexStore(index) as store:  # with the file's own stat, so the search does not refresh it inline
        store.write_file("c.md", stat.st_size, stat.st_mtime_ns, "h", "markdown",
                         [Chunk("sourdough starter", 0, 1, 1, 1, None, "")], None)
    assert kb.status()[0]["keyword_cache"] == "stale"
    assert kb.search("sourdough", mode="keyword").hits[0].path == "c.md"
    assert not searched
    kb.index()
    assert kb.status()[0]["keyword_cache"] == "current"
    assert kb.search("sourdough hydration", mode="keyword").hits[0].path == "c.md"

    (root / "a.md").unlink()
    kb.index()
    assert all(h.path != "a.md" for h in kb.search("kiwi mango", mode="keyword").hits)
    with IndexStore(index) as store:  # the deleted file's terms went with its chunks
        assert store.term_totals()[0] == store.counts()["chunks"]
    assert remove_index(index) and not cache_path(index).exists()


def test_chunks_indexed_before_chunk_terms_existed_get_their_terms_once(tmp_path):
    texts = random_texts(120)
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, texts)
        keyword_cache.refresh(store)
        before = KeywordCache(cache_path(store.path)).search(["kiwi", "w7"], 50)
        store.conn.execute("DELETE FROM chunk_terms")  # what an index from the previous version looks like
        cache_path(store.path).unlink()
        assert keyword_cache.refresh(store)
        assert store.term_totals()[0] == 120
        assert KeywordCache(cache_path(store.path)).search(["kiwi", "w7"], 50) == before
        assert not keyword_cache.refresh(store)  # nothing moved: no rebuild


def test_above_the_posting_limit_fts5_serves_keyword_search(tmp_path, make_kb, monkeypatch):
    monkeypatch.setattr(keyword_cache, "MAX_POSTINGS", 3)
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("kiwi banana mango smoothie recipe\n")
    kb = make_kb(root)
    kb.index()
    assert not cache_path(kb.index_path(kb.config.directories[0])).exists()
    assert kb.status()[0]["keyword_cache"] == "off"
    assert kb.search("mango", mode="keyword").hits[0].path == "a.md"


def test_a_failed_keyword_cache_rebuild_leaves_the_index_searchable(tmp_path, make_kb, monkeypatch):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("kiwi mango smoothie\n")
    kb = make_kb(root)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(keyword_cache, "build", disk_full)
    assert kb.index()[0].added == 1
    assert kb.status()[0]["keyword_cache"] == "stale"
    assert kb.search("mango", mode="keyword").hits[0].path == "a.md"


@pytest.mark.parametrize("count", [0, 1])
def test_tiny_and_empty_indexes_build(tmp_path, count):
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, [("kiwi", "")] * count)
        keyword_cache.refresh(store)
        cache = KeywordCache(cache_path(store.path))
        assert len(cache.search(["kiwi"], 5)) == count
        assert cache.search(["absent"], 5) == []


def postings_of(cache: KeywordCache) -> list[tuple[int, int, int, float]]:
    """Every posting as (term hash, chunk id, count, weight), in a canonical order."""
    hashes = np.repeat(cache.hashes, np.diff(cache.offsets))
    return sorted(zip(hashes.tolist(), cache.ids[cache.rows].tolist(), cache.counts.tolist(),
                      np.round(cache.weights, 4).tolist()))


def test_an_incremental_rebuild_equals_a_full_one(tmp_path, monkeypatch):
    texts = random_texts(600, seed=9)
    rng = np.random.default_rng(2)
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, texts[:300])
        keyword_cache.refresh(store)
        full = tmp_path / "full.terms"
        monkeypatch.setattr(keyword_cache, "build", lambda *a: pytest.fail("a small change must not re-sort everything"))
        for step in range(6):
            files = sorted(store.files())
            store.delete_files([files[-1], *rng.choice(files[:-1], 2, replace=False).tolist()])  # the last: ids get reused
            for n in range(3):
                begin = int(rng.integers(300, 590))
                chunks = [Chunk(t, 0, len(t), i + 1, i + 1, None, h) for i, (t, h) in enumerate(texts[begin:begin + 10])]
                store.write_file(f"new{step}-{n}.txt", 1, 1, "h", "text", chunks, None)
            assert keyword_cache.refresh(store)
            with store.snapshot():
                keyword_cache._write(full, store.generation(), keyword_cache._collect(store.iter_terms()))
            merged, rebuilt = KeywordCache(cache_path(store.path)), KeywordCache(full)
            assert merged.generation == rebuilt.generation
            assert np.array_equal(merged.ids, rebuilt.ids) and np.array_equal(merged.hashes, rebuilt.hashes)
            assert postings_of(merged) == postings_of(rebuilt)
            for query in (["kiwi"], ["mango", "cells", "w3"], ["w1", "w40", "protein"]):
                assert merged.search(query, 20) == rebuilt.search(query, 20)


def test_a_copy_newer_than_its_index_is_rebuilt_from_scratch(tmp_path):
    """An index file restored from a backup goes back in generations; the copy beside it is ahead,
    and the chunk ids it knows are handed out again for other text."""
    texts = random_texts(100, seed=4)
    index = tmp_path / "i.sqlite"

    def write(store, name, part):
        store.write_file(name, 1, 1, name, "text", [Chunk(t, 0, 1, 1, 1, None, h) for t, h in part], None)

    with IndexStore(index) as store:
        fill(store, texts[:80])
    backup = index.read_bytes()
    with IndexStore(index) as store:
        write(store, "extra1.txt", texts[80:85])
        write(store, "extra2.txt", texts[85:90])
        keyword_cache.refresh(store)
    index.write_bytes(backup)
    with IndexStore(index) as store:
        write(store, "other.txt", texts[90:95])  # reuses the ids extra1.txt had in the copy
        assert keyword_cache.refresh(store)
        with store.snapshot():
            keyword_cache._write(tmp_path / "full.terms", store.generation(), keyword_cache._collect(store.iter_terms()))
    assert postings_of(KeywordCache(cache_path(index))) == postings_of(KeywordCache(tmp_path / "full.terms"))


@pytest.mark.parametrize("module", [keyword_cache, vector_cache], ids=["keyword", "vector"])
def test_a_copy_of_the_wrong_size_counts_as_corrupt_and_the_next_run_rebuilds_it(tmp_path, make_kb, module):
    # A layout from another version, or a damaged file, keeps a header naming the current generation.
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nkiwi mango smoothie\n")
    kb = make_kb(root)
    kb.index()
    copy = module.cache_path(kb.index_path(kb.config.directories[0]))
    whole = copy.stat().st_size
    with open(copy, "r+b") as handle:
        handle.truncate(whole - 8)
    field = f"{'keyword' if module is keyword_cache else 'vector'}_cache"
    assert module.read_generation(copy) is None and kb.status()[0][field] == "corrupt"  # truncated: damage, not age
    assert kb.search("kiwi mango").hits[0].path == "a.md"  # from the index itself meanwhile
    kb.index()  # nothing changed on disk, but the copy is rebuilt
    assert copy.stat().st_size == whole and kb.status()[0][field] == "current"
