"""Readers never fail while a writer works; concurrent writers end with a correct index."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.service import KnowledgeBase

from ..helpers_index import index_contents

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def make_corpus(root: Path, n: int = 60) -> Path:
    root.mkdir()
    for i in range(n):
        (root / f"note{i:03}.md").write_text(f"# Note {i}\n\nObservation {i} concerns topic {i % 5} and item {i}.\n")
    return root


def fresh_index(corpus: Path, home: Path) -> dict:
    subprocess.run([sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", "index", str(corpus)], check=True, cwd=REPO,
                   env={**os.environ, "HERMES_HOME": str(home)}, capture_output=True)
    return index_contents(next((home / "knowledgebase" / "indexes").glob("*.sqlite")))


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
    from hermes_kb.agent.knowledgebase.service import KnowledgeBase
    corpus, home, seconds = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    kb = KnowledgeBase(parse_knowledgebase({"directories": [str(corpus)]}), home)
    deadline, rounds = time.time() + seconds, 0
    while time.time() < deadline:
        for i in range(3):
            n = (rounds * 3 + i) % 60
            (corpus / f"note{n:03}.md").write_text(f"# Note {n}\\n\\nRevision {rounds} of observation {n}.\\n")
        kb.index()
        rounds += 1
    print(rounds)
""")


def test_searches_never_fail_while_another_process_indexes(tmp_path, real_embedder):
    corpus = make_corpus(tmp_path / "corpus")
    home = tmp_path / "home"
    kb = KnowledgeBase(parse_knowledgebase({"directories": [str(corpus)]}), home, embedder_factory=lambda: real_embedder)
    kb.index()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(corpus), str(home), "20"], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    failures = []
    for i in range(1000):
        try:
            mode = "hybrid" if i % 10 == 0 else "keyword"
            result = kb.search(f"observation {i % 60}", k=3, mode=mode)
            assert result.hits
        except Exception as exc:  # any failure at all is what this test is for
            failures.append(repr(exc))
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert failures == []
    assert "locked" not in err and int(out.strip()) >= 2
    kb.index()
    final = index_contents(kb.index_path(kb.config.directories[0]))
    assert final == fresh_index(corpus, tmp_path / "fresh")
    wal = Path(f"{kb.index_path(kb.config.directories[0])}-wal")
    assert not wal.exists() or wal.stat().st_size < 8_000_000  # checkpointed, not growing without bound


def test_two_processes_indexing_one_directory_at_once(tmp_path):
    corpus = make_corpus(tmp_path / "corpus", 80)
    home = tmp_path / "home"
    env = {**os.environ, "HERMES_HOME": str(home)}
    command = [sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", "index", str(corpus)]
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [p.communicate(timeout=300) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    assert not any("error" in err.lower() or "locked" in err.lower() for _, err in outputs)
    index = next((home / "knowledgebase" / "indexes").glob("*.sqlite"))
    assert index_contents(index) == fresh_index(corpus, tmp_path / "fresh")
