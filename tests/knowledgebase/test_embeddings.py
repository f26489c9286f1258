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


RUNTIME_TEXTS = ["", "a", "Vitamin D and bone density in older adults.", "résumé naïve Zürich 東京 ✓",
                 "def parse(path):\n    return open(path).read()\n" * 3, "word " * 400]  # the last is truncated at 256


@pytest.mark.integration
@pytest.mark.parametrize("precision", ["default", "f32"])  # f32: what a CPU without bf16 units runs
def test_openvino_and_onnxruntime_give_the_same_vectors(real_embedder, hermes_home, monkeypatch, precision):
    """The default runs on OpenVINO; its vectors must match onnxruntime's so indexes need no re-embed."""
    pytest.importorskip("openvino")  # not installed by default on Linux aarch64
    from hermes_kb.agent.knowledgebase import openvino_runtime
    from hermes_kb.agent.knowledgebase.config import EmbeddingConfig

    ours = real_embedder
    if precision == "f32":
        monkeypatch.setitem(openvino_runtime.COMPILE_SETTINGS, "INFERENCE_PRECISION_HINT", "f32")
        ours = create_embedder(EmbeddingConfig(), hermes_home)
        assert ours.runtime == "openvino (f32)"
    onnxruntime = create_embedder(EmbeddingConfig(runtime="onnxruntime"), hermes_home)
    assert ours.runtime.startswith("openvino") and onnxruntime.runtime == "onnxruntime"
    assert ours.identity == onnxruntime.identity
    mine, theirs = ours.embed_documents(RUNTIME_TEXTS), onnxruntime.embed_documents(RUNTIME_TEXTS)
    assert mine.shape == theirs.shape == (len(RUNTIME_TEXTS), 384)
    assert (mine * theirs).sum(axis=1).min() >= 0.999
    assert np.allclose(np.linalg.norm(mine, axis=1), 1, atol=1e-5)


@pytest.mark.integration
def test_openvino_embeds_from_two_threads_at_once(real_embedder):
    """A query can arrive while an index run embeds: one shared infer request must not mix them up."""
    pytest.importorskip("openvino")
    from concurrent.futures import ThreadPoolExecutor

    alone = [real_embedder.embed_documents([t] * 6) for t in RUNTIME_TEXTS[2:5]]
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda t: real_embedder.embed_documents([t] * 6), RUNTIME_TEXTS[2:5] * 4))
    for i, vectors in enumerate(together):
        assert np.allclose(vectors, alone[i % 3], atol=1e-5)


@pytest.mark.integration
def test_an_index_runs_batches_over_openvino_streams_with_each_vector_in_its_place(real_embedder):
    """An index run's batches go through OpenVINO's THROUGHPUT streams, finishing out of order; each
    text must still get its own vector, the one a query of that text gets on the latency path."""
    pytest.importorskip("openvino")
    texts = [f"{n} {text}" for n, text in enumerate(RUNTIME_TEXTS * 3)]  # distinct, 5 batches of 4
    alone = np.stack([real_embedder.embed_query(text) for text in texts])
    for together in real_embedder.embed_documents(texts), real_embedder.embed_documents_leaving_a_core(texts):
        assert (together * alone).sum(axis=1).min() >= 0.9999
        assert (together @ alone.T).argmax(axis=1).tolist() == list(range(len(texts)))


@pytest.mark.integration
def test_openvino_keeps_its_compiled_model_and_survives_a_damaged_or_unwritable_cache(tmp_path):
    """The compiled model is kept under HERMES_HOME (a cold hybrid search loads it instead of compiling);
    a damaged blob or a cache that cannot be made still gives the same vectors."""
    pytest.importorskip("openvino")
    from hermes_kb.agent.knowledgebase.config import EmbeddingConfig

    home = tmp_path / "home"
    first = create_embedder(EmbeddingConfig(), home).embed_documents(RUNTIME_TEXTS)
    cache = home / "knowledgebase" / "models" / "openvino-cache"
    blobs = list(cache.iterdir())
    assert blobs and sum(b.stat().st_size for b in blobs) > 1_000_000
    assert np.allclose(create_embedder(EmbeddingConfig(), home).embed_documents(RUNTIME_TEXTS), first, atol=1e-6)
    for blob in blobs:
        blob.write_bytes(b"\0garbage" * 100)
    assert np.allclose(create_embedder(EmbeddingConfig(), home).embed_documents(RUNTIME_TEXTS), first, atol=1e-6)
    for blob in cache.iterdir():
        blob.unlink()
    cache.rmdir()
    cache.write_text("not a folder")
    embedder = create_embedder(EmbeddingConfig(), home)
    assert embedder.runtime.startswith("openvino")
    assert np.allclose(embedder.embed_documents(RUNTIME_TEXTS), first, atol=1e-6)


