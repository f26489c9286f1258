import os
import time

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.chunker import chunk_document
from hermes_kb.agent.knowledgebase.config import ChunkingConfig
from hermes_kb.agent.knowledgebase.embeddings import BASELINE_PROBES, cosine_baseline
from hermes_kb.agent.knowledgebase.indexer import ModelMismatchError
from hermes_kb.agent.knowledgebase.kinds.document import Document
from hermes_kb.agent.knowledgebase.retriever import REFERENCE_BASELINE
from hermes_kb.agent.knowledgebase.index.store import fts_query, IndexStore
from hermes_kb.agent.knowledgebase.index.vector_cache import VectorCache

from ..conftest import StubEmbedder

NOTES = {
    "deploy.md": "# Deployment\n\nWe deploy with blue green releases on port 4271 every Tuesday.\n",
    "cooking.md": "# Cooking\n\nA risotto needs patience, stock and constant stirring.\n",
    "code/app.py": "def launch_rocket(fuel):\n    return fuel * 2\n",
}


def store_rows(kb, name="docs", terms=("risotto", "pancakes", "4271")):
    directory = kb.targets(name)[0]
    with IndexStore(kb.index_path(directory), create=False) as store:
        conn = store.conn
        return {
            "files": sorted(r[0] for r in conn.execute("SELECT path FROM files")),
            "chunks": conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0],
            "fts": conn.execute("SELECT COUNT(*) FROM chunks_fts_docsize").fetchone()[0],
            "vec": conn.execute("SELECT COUNT(*) FROM chunk_vec").fetchone()[0],
            "fts_hits": {term: conn.execute("SELECT COUNT(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (fts_query([term]),)).fetchone()[0]
                         for term in terms},
        }


def test_index_then_unchanged_rescan_embeds_nothing(tree, make_kb, stub_embedder):
    kb = make_kb(tree(NOTES))
    first = kb.index()[0]
    assert (first.added, first.changed, first.removed) == (3, 0, 0)
    calls = len(stub_embedder.calls)
    second = kb.index()[0]
    assert (second.added, second.changed, second.unchanged, second.chunks_embedded) == (0, 0, 3, 0)
    assert len(stub_embedder.calls) == calls


def test_keyword_search_finds_exact_number(tree, make_kb):
    kb = make_kb(tree(NOTES))
    kb.index()
    hits = kb.search("4271", mode="keyword").hits
    assert hits and hits[0].path == "deploy.md" and hits[0].found_by == ["keyword"]


@pytest.mark.parametrize("query", ['"unbalanced', "AND OR NOT", "risotto AND (stock", "stir* NEAR(a b)", "col:umn ^x -y +z", "()"])
def test_hostile_queries_do_not_raise(tree, make_kb, query):
    kb = make_kb(tree(NOTES))
    kb.index()
    for mode in ("keyword", "hybrid", "vector"):
        kb.search(query, mode=mode)


def test_editing_a_file_replaces_only_its_chunks(tree, make_kb, stub_embedder):
    root = tree(NOTES)
    kb = make_kb(root)
    kb.index()
    time.sleep(0.01)
    (root / "cooking.md").write_text("# Cooking\n\nPancakes need flour, eggs and milk.\n")
    summary = kb.index()[0]
    assert (summary.changed, summary.unchanged) == (1, 2)
    assert summary.chunks_embedded == 1
    rows = store_rows(kb)
    assert rows["fts_hits"]["risotto"] == 0 and rows["fts_hits"]["pancakes"] == 1
    assert rows["chunks"] == rows["fts"] == rows["vec"] == 3
    assert [h.path for h in kb.search("pancakes flour", mode="keyword").hits] == ["cooking.md"]


def test_touch_without_change_rehashes_but_does_not_rechunk(tree, make_kb, stub_embedder):
    root = tree(NOTES)
    kb = make_kb(root)
    kb.index()
    os.utime(root / "deploy.md", ns=(time.time_ns(), time.time_ns() + 10**9))
    summary = kb.index()[0]
    assert summary.changed == 0 and summary.unchanged == 3 and summary.chunks_embedded == 0


