"""A question set in a tool or system its collection hardly mentions gets no block (subject.py)."""

from __future__ import annotations

import json

import pytest

from hermes_kb.agent.knowledgebase.context import AutoRetriever
from hermes_kb.agent.knowledgebase.subject import FOREIGN_SHARE, setting_name
from tests.knowledgebase.test_reranker import CountingEngine


@pytest.mark.parametrize(("question", "name"), [
    ("How do I make a column unique in MySQL?", "MySQL"),
    ("How do I convert bytes to a string in Python 3?", "Python"),
    ("How do I free memory in C++?", "C++"),
    ("How do I read a JSON file with Node.js ?", "Node.js"),
    ("How do I set a timeout on an HTTP request in Go?", "Go"),
    ("How do I install it with Windows 10?", "Windows"),
    ("How do I set up replication on Ubuntu?", None),  # where it runs, which its answer seldom names
    ("How do I find duplicates in a list?", None),  # a plain word: often said otherwise by its answer
    ("How do I install Node.js with nvm?", None),  # lower case: a tool's name or an English word
    ("What did Tesla do in 1890?", None),  # a number is not a name
    ("How do I free memory in C++ without leaks?", None),  # the setting must end the question
    ("make a column unique in MySQL", None),  # not a question
])
def test_a_questions_setting_is_the_name_it_ends_on(question, name):
    assert setting_name(question) == name


def test_a_pasted_page_costs_the_setting_nothing():
    """Only the question's tail is read, by a pattern without nested repeats: the first version took
    2.2 s on 8,000 characters of one word after "in" (MAX_QUERY_CHARS)."""
    import time

    started = time.perf_counter()
    for text in ("How do I do it in " + "a" * 8_000 + "!", "in in " * 1_300, "in " + "a " * 4_000 + "?"):
        setting_name(text)
    assert time.perf_counter() - started < 1.0
    assert setting_name("x" * 7_900 + " How do I do this in MySQL?") == "MySQL"


def _manual(tree, extra: dict[str, str]):
    """A small manual of the made-up database Quarry: most pages say its name, the page on unique
    columns does not."""
    pages = {f"topic{n}.md": f"# Topic {n}\n\nQuarry stores table {n} on disk; vacuum reclaims its pages {n}.\n"
             for n in range(80)}
    pages["unique.md"] = ("# Unique constraints\n\nTo make a column unique, add a UNIQUE constraint: "
                          "ALTER TABLE t ADD CONSTRAINT t_key UNIQUE (column).\n")
    return tree(pages | extra)


def _block(kb, question: str):
    kb.rerankers._loaded["local"] = CountingEngine("UNIQUE", identity=f"likes-unique-{question}")
    return AutoRetriever(kb, kb.config).block_for(question)


def test_a_question_set_in_a_name_no_passage_of_its_block_says_gets_no_block(tree, make_kb):
    kb = make_kb(_manual(tree, {}), rerank="local", relevance_threshold=2.0)  # the judgement alone opens it
    kb.index()
    assert _block(kb, "How do I make a column unique?") is not None
    result = kb.search("How do I make a column unique in MySQL?")
    assert result.setting is not None and result.setting.name == "MySQL" and result.setting.foreign
    assert result.hits[0].path == "unique.md" and result.hits[0].rerank_score > 0.9  # judged an answer all the same
    assert _block(kb, "How do I make a column unique in MySQL?") is None
    assert _block(kb, "@kb How do I make a column unique in MySQL?") is not None  # asked for: no setting asked
    (kb.config.directories[0].path / "mysql.md").write_text("# Moving from MySQL\n\nMySQL users keep their keys.\n")
    kb.index()
    result = kb.search("How do I make a column unique in MySQL?", k=4)
    assert result.setting.foreign and [h.path for h in result.hits][:2] == ["unique.md", "mysql.md"]
    block = _block(kb, "How do I make a column unique in MySQL?")  # a passage the block could carry says it
    assert block is not None and block.hits[0].path == "unique.md"


def test_the_collections_own_subject_and_a_name_its_best_passage_says_keep_the_gate_open(tree, make_kb):
    kb = make_kb(_manual(tree, {"zed.md": "# Zed\n\nZed is a client that adds a UNIQUE column in one step.\n"}),
                 rerank="local", relevance_threshold=2.0)
    kb.index()
    own = kb.search("How do I make a column unique in Quarry?").setting
    assert own is not None and own.share > FOREIGN_SHARE and not own.foreign  # in 80 of 82 pages
    block = _block(kb, "How do I make a column unique in Quarry?")
    assert block is not None and block.hits[0].path == "unique.md"  # which never says "Quarry"
    rare = kb.search("How do I make a column unique with Zed?").setting
    assert rare is not None and rare.foreign
    block = _block(kb, "How do I make a column unique with Zed?")
    assert block is not None and block.hits[0].path == "zed.md"


def test_keywords_name_no_setting_and_retrieval_keeps_its_order(tree, make_kb):
    kb = make_kb(_manual(tree, {}))
    kb.index()
    assert kb.search("unique column MySQL").setting is None
    asked = kb.search("How do I make a column unique in MySQL?")
    assert asked.setting is not None and asked.hits[0].path == "unique.md"  # the search itself is unchanged


def test_search_json_and_explain_say_the_setting_and_what_the_hook_makes_of_it(tree, hermes_home, stub_embedder):
    from tests.hermes_cli.test_directory_names import cli

    docs = _manual(tree, {})
    assert cli(hermes_home, stub_embedder, "index", str(docs))[0] == 0
    code, out, _ = cli(hermes_home, stub_embedder, "search", "How do I make a column unique in MySQL?", "--json")
    assert code == 0 and json.loads(out)["setting"] == {"name": "MySQL", "word": "mysql", "share": 0.0, "foreign": True}
    code, _, err = cli(hermes_home, stub_embedder, "search", "How do I make a column unique in MySQL?", "--explain")
    assert code == 0 and "set in MySQL: 0.00% of passages say 'mysql'" in err and "injects nothing" in err
    _, out, _ = cli(hermes_home, stub_embedder, "search", "How do I vacuum a table in Quarry?", "--json")
    assert json.loads(out)["setting"]["foreign"] is False
    _, out, _ = cli(hermes_home, stub_embedder, "search", "unique column", "--json")
    assert json.loads(out)["setting"] is None
