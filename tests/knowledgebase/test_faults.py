"""Fault injection: a full disk, damaged pages, a re-embed cut short, orphaned and odd indexes.
Each fault must end in one sentence naming the index and the fix, touch only that index, and heal."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from hermes_kb.agent.knowledgebase.doctor import examine
from hermes_kb.agent.knowledgebase.service import KnowledgebaseError
from hermes_kb.agent.knowledgebase.index.contract import StoreError
from hermes_kb.agent.knowledgebase.index.store import IndexStore
from hermes_kb.hermes_cli.kb_command import run_kb

from ..conftest import StubEmbedder


def notes(tree, root, n=8, word="alpha"):
    return tree({f"n{i}.md": f"# Note {i}\n\n{word} observation number {i} about topic {i % 3}.\n" for i in range(n)},
                root=root)


def cli(kb, *argv):
    out, err = StringIO(), StringIO()
    code = run_kb(list(argv), lambda: kb, Console(file=out, width=200), Console(file=err, width=200))
    return code, out.getvalue(), err.getvalue()


def damage(path: Path, seed: int = 7) -> None:
    """Overwrite pages in the middle of an SQLite file, as a bad disk or a stray write would."""
    data = bytearray(path.read_bytes())
    page = 4096
    rng = random.Random(seed)
    for number in rng.sample(range(2, len(data) // page - 1), k=max(1, len(data) // page // 3)):
        data[number * page:(number + 1) * page] = bytes(rng.randrange(256) for _ in range(page))
    path.write_bytes(bytes(data))


@pytest.fixture
def two(tree, make_kb, tmp_path):
    good, bad = notes(tree, tmp_path / "good", word="alpha"), notes(tree, tmp_path / "bad", n=40, word="alpha")
    kb = make_kb(good, bad)
    kb.index()
    return kb, good, bad


# --- a full disk -------------------------------------------------------------------------------------

def test_disk_full_is_one_sentence_valid_json_and_the_index_is_intact(tree, make_kb, tmp_path, monkeypatch):
    root = notes(tree, tmp_path / "docs")
    kb = make_kb(root)
    kb.index()
    before = [h.path for h in kb.search("alpha observation", mode="keyword", k=20).hits]
    for i in range(40):
        (root / f"more{i}.md").write_text("alpha " + " ".join(f"word{i}x{j}" for j in range(400)) + "\n")
    real_init = IndexStore.__init__

    def full_disk(self, *args, **kwargs):  # the file may not grow past its present size: SQLITE_FULL
        real_init(self, *args, **kwargs)
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        self.conn.execute(f"PRAGMA max_page_count = {pages + 2}")

    monkeypatch.setattr(IndexStore, "__init__", full_disk)
    code, out, _ = cli(kb, "index", "docs", "--json")
    assert code == 1
    error = json.loads(out)["error"]
    assert "disk holding the index of docs" in error and "is full" in error and "nothing indexed was lost" in error
    monkeypatch.setattr(IndexStore, "__init__", real_init)
    assert [h.path for h in kb.search("alpha observation", mode="keyword", k=20).hits] == before
    assert kb.index()[0].added == 40  # space again: the next run completes


def test_disk_full_on_a_real_small_filesystem(tree, make_kb, tmp_path, hermes_home):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=600k tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("needs root and tmpfs to mount a tiny filesystem")
    try:
        root = notes(tree, tmp_path / "docs", n=2)
        kb = make_kb(directories=[{"path": str(root), "index_path": str(mount / "docs.sqlite")}])
        kb.index()
        for i in range(300):
            (root / f"big{i}.md").write_text(" ".join(f"token{i}x{j}" for j in range(300)) + "\n")
        code, out, err = cli(kb, "index")
        assert code == 1 and "is full" in err and "Traceback" not in err
        assert kb.search("observation", mode="keyword").hits  # what was indexed is still there
        kb.indexes.forget(mount / "docs.sqlite")
    finally:
        os.system(f"umount -l {mount}")


# --- corruption ------------------------------------------------------------------------------------

def test_one_corrupt_index_is_fenced_off_and_the_other_works(two):
    kb, good, bad = two
    damage(kb.index_path(kb.config.directory("bad")))
    kb = type(kb)(kb.config, kb.hermes_home, embedder_factory=lambda: StubEmbedder())  # a fresh process
    result = kb.search("alpha observation", mode="keyword", k=5)
    assert {h.directory for h in result.hits} == {"good"}
    assert any("bad" in w and "hermes kb doctor bad --repair" in w for w in result.warnings), result.warnings
    rows = {row["name"]: row for row in kb.status()}
    assert rows["good"]["health"] == "ok" and rows["good"]["files"] == 8
    summaries = {s.directory: s for s in kb.index()}  # an unchanged damaged index may not even be read
    assert summaries["good"].error is None
    code, out, err = cli(kb, "search", "alpha", "--dir", "bad", "--mode", "keyword", "--json")
    assert code == 1 and "hermes kb doctor bad --repair" in json.loads(out)["error"]
    with pytest.raises(StoreError, match="corrupt"):
        kb.search("alpha", directory="bad", mode="keyword")


def test_doctor_finds_and_repairs_a_corrupt_index(two):
    kb, _, bad = two
    path = kb.index_path(kb.config.directory("bad"))
    damage(path)
    findings = examine(kb, "bad")
    assert findings and "corrupt" in findings[0].problem and not findings[0].repaired
    code, out, _ = cli(kb, "doctor", "bad", "--repair", "--json")
    report = json.loads(out)
    assert code == 0 and report["healthy"] and all(f["repaired"] for f in report["findings"])
    assert Path(f"{path}.corrupt").exists()
    assert len(kb.search("alpha observation", directory="bad", mode="keyword", k=50).hits) >= 10
    assert examine(kb) == []


def test_bad_meta_is_a_sentence_not_a_traceback(two):
    kb, _, _ = two
    path = kb.index_path(kb.config.directory("bad"))
    with IndexStore(path) as store:
        store.set_meta(dimension="lots")
    rows = {row["name"]: row for row in kb.status()}
    assert rows["bad"]["health"] == "corrupt" and "vector dimension" in rows["bad"]["problem"]
    assert rows["good"]["health"] == "ok"


# --- interrupted work resumes ------------------------------------------------------------------------

class DiesAfter(StubEmbedder):
    """Embeds `calls` batches, then the process 'dies' (as SIGKILL would, between two file writes)."""

    def __init__(self, calls, model_id):
        super().__init__(model_id=model_id)
        self.left = calls

    def embed_documents(self, texts):
        if self.left == 0:
            raise KeyboardInterrupt("killed")
        self.left -= 1
        return super().embed_documents(texts)


def test_an_interrupted_full_reembed_is_finished_by_the_next_run(tree, make_kb, tmp_path, monkeypatch):
    root = tree({f"n{i}.md": f"# Note {i}\n\n" + " ".join(f"w{i}x{j}" for j in range(150)) + "\n" for i in range(150)},
                root=tmp_path / "docs")
    kb = make_kb(root)
    kb.index()
    monkeypatch.setattr("hermes_kb.agent.knowledgebase.indexer.EMBED_BATCH_CHUNKS", 8)
    killed = make_kb(root, embedder=DiesAfter(5, "new-model"))
    with pytest.raises(KeyboardInterrupt):
        killed.index(full=True)
    resumed = make_kb(root, embedder=StubEmbedder(model_id="new-model"))
    row = resumed.status()[0]
    assert row["chunks_without_vectors"] > 0 and "still wait for vectors" in row["vector_search"]
    summary = resumed.index()[0]
    assert summary.resumed > 0 and summary.chunks_embedded > 0  # finished, and called unchanged: nothing changed
    row = resumed.status()[0]
    assert row["vector_search"] == "ok" and "chunks_without_vectors" not in row
    again = resumed.index()[0]
    assert again.changed == again.resumed == 0  # done for good


# --- indexes nobody could see or remove ---------------------------------------------------------------

@pytest.mark.parametrize("how", ["deleted", "renamed", "cut short", "unreadable"])
def test_orphaned_indexes_are_listed_and_clearable(tree, make_kb, tmp_path, how):
    folder = notes(tree, tmp_path / "adhoc", n=2)
    kb = make_kb(notes(tree, tmp_path / "docs", n=2))
    kb.index()
    kb.index(str(folder))
    index = next(p for p in (kb.hermes_home / "knowledgebase" / "indexes").glob("adhoc-*.sqlite"))
    if how == "deleted":
        shutil.rmtree(folder)
    elif how == "renamed":
        folder.rename(tmp_path / "elsewhere")
    elif how == "cut short":
        with sqlite3.connect(index) as conn:
            conn.execute("DELETE FROM meta WHERE key = 'root'")
    else:
        index.write_bytes(b"not an index at all" * 100)
    (index.parent / f"{index.name}.vectors.tmp4242").write_bytes(b"half a cache")
    orphans = [row for row in kb.status() if row["health"] == "orphaned"]
    assert [row["name"] for row in orphans] == [index.stem]
    assert f"hermes kb clear {index.stem}" in orphans[0]["problem"]
    assert kb.search("observation", mode="keyword").hits  # the rest works
    assert kb.clear(index.stem) == [index.stem]
    assert [p.name for p in index.parent.glob("adhoc-*")] == [f"{index.name}.lock"]  # leftovers went with it
    assert [row["name"] for row in kb.status()] == ["docs"]


def test_no_target_hint_names_the_index(two):
    kb, _, _ = two
    damage(kb.index_path(kb.config.directory("bad")))
    kb = type(kb)(kb.config, kb.hermes_home, embedder_factory=lambda: StubEmbedder())
    warnings = kb.search("alpha", mode="keyword").warnings
    assert warnings and all("hermes kb clear`" not in w for w in warnings)


# --- a search refreshes its own stale hits, nothing else ------------------------------------------------

def test_search_refreshes_only_the_changed_hit_not_the_whole_folder(tree, make_kb, tmp_path):
    root = notes(tree, tmp_path / "docs", n=3)
    kb = make_kb(root)
    kb.index()
    (root / "n1.md").write_text("# Note 1\n\nalpha observation number 1, now with zebra.\n")
    for i in range(30):
        (root / f"new{i}.md").write_text(f"unrelated new file {i}\n")
    hits = kb.search("alpha observation number 1", mode="keyword", k=3).hits
    assert hits[0].path == "n1.md" and "zebra" in hits[0].text and not hits[0].stale
    assert kb.status()[0]["changed_on_disk"] == 30  # the new files wait for the next index run


def test_a_missing_configured_folder_does_not_stop_the_others(tree, make_kb, tmp_path):
    kb = make_kb(tmp_path / "unmounted", notes(tree, tmp_path / "docs", n=2))
    summaries = {s.directory: s for s in kb.index()}
    assert "does not exist" in summaries["unmounted"].error and summaries["docs"].added == 2
    rows = {row["name"]: row for row in kb.status()}
    assert rows["unmounted"]["health"] == "missing" and rows["docs"]["health"] == "ok"
    with pytest.raises(KnowledgebaseError, match="does not exist"):
        kb.index("unmounted")


KILLED_REEMBED = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from tests.conftest import StubEmbedder
from hermes_kb.agent.knowledgebase import indexer
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.service import KnowledgeBase

class Slow(StubEmbedder):
    def embed_documents(self, texts):
        time.sleep(0.05)
        return super().embed_documents(texts)

indexer.EMBED_BATCH_CHUNKS = 4
embedder = Slow(model_id="new-model")
section = {"directories": [sys.argv[1]]}
if len(sys.argv) > 4:  # a PostgreSQL URL: the same run against the server (tests/integration/test_postgres_backend.py)
    section["store"] = {"backend": "postgres", "url": sys.argv[4]}
kb = KnowledgeBase(parse_knowledgebase(section), Path(sys.argv[2]), embedder_factory=lambda: embedder)
kb.index(full=True)
"""


