"""No search can crash from an estimate: every statistic a keyword search derives (document
frequencies, IDF, scales) stays finite and bounded, on indexes with id holes, deletions, a stale or
absent keyword copy and words in every chunk, on both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from hermes_kb.agent.knowledgebase import retriever

from hermes_kb.agent.knowledgebase.index import bm25, keyword_cache
from hermes_kb.agent.knowledgebase.index.bm25 import MIN_IDF, idf

from .test_store_contract import pg_store, store, write  # noqa: F401  (fixtures)

numbers = st.floats(-1e15, 1e15) | st.integers(-10**9, 10**12) | st.just(float("nan"))


@given(count=numbers, frequency=numbers)
def test_idf_is_finite_and_floored_for_any_count_and_frequency(count, frequency):
    value = float(idf(count, frequency))
    assert math.isfinite(value) and value >= MIN_IDF


@given(st.lists(numbers, max_size=20))
def test_idf_of_arrays_is_finite_everywhere(frequencies):
    values = idf(len(frequencies), np.array(frequencies, dtype=np.float64))
    assert np.all(np.isfinite(values)) and np.all(values >= MIN_IDF)


def _index_with_holes(store) -> None:  # noqa: F811  (the fixture's value, passed on)
    """Over 4,000 chunk ids (so document frequencies are sampled in id windows), every chunk holding
    `common`, and most ids a hole: files written and deleted between the first and the last (what a
    --full run or deleted folders leave), so the windows see dense rows the width scale overstated."""
    for n in range(10):
        write(store, f"f{n}.txt", [f"common word number {n} {i} rare{n % 7}" for i in range(80)])
    for n in range(90):
        write(store, f"gone{n}.txt", [f"transient {i}" for i in range(80)])
    for n in range(10, 20):
        write(store, f"f{n}.txt", [f"common word number {n} {i} rare{n % 7}" for i in range(80)])
    store.delete_files([f"gone{n}.txt" for n in range(90)])


@pytest.mark.parametrize("query", [["common"], ["common", "word"], ["rare3"], ["absent"], ["common"] * 5])
def test_sampled_frequencies_never_exceed_the_chunk_count_and_scales_stay_finite(store, query):  # noqa: F811
    _index_with_holes(store)
    total = store.chunk_total()
    frequencies = store.document_frequencies(query)
    assert all(0 <= f <= total for f in frequencies), (frequencies, total)
    source = retriever.SearchSource("docs", "/x", store)  # no keyword copy: the store answers
    scale = retriever.keyword_scale(source, query)
    assert math.isfinite(scale) and scale >= 0
    hits = store.keyword(query, 10)
    scores = bm25.bm25(query, store.terms_of([i for i, _ in hits]) if hits else [],
                                dict(zip(query, [f * 50 for f in frequencies])), total, 5.0, 10)
    assert all(math.isfinite(score) for _, score in scores)


def test_scales_over_a_stale_copy_and_over_none_stay_finite(store):  # noqa: F811
    """The copy built before the deletions (stale: its counts say 8,000 chunks), then none at all."""
    for n in range(100):
        write(store, f"f{n}.txt", [f"common word number {n} {i}" for i in range(80)])
    keyword_cache.refresh(store)
    store.delete_files([f"f{n}.txt" for n in range(5, 95)])
    stale = keyword_cache.KeywordCache(keyword_cache.cache_path(store.path))
    for copy in (stale, None):
        source = retriever.SearchSource("docs", "/x", store, keywords=copy)
        assert math.isfinite(retriever.keyword_scale(source, ["common", "number", "absent"]))


def test_a_han_run_weighs_as_its_bigrams_on_every_backend(store):  # noqa: F811
    """Each bigram of a run of Han text is its own evidence, as bm25 scores it; the run's commonest
    bigram alone (its old weight) made a message sharing one common word a full match."""
    write(store, "guide.txt", ["数据库迁移失败时先回滚"] + [f"怎么做第{n}道菜" for n in range(30)])
    keyword_cache.refresh(store)
    for copy in (None, keyword_cache.KeywordCache(keyword_cache.cache_path(store.path))):
        source = retriever.SearchSource("docs", "/x", store, keywords=copy)
        run = retriever.keyword_scale(source, ["数据库迁移"])
        assert run == pytest.approx(retriever.keyword_scale(source, ["数据", "据库", "库迁", "迁移"]))
        assert run > 3 * retriever.keyword_scale(source, ["怎么"])


def test_a_reader_kept_open_sees_the_counts_of_each_write(tmp_path):
    """The chunk count and document frequencies a reader keeps between searches (counted once per
    state of the index: COUNT(*) walks the table) follow every write and deletion another connection
    makes, the sampled estimate included (over 4,000 ids)."""
    from hermes_kb.agent.knowledgebase.index.store import IndexStore

    path = tmp_path / "index.sqlite"
    with IndexStore(path) as writer, IndexStore(path, create=False) as reader:
        write(writer, "a.txt", ["walrus alpha", "beta"])
        assert reader.chunk_total() == 2 and reader.document_frequencies(["walrus", "beta"]) == [1.0, 1.0]
        write(writer, "b.txt", ["walrus gamma"] * 3)
        assert reader.chunk_total() == 5 and reader.document_frequencies(["walrus"]) == [4.0]
        for n in range(60):
            write(writer, f"many{n}.txt", [f"walrus {n} {i}" for i in range(80)])
        assert reader.chunk_total() == 4805
        assert 4000 < reader.document_frequencies(["walrus"])[0] <= 4805
        writer.delete_files([f"many{n}.txt" for n in range(60)] + ["b.txt"])
        assert reader.chunk_total() == 2 and reader.document_frequencies(["walrus", "gamma"]) == [1.0, 0.0]
