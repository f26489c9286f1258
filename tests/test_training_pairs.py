"""The relevance model's training pairs (training/pairs.py): stage 3's third negative is the answer to
the most similar question about another page, the right kind of answer about another thing."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("scipy")  # pairs.bm25_top's sparse products; training's own dependency
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import pairs  # noqa: E402

CONDITIONS = ["Ascher", "Bloom", "Cohen", "Dubin", "Eagle", "Fraser", "Gorlin", "Hunter", "Imerslund",
              "Jacobsen", "Kabuki", "Laron"]


def syndrome_rows() -> tuple[list[dict], list[str], list[int]]:
    """One page (group) per syndrome with two questions; only Ascher's and Bloom's first questions are
    worded alike, every other question names its own syndrome's own treatment."""
    rows, passages = [], []
    for name in CONDITIONS:
        passages += [f"{name} syndrome first shows as {name.lower()}ia of the eyelids in children.",
                     f"{name} syndrome is treated with {name.lower()}ol."]
        if name in ("Ascher", "Bloom"):
            first = f"What are the early symptoms of {name} syndrome in children?"
        else:
            first = f"Which sign does {name} syndrome show first?"
        rows += [{"query": first, "group": name}, {"query": f"How is {name} syndrome treated?", "group": name}]
    return rows, passages, list(range(len(passages)))


def test_the_third_negative_answers_the_most_similar_question_about_another_page():
    rows, passages, passage_of = syndrome_rows()
    top = pairs.bm25_top([r["query"] for r in rows], passages, k=6)
    made = pairs.triples(rows, passages, passage_of, top, random.Random(3), akin=True)
    by_query = {t[0]: t for t in made}
    ascher = by_query["What are the early symptoms of Ascher syndrome in children?"]
    assert len(ascher) == 5
    assert ascher[1] == passages[0]
    assert ascher[4] == passages[2], "Bloom's early signs: the answer to the question worded most alike"
    for query, positive, *negatives in made:
        group = next(r["group"] for r in rows if r["query"] == query)
        akin = negatives[-1]
        assert akin != positive and not akin.startswith(group), "the third negative is about another syndrome"


def test_stages_one_and_two_keep_two_negatives():
    rows, passages, passage_of = syndrome_rows()
    top = pairs.bm25_top([r["query"] for r in rows], passages, k=6)
    made = pairs.triples(rows, passages, passage_of, top, random.Random(3))
    assert made and all(len(t) == 4 for t in made)
    assert all(t[1] == passages[passage_of[i]] for i, t in enumerate(made))