def test_sigkill_during_a_full_reembed_is_finished_by_the_next_run(tree, make_kb, tmp_path, hermes_home):
    import signal
    import subprocess
    import sys
    import time

    root = tree({f"n{i}.md": f"# Note {i}\n\nbody {i} " + " ".join(f"w{j}" for j in range(60)) + "\n" for i in range(120)},
                root=tmp_path / "docs")
    make_kb(root).index()  # built with the "stub" model
    child = subprocess.Popen([sys.executable, "-c", KILLED_REEMBED, str(root), str(hermes_home),
                              str(Path(__file__).resolve().parents[2])])
    index = next((hermes_home / "knowledgebase" / "indexes").glob("*.sqlite"))
    deadline = time.time() + 60
    while time.time() < deadline:  # kill once the re-embed is under way, with part of it written
        with IndexStore(index, create=False) as store:
            if store.reembed_pending() and store.has_vector_table() and 0 < store.counts()["vectors"] < 100:
                break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    resumed = make_kb(root, embedder=StubEmbedder(model_id="new-model"))
    waiting = resumed.status()[0]["chunks_without_vectors"]
    assert waiting > 0
    summary = resumed.index()[0]
    assert summary.chunks_embedded == waiting  # only what the killed run had not done
    assert resumed.status()[0]["vector_search"] == "ok" and examine(resumed) == []


