"""Queries the agent writes: typed searches fused into one list (typed_search.py, KnowledgeBase.search)."""

from __future__ import annotations

import pytest

from hermes_kb.agent.knowledgebase.service import KnowledgebaseError
from hermes_kb.agent.knowledgebase.typed_search import fuse, judged_query, parse
from hermes_kb.agent.knowledgebase.retriever import SearchResult

NOTES = {
    "deploy.md": "# Deploy\n\nProduction deploys use the blue-green switch on port 4271.\n",
    "errors.md": "# Errors\n\nECONNRESET during upload means the proxy dropped the connection; retry with backoff.\n",
    "garden.md": "# Garden\n\nBeans climb the trellis in June; water them at dawn.\n",
    "fox.md": "# Fox\n\nThe quick brown fox jumps over the lazy dog.\n",
}


def keys(result):
    return [(hit.path, hit.start_line, round(hit.score, 4)) for hit in result.hits]


@pytest.fixture
def kb(tree, make_kb):
    kb = make_kb(tree(NOTES))
    kb.index()
    return kb


def test_one_lex_search_is_keyword_mode_and_one_vec_search_is_vector_mode(kb):
    assert keys(kb.search([{"type": "lex", "query": "ECONNRESET retry"}], k=3)) == \
        keys(kb.search("ECONNRESET retry", k=3, mode="keyword"))
    assert keys(kb.search([{"type": "vec", "query": "why do uploads fail"}], k=3)) == \
        keys(kb.search("why do uploads fail", k=3, mode="vector"))
    assert keys(kb.search([{"type": "hyde", "query": "Beans climb the trellis in June."}], k=2)) == \
        keys(kb.search("Beans climb the trellis in June.", k=2, mode="vector"))


def test_variants_are_fused_each_passage_once_and_agreement_ranks_first(kb):
    result = kb.search([{"type": "lex", "query": "4271"}, {"type": "vec", "query": "blue-green production deploys"},
                        {"type": "hyde", "query": "Production deploys use the blue-green switch."}], k=3,
                       intent="how do we deploy to production")
    paths = [hit.path for hit in result.hits]
    assert paths[0] == "deploy.md" and len(paths) == len(set(paths)) <= 3
    assert {"keyword", "vector"} <= set(result.hits[0].found_by)
    assert 0 < result.hits[-1].score <= result.hits[0].score <= 1


def test_a_list_that_cannot_be_searched_is_one_sentence(kb):
    for searches, sentence in (([], "non-empty list"), ([{"type": "sql", "query": "x"}], "type is one of lex, vec, hyde"),
                               ([{"type": "lex"}], "needs a query"), ([{"type": "lex", "query": "x", "k": 3}], "exactly a type"),
                               ([{"type": "lex", "query": "x"}] * 9, "At most 8"), (["lex: x"], "exactly a type")):
        with pytest.raises(KnowledgebaseError, match=sentence):
            kb.search(searches)


def test_fusion_ranks_by_reciprocal_rank_and_the_judge_reads_the_intent():
    assert judged_query(parse([{"type": "lex", "query": "a b"}, {"type": "vec", "query": "why"}], 100), None) == "why"
    assert judged_query(parse([{"type": "lex", "query": "a b"}], 100), "the intent") == "the intent"
    assert fuse([SearchResult(), SearchResult()], 5).hits == []
