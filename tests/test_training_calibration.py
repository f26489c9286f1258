"""training/calibrate_pipeline.py's collections: written per passage, or per page as a site holds them."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import calibrate_pipeline  # noqa: E402


def rows() -> list[dict]:
    return [{"source": "medquad", "group": "ascher", "passage": "Ascher syndrome shows as swollen eyelids."},
            {"source": "medquad", "group": "ascher", "passage": "Ascher syndrome is treated by surgery."},
            {"source": "medquad", "group": "ascher", "passage": "Ascher syndrome is treated by surgery."},
            {"source": "medquad", "group": "bloom", "passage": "Bloom syndrome is inherited."},
            {"source": "code", "group": "pkg/mod.py", "passage": "parse\ndef parse(text):\n    return text.split()"}]


def test_each_passage_is_a_file_of_its_collection(tmp_path):
    asked = rows()
    calibrate_pipeline.write_collections(asked, tmp_path)
    assert len({row["file"] for row in asked}) == 4
    assert (tmp_path / "docs" / asked[1]["file"]).read_text() == "Ascher syndrome is treated by surgery.\n"
    assert asked[1]["file"] == asked[2]["file"]
    assert (tmp_path / "code" / asked[4]["file"]).read_text() == "def parse(text):\n    return text.split()\n"


def test_with_pages_a_page_holds_its_passages_once_each_in_order(tmp_path):
    asked = rows()
    calibrate_pipeline.write_collections(asked, tmp_path, "-near", pages=True)
    assert asked[0]["file"] == asked[1]["file"] == asked[2]["file"] != asked[3]["file"]
    page = (tmp_path / "docs-near" / asked[0]["file"]).read_text()
    assert page == "Ascher syndrome shows as swollen eyelids.\n\nAscher syndrome is treated by surgery.\n"
    assert sorted(p.name for p in (tmp_path / "docs-near").iterdir()) == sorted({asked[0]["file"], asked[3]["file"]})
    assert asked[4]["file"].endswith(".py")


def test_a_search_shut_by_its_named_setting_never_opens_and_is_counted_by_kind():
    weights = ((12, 0.75),)
    sure = dict(retrieval=[0.9, 0.5], right=[False, False], judged=[0.99, 0.1], confidence=2.0)
    shut = calibrate_pipeline.Asked("docs", "question", False, off_setting=[True, True], **sure)
    named = calibrate_pipeline.Asked("docs", "question", True, off_setting=[False, True],
                                     **(sure | {"right": [True, False]}))
    near = calibrate_pipeline.Asked("docs", "question", False, near=True, **sure)
    assert calibrate_pipeline.block_of(shut, weights)[2] and not calibrate_pipeline.block_of(named, weights)[2]
    row = next(r for r in calibrate_pipeline.gate_table([shut, named, near], 0.75, weights)
               if r["threshold"] == 0.5 and r["veto"] == 0.0)
    assert row["off_topic_opened"] == 0.0 and row["answerable_opened"] == 1.0 and row["near_miss_opened"] == 1.0
    assert calibrate_pipeline.setting_table([shut, named, near], weights) == {
        "answerable": 0, "answerable_right": 0, "off_topic": 1, "near_miss": 0, "named_foreign": 2}


def test_a_confident_search_in_a_field_the_model_never_read_is_not_vetoed():
    weights = ((12, 0.75),)
    searched = dict(retrieval=[0.9, 0.5], right=[True, False], judged=[0.01, 0.02], answerable=True)
    unread = calibrate_pipeline.Asked("docs", "claim", confidence=0.8, unread=True, **searched)
    judged = calibrate_pipeline.Asked("docs", "claim", confidence=0.8, **searched)
    unsure = calibrate_pipeline.Asked("docs", "claim", confidence=0.5, unread=True, **searched)
    row = next(r for r in calibrate_pipeline.gate_table([unread, judged, unsure], 0.75, weights)
               if r["threshold"] == 0.5 and r["veto"] == 0.05)
    assert row["answerable_opened"] == pytest.approx(1 / 3) and row["precision"] == 1.0  # the unread one alone
    assert calibrate_pipeline.unread_table([unread, judged, unsure]) == {"answerable": 2, "off_topic": 0, "near_miss": 0}


def test_the_gate_is_reported_for_each_collection_a_search_was_asked_of():
    weights = ((12, 0.75),)
    found = dict(retrieval=[0.9, 0.5], judged=[0.8, 0.1], confidence=0.5)
    asked = [calibrate_pipeline.Asked("code", "question", True, right=[True, False], **found),
             calibrate_pipeline.Asked("code", "question", True, right=[True, False], **(found | {"judged": [0.2, 0.1]})),
             calibrate_pipeline.Asked("code", "question", False, near=True, right=[False, False], **found),
             calibrate_pipeline.Asked("docs", "question", False, right=[False, False], **found),  # asked of code
             calibrate_pipeline.Asked("docs", "question", True, right=[False, True], **found)]
    table = calibrate_pipeline.collection_gate(asked, 0.75, weights, 0.5, 0.05)
    assert set(table) == {"code", "docs"}
    assert table["code"] == {"answerable_opened": 0.5, "precision": 1.0, "off_topic_opened": 1.0, "near_miss_opened": 1.0,
                             "answerable_searches": 2, "off_topic_searches": 1, "near_miss_searches": 1}
    assert table["docs"]["answerable_opened"] == 1.0 and table["docs"]["precision"] == 0.0


def test_the_blends_tried_reach_as_deep_as_the_engine_judges_and_none_twice():
    assert calibrate_pipeline.by_position(12, 0.75, 0.6, 0.4) == ((3, 0.75), (10, 0.6), (12, 0.4))
    assert calibrate_pipeline.by_position(6, 0.75, 0.6, 0.4) == ((3, 0.75), (6, 0.6))
    for depth in (3, 6, 12):
        blends = calibrate_pipeline.candidate_blends(depth)
        judged = [w for w in blends.values() if w is not None]
        assert all(w[-1][0] == depth for w in judged)
        per_rank = {tuple(calibrate_pipeline.relevance.retrieval_weight(r, w) for r in range(depth)) for w in judged}
        assert len(per_rank) == len(judged)
    assert len(calibrate_pipeline.candidate_blends(6)) < len(calibrate_pipeline.candidate_blends(12))


def test_a_documentation_site_is_asked_its_own_sections_and_other_projects_questions(tmp_path, monkeypatch):
    """A held-out project's pages are written as its sdist holds them; its sections' questions are
    answerable there (the answer: the section's page), other projects' questions are off-topic,
    except one whose heading the site also has (it may be answered there)."""
    body = "The cache keeps every rendered page for ten minutes and drops the oldest entry when it is full again."
    pages = {"guide/cache.md": f"# Guide\n\n## Clearing the cache\n\n{body}\n\n## Configuration\n\n{body}\n"}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in pages.items():
            info = tarfile.TarInfo(f"jupytext-1.0/docs/{name}")
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    (tmp_path / "sdists").mkdir()
    (tmp_path / "sdists" / "jupytext-1.0.tar.gz").write_bytes(buffer.getvalue())
    source = {"project": "jupytext", "version": "1.0", "sdist": "jupytext-1.0.tar.gz",
              "sha256": hashlib.sha256(buffer.getvalue()).hexdigest(), "licence": "MIT"}
    monkeypatch.setattr(calibrate_pipeline.docs_corpus, "sources", lambda: [source])
    monkeypatch.setattr(calibrate_pipeline.docs_pairs, "HELD_OUT", frozenset({"jupytext"}))

    def chunk(project: str, page: str, path: str) -> dict:
        return {"project": project, "page": page, "heading": path, "text": f"## {path.split(' > ')[-1]}\n\n{body}"}

    corpus = tmp_path / "docs_chunks.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as out:
        for one in (chunk("jupytext", "guide/cache.md", "Guide > Clearing the cache"),
                    chunk("jupytext", "guide/cache.md", "Guide > Configuration"),
                    chunk("acme", "setup.md", "Setup > Rotating the logs"),
                    chunk("acme", "setup.md", "Setup > Configuration")):
            out.write(json.dumps(one) + "\n")
    sites = calibrate_pipeline.docs_sites(tmp_path / "collections", corpus, random.Random(1))
    assert (tmp_path / "collections" / "pages-jupytext" / "guide" / "cache.md").read_text() == pages["guide/cache.md"]
    assert [(s["site"], s["file"]) for s in sites] == [("pages-jupytext", "guide/cache.md")] * 2 + [("pages-jupytext", None)]
    assert "clear the cache" in sites[0]["query"] and "rotate the logs" in sites[2]["query"]
    assert calibrate_pipeline.docs_sites(tmp_path / "elsewhere", tmp_path / "missing.jsonl.gz", random.Random(1)) == []


def test_the_gates_bar_opens_the_most_answers_within_both_off_topic_limits_at_the_exports_veto():
    def row(threshold, veto, answerable, off_topic, site_off_topic, precision=0.95):
        return {"threshold": threshold, "veto": veto, "answerable_opened": answerable, "precision": precision,
                "off_topic_opened": off_topic, "site_off_topic_opened": site_off_topic}

    gate = [row(0.4, 0.05, 0.95, 0.005, 0.03),   # a site's off-topic questions open it too often
            row(0.4, 0.15, 0.94, 0.005, 0.01),   # another veto: not the export's
            row(0.5, 0.05, 0.90, 0.005, 0.015),  # within both limits (a site's: the 2%)
            row(0.6, 0.05, 0.85, 0.004, 0.004),
            row(0.45, 0.05, 0.92, 0.012, 0.0),   # another domain's off-topic queries: over half the limit
            row(0.3, 0.05, 0.97, 0.0, 0.0, precision=0.85)]
    assert calibrate_pipeline.chosen_bars(gate, 0.05) == gate[2]
    assert calibrate_pipeline.chosen_bars(gate, 0.15) == gate[1]
    assert calibrate_pipeline.chosen_bars(gate[-2:], 0.05) is None
