"""`hermes kb` as a user runs it: real subprocesses, real model, real files."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..helpers_index import index_contents

pytestmark = pytest.mark.integration
HERMES = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
REPO = Path(__file__).resolve().parents[2]


def hermes(*args, home: Path, check=True, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_HOME": str(home)}
    result = subprocess.run([*HERMES, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300, **kwargs)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_index_search_status_clear_json(tmp_path):
    home = tmp_path / "home"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("# Deploy\n\nProduction deploys happen through the blue-green switch on port 4271.\n")
    (notes / "garden.md").write_text("# Garden\n\nTomatoes need full sun and regular watering.\n")
    summary = json.loads(hermes("kb", "index", str(notes), "--json", home=home).stdout)
    assert summary[0]["added"] == 2 and summary[0]["chunks_embedded"] == 2
    found = json.loads(hermes("kb", "search", "how", "do", "we", "ship", "to", "production", "--json", home=home).stdout)
    assert found["hits"][0]["path"] == "deploy.md" and found["hits"][0]["start_line"] == 1
    keyword = json.loads(hermes("kb", "search", "4271", "--mode", "keyword", "--dir", str(notes), "--json", home=home).stdout)
    assert [h["path"] for h in keyword["hits"]] == ["deploy.md"]
    status = json.loads(hermes("kb", "status", "--json", home=home).stdout)
    assert status[0]["files"] == 2 and status[0]["changed_on_disk"] == 0 and "SQLite" in status[0]["driver"]
    (notes / "garden.md").write_text("changed")
    assert json.loads(hermes("kb", "status", "--json", home=home).stdout)[0]["changed_on_disk"] == 1
    cleared = json.loads(hermes("kb", "clear", str(notes), "--yes", "--json", home=home).stdout)
    assert cleared == {"cleared": ["notes"]}


def test_user_errors_are_one_sentence_and_non_zero(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("knowledgebase:\n  alpha: 7\n")
    bad = hermes("kb", "status", home=home, check=False)
    assert bad.returncode == 1 and "knowledgebase.alpha must be a number between 0.0 and 1.0" in bad.stderr
    assert "Traceback" not in bad.stderr
    (home / "config.yaml").write_text("knowledgebase: [unclosed\n")
    assert "not valid YAML" in hermes("kb", "status", home=home, check=False).stderr
    (home / "config.yaml").write_text("")
    missing = hermes("kb", "index", str(tmp_path / "nope"), home=home, check=False)
    assert missing.returncode == 1 and "neither the name of a knowledgebase directory nor an existing folder" in missing.stderr
    nothing = hermes("kb", "search", "anything", "--json", home=home, check=False)
    assert nothing.returncode == 1 and "error" in json.loads(nothing.stdout)
    usage = hermes("kb", "search", home=home, check=False)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_sigkill_mid_index_then_rerun_equals_uninterrupted_run(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(240):
        (corpus / f"note{i:03}.md").write_text(
            f"# Note {i}\n\nThis note records observation number {i} about topic {i % 7}. " * 3 + "\n")
    killed_home, clean_home = tmp_path / "killed", tmp_path / "clean"
    env = {**os.environ, "HERMES_HOME": str(killed_home)}
    process = subprocess.Popen([*HERMES, "kb", "index", str(corpus)], env=env, cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    index_dir = killed_home / "knowledgebase" / "indexes"
    deadline = time.time() + 120
    written = 0
    while time.time() < deadline and process.poll() is None:
        indexes = list(index_dir.glob("*.sqlite")) if index_dir.exists() else []
        if indexes:
            try:
                conn = sqlite3.connect(f"file:{indexes[0]}?mode=ro", uri=True, timeout=1)
                written = conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]
                conn.close()
            except sqlite3.Error:
                written = 0
        if written >= 64:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the index run finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert 0 < written < 240
    rerun = json.loads(hermes("kb", "index", str(corpus), "--json", home=killed_home).stdout)[0]
    # files written before the kill are not added again; those still waiting for vectors are redone
    assert rerun["added"] + rerun["changed"] + rerun["unchanged"] == 240 and rerun["added"] <= 240 - written
    hermes("kb", "index", str(corpus), home=clean_home)
    killed = index_contents(next(index_dir.glob("*.sqlite")))
    clean = index_contents(next((clean_home / "knowledgebase" / "indexes").glob("*.sqlite")))
    assert killed == clean
    assert killed["counts"][0] == killed["counts"][1] == killed["counts"][2] and killed["orphans"] == 0
