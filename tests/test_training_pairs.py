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


def test_a_lexical_trap_comes_from_another_domain_and_shares_the_query_words():
    """Stage 4's negative: what the query meets when asked of a collection that cannot answer it. Its
    own domain's passages never qualify, however well they match (a Natural Questions question may be
    answered by a SQuAD paragraph: both are Wikipedia); the best match elsewhere does."""
    rows = [{"query": "What is the time complexity of quicksort?", "source": "nq_qed_train", "group": "sorting",
             "positive": "Quicksort takes n log n time on average and n squared at worst."},
            {"query": "Who invented quicksort and when was its time complexity proved?", "source": "squad_v1.1_train",
             "group": "hoare", "positive": "Tony Hoare invented quicksort in 1959; its time complexity was proved later."},
            {"query": "How do I read a query plan?", "source": "tldr_pages", "group": "explain",
             "positive": "EXPLAIN prints the plan: Sort Method: quicksort  Memory: 25kB."},
            {"query": "Which wine goes with fish?", "source": "medquad", "group": "wine",
             "positive": "A dry white wine goes with most fish."}]
    texts = [r["positive"] for r in rows]
    domains = [pairs.DOMAINS[r["source"]] for r in rows]
    found = pairs.foreign_top(rows, rows, texts, k=1)
    assert found[0] == [2], "the manual's quicksort, not the Wikipedia paragraph that answers it too"
    assert all(domains[p] != domains[i] for i, hits in enumerate(found) for p in hits)
    text_traps, code_traps = pairs.lexical_traps(rows, [])
    assert code_traps == [] and text_traps[0][0] == texts[2]
    top = pairs.bm25_top([r["query"] for r in rows], texts, k=2)
    made = pairs.triples(rows, texts, [0, 1, 2, 3], top, random.Random(1), traps=text_traps)
    quicksort = next(t for t in made if t[0] == rows[0]["query"])
    assert len(quicksort) == 5 and quicksort[-1] in (texts[2], texts[3]) and texts[1] not in quicksort[3:]


def test_a_swapped_subject_names_another_group_s_subject_that_the_passage_never_names():
    """Stage 4's swapped queries: what the question names replaced by another page's subject of the same
    source, in the case it was written; rows without a subject (code) get none."""
    rows = [{"query": f"What are the symptoms of {name} syndrome ?", "source": "medquad", "group": name,
             "positive": f"{name} syndrome shows as {name.lower()}ia of the eyelids."} for name in CONDITIONS[:4]]
    rows += [{"query": "tar: Create a gzipped archive", "source": "tldr_pages", "group": "tldr:common/tar",
              "positive": "tar (common): Archiving utility.\nExample command:\ntar czf target.tar.gz file"},
             {"query": "zip: Add files to an archive", "source": "tldr_pages", "group": "tldr:common/zip",
              "positive": "zip (common): Package and compress files.\nExample command:\nzip -r archive.zip folder"},
             {"query": "who wrote the song hey jude", "source": "nq_qed_train", "group": "nq:Hey Jude", "title": "Hey Jude",
              "positive": "Hey Jude is a song by the Beatles, written by Paul McCartney."},
             {"query": "when did the battle of hastings happen", "source": "nq_qed_train", "group": "nq:Battle of Hastings",
              "title": "Battle of Hastings", "positive": "The Battle of Hastings was fought on 14 October 1066."},
             {"query": "Open a file for reading.", "source": "code", "group": "m", "positive": "def open_file(path): ..."}]
    assert [pairs.subject_of(r) for r in rows] == ["Ascher", "Bloom", "Cohen", "Dubin", "tar", "zip", "Hey Jude",
                                                    "Battle of Hastings", None]
    others = pairs.swapped_subjects(rows, random.Random(2))
    swapped = [pairs.swap_subject(r["query"], swap) for r, swap in zip(rows, others)]
    assert swapped[4] == "zip: Create a gzipped archive" and swapped[5] == "tar: Add files to an archive"
    assert swapped[6] == "who wrote the song battle of hastings", "lower case where the question was"
    assert swapped[8] is None
    for row, query, (subject, other) in zip(rows[:4], swapped, others):
        assert subject == row["group"] and other in CONDITIONS and other != row["group"]
        assert query == row["query"].replace(row["group"], other)
    assert pairs.swap_subject("Hyderabadi is a kind of what language?", ("Hyderabad", "Senate")) is None, "whole words only"
    top = pairs.bm25_top([r["query"] for r in rows], [r["positive"] for r in rows], k=3)
    made = pairs.triples(rows, [r["positive"] for r in rows], list(range(len(rows))), top, random.Random(1),
                         swaps=swapped)
    assert all(len(t) == 5 for t in made) and {t[-1] for t in made if t[0].startswith("tar:")} == {swapped[4]}
    assert {t[-1] for t in made if t[0].startswith("Open")} == {""}


