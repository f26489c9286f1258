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


# --- folders that vanish, come back, or are replaced -------------------------------------

CHECK = 0.1  # how often the watcher stats each folder's path, kept short here


@pytest.fixture
def two_folders(tree, make_kb, tmp_path):
    docs = tree({"a.md": "# A\n\nalpha apples\n"})
    other = tree({"o.md": "# O\n\noscar olives\n"}, root=tmp_path / "other")
    kb = make_kb(docs, other)
    kb.index()
    said = {"missing": [], "back": [], "errors": []}
    watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=DEBOUNCE, check_s=CHECK,
                                   on_missing=said["missing"].append, on_return=said["back"].append,
                                   on_error=said["errors"].append)
    watcher.start()
    yield kb, docs, other, watcher, said
    watcher.stop()


def test_a_deleted_and_recreated_folder_is_watched_and_synced_again(two_folders):
    kb, docs, other, watcher, said = two_folders
    for path in docs.iterdir():
        path.unlink()
    docs.rmdir()
    assert eventually(lambda: len(said["missing"]) == 1)
    assert "docs" in said["missing"][0] and str(docs) in said["missing"][0]
    (other / "p.md").write_text("# P\n\npapa pears\n")  # the other folder keeps syncing meanwhile
    assert eventually(lambda: paths_for(kb, "pears") == ["p.md"])
    time.sleep(CHECK * 10)
    assert len(said["missing"]) == 1 and said["errors"] == []  # said once, not once per check or event
    docs.mkdir()
    (docs / "c.md").write_text("# C\n\ncharlie cherries\n")
    assert eventually(lambda: paths_for(kb, "cherries") == ["c.md"])  # synced on return...
    assert eventually(lambda: paths_for(kb, "apples") == [])  # ...so the deleted files left the index
    assert len(said["back"]) == 1 and "docs" in said["back"][0]
    (docs / "d.md").write_text("# D\n\ndelta dates\n")  # and watched again afterwards
    assert eventually(lambda: paths_for(kb, "dates") == ["d.md"])
    assert said["errors"] == [] and len(said["missing"]) == 1


def test_a_folder_renamed_away_and_back_is_watched_again(two_folders, tmp_path):
    kb, docs, other, watcher, said = two_folders
    away = tmp_path / "away"
    docs.rename(away)
    assert eventually(lambda: len(said["missing"]) == 1)
    (away / "moved.md").write_text("# M\n\nmike mangoes\n")  # outside the configured path: not indexed
    (other / "p.md").write_text("# P\n\npapa pears\n")
    assert eventually(lambda: paths_for(kb, "pears") == ["p.md"])
    time.sleep(DEBOUNCE + CHECK * 5)
    assert paths_for(kb, "mangoes") == [] and said["errors"] == [] and len(said["missing"]) == 1
    away.rename(docs)
    assert eventually(lambda: paths_for(kb, "mangoes") == ["moved.md"])  # what changed while away is synced
    (docs / "c.md").write_text("# C\n\ncharlie cherries\n")
    assert eventually(lambda: paths_for(kb, "cherries") == ["c.md"])
    assert len(said["back"]) == 1 and said["errors"] == []


def test_a_renamed_parent_and_a_folder_swapped_in_at_the_path(tree, make_kb, tmp_path):
    docs = tree({"a.md": "# A\n\nalpha apples\n"}, root=tmp_path / "parent" / "docs")
    kb = make_kb(docs)
    kb.index()
    missing, back = [], []
    watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=DEBOUNCE, check_s=CHECK,
                                   on_missing=missing.append, on_return=back.append)
    watcher.start()
    try:
        (tmp_path / "parent").rename(tmp_path / "parent2")  # inotify tells the watched folder nothing
        assert eventually(lambda: len(missing) == 1)
        (tmp_path / "parent2").rename(tmp_path / "parent")
        assert eventually(lambda: len(back) == 1)
        fresh = tree({"n.md": "# N\n\nnovember nectarines\n"}, root=tmp_path / "fresh")
        docs.rename(tmp_path / "old")
        fresh.rename(docs)  # `mv new old`: another folder at the same path, perhaps never seen missing
        assert eventually(lambda: paths_for(kb, "nectarines") == ["n.md"] and paths_for(kb, "apples") == [])
        (docs / "z.md").write_text("# Z\n\nzulu zucchini\n")  # the watch follows the new folder
        assert eventually(lambda: paths_for(kb, "zucchini") == ["z.md"])
        (tmp_path / "old" / "a.md").write_text("# A\n\nalpha avocados\n")  # the old one is no longer watched
        time.sleep(DEBOUNCE + CHECK * 5)
        assert paths_for(kb, "avocados") == []
    finally:
        watcher.stop()


def test_stop_is_prompt_while_a_folder_is_missing(two_folders):
    _, docs, _, watcher, said = two_folders
    (docs / "a.md").unlink()
    docs.rmdir()
    assert eventually(lambda: len(said["missing"]) == 1)
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 2.0
    assert watcher.wait(timeout=0) is None  # stopped, not given up


def test_gives_up_once_every_folder_is_gone_past_the_grace(tree, make_kb):
    docs = tree({"a.md": "alpha"})
    kb = make_kb(docs)
    kb.index()
    watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=DEBOUNCE, check_s=CHECK,
                                   grace_s=1.0, on_missing=lambda message: None)
    watcher.start()
    try:
        (docs / "a.md").unlink()
        docs.rmdir()
        time.sleep(0.3)
        docs.mkdir()  # back within the grace: nothing given up
        assert watcher.wait(timeout=1.5) is None
        docs.rmdir()
        started = time.monotonic()
        reason = watcher.wait(timeout=5)
        assert reason and str(docs) in reason and "missing for over 1 s" in reason
        assert 0.9 <= time.monotonic() - started < 4
    finally:
        watcher.stop()


def test_a_folder_missing_at_start_is_said_and_picked_up_when_it_appears(tree, make_kb, tmp_path):
    docs = tree({"a.md": "alpha apples"})
    late = tmp_path / "late"
    late.mkdir()
    kb = make_kb(docs, late)
    kb.index(str(docs))
    late.rmdir()
    missing = []
    watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=DEBOUNCE, check_s=CHECK,
                                   on_missing=missing.append)
    watcher.start()  # no crash: watchdog cannot schedule a missing path, the watcher waits for it
    try:
        assert len(missing) == 1 and str(late) in missing[0]
        tree({"l.md": "# L\n\nlima lemons\n"}, root=late)
        assert eventually(lambda: paths_for(kb, "lemons") == ["l.md"])
    finally:
        watcher.stop()
