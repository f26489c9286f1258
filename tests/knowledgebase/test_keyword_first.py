"""Keyword first: a folder is keyword-searchable while its vectors are still being embedded."""

import threading

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.embeddings import EmbeddingError

from ..conftest import StubEmbedder


class GatedEmbedder(StubEmbedder):
    """Embeds nothing until released: the index run stops where its vectors begin."""

    def __init__(self):
        super().__init__()
        self.waiting, self.release = threading.Event(), threading.Event()

    def embed_documents(self, texts):
        self.waiting.set()
        assert self.release.wait(30), "the test never released the embedder"
        return super().embed_documents(texts)


class FailingEmbedder(StubEmbedder):
    """The embedding service goes away after the first batch."""

    def embed_documents(self, texts):
        if self.calls:
            raise EmbeddingError("The embedding service stopped answering.")
        return super().embed_documents(texts)


def notes(n: int) -> dict[str, str]:
    return {f"note{i:03}.md": f"# Note {i}\n\nObservation {i} about the wombatfrost valve number {i}.\n"
            for i in range(n)}


def test_files_are_keyword_searchable_before_their_vectors(tree, make_kb, stub_embedder):
    root = tree(notes(40))
    gated = GatedEmbedder()
    writer = make_kb(root, embedder=gated)
    run = threading.Thread(target=writer.index)
    run.start()
    try:
        assert gated.waiting.wait(30)
        reader = make_kb(root)  # another process's view: the index file as it is now
        found = reader.search("wombatfrost valve number 17", k=3, mode="keyword").hits
        assert found and found[0].path == "note017.md"
        hybrid = reader.search("wombatfrost valve number 17", k=3).hits
        assert hybrid and hybrid[0].path == "note017.md"  # no vector yet, not hidden
        row = reader.status()[0]
        assert row["chunks_without_vectors"] == 40 and "wait for vectors" in row["vector_search"]
    finally:
        gated.release.set()
        run.join(30)
    row = make_kb(root).status()[0]
    assert "chunks_without_vectors" not in row and row["vector_search"] == "ok"
    assert make_kb(root).search("wombatfrost valve number 17", k=1, mode="vector").hits[0].path == "note017.md"


def test_the_model_starts_on_the_first_batch_while_the_other_files_are_read(tree, make_kb):
    """The model thread takes the first batch as soon as it is written, and the files after it are
    read and written (keyword-searchable) while it embeds, not after."""
    root = tree(notes(300))
    files_when_the_model_started = []

    class Watched(GatedEmbedder):
        def embed_documents(self, texts):
            if not files_when_the_model_started:
                files_when_the_model_started.append(make_kb(root).status()[0]["files"])
            return super().embed_documents(texts)

    gated = Watched()
    run = threading.Thread(target=make_kb(root, embedder=gated).index)
    run.start()
    try:
        assert gated.waiting.wait(30)
        assert files_when_the_model_started[0] < 300
        for _ in range(300):  # the model is held: every file is still written
            if make_kb(root).status()[0]["files"] == 300:
                break
            threading.Event().wait(0.1)
        found = make_kb(root).search("wombatfrost valve number 299", k=1, mode="keyword").hits
        assert found and found[0].path == "note299.md"
    finally:
        gated.release.set()
        run.join(30)
    row = make_kb(root).status()[0]
    assert row["files"] == 300 and "chunks_without_vectors" not in row and row["vector_search"] == "ok"


def test_a_run_that_loses_its_embedder_is_finished_by_the_next(tree, make_kb):
    root = tree(notes(300))
    with pytest.raises(EmbeddingError):
        make_kb(root, embedder=FailingEmbedder()).index()
    broken = make_kb(root).status()[0]
    assert broken["files"] == 300 and 0 < broken["chunks_without_vectors"] < 300
    assert make_kb(root).search("valve number 250", k=1, mode="keyword").hits[0].path == "note250.md"
    summary = make_kb(root).index()[0]
    assert summary.added == 0 and summary.chunks_embedded == broken["chunks_without_vectors"]
    healed = make_kb(root).status()[0]
    assert "chunks_without_vectors" not in healed and healed["vector_search"] == "ok"


def test_an_edited_file_reuses_the_vectors_of_its_unchanged_chunks(tree, make_kb, stub_embedder):
    sections = "".join(f"## Part {i}\n\n" + f"Text of part {i} with enough words to stand alone. " * 30 + "\n\n"
                       for i in range(8))
    root = tree({"long.md": "# Long\n\n" + sections})
    kb = make_kb(root)
    first = kb.index()[0]
    (root / "long.md").write_text("# Long\n\n" + sections + "## Part new\n\nOne more paragraph.\n")
    again = kb.index()[0]
    assert first.chunks_embedded > 3 and again.chunks_reused >= first.chunks_embedded - 1
    assert again.chunks_embedded <= 2
    assert np.isfinite(kb.search("part new paragraph", k=1).hits[0].score)


def test_a_folder_indexed_by_path_is_searchable_by_name_while_it_embeds(tree, make_kb):
    root = tree(notes(10), root=tree({}).parent / "adhoc")
    gated = GatedEmbedder()
    writer = make_kb(embedder=gated)
    run = threading.Thread(target=lambda: writer.index(str(root)))
    run.start()
    try:
        assert gated.waiting.wait(30)
        reader = make_kb()  # nothing configured: the folder is known by its index alone
        hits = reader.search("wombatfrost valve number 7", k=1, directory="adhoc", mode="keyword").hits
        assert hits and hits[0].path == "note007.md"
        assert [row["name"] for row in reader.status()] == ["adhoc"]
    finally:
        gated.release.set()
        run.join(30)