def test_openvino_failure_falls_back_to_onnxruntime_or_says_why(hermes_home, monkeypatch, caplog):
    from hermes_kb.agent.knowledgebase import openvino_runtime
    from hermes_kb.agent.knowledgebase.config import EmbeddingConfig

    def broken(*_):
        raise RuntimeError("no CPU plugin")

    monkeypatch.setattr(openvino_runtime, "OpenVinoMeanPooled", broken)
    embedder = create_embedder(EmbeddingConfig(), hermes_home)
    assert embedder.runtime == "onnxruntime" and embedder.embed_query("x").shape == (384,)
    assert "OpenVINO could not load the embedding model (no CPU plugin); using onnxruntime" in caplog.text
    with pytest.raises(EmbeddingError, match=r"^OpenVINO could not load the embedding model \(no CPU plugin\)\.$"):
        create_embedder(EmbeddingConfig(runtime="openvino"), hermes_home)
    monkeypatch.setattr(openvino_runtime, "available", lambda: False)
    with pytest.raises(EmbeddingError, match="OpenVINO is not installed"):
        create_embedder(EmbeddingConfig(runtime="openvino"), hermes_home)


def test_openvino_runtime_is_for_the_offline_default_only(tmp_path, hermes_home):
    from hermes_kb.agent.knowledgebase.config import ConfigError

    (tmp_path / "model.onnx").write_bytes(b"")
    config = parse_knowledgebase({"embedding_model": {"model_path": str(tmp_path), "runtime": "openvino"}})
    with pytest.raises(EmbeddingError, match="runs the offline default model only"):
        create_embedder(config.embedding, hermes_home)
    with pytest.raises(ConfigError, match="runtime must be one of auto, openvino, onnxruntime, not 'gpu'"):
        parse_knowledgebase({"embedding_model": {"runtime": "gpu"}})


def test_a_folder_whose_model_fails_at_query_time_answers_by_keywords_and_the_others_keep_vectors(
        tree, hermes_home, stub_embedder, tmp_path):
    """Two folders on two models; the remote one stops embedding queries: only its folder falls back to
    keywords (said once, naming it), the local folder's hits still come with their vectors."""
    failing = {"now": False}

    def embed(body):
        if failing["now"] and body["input"] != ["dimension probe"]:
            return 500, {"error": "model unloaded"}
        return 200, {"embeddings": fake_vectors(body["input"])}

    local = tree({"alpha.md": "alpha observation about the pump valve"}, tmp_path / "local")
    remote = tree({"beta.md": "beta observation about the pump valve"}, tmp_path / "remote")
    with RecordingServer({"/api/embed": embed}) as server:
        config = parse_knowledgebase({"directories": [
            str(local), {"path": str(remote), "embedding_model": {"backend": "ollama", "model": "m", "base_url": server.url}}]})
        kb = KnowledgeBase(config, hermes_home, embedder_factory=lambda: stub_embedder)
        kb.index()
        failing["now"] = True
        result = KnowledgeBase(config, hermes_home, embedder_factory=lambda: stub_embedder).search("pump valve observation")
        told = [w for w in result.warnings if "Keyword results only" in w]
        assert len(told) == 1 and told[0].startswith(
            f"Keyword results only from remote: The ollama embedding service at {server.url} failed: "), told
        found = {hit.directory: hit.found_by for hit in result.hits}
        assert "vector" in found["local"] and found["remote"] == ["keyword"]
        with pytest.raises(Exception, match="Keyword results only from remote"):
            KnowledgeBase(config, hermes_home, embedder_factory=lambda: stub_embedder).search(
                "pump valve", directory="remote", mode="vector")