def test_deleting_a_file_removes_rows_from_chunks_fts_and_vectors(tree, make_kb):
    root = tree(NOTES)
    kb = make_kb(root)
    kb.index()
    before = store_rows(kb)
    (root / "deploy.md").unlink()
    summary = kb.index()[0]
    after = store_rows(kb)
    assert summary.removed == 1 and "deploy.md" not in after["files"]
    assert after["chunks"] == after["fts"] == after["vec"] == before["chunks"] - 1
    assert after["fts_hits"]["4271"] == 0
    assert all(h.path != "deploy.md" for h in kb.search("deploy 4271").hits)


def test_rename_embeds_nothing_new(tree, make_kb, stub_embedder):
    root = tree(NOTES)
    kb = make_kb(root)
    kb.index()
    (root / "deploy.md").rename(root / "releases.md")
    summary = kb.index()[0]
    assert (summary.added, summary.removed, summary.chunks_embedded, summary.chunks_reused) == (1, 1, 0, 1)
    assert kb.search("4271", mode="keyword").hits[0].path == "releases.md"


def test_binary_oversized_and_corrupt_pdf_are_skipped_while_rest_indexes(tree, make_kb):
    root = tree({**NOTES, "image.dat": b"\x00\x01\x02binary", "huge.txt": "x " * 4000,
                 "broken.pdf": b"%PDF-1.7 garbage that is not a pdf"})
    kb = make_kb(root, max_file_bytes=5000)
    summary = kb.index()[0]
    reasons = dict(summary.skipped)
    assert reasons["image.dat"] == "binary file"
    assert reasons["huge.txt"].startswith("larger than max_file_bytes")
    assert "PDF" in reasons["broken.pdf"]
    assert summary.added == 3
    assert sorted(h.path for h in kb.search("risotto stock", mode="keyword").hits) == ["cooking.md"]
    again = kb.index()[0]  # told once: an unchanged skipped file is neither reported again nor counted twice
    assert again.skipped == [] and again.unchanged == 5 and again.chunks_embedded == 0
    assert dict(kb.index(full=True)[0].skipped).keys() == reasons.keys()  # --full reports every skip again


def test_model_mismatch_refuses_vector_search_keeps_keyword(tree, make_kb, hermes_home):
    root = tree(NOTES)
    make_kb(root).index()
    other = make_kb(root, embedder=StubEmbedder(dim=32, model_id="other-model"))
    # The configured backend (local MiniLM) differs from the stub the index was built with.
    with pytest.raises(Exception) as error:
        other.search("blue green", mode="vector")
    message = str(error.value)
    assert "was built with stub" in message and "hermes kb index docs --full" in message
    assert "keyword search still works" in message
    result = other.search("blue green deploy", mode="hybrid")
    assert result.hits[0].path == "deploy.md" and any("--full" in w for w in result.warnings)
    assert other.search("4271", mode="keyword").hits[0].path == "deploy.md"
    with pytest.raises(ModelMismatchError):
        (root / "new.md").write_text("new file")
        other.index()
    rebuilt = other.index(full=True)[0]
    assert rebuilt.chunks_embedded == 4


def test_search_filters_and_union_of_directories(tree, make_kb, tmp_path):
    notes = tree(NOTES)
    other = tree({"ops.md": "# Ops\n\nThe pager rotation covers port 4271 alerts.\n"}, root=tmp_path / "ops")
    kb = make_kb(notes, other)
    kb.index()
    both = kb.search("4271", mode="keyword").hits
    assert {h.directory for h in both} == {"docs", "ops"}
    assert [h.directory for h in kb.search("4271", mode="keyword", directory="ops").hits] == ["ops"]
    assert [h.path for h in kb.search("fuel", kind="python").hits] == ["code/app.py"]
    assert all(h.path.startswith("code/") for h in kb.search("fuel rocket", path_glob="code/*").hits)


