"""A large vector copy a few changes behind is kept, and searched with the vectors of the chunks changed
since (vector_cache.VectorDelta): it must find the chunks and scores a copy rebuilt from scratch finds."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase import doctor

from hermes_kb.agent.knowledgebase.index import derived_file, encoding, vector_cache
from hermes_kb.agent.knowledgebase.chunker import Chunk
from hermes_kb.agent.knowledgebase.embeddings import ModelIdentity
from hermes_kb.agent.knowledgebase.index.store import IndexStore
from hermes_kb.agent.knowledgebase.index.vector_cache import MAGIC, VectorCache, build, cache_path

from .test_vector_cache import clustered, exact_top, window_ids

TOPICS = ["kiwi banana mango smoothie", "rust borrow checker lifetimes", "sourdough starter hydration",
          "tide pool anemone starfish", "violin bow rosin strings", "comet orbit perihelion tail"]
QUERIES = ["mango smoothie", "borrow checker", "sourdough hydration", "anemone starfish", "violin rosin",
           "comet perihelion", "volcano basalt eruption", "glacier crevasse ice"]


def copy_generation(index) -> str | None:
    return (derived_file.claimed(cache_path(index), MAGIC) or {}).get("generation")


def answers(kb) -> list:
    """Every query's vector and hybrid hits (path, score), and a filtered search's; equal scores in
    path order, as either copy may return them in its own."""
    def hits(query, **options):
        return sorted(((h.path, round(h.score, 5)) for h in kb.search(query, **options).hits), key=lambda hit: (-hit[1], hit[0]))
    found = []
    for query in QUERIES:
        found += [hits(query, k=6, mode=mode) for mode in ("vector", "hybrid")]
        found.append(hits(query, k=3, mode="vector", path_glob="n1*"))
    return found


@pytest.fixture
def notes(tree, make_kb, monkeypatch):
    """36 notes indexed with a copy that counts as large (DELTA_MIN_ROWS 0)."""
    monkeypatch.setattr(vector_cache, "DELTA_MIN_ROWS", 0)
    root = tree({f"n{i:02}.md": f"# Note {i}\n\n{TOPICS[i % len(TOPICS)]} number{i}\n" for i in range(36)})
    kb = make_kb(root)
    kb.index()
    return root, kb, kb.index_path(kb.config.directories[0])


def test_a_copy_a_few_changes_behind_answers_as_a_rebuilt_one(notes, make_kb, monkeypatch):
    root, kb, index = notes
    kept = copy_generation(index)
    with IndexStore(index) as store:
        last_file, last_ids = store.conn.execute(
            "SELECT f.path, json_group_array(c.id) FROM chunks c JOIN files f ON f.id = c.file_id "
            "WHERE f.id = (SELECT file_id FROM chunks ORDER BY id DESC LIMIT 1)").fetchone()
    # The file written last is edited: SQLite gives its new chunks the same ids, so the copy's rows for
    # those ids are another text's. Then, in a second run, one file is deleted and one added.
    (root / last_file).write_text("# Changed\n\nvolcano basalt eruption\n")
    kb.index()
    with IndexStore(index) as store:
        new_ids = [row[0] for row in store.conn.execute(
            "SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path = ?", (last_file,))]
    assert set(new_ids) & set(json.loads(last_ids))
    (root / "n07.md").unlink()
    (root / "n1new.md").write_text("# New\n\nglacier crevasse ice\n")
    kb.index()
    with IndexStore(index) as store:
        assert copy_generation(index) == kept != store.generation()  # kept through both runs, not rebuilt
    status = kb.status()[0]
    assert status["vector_cache"] == "current" and status["vector_cache_changes"] >= 3
    assert doctor.examine(kb) == []  # a copy searched with its changes is not "behind its index"

    def no_sqlite_vec(*args, **kwargs):
        raise AssertionError("searched sqlite-vec: the copy and its delta should have answered")

    with monkeypatch.context() as patched:
        patched.setattr(IndexStore, "knn", no_sqlite_vec)
        with_delta = answers(kb)
    found = {query: [h.path for h in kb.search(query, k=3, mode="vector").hits] for query in QUERIES}
    assert last_file in found["volcano basalt eruption"] and "n1new.md" in found["glacier crevasse ice"]
    assert all(path != "n07.md" for hits in with_delta for path, _ in hits)

    monkeypatch.setattr(vector_cache, "DELTA_MIN_ROWS", 10**9)
    with IndexStore(index) as store:
        assert vector_cache.refresh(store) and copy_generation(index) == store.generation()
    assert answers(make_kb(root)) == with_delta


def test_more_changes_than_a_delta_holds_rebuild_the_copy(notes, monkeypatch):
    root, kb, index = notes
    monkeypatch.setattr(vector_cache, "DELTA_CHUNKS", 2)
    (root / "n01.md").write_text("# Changed\n\nvolcano basalt eruption\n")
    kb.index()
    kept = copy_generation(index)
    with IndexStore(index) as store:
        assert kept != store.generation()
    for name in ("n02.md", "n03.md"):
        (root / name).write_text(f"# Changed {name}\n\nglacier crevasse ice\n")
    kb.index()
    with IndexStore(index) as store:
        assert copy_generation(index) == store.generation()  # three changes since: rebuilt
        assert store.vectors_touched_since(derived_file.counter(store.generation()), 10) == []  # the log was cut
    assert kb.status()[0]["vector_cache"] == "current" and "vector_cache_changes" not in kb.status()[0]


def test_new_vectors_for_every_chunk_never_ride_on_an_older_copy(notes):
    """A re-embed (another model) drops every vector: no copy from before it may serve with a delta,
    even while only a few chunks have their new vectors."""
    root, kb, index = notes
    with IndexStore(index) as store:
        before = derived_file.claimed(cache_path(index), MAGIC)
        store.drop_vectors()
        store.pin_model(ModelIdentity("other", "v", 64))
        chunk = store.conn.execute("SELECT id FROM chunks LIMIT 1").fetchone()[0]
        store.add_vectors({chunk: np.ones((1, 64), np.float32)})
        assert vector_cache.delta_since(store, before, store.generation()) is None


def test_an_index_written_before_the_log_never_serves_an_older_copy_with_one(tmp_path):
    with IndexStore(tmp_path / "i.sqlite") as store:
        store.pin_model(ModelIdentity("m", "v", 8))
        store.write_file("a.txt", 1, 1, "h1", "text", [Chunk("a", 0, 1, 1, 1, None, "")], [np.ones((1, 8), np.float32)])
        older = store.generation()
        store.write_file("b.txt", 1, 1, "h2", "text", [Chunk("b", 0, 1, 1, 1, None, "")], [np.ones((1, 8), np.float32)])
        # As an index of a version without the log: its changes since `older` were never logged.
        for statement in ("DROP TRIGGER chunk_vec_logs_insert", "DROP TRIGGER chunk_vec_logs_delete",
                          "DROP TABLE vectors_touched", "DELETE FROM meta WHERE key = 'vectors_logged_since'"):
            store.conn.execute(statement)
    with IndexStore(tmp_path / "i.sqlite", create=False) as store:  # a reader does not make the log
        assert not store.vector_log_complete() and store.vectors_touched_since(0, 100) is None
    with IndexStore(tmp_path / "i.sqlite") as store:  # an index run does
        now = derived_file.counter(store.generation())
        assert store.vectors_touched_since(derived_file.counter(older), 100) is None
        assert store.vectors_touched_since(now, 100) == []  # what changes from here on is logged
        store.write_file("a.txt", 1, 1, "h3", "text", [Chunk("a2", 0, 1, 1, 1, None, "")], [np.ones((1, 8), np.float32)])
        store.delete_files(["b.txt"])
        assert len(store.vectors_touched_since(now, 100)) == 3  # a's old chunk, its new one, b's
        assert store.vectors_touched_since(now, 2) is None  # more than asked for: no delta


@pytest.mark.parametrize("rows", [3000, 30_000], ids=["exact scan", "shortlist"])
def test_a_copy_leaves_out_the_chunks_it_is_told_to(tmp_path, rows):
    vectors = clustered(rows, dim=64, centres=200)
    path = tmp_path / "x.vectors"
    ids = window_ids(rows)
    build(path, "gen-1", 64, rows, iter([(ids, vectors)]))
    cache = VectorCache(path)
    chunks = np.unique(ids >> encoding.WINDOW_BITS)
    rng = np.random.default_rng(5)
    for query in vectors[:10] + 0.01:
        best = [chunk for chunk, _ in cache.knn(query, 10)]
        without = np.sort(np.array(best[:4] + rng.choice(chunks, 50, replace=False).tolist(), dtype=np.int64))
        kept = ~np.isin(ids >> encoding.WINDOW_BITS, without)
        expected, _ = exact_top(vectors[kept], ids[kept], query, 10)
        found = [chunk for chunk, _ in cache.knn(query, 10, without=np.unique(without))]
        assert not set(found) & set(without.tolist())
        assert len(set(found) & set(expected)) >= 9
        allowed = np.sort(chunks[::3])
        filtered = [chunk for chunk, _ in cache.knn(query, 10, allowed, without=np.unique(without))]
        assert set(filtered) <= set(allowed.tolist()) - set(without.tolist())


def test_vectors_an_older_version_writes_are_logged_or_the_copy_is_not_trusted(notes, make_kb):
    """An older hermes-kb (a watcher left running over an upgrade) writes vectors without knowing the
    log: the triggers on sqlite-vec's own storage log them all the same; one that re-creates the vector
    table leaves it without them, and then no copy from before serves with a delta."""
    root, kb, index = notes
    with IndexStore(index) as store:
        header = derived_file.claimed(cache_path(index), MAGIC)
        file_id = store.conn.execute("SELECT id FROM files WHERE path = 'n03.md'").fetchone()[0]
        store.conn.execute("BEGIN IMMEDIATE")  # as the older code writes a chunk: its own SQL, no log calls
        store.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
        chunk = store.conn.execute("INSERT INTO chunks(file_id, ord, text, start_char, end_char, start_line, end_line, "
                                   "content_hash) VALUES (?, 9, 'volcano basalt eruption', 0, 1, 1, 1, 'x')", (file_id,)).lastrowid
        vector = kb.embedder().embed_documents(["volcano basalt eruption"])[0]
        store.conn.execute("INSERT INTO chunk_vec(rowid, embedding) VALUES (?, ?)", (chunk << encoding.WINDOW_BITS, vector.tobytes()))
        store.conn.execute("COMMIT")
        assert chunk in vector_cache.delta_since(store, header, store.generation()).tolist()
    assert [h.path for h in make_kb(root).search("volcano basalt eruption", k=1, mode="vector").hits] == ["n03.md"]
    with IndexStore(index, create=False) as store:  # as an older version re-creating the table for a re-embed
        store.conn.execute("DROP TABLE chunk_vec")
        store.conn.execute("CREATE VIRTUAL TABLE chunk_vec USING vec0(embedding float[64] distance_metric=cosine)")
        assert not store.vector_log_complete()
        assert vector_cache.delta_since(store, header, store.generation()) is None


def test_an_index_restored_from_a_backup_never_takes_a_newer_copy_for_its_own(notes, tmp_path, monkeypatch):
    """A copy built after the backup was taken, from changes the restore undid, must not serve once the
    restored index's own changes count past its generation."""
    root, kb, index = notes
    backup = tmp_path / "backup.sqlite"
    with IndexStore(index) as store:
        store.conn.execute("VACUUM INTO ?", (str(backup),))
    (root / "secret.md").write_text("# Secret\n\nvolcano basalt eruption\n")
    with monkeypatch.context() as rebuilding:
        rebuilding.setattr(vector_cache, "DELTA_MIN_ROWS", 10**9)
        kb.index()  # the copy now holds secret.md's vector, and the index records it as the one it built
    copy_header = derived_file.claimed(cache_path(index), MAGIC)
    (root / "secret.md").unlink()
    kb.indexes.forget(index)
    for companion in (index, Path(f"{index}-wal"), Path(f"{index}-shm")):
        companion.unlink(missing_ok=True)
    shutil.copy(backup, index)  # the index is restored; its vector copy is left as it was
    for i in range(8):  # its own changes take its generation past the copy's
        (root / f"n{i:02}.md").write_text(f"# Restored {i}\n\nglacier crevasse ice {i}\n")
        kb.index()
        with IndexStore(index) as store:
            assert vector_cache.delta_since(store, copy_header, store.generation()) is None
    assert all(h.path != "secret.md" for h in kb.search("volcano basalt eruption", k=5, mode="vector").hits)
