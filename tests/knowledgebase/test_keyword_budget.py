import pytest

from hermes_kb.agent.knowledgebase.index import store as store_module
from hermes_kb.agent.knowledgebase.chunker import Chunk
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.index.store_keywords import affordable_terms
from hermes_kb.agent.knowledgebase.index.store import IndexStore


def fill(store: IndexStore, texts: list[str], per_file: int = 100) -> None:
    for begin in range(0, len(texts), per_file):
        chunks = [Chunk(t, 0, len(t), i + 1, i + 1, None, "") for i, t in enumerate(texts[begin:begin + per_file])]
        store.write_file(f"f{begin}.txt", 1, 1, f"h{begin}", "text", chunks, None)


def test_document_frequencies_are_exact_on_a_small_index(tmp_path):
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, ["common kiwi", "common mango", "common", "rare"])
        assert store.document_frequencies(["common", "kiwi", "absent"]) == [3, 1, 0]
        assert store.document_frequencies(["kiwis"]) == [1]  # stemmed as FTS5 stores it


def test_document_frequencies_are_estimated_from_windows_on_a_large_index(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "DF_SAMPLE_ROWS", 100)
    texts = [f"row {i} every {'tenth' if i % 10 == 0 else 'other'}" for i in range(4000)]
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, texts)
        every, tenth = store.document_frequencies(["every", "tenth"])
    assert every == pytest.approx(4000, rel=0.01)
    assert tenth == pytest.approx(400, rel=0.15)


def test_over_budget_the_commonest_words_go_first_and_the_rarest_always_stays(tmp_path):
    with IndexStore(tmp_path / "i.sqlite") as store:
        fill(store, ["alpha beta gamma"] * 50 + ["alpha beta"] * 30 + ["alpha"] * 20)
        terms = ["alpha", "beta", "gamma"]  # 100, 80, 50 rows
        assert affordable_terms(store, terms, None) == terms
        assert affordable_terms(store, terms, 1000) == terms
        assert affordable_terms(store, terms, 130) == ["beta", "gamma"]  # query order kept
        assert affordable_terms(store, terms, 10) == ["gamma"]
        assert affordable_terms(store, ["alpha"], 10) == ["alpha"]


def test_budget_keeps_the_rare_word_that_finds_the_answer(tmp_path, make_kb):
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(60):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nproject status meeting notes number {i}\n")
    (root / "answer.md").write_text("# Deploy\n\nproject status: the zanzibar cluster deploys on Fridays\n")
    kb = make_kb(root, keyword_row_budget=100)
    kb.index()
    hits = kb.search("project status zanzibar", mode="keyword").hits
    assert hits[0].path == "answer.md"


def test_budget_setting_is_validated():
    assert parse_knowledgebase({"keyword_row_budget": None}).keyword_row_budget is None
    assert parse_knowledgebase({}).keyword_row_budget == 5000
    bad = parse_knowledgebase({"keyword_row_budget": 5})  # a tuning number: warned about, its default kept
    assert bad.keyword_row_budget == 5000 and "keyword_row_budget" in bad.warnings[0]
