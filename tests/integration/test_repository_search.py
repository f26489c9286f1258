"""The real default model over this repository: identifiers and paraphrases."""

from pathlib import Path

import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.service import KnowledgeBase

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repo_kb(real_embedder, tmp_path_factory):
    home = tmp_path_factory.mktemp("repo-home")
    # tests/ is left out: these very queries are written in it and would match themselves.
    section = {"directories": [{"path": str(REPO), "name": "repo", "exclude": ["tests/"]}]}
    kb = KnowledgeBase(parse_knowledgebase(section), home,
                       embedder_factory=lambda: real_embedder)
    summary = kb.index()[0]
    assert summary.added > 20 and summary.chunks_embedded > 100
    return kb


def test_real_model_vectors_are_unit_length_and_pinned(real_embedder):
    vectors = real_embedder.embed_documents(["a short text", "another, somewhat longer text about sqlite indexes"])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert real_embedder.identity.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert real_embedder.identity.variant == "onnx-int8"


@pytest.mark.parametrize("identifier, definition", [
    ("writer_lock", "def writer_lock("),
    ("chunker_signature", "def chunker_signature("),
    ("IgnoreRules", "class IgnoreRules"),
])
def test_exact_identifier_returns_its_definition_first(repo_kb, identifier, definition):
    hits = repo_kb.search(identifier, k=5).hits
    assert definition in hits[0].text, [(h.path, h.start_line) for h in hits]


@pytest.mark.parametrize("paraphrase, path, heading", [
    ("what happens to my searches when I switch to a different embedding model",
     "docs/user-guide.md", "Changing the embedding model"),
    ("what file types does it index and which does it skip", "docs/user-guide.md", "What gets indexed"),
    ("how are sentences and paragraphs cut into pieces for the model", "docs/architecture.md", "Chunking"),
])
def test_paraphrase_of_a_docs_section_is_in_top_three(repo_kb, paraphrase, path, heading):
    hits = repo_kb.search(paraphrase, k=3).hits
    assert any(h.path == path and heading in h.heading for h in hits), [(h.path, h.heading) for h in hits]
