"""training/judge_vocabulary.py: the words the relevance model read, as the product reads them back."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import judge_vocabulary  # noqa: E402
import pairs  # noqa: E402

from hermes_kb.agent.knowledgebase import reranker  # noqa: E402


def write_source(folder: Path, name: str, rows: list[dict]) -> None:
    with gzip.open(folder / f"{name}.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def test_the_words_of_the_training_pages_are_counted_and_the_held_out_pages_are_not(tmp_path, monkeypatch):
    articles = [{"query": f"Who built bridge {n}?", "positive": f"Monks built bridge {n} over the river.",
                 "source": "squad_v1.1_train", "id": f"q{n}", "title": f"Article{n:03d}"} for n in range(80)]
    articles += [{"query": "What does Zyxolimab treat?", "positive": "Zyxolimab treats nothing at all.",
                  "source": "squad_v1.1_train", "id": f"z{n}", "title": "Zyxolimab"} for n in range(3)]
    write_source(tmp_path, "squad_v1.1_train", articles)
    for source in set(pairs.SOURCES) - {"squad_v1.1_train"}:
        write_source(tmp_path, source, [])
    monkeypatch.setattr(pairs, "code_rows", lambda: ([{"query": "Parse the flags.", "positive": "def parse_flags(argv):\n    return argv"}], []))
    seed = next(seed for seed in range(1000) if "squad:Zyxolimab" in pairs.split_pairs(tmp_path, random.Random(seed))[1])
    held = pairs.split_pairs(tmp_path, random.Random(seed))[1]
    counts = judge_vocabulary.read_words(tmp_path, seed)
    assert counts["monks"] == 80 - sum(1 for g in held if g.startswith("squad:Article"))
    assert "zyxolimab" not in counts  # its article held out: words the model never trained on
    # the functions stage 2 reads, their words as the product takes them (an identifier is a name, not a word)
    assert counts["flags"] == 1 and counts["argv"] == 1 and "parse_flags" not in counts


def test_a_documentation_stage_adds_the_training_projects_sections_and_not_the_held_out_ones(tmp_path, monkeypatch):
    for source in pairs.SOURCES:
        write_source(tmp_path, source, [])
    monkeypatch.setattr(pairs, "code_rows", lambda: ([], []))
    body = "The {} keeps every rendered page for ten minutes and drops the oldest entry when it is full."
    corpus = tmp_path / "docs.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        for project, word in (("acme", "memcache"), ("jupytext", "notebookcache")):
            handle.write(json.dumps({"project": project, "page": "cache.md", "heading": "Caching > Expiring",
                                     "text": f"## Expiring\n\n{body.format(word)}"}) + "\n")
    assert judge_vocabulary.read_words(tmp_path, 13)["memcache"] == 0
    counts = judge_vocabulary.read_words(tmp_path, 13, corpus)
    assert counts["memcache"] == 1 and counts["expiring"] == 2 and "notebookcache" not in counts


def test_the_vocabulary_keeps_words_read_often_enough_and_the_product_reads_it_back(tmp_path):
    (tmp_path / "card.json").write_text(json.dumps({"name": "judge", "version": "1"}))
    counts = {"archive": 5, "gzipped": 3, "zyxolimab": 2}
    assert judge_vocabulary.write(tmp_path, counts) == {"words": 2, "min_count": 3}
    first = (tmp_path / reranker.VOCABULARY).read_bytes()
    judge_vocabulary.write(tmp_path, counts)
    assert (tmp_path / reranker.VOCABULARY).read_bytes() == first  # the same words, the same bytes
    assert reranker._vocabulary(tmp_path / reranker.VOCABULARY) == {"archive", "gzipped"}
    assert json.loads((tmp_path / "card.json").read_text())["vocabulary"]["words"] == 2
