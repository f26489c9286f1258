"""The offline model's int8-activations variant as a user meets it: a new index gets it where the CPU
pays (or where the config says), an index keeps the variant it was embedded with (search and
incremental runs) until `--full` moves it, status says so once, and a machine that cannot run an
index's variant says why while keyword search goes on."""

import pytest

from hermes_kb.agent.knowledgebase import embeddings, openvino_runtime
from hermes_kb.agent.knowledgebase.config import ConfigError, EmbeddingConfig, parse_knowledgebase
from hermes_kb.agent.knowledgebase.embeddings import INT8_ACTIVATIONS_VARIANT, OFFLINE_VARIANT, ModelIdentity
from hermes_kb.agent.knowledgebase.service import KnowledgeBase, kept_variant

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
NOTES = {"deploy.md": "# Deploy\n\nProduction deploys go through the blue-green switch on port 4271.\n",
         "garden.md": "# Garden\n\nTomatoes need full sun and regular watering.\n"}


@pytest.mark.parametrize("flags, pays", [
    ({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}, True),  # AMD EPYC (Zen 4/5)
    ({"avx2", "avx512_vnni", "amx_int8", "amx_bf16", "avx512_bf16"}, False),  # Xeon with AMX: bf16 tiles as fast
    ({"avx2", "avx512f", "avx512_vnni"}, False),  # VNNI without bf16: not measured, not chosen
    ({"avx2", "fma"}, False),
    (set(), False),  # not Linux, or the kernel did not say
])
def test_int8_activations_are_chosen_where_the_cpu_has_int8_dot_products_and_bf16_but_no_amx(flags, pays):
    assert openvino_runtime.int8_activations_pay(flags) is pays


@pytest.mark.parametrize("written, read", [("auto", "auto"), (True, "on"), (False, "off"), ("off", "off")])
def test_int8_activations_setting_reads_yaml_booleans(written, read):
    config = parse_knowledgebase({"embedding_model": {"int8_activations": written}})
    assert config.embedding.int8_activations == read


def test_a_bad_int8_activations_setting_is_one_sentence():
    with pytest.raises(ConfigError, match="int8_activations must be one of auto, on, off"):
        parse_knowledgebase({"embedding_model": {"int8_activations": "fast"}})


@pytest.mark.parametrize("indexed, config, new, kept", [
    (None, EmbeddingConfig(), INT8_ACTIVATIONS_VARIANT, INT8_ACTIVATIONS_VARIANT),  # a new index: the new variant
    (OFFLINE_VARIANT, EmbeddingConfig(), INT8_ACTIVATIONS_VARIANT, OFFLINE_VARIANT),  # kept: its vectors' variant
    (INT8_ACTIVATIONS_VARIANT, EmbeddingConfig(), OFFLINE_VARIANT, INT8_ACTIVATIONS_VARIANT),  # int8_activations: off
    # onnxruntime cannot make int8-activation vectors: the new variant, which the index's vectors do not match
    (INT8_ACTIVATIONS_VARIANT, EmbeddingConfig(runtime="onnxruntime"), OFFLINE_VARIANT, OFFLINE_VARIANT),
    ("custom", EmbeddingConfig(), INT8_ACTIVATIONS_VARIANT, INT8_ACTIVATIONS_VARIANT),  # not this model's variant
])
def test_an_index_keeps_the_variant_of_its_vectors_while_this_machine_can_run_it(indexed, config, new, kept, monkeypatch):
    monkeypatch.setattr(openvino_runtime, "available", lambda: True)
    identity = None if indexed is None else ModelIdentity(MODEL, indexed, 384)
    assert kept_variant(config, (MODEL, new), identity) == (MODEL, kept)


def knowledgebase(root, home, **embedding) -> KnowledgeBase:
    return KnowledgeBase(parse_knowledgebase({"directories": [str(root)], "embedding_model": embedding}), home)


@pytest.mark.integration
@pytest.mark.skipif(not openvino_runtime.available(), reason="int8 activations run on OpenVINO")
def test_an_index_keeps_its_variant_until_full_and_status_says_so(tree, hermes_home):
    root = tree(NOTES)
    fast = knowledgebase(root, hermes_home, int8_activations="on")
    fast.index()
    [row] = fast.status()
    assert row["model"] == f"{MODEL} ({INT8_ACTIVATIONS_VARIANT}, 384d)" and "model_variant" not in row
    assert "int8 activations" in fast.embedder(fast.targets(None)[0]).runtime

    plain = knowledgebase(root, hermes_home, int8_activations="off")  # e.g. the index moved to another machine
    [row] = plain.status()
    assert row["vector_search"] == "ok" and f"`hermes kb index {row['name']} --full` re-embeds it" in row["model_variant"]
    assert [h.path for h in plain.search("how do we ship to production", k=1, mode="vector").hits] == ["deploy.md"]
    (root / "roses.md").write_text("# Roses\n\nPrune roses in late winter, above an outward-facing bud.\n")
    [summary] = plain.index()  # an incremental run embeds in the index's own variant
    assert summary.added == 1 and summary.error is None
    assert plain.status()[0]["model"].startswith(f"{MODEL} ({INT8_ACTIVATIONS_VARIANT}")
    assert [h.path for h in plain.search("when to cut back flowers", k=1, mode="vector").hits] == ["roses.md"]

    [summary] = plain.index(full=True)
    [row] = plain.status()
    assert summary.chunks_embedded == 3 and row["model"] == f"{MODEL} ({OFFLINE_VARIANT}, 384d)"
    assert "model_variant" not in row and row["vector_search"] == "ok"


@pytest.mark.integration
@pytest.mark.skipif(not openvino_runtime.available(), reason="int8 activations run on OpenVINO")
def test_an_index_of_int8_activations_on_onnxruntime_refuses_vectors_in_one_sentence(tree, hermes_home):
    root = tree(NOTES)
    knowledgebase(root, hermes_home, int8_activations="on").index()
    elsewhere = knowledgebase(root, hermes_home, runtime="onnxruntime")
    [row] = elsewhere.status()
    assert "--full" in row["vector_search"] and "\n" not in row["vector_search"]
    result = elsewhere.search("4271", k=3)
    assert [h.path for h in result.hits][:1] == ["deploy.md"]  # keyword search goes on


@pytest.mark.integration
@pytest.mark.skipif(not openvino_runtime.available(), reason="int8 activations run on OpenVINO")
def test_queries_of_an_int8_activations_index_are_embedded_by_the_plain_variant(tree, hermes_home, monkeypatch):
    root = tree(NOTES)
    knowledgebase(root, hermes_home, int8_activations="on").index()
    loaded, create = [], embeddings.create_embedder
    monkeypatch.setattr(embeddings, "create_embedder",
                        lambda config, home, variant=None: loaded.append(variant) or create(config, home, variant))
    searching = knowledgebase(root, hermes_home, int8_activations="on")
    assert [h.path for h in searching.search("how do we ship to production", k=1, mode="vector").hits] == ["deploy.md"]
    assert loaded == [OFFLINE_VARIANT]  # one short text gains nothing from int8 activations, and loses a little
    assert searching.status()[0]["model"] == f"{MODEL} ({INT8_ACTIVATIONS_VARIANT}, 384d)"
