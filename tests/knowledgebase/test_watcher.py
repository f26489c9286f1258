"""Real watchdog observers on a temp directory, with a short debounce window."""

import os
import time

import pytest

from hermes_kb.agent.knowledgebase.watcher import KnowledgebaseWatcher

DEBOUNCE = 0.3
MARGIN = 5.0


@pytest.fixture
def watched(tree, make_kb):
    root = tree({"a.md": "# A\n\nalpha apples\n", "b.md": "# B\n\nbravo bananas\n"})
    kb = make_kb(root)
    kb.index()
    summaries = []
    watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=DEBOUNCE, on_sync=summaries.append)
    watcher.start()
    yield kb, root, watcher, summaries
    watcher.stop()


def paths_for(kb, word):
    return sorted(h.path for h in kb.search(word, mode="keyword").hits)


def eventually(check, timeout=DEBOUNCE + MARGIN):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_create_modify_rename_delete_reach_the_index(watched):
    kb, root, _, _ = watched
    (root / "c.md").write_text("# C\n\ncharlie cherries\n")
    assert eventually(lambda: paths_for(kb, "cherries") == ["c.md"])
    (root / "a.md").write_text("# A\n\nalpha apricots\n")
    assert eventually(lambda: paths_for(kb, "apricots") == ["a.md"] and paths_for(kb, "apples") == [])
    (root / "b.md").rename(root / "renamed.md")
    assert eventually(lambda: paths_for(kb, "bananas") == ["renamed.md"])
    (root / "renamed.md").unlink()
    assert eventually(lambda: paths_for(kb, "bananas") == [])


def test_editor_style_atomic_save_ends_in_the_real_file(watched):
    kb, root, _, summaries = watched
    temp = root / ".a.md.swp~"
    temp.write_text("# A\n\nalpha avocados\n")
    os.replace(temp, root / "a.md")
    assert eventually(lambda: paths_for(kb, "avocados") == ["a.md"])
    files = {r["name"]: r["files"] for r in kb.status()}
    assert files["docs"] == 2  # the temp file never became an indexed file


def test_a_burst_of_writes_triggers_few_reindexes(watched):
    kb, root, watcher, summaries = watched
    for i in range(100):
        (root / "a.md").write_text(f"# A\n\nversion {i} of alpha\n")
    assert eventually(lambda: paths_for(kb, "99") == ["a.md"])
    time.sleep(DEBOUNCE * 3)
    assert 1 <= watcher.runs <= 3


def test_ignored_paths_and_the_index_itself_trigger_nothing(tree, make_kb):
    root = tree({"a.md": "alpha", ".git/HEAD": "ref", ".gitignore": "*.tmp\n"})
    kb = make_kb(root, directories=[{"path": str(root), "index_path": str(root / ".kb.sqlite")}])
    kb.index()
    watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=DEBOUNCE)
    watcher.start()
    try:
        (root / ".git" / "HEAD").write_text("ref2")
        (root / "scratch.tmp").write_text("x")
        time.sleep(DEBOUNCE + 1.0)
        assert watcher.runs == 0
        (root / "b.md").write_text("bravo")
        assert eventually(lambda: watcher.runs == 1)
        time.sleep(DEBOUNCE + 1.0)
        assert watcher.runs == 1  # writing the index inside the tree did not wake the watcher again
    finally:
        watcher.stop()
