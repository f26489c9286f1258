import json
from pathlib import Path

import pytest

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.evaluation import EvaluationError, evaluate

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "eval" / "scifact"


def write_beir(root: Path) -> Path:
    docs = {"d1": ("Volcano", "Lava flows from the volcano crater."), "d2": ("Ocean", "Whales migrate across the ocean."),
            "d3": ("Forest", "Moss grows on the north side of trees."), "d/4": ("Desert", "Cacti store water in dry deserts.")}
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": k, "title": t, "text": x}) for k, (t, x) in docs.items()))
    queries = {"q1": "where does lava come from", "q2": "whales migration", "q3": "how do cacti survive dry deserts"}
    (root / "queries.jsonl").write_text("\n".join(json.dumps({"_id": k, "text": v}) for k, v in queries.items()))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td/4\t1\n")
    return root


def test_harness_on_a_tiny_dataset(tmp_path, hermes_home, stub_embedder):
    dataset = write_beir(tmp_path / "tiny")
    report = evaluate(dataset, parse_knowledgebase({}), hermes_home, embedder_factory=lambda: stub_embedder)
    assert (report.queries, report.documents, report.chunks) == (3, 4, 4)
    keyword = report.systems[0]
    assert keyword.name == "keyword" and keyword.metrics["recall@10"] == 1.0
    assert {s.name for s in report.systems} == {"keyword", "vector", "hybrid (weighted)", "hybrid (rrf)", "hybrid + rerank"}
    assert all(0.0 <= s.metrics["ndcg@10"] <= 1.0 for s in report.systems)
    again = evaluate(dataset, parse_knowledgebase({}), hermes_home, embedder_factory=lambda: stub_embedder)
    assert again.chunks_embedded == 0  # cached index: a tuning loop does not re-embed


def test_a_folder_indexed_by_path_in_the_same_home_stays_out_of_the_runs(tmp_path, hermes_home, stub_embedder, make_kb, tree):
    dataset = write_beir(tmp_path / "tiny")
    clean = evaluate(dataset, parse_knowledgebase({}), hermes_home, embedder_factory=lambda: stub_embedder)
    words = "where does lava come from whales migration how do cacti survive dry deserts"
    decoy = tree({f"decoy{i}.md": words for i in range(320)}, root=tmp_path / "decoy")  # would fill every ranking
    make_kb().index(str(decoy))  # indexed by path: known to this home from now on
    report = evaluate(dataset, parse_knowledgebase({}), hermes_home, embedder_factory=lambda: stub_embedder)
    assert [s.metrics for s in report.systems] == [s.metrics for s in clean.systems]
    assert report.chunks == clean.chunks


def test_missing_files_are_one_clear_error(tmp_path, hermes_home):
    with pytest.raises(EvaluationError, match="not a BEIR dataset folder"):
        evaluate(tmp_path, parse_knowledgebase({}), hermes_home)


@pytest.mark.integration
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/eval/scifact is not beside the repository")
def test_scifact_smoke_run_through_the_cli(hermes_home):
    import os
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", "eval", str(SCIFACT), "--limit", "5", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
                            env={**os.environ, "HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["queries"] == 5 and report["documents"] == 100
    systems = {s["name"]: s for s in report["systems"]}
    assert systems["hybrid (weighted)"]["ndcg@10"] > 0.5 and systems["keyword"]["recall@100"] > 0.5


def test_a_duplicate_document_counts_where_the_search_shows_it(tmp_path, hermes_home, stub_embedder):
    """A document word for word the same as another is one hit naming both (Hit.also_in); the
    evaluation ranks both there, so a relevant copy is not lost for being the one not kept."""
    dataset = write_beir(tmp_path / "tiny")
    corpus = dataset / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + "\n" + json.dumps({"_id": "d5", "title": "Volcano", "text": "Lava flows from the volcano crater."}))
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td5\t1\nq2\td2\t1\nq3\td/4\t1\n")
    report = evaluate(dataset, parse_knowledgebase({}), hermes_home, embedder_factory=lambda: stub_embedder)
    assert all(s.metrics["recall@10"] == 1.0 for s in report.systems if s.name == "keyword")
    ranked = report.systems[0].runs["q1"]
    assert {"d1", "d5"} <= set(ranked) and sorted(ranked.values(), reverse=True)[:2] == sorted((ranked["d1"], ranked["d5"]), reverse=True)
