"""`hermes kb watch` through run_kb in-process (stub embedder): folders that vanish and the grace period."""

import threading
import time

from rich.console import Console

from hermes_kb.agent.knowledgebase import watcher as watcher_module
from hermes_kb.hermes_cli.kb_command import run_kb


def consoles():
    return Console(record=True, width=400), Console(record=True, width=400)


def test_watch_exits_1_with_one_sentence_when_its_only_folder_stays_gone(tree, make_kb, monkeypatch):
    monkeypatch.setattr(watcher_module, "WATCH_GRACE_S", 1.0)
    monkeypatch.setattr(watcher_module, "CHECK_S", 0.1)
    docs = tree({"a.md": "alpha apples"})
    kb = make_kb(docs)
    out, err = consoles()
    result = []
    runner = threading.Thread(target=lambda: result.append(
        run_kb(["watch", "docs", "--debounce", "0.2"], lambda: kb, out, err)), daemon=True)
    runner.start()
    deadline = time.time() + 10
    while "Watching docs" not in out.export_text(clear=False) and time.time() < deadline:
        time.sleep(0.05)
    (docs / "a.md").unlink()
    docs.rmdir()
    runner.join(timeout=10)
    assert result == [1]
    text = err.export_text()
    assert text.count("is missing (deleted or renamed)") == 1
    assert f"error: Folder {docs} (docs) has been missing for over 1 s, so there is nothing left to watch." in text
    assert "Traceback" not in text


def test_watch_refuses_at_once_when_nothing_it_should_watch_exists(tree, make_kb):
    docs = tree({"a.md": "alpha"})
    kb = make_kb(docs)
    (docs / "a.md").unlink()
    docs.rmdir()
    out, err = consoles()
    assert run_kb(["watch"], lambda: kb, out, err) == 1
    assert f"error: Nothing to watch: {docs} (docs) does not exist." in err.export_text()