def test_odd_index_locations_are_one_sentence(tree, make_kb, tmp_path):
    root = notes(tree, tmp_path / "docs", n=2)
    kb = make_kb(directories=[{"path": str(root), "index_path": "/proc/kb/docs.sqlite"}])
    code, out, err = cli(kb, "index", "--json")
    assert code == 1 and "docs" in json.loads(out)[0]["error"]
    lock_dir = tmp_path / "idx" / "docs.sqlite.lock"
    lock_dir.mkdir(parents=True)
    kb = make_kb(directories=[{"path": str(root), "index_path": str(tmp_path / "idx" / "docs.sqlite")}])
    with pytest.raises(StoreError, match="docs"):
        kb.index("docs")


def test_hybrid_search_without_a_model_answers_with_keywords(tree, make_kb, tmp_path):
    from hermes_kb.agent.knowledgebase.embeddings import EmbeddingError

    root = notes(tree, tmp_path / "docs", n=3)
    make_kb(root).index()

    def broken():
        raise EmbeddingError("The offline embedding model is damaged; reinstall it.")

    from hermes_kb.agent.knowledgebase.service import KnowledgeBase

    kb = make_kb(root)
    kb = KnowledgeBase(kb.config, kb.hermes_home, embedder_factory=broken)
    result = kb.search("alpha observation number 2")
    assert result.hits and result.hits[0].path == "n2.md"
    assert any("damaged" in w for w in result.warnings), result.warnings