def test_overlapping_chunks_of_one_file_collapse(tree, make_kb):
    text = " ".join(f"Alpha beta gamma sentence number {i}." for i in range(200))
    kb = make_kb(tree({"long.txt": text}), chunk_size=60, chunk_overlap=20)
    kb.index()
    hits = kb.search("alpha beta gamma", k=50).hits
    ranges = [(h.start_line, h.end_line, h.text) for h in hits]
    for i, a in enumerate(hits):
        for b in hits[i + 1:]:
            assert a.path != b.path or a.text not in b.text
    assert len(ranges) >= 1


def test_empty_query_is_a_clear_error(tree, make_kb):
    kb = make_kb(tree(NOTES))
    kb.index()
    with pytest.raises(Exception, match="empty"):
        kb.search("   ")


def test_a_kept_open_reader_follows_an_index_that_was_cleared_and_rebuilt(tmp_path, make_kb):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha bravo\n")
    reader = make_kb(root)
    reader.index()
    assert reader.search("alpha", mode="keyword").hits
    other = make_kb(root)  # another process, as far as the reader can tell
    other.clear()
    (root / "a.md").write_text("# A\n\nzulu yankee\n")
    other.index()
    assert reader.search("zulu", mode="keyword").hits[0].path == "a.md"
    assert not reader.search("alpha", mode="keyword").hits
    other.clear()
    with pytest.raises(Exception, match="Nothing is indexed"):
        reader.search("zulu", mode="keyword")


def from_baseline(cosine: float, embedder) -> float:
    """A cosine as hits score it: from the model's cosine baseline, on the default model's scale."""
    baseline = round(cosine_baseline(embedder), 4)
    return max(0.0, REFERENCE_BASELINE + (cosine - baseline) * (1 - REFERENCE_BASELINE) / (1 - baseline))


def test_a_chunk_is_as_close_as_its_best_window(tmp_path, make_kb, stub_embedder):
    root = tmp_path / "notes"
    root.mkdir()
    filler = " ".join(f"Kiwi mango banana smoothie number {i}." for i in range(20))
    (root / "long.txt").write_text(f"Fruit notes\n\n{filler} Sourdough starter hydration and levain timing.\n")
    (root / "short.txt").write_text("Bread notes\n\nSourdough rye loaf with caraway seeds and salt and water and flour.\n")
    kb = make_kb(root)
    kb.index()
    rows = store_rows(kb, name="notes")
    assert rows["chunks"] == 2 and rows["vec"] > 2  # the long chunk is embedded window by window
    query = "sourdough starter hydration levain timing"
    hits = kb.search(query, mode="vector", min_score=0).hits
    hit = hits[0]
    assert [h.path for h in hits] == ["long.txt", "short.txt"]  # its last window is about bread, though most of it is fruit
    chunk = chunk_document(Document((root / "long.txt").read_text(), "text"), "long.txt", ChunkingConfig())[0]
    best = max(float(stub_embedder.embed_query(text) @ stub_embedder.embed_query(query)) for text in chunk.embed_texts)
    whole = float(stub_embedder.embed_query(chunk.embed_text) @ stub_embedder.embed_query(query))
    assert hit.vector_score == pytest.approx(from_baseline(best, stub_embedder), abs=1e-4)
    assert from_baseline(whole, stub_embedder) < hits[1].vector_score < hit.vector_score


def test_vectors_from_before_windows_are_refused_then_rebuilt(tree, make_kb):
    root = tree(NOTES)
    kb = make_kb(root)
    kb.index()
    with IndexStore(kb.index_path(kb.targets("docs")[0]), create=False) as store, store.transaction():
        store.conn.execute("DELETE FROM meta WHERE key = 'vector_ids'")  # as an index written before windows
    with pytest.raises(Exception, match="older version of the index"):
        kb.search("blue green", mode="vector")
    result = kb.search("blue green deploy 4271")
    assert result.hits[0].path == "deploy.md" and any("hermes kb index docs" in w for w in result.warnings)
    assert kb.index()[0].chunks_embedded == store_rows(kb)["chunks"]  # every chunk re-embedded
    assert kb.search("blue green releases", mode="vector").hits[0].path == "deploy.md"


