import numpy as np
import pytest

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.embeddings import EmbeddingError, create_embedder, pip_model_dir
from hermes_kb.agent.knowledgebase.service import KnowledgeBase

from ..helpers_http import RecordingServer


def fake_vectors(texts):
    return [[float(len(t)), 1.0, 0.0, 2.0] for t in texts]


ROUTES = {
    "/v1/embeddings": lambda body: (200, {"data": [{"index": i, "embedding": v} for i, v in enumerate(fake_vectors(body["input"]))][::-1]}),
    "/api/embed": lambda body: (200, {"embeddings": fake_vectors(body["input"])}),
}


def test_openai_backend_over_http(monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sk-test")
    with RecordingServer(ROUTES) as server:
        config = parse_knowledgebase({"embedding_model": {"backend": "openai", "model": "emb-small",
                                                          "base_url": server.url + "/v1", "api_key_env": "TEST_KEY",
                                                          "batch_size": 2}}).embedding
        embedder = create_embedder(config, None)
        vectors = embedder.embed_documents(["a", "bbb", "cc"])
    assert embedder.identity.dim == 4 and embedder.sends_text_off_machine
    assert vectors.shape == (3, 4) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.array(fake_vectors(["bbb"])[0]) / np.linalg.norm(fake_vectors(["bbb"])[0])
    assert np.allclose(vectors[1], expected)  # order restored from the `index` field
    paths = [p for p, _, _ in server.requests]
    assert paths == ["/v1/embeddings"] * 3  # probe + two batches of at most 2
    assert server.requests[1][1]["Authorization"] == "Bearer sk-test"
    assert server.requests[1][2] == {"model": "emb-small", "input": ["a", "bbb"]}


def test_ollama_backend_indexes_and_warns_once(tree, hermes_home):
    with RecordingServer(ROUTES) as server:
        root = tree({"a.md": "alpha text", "b.md": "beta words here"})
        config = parse_knowledgebase({"directories": [str(root)],
                                      "embedding_model": {"backend": "ollama", "model": "all-minilm", "base_url": server.url}})
        kb = KnowledgeBase(config, hermes_home)
        notes = []

        class Recorder:
            def start(self, *a): pass
            def advance(self, **k): pass
            def note(self, text): notes.append(text)
            def finish(self): pass

        summary = kb.index(progress=Recorder)[0]
        assert summary.chunks_embedded == 2
        assert any("sends the text of every indexed file" in n for n in notes)
        (root / "c.md").write_text("gamma")
        notes.clear()
        kb.index(progress=Recorder)
        assert notes == []
        assert kb.status()[0]["model"] == "all-minilm (ollama, 4d)"


def test_http_failure_is_one_clear_error():
    with RecordingServer({}) as server:
        config = parse_knowledgebase({"embedding_model": {"backend": "ollama", "base_url": server.url}}).embedding
        with pytest.raises(EmbeddingError, match="ollama embedding service .* failed"):
            create_embedder(config, None)


def test_openai_without_key_says_which_variable(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    config = parse_knowledgebase({"embedding_model": {"backend": "openai", "api_key_env": "NO_SUCH_KEY"}}).embedding
    with pytest.raises(EmbeddingError, match=r"\$NO_SUCH_KEY"):
        create_embedder(config, None)


def test_pip_model_folder_is_built_once_and_verified(hermes_home):
    folder = pip_model_dir(hermes_home)
    assert folder is not None
    assert {p.name for p in folder.iterdir()} >= {"model.onnx", "tokenizer.json", "tokenizer_config.json", "verified.json"}
    marker = (folder / "verified.json").stat().st_mtime_ns
    assert pip_model_dir(hermes_home) == folder
    assert (folder / "verified.json").stat().st_mtime_ns == marker
