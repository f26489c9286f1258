import numpy as np
import pytest

from agent.knowledgebase import vector_cache
from agent.knowledgebase.store import IndexStore, remove_index
from agent.knowledgebase.vector_cache import VectorCache, build, cache_path, read_generation


def clustered(count: int, dim: int = 48, seed: int = 3, centres: int = 20) -> np.ndarray:
    """Vectors around shared centres, so every vector has close neighbours as real embeddings do."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(centres, dim))
    vectors = points[rng.integers(0, centres, count)] + rng.normal(0, 0.3, (count, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def write_cache(path, vectors, ids=None, batch=1000):
    if ids is None:  # sparse and out of order, as sqlite-vec hands them over after deletes
        ids = np.random.default_rng(1).permutation(np.arange(10, 10 + 3 * len(vectors), 3))
    batches = ((ids[b:b + batch], vectors[b:b + batch]) for b in range(0, len(vectors), batch))
    build(path, "gen-1", vectors.shape[1], len(vectors), batches)
    return ids


def exact_top(vectors, ids, query, k):
    scores = vectors @ (query / np.linalg.norm(query))
    order = np.argsort(-scores)[:k]
    return [int(ids[i]) for i in order], scores[order]


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
    row_of = {int(i): r for r, i in enumerate(ids)}
    for _ in range(30):
        query = vectors[rng.integers(len(vectors))] + rng.normal(0, 0.05, vectors.shape[1]).astype(np.float32)
        expected, _ = exact_top(vectors, ids, query, 10)
        found = [i for i, _ in cache.knn(query, 10)]
        assert found == sorted(found, key=lambda i: -float(vectors[row_of[i]] @ query))  # best first
        recalls.append(len(set(found) & set(expected)) / 10)
    assert np.mean(recalls) >= 0.9  # 300 of 20,000 rows re-scored; real embeddings are measured in benchmarks/


def test_vectors_for_looks_up_ids_and_ignores_unknown(tmp_path):
    vectors = clustered(50)
    path = tmp_path / "x.vectors"
    ids = write_cache(path, vectors)
    found = VectorCache(path).vectors_for([int(ids[4]), 999_999, int(ids[0])])
    assert set(found) == {int(ids[4]), int(ids[0])}
    assert np.allclose(found[int(ids[4])], vectors[4])


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
    from agent.knowledgebase.chunker import Chunk
    from agent.knowledgebase.embeddings import ModelIdentity

    vectors = clustered(2500)
    with IndexStore(tmp_path / "i.sqlite") as store:
        store.pin_model(ModelIdentity("m", "v", 48))
        for f in range(25):  # spans three sqlite-vec storage chunks of 1024
            chunks = [Chunk(f"t{f}-{i}", 0, 1, 1, 1, None, "") for i in range(100)]
            store.write_file(f"f{f}.txt", 1, 1, f"h{f}", "text", chunks, vectors[f * 100:(f + 1) * 100])
        store.delete_files(["f3.txt", "f12.txt"])  # leaves invalid slots behind
        copied = {int(i): v for ids, block in store.iter_vectors() for i, v in zip(ids, block)}
        assert len(copied) == store.vector_count() == 2300
        stored = store.vectors_for(list(copied))
        assert all(np.array_equal(stored[i], copied[i]) for i in copied)


def test_the_two_thread_hamming_pass_finds_the_same_neighbours(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_cache, "EXACT_SCAN_ROWS", 100)
    vectors = clustered(5001, dim=384, centres=500)
    path = tmp_path / "x.vectors"
    write_cache(path, vectors)
    cache = VectorCache(path)
    queries = vectors[:20] + 0.01
    single = [cache.knn(q, 10) for q in queries]
    monkeypatch.setattr(vector_cache, "PARALLEL_ROWS", 1000)
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
    mapped = [cache.knn(q, 10) for q in queries], cache.vectors_for(ids[:50].tolist())
    monkeypatch.setattr(vector_cache, "MAPPED_FLOAT_BYTES", 0)  # as for a matrix too large to map
    read = [cache.knn(q, 10) for q in queries], cache.vectors_for(ids[:50].tolist())
    assert mapped[0] == read[0]
    assert all(np.array_equal(mapped[1][i], read[1][i]) for i in mapped[1])