def test_a_keyword_only_hit_gets_the_cosine_of_its_best_window(tmp_path, make_kb, stub_embedder, monkeypatch):
    root = tmp_path / "notes"
    root.mkdir()
    filler = " ".join(f"Kiwi mango banana smoothie number {i}." for i in range(20))
    (root / "long.txt").write_text(f"Fruit notes\n\n{filler} Sourdough starter hydration and levain timing.\n")
    kb = make_kb(root)
    kb.index()
    # As if the chunk ranked below the vector pool: its cosine is then computed from its stored windows.
    monkeypatch.setattr(VectorCache, "knn", lambda self, query, k, allowed=None: [])
    monkeypatch.setattr(IndexStore, "knn", lambda self, query, k, allowed=None: [])
    query = "sourdough starter hydration levain timing"
    hit = kb.search(query).hits[0]
    assert hit.path == "long.txt" and hit.found_by == ["keyword"]
    chunk = chunk_document(Document((root / "long.txt").read_text(), "text"), "long.txt", ChunkingConfig())[0]
    best = max(float(stub_embedder.embed_query(text) @ stub_embedder.embed_query(query)) for text in chunk.embed_texts)
    assert hit.vector_score == pytest.approx(from_baseline(best, stub_embedder), abs=1e-4)


class HighBaselineEmbedder(StubEmbedder):
    """A model whose cosines all sit high (as multilingual-e5's do): every vector shares one large
    component, so unrelated texts are at about 0.8 and related ones higher."""

    def _vector(self, text):
        vector = super()._vector(text) * 0.5
        vector[0] += 1.0
        return vector / np.linalg.norm(vector)


def test_an_index_records_its_models_baseline_and_scores_start_there(tree, make_kb):
    root = tree({"a.md": "# Sailing\n\nReef the mainsail early when the wind picks up.\n",
                 "b.md": "# Bread\n\nLet the sourdough rise overnight.\n"})
    high = HighBaselineEmbedder()
    kb = make_kb(root, embedder=high)
    kb.index()
    with IndexStore(kb.index_path(kb.targets("docs")[0]), create=False) as store:
        recorded = store.cosine_baseline()
    assert 0.7 < recorded == pytest.approx(cosine_baseline(high), abs=1e-4)
    hits = kb.search("mainsail wind reef", mode="vector", min_score=0).hits
    raw = [float(high.embed_query("mainsail wind reef") @ high.embed_query(text)) for text in (
        "Sailing\n\nReef the mainsail early when the wind picks up.", "Bread\n\nLet the sourdough rise overnight.")]
    assert min(raw) > 0.75  # on the raw scale even the unrelated note looks close
    assert [h.path for h in hits] == ["a.md", "b.md"]
    assert 0.2 < hits[0].vector_score < raw[0] - 0.3  # measured from the model's 0.8, not from 0
    assert hits[1].vector_score < 0.1  # unrelated text scores near 0, as with the default model


def test_an_index_from_before_baselines_gets_one_on_its_next_run_without_re_embedding(tree, make_kb, stub_embedder):
    root = tree({"a.md": "# A\n\nalpha beta\n", "b.md": "# B\n\ngamma delta\n"})
    kb = make_kb(root)
    kb.index()
    path = kb.index_path(kb.targets("docs")[0])
    with IndexStore(path, create=False) as store, store.transaction():
        store.conn.execute("DELETE FROM meta WHERE key = 'cosine_baseline'")
    embedded = len(stub_embedder.calls)
    kb.index()
    assert stub_embedder.calls[embedded:] == [len(BASELINE_PROBES)]  # the probes only: nothing re-embedded
    with IndexStore(path, create=False) as store:
        assert store.cosine_baseline() == pytest.approx(cosine_baseline(StubEmbedder()), abs=1e-4)
    kb.index()
    assert len(stub_embedder.calls) == embedded + 1  # measured once