def test_malformed_embedding_service_replies_are_one_sentence(hermes_home):
    from hermes_kb.agent.knowledgebase.config import EmbeddingConfig
    from hermes_kb.agent.knowledgebase.embeddings import EmbeddingError, HttpEmbedder

    from ..helpers_http import RecordingServer

    for body in ({"data": None}, {"data": [{"index": 0}]}, {"embeddings": "x"}, {"data": []}):
        backend = "ollama" if "embeddings" in str(body) else "openai"
        route = "/api/embed" if backend == "ollama" else "/v1/embeddings"
        with RecordingServer({route: lambda _, body=body: (200, body)}) as server:
            config = EmbeddingConfig(backend=backend, model="m", base_url=server.url + ("/v1" if backend == "openai" else ""))
            os.environ.setdefault("OPENAI_API_KEY", "test")
            with pytest.raises(EmbeddingError, match="unexpected shape"):
                HttpEmbedder(config, hermes_home)


def test_an_index_inside_its_folder_with_any_name_never_indexes_itself(tree, make_kb, tmp_path):
    root = notes(tree, tmp_path / "docs", n=3)
    kb = make_kb(directories=[{"path": str(root), "index_path": str(root / "kb-index.db")}])
    kb.index()
    kb.search("alpha", mode="keyword")  # opens a reader: -wal and -shm exist now
    (root / "n0.md").write_text("# Note 0\n\nalpha changed\n")
    summary = kb.index()[0]
    assert (summary.added, summary.changed) == (0, 1), summary
    assert kb.status()[0]["files"] == 3
    assert kb.status()[0]["changed_on_disk"] == 0  # status's scan skips the same companions


def test_a_damaged_cache_is_reported_by_status_and_doctor_and_repaired(tree, make_kb, tmp_path):
    from hermes_kb.agent.knowledgebase.index import keyword_cache

    root = notes(tree, tmp_path / "docs", n=30)
    kb = make_kb(root)
    kb.index()
    cache = keyword_cache.cache_path(kb.index_path(kb.config.directories[0]))
    data = bytearray(cache.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(255 - b for b in data[middle:middle + 64])
    cache.write_bytes(bytes(data))
    assert kb.status()[0]["keyword_cache"] == "corrupt"
    assert kb.search("alpha observation number 7", mode="keyword").hits[0].path == "n7.md"  # FTS5 answers
    findings = examine(kb)
    assert len(findings) == 1 and "keyword cache" in findings[0].problem
    assert all(f.repaired for f in examine(kb, repair=True))
    assert kb.status()[0]["keyword_cache"] == "current" and examine(kb) == []


def test_an_invalid_allow_secrets_pattern_is_reported_not_fatal(tree, make_kb, tmp_path):
    kb = make_kb(notes(tree, tmp_path / "docs", n=2), allow_secrets=["[z-a]"])
    summary = kb.index()[0]  # the indexer once compiled allow_secrets itself, strictly: re.error
    assert summary.added == 2
    assert any("allow_secrets" in where and "[z-a]" in why for where, why in summary.skipped)
