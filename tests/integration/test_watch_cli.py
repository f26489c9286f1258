"""The real `hermes kb watch` (subprocess, real model) outliving its folder: deleted, recreated, renamed."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
HERMES = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
REPO = Path(__file__).resolve().parents[2]


class Lines:
    """Collects a pipe's lines on a thread so the test can wait for one without blocking."""

    def __init__(self, pipe):
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(iter(pipe.readline, "")), daemon=True).start()

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, text: str, times: int = 1, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while self.count(text) < times and time.time() < deadline:
            time.sleep(0.05)
        assert self.count(text) >= times, f"no {times}x {text!r} in {self.lines}"


def as_at_a_terminal() -> None:
    """Ctrl-C as a terminal delivers it: a shell without job control starts background commands with
    SIGINT ignored, and a Python started so never raises KeyboardInterrupt; run under such a shell (a
    CI script's `cmd &`), the watch this test stops with SIGINT kept running until killed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def keyword_paths(word: str, env: dict) -> list[str]:
    found = subprocess.run([*HERMES, "kb", "search", word, "--mode", "keyword", "--json"], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=120)
    return sorted(f"{h['directory']}:{h['path']}" for h in json.loads(found.stdout)["hits"])


def test_watch_survives_its_folder_being_deleted_recreated_and_renamed(tmp_path):
    home, notes, other = tmp_path / "home", tmp_path / "notes", tmp_path / "other"
    for folder in (home, notes, other):
        folder.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha apples\n")
    (other / "o.md").write_text("# O\n\noscar olives\n")
    (home / "config.yaml").write_text(json.dumps({"knowledgebase": {"directories": [str(notes), str(other)]}}))
    env = {**os.environ, "HERMES_HOME": str(home)}
    process = subprocess.Popen([*HERMES, "kb", "watch", "--debounce", "0.3"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                               preexec_fn=as_at_a_terminal)
    out, err = Lines(process.stdout), Lines(process.stderr)
    try:
        out.wait_for("Watching notes, other", timeout=240)
        (notes / "a.md").unlink()
        notes.rmdir()
        err.wait_for(f"Folder {notes} (notes) is missing")
        (other / "p.md").write_text("# P\n\npapa pears\n")  # the other folder keeps syncing meanwhile
        out.wait_for("other: 1 added")
        notes.mkdir()
        (notes / "z.md").write_text("# Z\n\nzebrafish zeal\n")
        err.wait_for(f"Folder {notes} (notes) is back")
        out.wait_for("notes: 1 added, 0 changed, 1 removed")
        notes.rename(tmp_path / "away")
        err.wait_for("is missing", times=2)
        (tmp_path / "away" / "y.md").write_text("# Y\n\nyankee yams\n")
        (tmp_path / "away").rename(notes)
        err.wait_for("is back", times=2)
        out.wait_for("notes: 1 added, 0 changed, 0 removed", times=2)  # the first was the initial index
        assert keyword_paths("zebrafish", env) == ["notes:z.md"]
        assert keyword_paths("yams", env) == ["notes:y.md"], (out.lines, err.lines)
        assert keyword_paths("pears", env) == ["other:p.md"]
        assert keyword_paths("apples", env) == []
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    time.sleep(0.2)  # let the reader threads drain the pipes
    assert err.count("is missing") == 2 and err.count("error") == 0, err.lines
