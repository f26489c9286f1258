import threading
from concurrent.futures import Future

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase import retriever

from hermes_kb.agent.knowledgebase.index import encoding, vector_cache
from hermes_kb.agent.knowledgebase.index.keyword_cache import KeywordCache
from hermes_kb.agent.knowledgebase.index.local_files import remove_index
from hermes_kb.agent.knowledgebase.index.store import IndexStore
from hermes_kb.agent.knowledgebase.index.vector_cache import VectorCache, build, cache_path, read_generation


def clustered(count: int, dim: int = 48, seed: int = 3, centres: int = 20) -> np.ndarray:
    """Vectors around shared centres, so every vector has close neighbours as real embeddings do."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(centres, dim))
    vectors = points[rng.integers(0, centres, count)] + rng.normal(0, 0.3, (count, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def window_ids(count: int, seed: int = 1) -> np.ndarray:
    """Vector ids of `count` windows: chunks of one to three windows, chunk ids sparse and out of order
    (as sqlite-vec hands them over after deletes)."""
    rng = np.random.default_rng(seed)
    ids, chunk = [], 10
    while len(ids) < count:
        ids += encoding.vector_ids(chunk, int(rng.integers(1, 4)))
        chunk += int(rng.integers(1, 4))
    return rng.permutation(np.array(ids[:count], dtype=np.int64))


def write_cache(path, vectors, ids=None, batch=1000):
    ids = window_ids(len(vectors)) if ids is None else ids
    batches = ((ids[b:b + batch], vectors[b:b + batch]) for b in range(0, len(vectors), batch))
    build(path, "gen-1", vectors.shape[1], len(vectors), batches)
    return ids


def exact_top(vectors, ids, query, k):
    """The k chunks whose best window is closest, by brute force."""
    scores = vectors @ (query / np.linalg.norm(query))
    best: dict[int, float] = {}
    for vector_id, score in zip(ids.tolist(), scores.tolist()):
        chunk = vector_id >> encoding.WINDOW_BITS
        best[chunk] = max(best.get(chunk, -2.0), score)
    top = sorted(best, key=lambda c: -best[c])[:k]
    return top, np.array([best[c] for c in top])


def test_exact_scan_matches_brute_force(tmp_path):
    vectors = clustered(3000)
    path = tmp_path / "x.vectors"
    ids = write_cache(path, vectors)
    cache = VectorCache(path)
    query = vectors[17] + 0.1
    expected_ids, expected_scores = exact_top(vectors, ids, query, 10)
    hits = cache.knn(query, 10)
    assert [i for i, _ in hits] == expected_ids
    assert np.allclose([s for _, s in hits], expected_scores, atol=1e-5)
    assert read_generation(path) == cache.generation == "gen-1"


def test_shortlist_keeps_recall_above_the_exact_scan_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_cache, "EXACT_SCAN_ROWS", 1000)
    monkeypatch.setattr(vector_cache, "MIN_SHORTLIST", 300)
    vectors = clustered(20_000, dim=384, centres=2000)
    path = tmp_path / "x.vectors"
    ids = write_cache(path, vectors, batch=777)
    cache = VectorCache(path)
    rng = np.random.default_rng(0)
    recalls = []
    for _ in range(30):
        query = vectors[rng.integers(len(vectors))] + rng.normal(0, 0.05, vectors.shape[1]).astype(np.float32)
        expected, _ = exact_top(vectors, ids, query, 10)
        hits = cache.knn(query, 10)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)  # best first
        assert len({c for c, _ in hits}) == 10  # one entry a chunk
        recalls.append(len({c for c, _ in hits} & set(expected)) / 10)
    assert np.mean(recalls) >= 0.9  # 300 of 20,000 rows re-scored; real embeddings are measured in benchmarks/


def test_vectors_for_looks_up_ids_and_ignores_unknown(tmp_path):
    vectors = clustered(50)
    path = tmp_path / "x.vectors"
    ids = write_cache(path, vectors)
    chunks = ids >> encoding.WINDOW_BITS
    first, other = int(chunks[4]), int(chunks[0])
    found = VectorCache(path).vectors_for([first, 999_999, other])
    assert set(found) == {first, other}
    windows = sorted(np.flatnonzero(chunks == first), key=lambda row: ids[row])  # in window order
    assert found[first].shape == (len(windows), 48) and np.allclose(found[first], vectors[windows])


def test_zero_query_and_empty_cache_match_nothing(tmp_path):
    path = tmp_path / "x.vectors"
    write_cache(path, clustered(5))
    assert VectorCache(path).knn(np.zeros(48, np.float32), 3) == []
    build(path, "gen-2", 48, 0, iter(()))
    assert VectorCache(path).knn(np.ones(48, np.float32), 3) == []


def test_a_rebuild_that_sees_other_counts_fails_and_keeps_the_old_file(tmp_path):
    vectors = clustered(10)
    path = tmp_path / "x.vectors"
    write_cache(path, vectors)
    with pytest.raises(ValueError):
        build(path, "gen-2", 48, 11, iter([(np.arange(10), vectors)]))
    assert read_generation(path) == "gen-1"
    assert [p.name for p in tmp_path.glob("x.vectors*")] == ["x.vectors"]  # no temporary left behind


def test_index_runs_keep_the_cache_current_and_search_uses_it(tmp_path, make_kb):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nkiwi banana mango smoothie recipe\n")
    (root / "b.md").write_text("# Beta\n\nrust borrow checker lifetimes\n")
    kb = make_kb(root)
    kb.index()
    index = kb.index_path(kb.config.directories[0])
    with IndexStore(index) as store:
        assert read_generation(cache_path(index)) == store.generation()
    assert kb.status()[0]["vector_cache"] == "current"
    assert kb.search("kiwi mango", mode="vector").hits[0].path == "a.md"

    # A write outside an index run makes the cache stale: search falls back to sqlite-vec, still right.
    (root / "c.md").write_text("# Gamma\n\nsourdough starter hydration\n")
    with IndexStore(index) as store:
        store.write_file("c.md", 1, 1, "h", "markdown", [], None)
    assert kb.status()[0]["vector_cache"] == "stale"
    assert kb.search("kiwi mango", mode="vector").hits[0].path == "a.md"
    kb.index()
    assert kb.status()[0]["vector_cache"] == "current"
    assert kb.search("sourdough hydration", mode="vector").hits[0].path == "c.md"

    (root / "a.md").unlink()
    kb.index()
    assert all(h.path != "a.md" for h in kb.search("kiwi mango", mode="vector").hits)
    assert remove_index(index) and not cache_path(index).exists()


def test_every_write_moves_the_generation(tmp_path):
    with IndexStore(tmp_path / "i.sqlite") as store:
        seen = {store.generation()}
        store.write_file("a.md", 1, 1, "h", "markdown", [], None)
        seen.add(store.generation())
        store.delete_files(["a.md"])
        seen.add(store.generation())
        store.delete_files([])  # nothing deleted, nothing moved
        seen.add(store.generation())
        assert len(seen) == 3


def test_reading_sqlite_vec_storage_directly_matches_the_virtual_table(tmp_path):
    from hermes_kb.agent.knowledgebase.chunker import Chunk
    from hermes_kb.agent.knowledgebase.embeddings import ModelIdentity

    vectors = clustered(2500)
    with IndexStore(tmp_path / "i.sqlite") as store:
        store.pin_model(ModelIdentity("m", "v", 48))
        for f in range(25):  # spans three sqlite-vec storage chunks of 1024
            chunks = [Chunk(f"t{f}-{i}", 0, 1, 1, 1, None, "") for i in range(50)]
            block = vectors[f * 100:(f + 1) * 100]
            store.write_file(f"f{f}.txt", 1, 1, f"h{f}", "text", chunks, [block[2 * i:2 * i + 2] for i in range(50)])
        store.delete_files(["f3.txt", "f12.txt"])  # leaves invalid slots behind
        copied = {int(i): v for ids, block in store.iter_vectors() for i, v in zip(ids, block)}
        assert len(copied) == store.vector_count() == 2300
        table = {i: np.frombuffer(blob, dtype=np.float32) for i, blob in store.conn.execute("SELECT rowid, embedding FROM chunk_vec")}
        assert table.keys() == copied.keys() and all(np.array_equal(table[i], copied[i]) for i in table)
        stored = store.vectors_for(sorted({i >> encoding.WINDOW_BITS for i in copied}))
        assert len(stored) == 1150 and all(len(windows) == 2 for windows in stored.values())
        assert all(np.array_equal(stored[i >> encoding.WINDOW_BITS][i & 31], copied[i]) for i in copied)


@pytest.mark.parametrize("block", [16_384, 333])
def test_the_blocked_hamming_pass_finds_the_same_neighbours(tmp_path, monkeypatch, block):
    monkeypatch.setattr(vector_cache, "EXACT_SCAN_ROWS", 100)
    vectors = clustered(5001, dim=384, centres=500)
    path = tmp_path / "x.vectors"
    write_cache(path, vectors)
    cache = VectorCache(path)
    queries = vectors[:20] + 0.01
    single = [cache.knn(q, 10) for q in queries]
    # The shortlist is exactly the rows nearest in Hamming distance, whatever the blocks.
    query = queries[0] / np.linalg.norm(queries[0])
    code = vector_cache._sign_codes(query[None, :], cache.mean, cache.codes.shape[0])[:, 0]
    distance = sum(np.bitwise_count(cache.codes[w] ^ code[w]).astype(int) for w in range(len(code)))
    monkeypatch.setattr(vector_cache, "HAMMING_BLOCK", block)
    shortlist = cache._shortlist(query, 400)
    assert len(shortlist) == 400 and distance[shortlist].max() <= np.sort(distance)[399]
    assert [cache.knn(q, 10) for q in queries] == single


def test_a_failed_cache_rebuild_leaves_the_index_complete_and_searchable(tmp_path, make_kb, monkeypatch):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nkiwi mango smoothie\n")
    kb = make_kb(root)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vector_cache, "build", disk_full)
    summary = kb.index()[0]
    assert summary.added == 1
    assert kb.status()[0]["vector_cache"] == "stale"
    assert kb.search("kiwi mango", mode="vector").hits[0].path == "a.md"


def test_rows_read_with_pread_equal_rows_read_through_the_mapping(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_cache, "EXACT_SCAN_ROWS", 100)
    vectors = clustered(3000, dim=96)
    path = tmp_path / "x.vectors"
    ids = write_cache(path, vectors)
    cache = VectorCache(path)
    queries = vectors[:10] + 0.02
    chunks = (ids[:50] >> encoding.WINDOW_BITS).tolist()
    mapped = [cache.knn(q, 10) for q in queries], cache.vectors_for(chunks)
    monkeypatch.setattr(vector_cache, "MAPPED_FLOAT_BYTES", 0)  # as for a matrix too large to map
    read = [cache.knn(q, 10) for q in queries], cache.vectors_for(chunks)
    assert mapped[0] == read[0] and len(mapped[1]) == len(set(chunks))
    assert all(np.array_equal(mapped[1][i], read[1][i]) for i in mapped[1])


def indexed_recipes(tmp_path, make_kb):
    """A knowledgebase of six short notes, indexed, with current vector and keyword copies."""
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(6):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nkiwi mango smoothie, recipe number {i} of the summer\n")
    kb = make_kb(root)
    kb.index()
    return kb


def test_a_hybrid_search_runs_the_vector_pass_beside_the_keyword_pass(tmp_path, make_kb, monkeypatch):
    kb = indexed_recipes(tmp_path, make_kb)

    class OneAfterTheOther:  # an executor that runs what it is given at once, on the caller's thread
        def __init__(self, max_workers):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, function, *args):
            done = Future()
            done.set_result(function(*args))
            return done

    with monkeypatch.context() as sequential:
        sequential.setattr(retriever, "ThreadPoolExecutor", OneAfterTheOther)
        alone = kb.search("kiwi smoothie recipe", k=4)
    vector_pass_started = threading.Event()
    knn, keyword_copy, fts5 = VectorCache.knn, KeywordCache.search, IndexStore.keyword

    def knn_that_says_so(self, *args, **kwargs):
        vector_pass_started.set()
        return knn(self, *args, **kwargs)

    def waiting_for_the_vector_pass(search):
        def keyword(*args, **kwargs):
            assert vector_pass_started.wait(10), "the vector pass waited for the keyword pass"
            return search(*args, **kwargs)
        return keyword

    monkeypatch.setattr(VectorCache, "knn", knn_that_says_so)
    monkeypatch.setattr(KeywordCache, "search", waiting_for_the_vector_pass(keyword_copy))
    monkeypatch.setattr(IndexStore, "keyword", waiting_for_the_vector_pass(fts5))
    beside = kb.search("kiwi smoothie recipe", k=4)
    assert vector_pass_started.is_set()
    assert [(h.path, h.score, h.found_by) for h in beside.hits] == [(h.path, h.score, h.found_by) for h in alone.hits]
    assert {"vector", "keyword"} <= {way for hit in beside.hits for way in hit.found_by}


def test_a_hybrid_search_at_interpreter_shutdown_runs_both_passes_on_its_own_thread(tmp_path, make_kb, monkeypatch):
    kb = indexed_recipes(tmp_path, make_kb)
    before = kb.search("kiwi smoothie recipe", k=3)

    def no_new_threads(self, *args, **kwargs):
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(retriever.ThreadPoolExecutor, "submit", no_new_threads)
    after = kb.search("kiwi smoothie recipe", k=3)
    assert [(h.path, h.score, h.found_by) for h in after.hits] == [(h.path, h.score, h.found_by) for h in before.hits]
    assert any("vector" in hit.found_by for hit in after.hits)