def test_a_task_is_asked_as_a_how_to_question_with_its_command_named():
    rng = random.Random(5)
    tldr = {"query": "pueue: Kill a task", "source": "tldr_pages", "group": "pueue"}
    asked = {pairs.how_to(tldr, rng) for _ in range(30)}
    assert asked == {"How do I kill a task with pueue?", "How can I kill a task using pueue?",
                     "pueue: how do I kill a task?"}
    code = {"query": "Returns the parameters serialized as bytes", "source": "code", "group": "cryptography/x.py"}
    assert {pairs.how_to(code, rng) for _ in range(30)} == {"How do I return the parameters serialized as bytes?",
                                                             "How does cryptography return the parameters serialized as bytes?"}


def test_a_query_that_is_not_a_task_has_no_how_to_form():
    rng = random.Random(5)
    assert pairs.how_to({"query": "The RSAPublicKey of this key", "source": "code", "group": "c/x.py"}, rng) is None
    assert pairs.how_to({"query": "%: The job number in front", "source": "tldr_pages", "group": "%"}, rng) is None
    assert pairs.how_to({"query": "Who wrote Hamlet?", "source": "squad_v1.1_train", "group": "h"}, rng) is None
    assert pairs.task_verb("Parses") == "parse" and pairs.task_verb("Copies") == "copy" and pairs.task_verb("Bus") is None
    row = {"query": "Who wrote Hamlet?", "source": "squad_v1.1_train", "group": "h", "answer": "Shakespeare"}
    assert {pairs.query_form(row, random.Random(i), how_to_share=1.0) for i in range(40)} <= {
        "Who wrote Hamlet?", "Shakespeare wrote Hamlet", "wrote hamlet"}


def test_a_headed_tuple_shows_each_passage_under_its_own_title_and_the_others_none():
    rows = [{"source": "squad_v1.1_train", "title": "Ascher_syndrome"}, {"source": "nq_qed_train", "title": "Bloom syndrome"},
            {"source": "tldr_pages", "title": "tar"}, {"source": "medquad"}]
    assert [pairs.page_title(r) for r in rows] == ["Ascher syndrome", "Bloom syndrome", None, None]
    titles = {"ascher text": "Ascher syndrome", "bloom text": "Bloom syndrome"}
    data = [(f"q{i}", "ascher text", "bloom text", "untitled text", "a swapped query") for i in range(400)]
    made = pairs.headed(data, titles, random.Random(5), 0.5, listed=3)
    assert [t[0] for t in made] == [t[0] for t in data]
    shown = [t for t, plain in zip(made, data) if t != plain]
    assert 150 < len(shown) < 250, "about half the tuples are headed"
    for t in shown:
        assert t[1:4] == ("Ascher syndrome\nascher text", "Bloom syndrome\nbloom text", "untitled text")
        assert t[4] == "a swapped query", "what follows the passages is left as it was"


def test_a_chunk_shaped_tuple_keeps_each_passage_whole_among_its_own_pages_words_never_the_answers():
    answer, negative, far = "the answer paragraph", "another paragraph of the same article", "a paragraph elsewhere"
    long_one = " ".join(["word"] * (pairs.ROOM_WORDS + 1))
    groups = {answer: [negative, "a neighbour of the answer"], negative: [answer, "a neighbour of the negative"],
              far: ["a neighbour far away"], long_one: ["never beside a long passage"]}
    titles = {answer: "Ascher syndrome", negative: "Ascher syndrome"}
    data = [(f"q{i}", answer, negative, far, long_one, "a swapped query") for i in range(400)]
    made = pairs.chunk_shaped(data, groups, titles, random.Random(7), 0.5, listed=4)
    shaped = [(t, plain) for t, plain in zip(made, data) if t != plain]
    assert 150 < len(shaped) < 250, "about half the tuples are shaped"
    beside = set()
    for t, plain in shaped:
        assert t[0] == plain[0] and t[5] == "a swapped query", "the query and what follows the passages stay"
        assert t[1].startswith("Ascher syndrome\n") and t[2].startswith("Ascher syndrome\n"), "a titled page's heading path"
        for original, shown in zip((answer, negative, far, long_one), t[1:5]):
            assert original in shown, "nothing is cut from the passage"
        assert t[2].count(answer) == 0, "a negative never borrows the answer's words"
        assert t[4] == long_one, "a long passage keeps the window to itself"
        for position, neighbour in ((1, "a neighbour of the answer"), (2, "a neighbour of the negative"), (3, "a neighbour far away")):
            assert all(neighbour not in t[other] for other in range(1, 5) if other != position), "only beside its own page"
            beside.update([neighbour] if neighbour in t[position] else [])
    assert len(beside) == 3, "fragments come from each passage's own page"
