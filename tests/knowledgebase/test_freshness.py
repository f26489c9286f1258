"""Query-time freshness: deleted files never come back, changed files are refreshed or flagged."""

import os
import time

from hermes_kb.agent.knowledgebase.index.local_files import writer_lock


def test_deleted_file_never_appears_and_edited_file_is_refreshed(tree, make_kb, stub_embedder):
    root = tree({"gone.md": "# Gone\n\nzebra crossing notes\n", "edit.md": "# Edit\n\nzebra stripes old text\n"})
    kb = make_kb(root)
    kb.index()
    (root / "gone.md").unlink()
    (root / "edit.md").write_text("# Edit\n\nzebra stripes brand new wording\n")
    for mode in ("keyword", "hybrid", "vector"):  # min_score 0: a one-word query is a weak vector match for the stub
        hits = kb.search("zebra", mode=mode, min_score=0).hits
        assert [h.path for h in hits] == ["edit.md"], mode
        assert "brand new wording" in hits[0].text and not hits[0].stale


def test_large_changed_file_is_flagged_stale(tree, make_kb):
    big = "# Big\n\n" + "filler words here. " * 20000 + "\nunicorn marker\n"
    root = tree({"big.md": big})
    kb = make_kb(root, max_file_bytes=10_000_000)
    kb.index()
    os.utime(root / "big.md", ns=(time.time_ns(), time.time_ns() + 10**9))
    hits = kb.search("unicorn marker", mode="keyword").hits
    assert hits and hits[0].stale


def test_changed_file_is_flagged_stale_while_another_process_indexes(tree, make_kb):
    root = tree({"a.md": "# A\n\nquokka facts\n"})
    kb = make_kb(root)
    kb.index()
    (root / "a.md").write_text("# A\n\nquokka facts, revised\n")
    with writer_lock(kb.index_path(kb.config.directories[0])):
        hits = kb.search("quokka", mode="keyword").hits
    assert hits[0].stale and hits[0].text.endswith("quokka facts")
    assert kb.status()[0]["changed_on_disk"] == 1
