"""A knowledgebase is shared by threads (the MCP server, the gateway): what one thread does to an index
(clear it, repair it) must not break a search another thread has under way."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hermes_kb.agent.knowledgebase import retriever
from hermes_kb.agent.knowledgebase.service import KnowledgebaseError


def test_a_search_under_way_in_another_thread_survives_a_clear(tree, make_kb, monkeypatch):
    kb = make_kb(tree({"a.md": "# Alpha\n\nkiwi banana mango smoothie recipe\n"}))
    kb.index()
    inside, cleared = threading.Event(), threading.Event()
    gather = retriever._gather

    def gather_that_waits(*args, **kwargs):  # the search has opened its reader and snapshot
        if threading.current_thread().name.startswith("searcher") and not cleared.is_set():
            inside.set()
            cleared.wait(10)
        return gather(*args, **kwargs)

    monkeypatch.setattr(retriever, "_gather", gather_that_waits)
    with ThreadPoolExecutor(1, thread_name_prefix="searcher") as searcher:
        under_way = searcher.submit(lambda: [h.path for h in kb.search("kiwi mango", mode="keyword").hits])
        assert inside.wait(10)
        assert kb.clear() == ["docs"]
        cleared.set()
        # Before: its connection was closed under it, and it said the index was corrupt.
        assert under_way.result(10) == ["a.md"]  # what its snapshot held
        # Its next search, on the same thread, does not keep reading the cleared file.
        with pytest.raises(KnowledgebaseError, match="Nothing is indexed"):
            searcher.submit(kb.search, "kiwi mango", mode="keyword").result(10)
