"""The whole facade on the PostgreSQL backend: index, search, freshness, status, clear, doctor, faults,
and several hosts (HERMES_HOMEs) sharing one server. A real server (see tests/conftest.py), one
database per test; hosts are separate HERMES_HOME folders, and separate processes where it matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from hermes_kb.agent.knowledgebase.index import copies, keyword_cache
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.doctor import examine
from hermes_kb.agent.knowledgebase.indexer import ModelMismatchError
from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore
from hermes_kb.agent.knowledgebase.service import KnowledgeBase, KnowledgebaseError
from hermes_kb.agent.knowledgebase.index.contract import StoreError

from ..conftest import StubEmbedder
from ..knowledgebase.test_faults import KILLED_REEMBED

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

NOTES = {
    "deploy.md": "# Deploying\n\nRestart the release train after the deploy finishes; the canary goes first.\n",
    "vitamin.md": "# Vitamin D\n\nVitamin D deficiency is linked to bone loss in older patients.\n",
    "cells.md": "# Stem cells\n\nStem cells divide and renew; a cell culture needs fresh medium.\n",
    "gardening.md": "# Garden\n\nTomatoes want sun, water in the morning, and stakes once they flower.\n",
    "code.py": "def divide_line(text, width):\n    \"\"\"Split text into lines of at most width characters.\"\"\"\n"
               "    return [text[i:i + width] for i in range(0, len(text), width)]\n",
}


def host(home: Path, url: str, *directories: Path, embedder=None) -> KnowledgeBase:
    """A KnowledgeBase as one machine (its own HERMES_HOME) sees the shared server."""
    home.mkdir(parents=True, exist_ok=True)
    config = parse_knowledgebase({"directories": [str(d) for d in directories], "rerank": "off",  # as make_kb
                                  "store": {"backend": "postgres", "url": url}})
    chosen = embedder or StubEmbedder()
    return KnowledgeBase(config, home, embedder_factory=lambda: chosen)


def ranking(kb: KnowledgeBase, query: str, mode: str) -> list[tuple[str, float]]:
    return [(hit.path, round(hit.score, 4)) for hit in kb.search(query, k=5, mode=mode).hits]


def test_search_ranks_as_on_sqlite_in_every_mode(tree, tmp_path, postgres_database, make_kb):
    docs = tree(NOTES)
    on_sqlite = make_kb(docs)
    on_postgres = host(tmp_path / "pg-home", postgres_database, docs)
    for kb in (on_sqlite, on_postgres):
        [summary] = kb.index()
        assert summary.error is None and summary.added == len(NOTES)
    for query in ("vitamin deficiency in patients", "restart the release train", "divide_line", "cell culture medium"):
        for mode in ("hybrid", "keyword", "vector"):
            assert ranking(on_postgres, query, mode) == ranking(on_sqlite, query, mode), (query, mode)
    exact = on_postgres.search("restart the release train", k=3).hits[0]
    assert exact.path == "deploy.md" and "exact" in exact.found_by
    for question in ("How do I renew stem cells in MySQL?", "How do I stake tomatoes in the Garden?"):
        setting = on_postgres.search(question).setting  # the chat hook's test reads the same shares
        assert setting is not None and setting == on_sqlite.search(question).setting, question


def test_status_clear_and_doctor(tree, tmp_path, postgres_database):
    docs = tree(NOTES)
    kb = host(tmp_path / "home", postgres_database, docs)
    [before] = kb.status()
    assert before["indexed"] is False and "PostgreSQL at 127.0.0.1" in before["driver"]
    assert "hermes-test" not in str(before)  # the password is never shown
    kb.index()
    [row] = kb.status()
    assert row["indexed"] and row["health"] == "ok" and row["files"] == len(NOTES)
    assert row["chunks"] == row["vectors"] and row["chunks"] >= len(NOTES)
    assert row["keyword_cache"] == "current" and row["vector_cache"] == "current" and row["size_bytes"] > 0
    assert row["vector_search"] == "ok" and row["changed_on_disk"] == 0
    (docs / "gardening.md").write_text("# Garden\n\nBeans climb.\n")
    assert kb.status()[0]["changed_on_disk"] == 1
    assert examine(kb) == []
    assert kb.status()[0]["indexing"] is False
    import psycopg

    from hermes_kb.agent.knowledgebase.index.pg_store import writer_lock

    with psycopg.connect(postgres_database, autocommit=True) as colleague:  # another machine's index run
        with writer_lock(colleague, kb.index_path(kb.config.directories[0]).name, docs.name):
            assert kb.status()[0]["indexing"] is True
    assert kb.status()[0]["indexing"] is False
    other = host(tmp_path / "other-home", postgres_database, docs)
    other.index()  # another machine writes: this one's copies fall behind, which is no fault on a shared server
    assert kb.status()[0]["keyword_cache"] == "stale" and examine(kb) == []
    copy = keyword_cache.cache_path(kb.index_path(kb.config.directories[0]))
    with open(copy, "r+b") as damaged:  # same size, other bytes: only the checksums can tell
        damaged.seek(copy.stat().st_size // 2)
        damaged.write(b"\xff" * 64)
    [finding] = examine(kb, repair=True)
    assert "keyword cache" in finding.problem and "damaged" in finding.problem and finding.repaired
    assert kb.status()[0]["keyword_cache"] == "current"
    assert kb.clear() == [docs.name]
    assert kb.status()[0]["indexed"] is False and kb.clear() == []
    with pytest.raises(KnowledgebaseError, match="not indexed yet"):
        kb.search("vitamin", directory=docs.name)


def test_a_host_with_another_model_searches_keywords_until_it_rebuilds(tree, tmp_path, postgres_database):
    """The model is pinned in the shared index: a machine configured with another one is refused vector
    search (keywords still answer) and may not mix its vectors in; `--full` re-embeds for everyone."""
    docs = tree(NOTES)
    host(tmp_path / "a", postgres_database, docs).index()
    other = host(tmp_path / "b", postgres_database, docs, embedder=StubEmbedder(dim=32, model_id="other-model"))
    result = other.search("vitamin deficiency", k=1)
    assert result.hits[0].path == "vitamin.md" and result.hits[0].found_by == ["keyword"]
    assert any("was built with stub" in warning for warning in result.warnings)
    (docs / "new.md").write_text("# New\n\nFresh vitamin notes.\n")
    with pytest.raises(ModelMismatchError, match="vector search is off until you run `hermes kb index"):
        other.index()
    [rebuilt] = other.index(full=True)
    assert rebuilt.error is None and rebuilt.chunks_embedded == other.status()[0]["chunks"]
    assert other.status()[0]["model"] == "other-model (test, 32d)"
    assert other.search("vitamin deficiency", k=1).hits[0].found_by[0] == "vector"


def test_a_changed_file_is_found_fresh_and_a_deleted_one_goes(tree, tmp_path, postgres_database):
    docs = tree(NOTES)
    kb = host(tmp_path / "home", postgres_database, docs)
    kb.index()
    (docs / "vitamin.md").write_text("# Vitamin D\n\nVitamin D deficiency was reversed by sunlight zebrafish.\n")
    [hit] = kb.search("vitamin deficiency", k=1, mode="keyword").hits
    assert hit.path == "vitamin.md" and "zebrafish" in hit.text and not hit.stale  # re-indexed before answering
    (docs / "cells.md").unlink()
    [summary] = kb.index()
    assert summary.removed == 1
    assert all(hit.path != "cells.md" for hit in kb.search("stem cells", k=5).hits)


def test_another_host_reads_the_index_and_follows_its_changes(tree, tmp_path, postgres_database):
    docs = tree(NOTES)
    writer = host(tmp_path / "writer-home", postgres_database, docs)
    reader = host(tmp_path / "reader-home", postgres_database, docs)
    writer.index()
    copy = keyword_cache.cache_path(reader.index_path(reader.config.directories[0]))
    assert not copy.exists()
    assert reader.search("tomatoes sun", k=1).hits[0].path == "gardening.md"
    assert keyword_cache.state(copy, reader.indexes.reader(copy.with_suffix("")).generation()) == "current"  # built here
    (docs / "tomato-diary.md").write_text("# Diary\n\nThe tomatoes split after heavy rain.\n")
    writer.index()
    assert "tomato-diary.md" in [hit.path for hit in reader.search("tomatoes rain", k=3, mode="keyword").hits]
    assert reader.status()[0]["files"] == len(NOTES) + 1


def test_a_reader_searches_its_copy_with_the_changes_since_and_merges_them_later(tree, tmp_path, postgres_database,
                                                                                 monkeypatch):
    """Another machine's few changes are searched beside this machine's keyword copy (not merged into it
    before every search); many changes, or an old copy, are merged first."""
    from hermes_kb.agent.knowledgebase.index import copies

    docs = tree(NOTES)
    writer = host(tmp_path / "writer-home", postgres_database, docs)
    reader = host(tmp_path / "reader-home", postgres_database, docs)
    writer.index()
    assert reader.search("tomatoes sun", k=1, mode="keyword").hits[0].path == "gardening.md"
    copy = keyword_cache.cache_path(reader.index_path(reader.config.directories[0]))
    built = keyword_cache.read_generation(copy)
    (docs / "vitamin.md").write_text("# Vitamin D\n\nVitamin D deficiency was reversed by sunlight zebrafish.\n")
    (docs / "tomato-diary.md").write_text("# Diary\n\nThe tomatoes split after heavy rain zebrafish.\n")
    writer.index()
    found = reader.search("zebrafish", k=5, mode="keyword").hits
    assert sorted(hit.path for hit in found) == ["tomato-diary.md", "vitamin.md"]
    assert keyword_cache.read_generation(copy) == built  # not rewritten: searched with the changes
    assert [hit.path for hit in reader.search("vitamin deficiency bone loss", k=3, mode="keyword").hits][:1] == ["vitamin.md"]
    assert "bone loss" not in reader.search("vitamin deficiency bone loss", k=1, mode="keyword").hits[0].text  # new text only
    hybrid = reader.search("sunlight zebrafish", k=2).hits
    assert hybrid[0].path == "vitamin.md" and "keyword" in hybrid[0].found_by
    monkeypatch.setattr(copies, "KEYWORD_DELTA_CHUNKS", 1)  # now too many changes: merged first
    assert sorted(hit.path for hit in reader.search("zebrafish", k=5, mode="keyword").hits) == ["tomato-diary.md",
                                                                                            "vitamin.md"]
    assert keyword_cache.read_generation(copy) != built
    assert keyword_cache.state(copy, reader.indexes.reader(copy.with_suffix("")).generation()) == "current"


def test_a_folder_indexed_by_path_belongs_to_the_machine_that_indexed_it(tree, tmp_path, postgres_database):
    """As with SQLite files in a home: another machine where the same folder exists does not search it."""
    docs = tree(NOTES)
    mine, theirs = (host(tmp_path / name, postgres_database) for name in ("mine", "theirs"))
    mine.index(str(docs))
    assert [d.name for d in mine.known_directories()] == [docs.name]
    assert mine.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"
    assert theirs.known_directories() == [] and theirs.orphans() == []
    with pytest.raises(KnowledgebaseError, match="No knowledgebase directories are configured"):
        theirs.search("vitamin deficiency")
    assert mine.clear(docs.name) == [docs.name] and mine.known_directories() == []


def test_keyword_search_without_a_copy_scores_bm25_on_the_server(tree, tmp_path, postgres_database, monkeypatch):
    """No current keyword copy (another process here holds the lock): the server's full-text index
    finds the chunks and BM25 scores them from their own terms, as the copy would."""
    docs = tree({**NOTES, **{f"filler{i}.md": f"# Filler {i}\n\nNotes about week {i} and the weather.\n"
                             for i in range(20)}})
    kb = host(tmp_path / "home", postgres_database, docs)
    kb.index()
    queries = ("vitamin deficiency patients", "weather week", "release train canary")
    with_copy = {q: ranking(kb, q, "keyword") for q in queries}
    named = kb.search("How do I stake tomatoes in the Garden?").setting
    assert named is not None and named.share == 1 / 25 and not named.foreign
    monkeypatch.setattr(copies.OpenIndexes, "catch_up_keywords", staticmethod(lambda *_: None))
    keyword_cache.cache_path(kb.index_path(kb.config.directories[0])).unlink()
    kb.indexes.forget(kb.index_path(kb.config.directories[0]))
    served = []
    original = PgIndexStore.keyword
    monkeypatch.setattr(PgIndexStore, "keyword", lambda self, terms, k, allowed=None, query=None: served.append(terms) or original(self, terms, k, allowed, query))
    for query in queries:
        assert ranking(kb, query, "keyword") == with_copy[query], query
    assert len(served) == len(queries)
    assert kb.search("How do I stake tomatoes in the Garden?", mode="keyword").setting == named  # the server's own counts


def test_connection_faults_are_one_sentence_and_lose_nothing(tree, tmp_path, postgres_database):
    docs = tree(NOTES)
    kb = host(tmp_path / "home", postgres_database, docs)
    kb.index()
    wrong = postgres_database.replace(":hermes-test@", ":wrong-password@")
    bad = host(tmp_path / "home", wrong, docs)
    with pytest.raises(StoreError, match="refused the credentials of postgres") as caught:
        bad.search("vitamin", directory=docs.name)
    assert "wrong-password" not in str(caught.value)
    [row] = bad.status()
    assert row["health"] == "error" and "refused the credentials" in row["problem"]
    [summary] = bad.index()
    assert "refused the credentials" in summary.error
    from ..postgres_server import free_port

    nobody = host(tmp_path / "home", f"postgresql://kb:pw@127.0.0.1:{free_port()}/kb", docs)
    with pytest.raises(StoreError, match="Cannot reach the PostgreSQL server at 127.0.0.1"):
        nobody.search("vitamin", directory=docs.name)
    assert kb.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"  # the index was never touched


def test_searches_heal_after_the_server_drops_every_connection(tree, tmp_path, postgres_database):
    """A server restart or an administrator's pg_terminate_backend: the next search reconnects."""
    import psycopg

    docs = tree(NOTES)
    kb = host(tmp_path / "home", postgres_database, docs)
    kb.index()
    assert kb.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        ended = admin.execute("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
    assert ended >= 2  # the reader's connection and the kept catalogue connection
    assert kb.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"
    assert kb.status()[0]["health"] == "ok"


def test_a_search_during_a_server_side_drop_is_one_sentence(tree, tmp_path, postgres_database):
    """Another host clears the index while this one has it open: a sentence, then 'not indexed'."""
    docs = tree(NOTES)
    kb, other = (host(tmp_path / name, postgres_database, docs) for name in ("a", "b"))
    kb.index()
    assert kb.search("vitamin", k=1).hits
    assert other.clear() == [docs.name]
    with pytest.raises(KnowledgebaseError, match="Nothing is indexed yet"):
        kb.search("vitamin", k=1)


def _cli(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", *args], cwd=REPO,
                            env={**os.environ, "HERMES_HOME": str(home)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_hosts_indexing_one_directory_at_once_make_one_index(tmp_path, postgres_database, real_embedder):
    """Two processes with two HERMES_HOMEs index the same folder against one server (the real CLI and
    model); searches from a third keep working throughout; the result is one index, as one run makes."""
    docs = tmp_path / "shared"
    docs.mkdir()
    for i in range(80):
        (docs / f"note{i:03}.md").write_text(f"# Note {i}\n\nObservation {i} concerns topic {i % 7} and item {i}.\n")
    homes = [tmp_path / f"host{n}" for n in range(2)]
    for home in homes:
        home.mkdir()
        (home / "config.yaml").write_text(yaml.safe_dump({"knowledgebase": {
            "directories": [{"path": str(docs), "name": "shared"}],
            "store": {"backend": "postgres", "url": postgres_database}}}))
    reader = host(tmp_path / "reader", postgres_database, docs, embedder=real_embedder)
    runs = [_cli(home, "index", "--json") for home in homes]
    failures, searches = [], 0
    stop = threading.Event()

    def search_meanwhile():
        nonlocal searches
        while not stop.is_set():
            try:
                reader.search("observation topic 3", k=3)
                searches += 1
            except KnowledgebaseError as exc:  # before the first file is written: nothing to search yet
                if "not indexed" not in str(exc) and "Nothing is indexed" not in str(exc):
                    failures.append(repr(exc))
            except Exception as exc:  # any other failure is what this test is for
                failures.append(repr(exc))

    thread = threading.Thread(target=search_meanwhile)
    thread.start()
    outputs = [run.communicate(timeout=300) for run in runs]
    stop.set()
    thread.join()
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outputs]
    summaries = sorted((json.loads(out)[0] for out, _ in outputs), key=lambda s: s["added"])
    # One waited for the other (the server's lock: their local locks are in different homes), then had nothing to do.
    assert [(s["added"], s["unchanged"]) for s in summaries] == [(0, 80), (80, 0)]
    assert any("Waiting for another process indexing shared" in err for _, err in outputs)
    assert failures == [] and searches > 0
    [row] = reader.status()
    assert (row["files"], row["chunks"], row["vectors"]) == (80, 80, 80)
    hits = reader.search("observation 42 concerns", k=3).hits
    assert hits[0].path == "note042.md"
    store = reader.indexes.reader(reader.index_path(reader.config.directories[0]))
    assert sorted(store.files()) == sorted(p.name for p in docs.iterdir())
    assert store.conn.execute(f'SELECT COUNT(*) FROM "{store.schema}".chunks').fetchone()[0] == 80  # no duplicate


def test_sigkill_mid_run_releases_the_lock_and_another_host_finishes_the_work(tree, tmp_path, postgres_database):
    import signal
    import time

    docs = tree({f"n{i}.md": f"# Note {i}\n\nbody {i} " + " ".join(f"w{j}" for j in range(60)) + "\n" for i in range(120)})
    first = host(tmp_path / "first", postgres_database, docs)
    first.index()  # with the "stub" model
    child = subprocess.Popen([sys.executable, "-c", KILLED_REEMBED, str(docs), str(tmp_path / "first"), str(REPO),
                              postgres_database])
    store = first.indexes.reader(first.index_path(first.config.directories[0]))
    deadline = time.time() + 60
    while time.time() < deadline:  # kill once the re-embed is under way, with part of it written
        if store.reembed_pending() and store.has_vector_table() and 0 < store.counts()["vectors"] < 100:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    other = host(tmp_path / "second", postgres_database, docs, embedder=StubEmbedder(model_id="new-model"))
    waiting = other.status()[0]["chunks_without_vectors"]
    assert waiting > 0
    [summary] = other.index(wait=False)  # the dead process's lock went with its connection
    assert summary.error is None and summary.chunks_embedded == waiting  # only what the killed run had not done
    [row] = other.status()
    assert row["vector_search"] == "ok" and row["vectors"] == row["chunks"] and examine(other) == []


# --- what an attacker's review found (each failed before its fix) ------------------------------------

def test_an_index_path_naming_another_schema_cannot_drop_it(tree, tmp_path, postgres_database):
    """A configured index_path under the postgres folder is a schema name only when it is one this store
    makes: `public` (holding pgvector for everyone) or `My-Notes` are keys like any other path."""
    import psycopg

    docs = tree(NOTES)
    team = host(tmp_path / "team", postgres_database, docs)
    team.index()
    home = tmp_path / "mine"
    for leaf in ("public", "My-Notes"):
        config = parse_knowledgebase({"directories": [{"path": str(docs), "name": "mine",
                                                       "index_path": str(home / "knowledgebase" / "postgres" / leaf)}],
                                      "store": {"backend": "postgres", "url": postgres_database}})
        mine = KnowledgeBase(config, home, embedder_factory=StubEmbedder)
        assert mine.index_path(config.directories[0]).name.startswith("kb_mine_")
        [summary] = mine.index()
        assert summary.error is None
        assert mine.clear("mine") == ["mine"]
    with psycopg.connect(postgres_database) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'public'").fetchone()
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    assert team.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"


def test_a_password_with_url_characters_works_from_the_environment_and_is_never_shown(tree, tmp_path, postgres_database,
                                                                                        monkeypatch):
    import psycopg

    secret = "Xy@S/cr#t%zz?9"
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS kb_special")
        admin.execute(f"CREATE ROLE kb_special LOGIN SUPERUSER PASSWORD '{secret}'")
    try:
        docs = tree(NOTES)
        server = postgres_database.split("@", 1)[1]
        monkeypatch.setenv("KB_PG_PASSWORD", secret)
        kb = host(tmp_path / "home", f"postgresql://kb_special:${{KB_PG_PASSWORD}}@{server}", docs)
        [summary] = kb.index()
        assert summary.error is None and kb.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"
        monkeypatch.setenv("KB_PG_PASSWORD", "Wr0ngZebra@pass/%zz")
        wrong = host(tmp_path / "home", f"postgresql://kb_special:${{KB_PG_PASSWORD}}@{server}", docs)
        with pytest.raises(StoreError, match="refused the credentials of kb_special") as caught:
            wrong.search("vitamin", directory=docs.name)
        assert "Zebra" not in str(caught.value) and "%zz" not in str(caught.value)
    finally:
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute("DROP OWNED BY kb_special")
            admin.execute("DROP ROLE kb_special")


def test_a_role_without_rights_on_an_index_gets_sentences_not_tracebacks(tree, tmp_path, postgres_database):
    import psycopg

    docs = tree(NOTES)
    home = tmp_path / "home"
    owner = host(home, postgres_database)
    owner.index(str(docs))  # indexed by path: listed on this machine from now on
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS kb_nobody")
        admin.execute("CREATE ROLE kb_nobody LOGIN PASSWORD 'pw'")
    try:
        server = postgres_database.split("@", 1)[1]
        nobody = host(home, f"postgresql://kb_nobody:pw@{server}")
        for attempt in (lambda: nobody.search("vitamin"), nobody.status, lambda: nobody.index(str(docs))):
            with pytest.raises((StoreError, KnowledgebaseError), match="PostgreSQL at|permission denied|No knowledgebase|belongs to the role"):
                attempt()
    finally:
        with psycopg.connect(postgres_database, autocommit=True) as admin:
            admin.execute("DROP ROLE kb_nobody")


def test_chunks_deleted_elsewhere_do_not_crowd_out_the_rest_of_a_delta_search(tree, tmp_path, postgres_database):
    # Each text its own: identical ones would be one hit (Hit.also_in).
    docs = tree({**{f"short{i}.md": f"canary canary canary short{i}\n" for i in range(60)},
                 **{f"keep{i}.md": f"The canary keep{i} " + " ".join(f"filler{j}" for j in range(80)) + "\n" for i in range(5)}})
    writer = host(tmp_path / "a", postgres_database, docs)
    reader = host(tmp_path / "b", postgres_database, docs)
    writer.index()
    assert len(reader.search("canary", k=10, mode="keyword").hits) == 10  # builds the reader's copy
    for i in range(60):
        (docs / f"short{i}.md").unlink()
    writer.index()
    assert sorted(hit.path for hit in reader.search("canary", k=10, mode="keyword").hits) == [f"keep{i}.md" for i in range(5)]


def test_without_psycopg_the_postgres_store_is_one_sentence(tree, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the [postgres] extra were not installed
    kb = host(tmp_path / "home", "postgresql://kb:pw@127.0.0.1:1/kb", tree(NOTES))
    with pytest.raises(StoreError, match=r"pip install 'hermes-knowledgebase\[postgres\]'"):
        kb.search("vitamin", directory="docs")
    [row] = kb.status()
    assert "hermes-knowledgebase[postgres]" in row["problem"]


@pytest.mark.parametrize("exact_up_to", [10_000, 0])  # the exact comparison, then the filtered HNSW walk
def test_filters_answer_as_on_sqlite_from_the_copies_and_from_the_server(tree, tmp_path, postgres_database, make_kb,
                                                                          monkeypatch, exact_up_to):
    """Tags and dates read from the same facets on both backends; with no copy current, the server's
    HNSW and term indexes are restricted to the filter's chunks inside the query."""
    from hermes_kb.agent.knowledgebase.index import pg_store
    from hermes_kb.agent.knowledgebase.filters import SearchFilter

    from ..knowledgebase.test_filters import vault

    docs = vault(tree)
    on_sqlite, on_postgres = make_kb(docs), host(tmp_path / "pg-home", postgres_database, docs)
    filters = [{"tags": ["finance"]}, {"since": "2026-11-01"}, {"before": "2026-11-01", "kind": "markdown"}]
    answers = []
    for kb in (on_sqlite, on_postgres):
        kb.index()
        answers.append([[h.path for h in kb.search("quarterly report", k=5, mode=mode, min_score=0, **f).hits]
                        for f in filters for mode in ("hybrid", "vector", "keyword")])
    assert answers[0] == answers[1] and all(answers[0])
    monkeypatch.setattr(pg_store, "EXACT_FILTERED_CHUNKS", exact_up_to)
    directory = on_postgres.config.directories[0]
    store = on_postgres.backend.open(on_postgres.index_path(directory), name=directory.name)
    try:
        allowed = store.file_facets().admitted(SearchFilter(tags=("finance",)))
        query = StubEmbedder().embed_query("quarterly report")
        assert {i for i, _ in store.knn(query, 5, allowed)} == set(allowed.tolist())
        assert {i for i, _ in store.keyword(["quarterly", "report"], 5, allowed)} == set(allowed.tolist())
    finally:
        store.close()
