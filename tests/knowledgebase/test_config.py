import os

import pytest

from hermes_kb.agent.knowledgebase.config import ConfigError, parse_knowledgebase


def test_defaults_when_section_missing():
    config = parse_knowledgebase(None)
    assert config.enabled and config.alpha == 0.7 and config.fusion == "weighted"
    assert config.embedding.backend == "local"
    assert config.embedding.model == "sentence-transformers/all-MiniLM-L6-v2"


def test_directories_expand_home_and_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("NOTES_ROOT", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_knowledgebase({"directories": ["${NOTES_ROOT}/notes", {"path": "~/code", "name": "code",
                                                                          "chunk_size": 120, "exclude": ["*.lock"]}]})
    notes, code = config.directories
    assert notes.path == tmp_path / "notes" and notes.name == "notes"
    assert code.path == tmp_path / "code" and code.chunking.chunk_size == 120 and code.exclude == ("*.lock",)


@pytest.mark.parametrize("section, fragment", [
    ({"alpha": 1.5}, "knowledgebase.alpha must be a number between 0.0 and 1.0"),
    ({"fusion": "max"}, "knowledgebase.fusion must be one of weighted, rrf"),
    ({"chunk_size": 100, "chunk_overlap": 100}, "chunk_overlap must be smaller than chunk_size"),
    ({"auto_retrieve": "yes"}, "knowledgebase.auto_retrieve must be true or false"),
    ({"embedding_model": "bert"}, "knowledgebase.embedding_model.backend must be one of local, multilingual, openai, ollama"),
    ({"directories": [{"name": "x"}]}, "knowledgebase.directories[0] must be a path or a mapping with a path key"),
    ({"directories": ["/a/x", "/b/x"]}, "two entries named 'x'"),
    ({"max_file_bytes": 0}, "knowledgebase.max_file_bytes must be a whole number of at least 1"),
    ({"colour": "blue"}, "knowledgebase.colour is not a known setting"),
])
def test_bad_values_name_the_key(section, fragment):
    assert fragment in problem(section)


def problem(section: dict) -> str:
    """What the user is told: the refusal of a setting nothing can work without, else the warnings of
    the ones ignored (an unknown key, a bad tuning value: each costs only itself)."""
    try:
        return " ".join(parse_knowledgebase(section).warnings)
    except ConfigError as exc:
        return f"refused: {exc}"


def test_a_mistyped_or_bad_optional_setting_is_warned_about_and_ignored_and_the_rest_works(tmp_path):
    config = parse_knowledgebase({"relevance_treshold": 0.5, "alpha": 7, "rerank": "maybe", "max_context_chunks": 2,
                                  "directories": [str(tmp_path)]})
    assert config.alpha == 0.7 and config.rerank == "auto" and config.max_context_chunks == 2
    assert config.relevance_threshold == 0.75 and len(config.directories) == 1
    assert [w.split(" ")[0] for w in config.warnings] == [
        "knowledgebase.relevance_treshold", "knowledgebase.alpha", "knowledgebase.rerank"]
    assert "did you mean relevance_threshold? It is ignored." in config.warnings[0]
    assert "It is ignored: the default, 0.7, applies." in config.warnings[1]
    assert problem({"exclude": 5}).startswith("refused: knowledgebase.exclude")  # ignoring it would index what was kept out


def test_embedding_mapping_for_remote_backend():
    config = parse_knowledgebase({"embedding_model": {"backend": "ollama", "model": "all-minilm"}})
    assert config.embedding.backend == "ollama"
    assert config.embedding.base_url == "http://127.0.0.1:11434"


def test_default_index_path_is_per_absolute_path(tmp_path):
    config = parse_knowledgebase({"directories": [str(tmp_path / "a" / "notes"), {"path": str(tmp_path / "b" / "notes"), "name": "notes2"}]})
    first, second = (d.resolved_index_path(tmp_path) for d in config.directories)
    assert first != second and first.name.startswith("notes-") and first.suffix == ".sqlite"


def test_a_directory_may_name_its_own_model_and_the_rest_keep_the_knowledgebase_s(tmp_path):
    config = parse_knowledgebase({"embedding_model": {"backend": "ollama", "model": "nomic-embed-text"}, "directories": [
        {"path": str(tmp_path / "zh"), "embedding_model": "multilingual"}, str(tmp_path / "en"),
        {"path": str(tmp_path / "other"), "embedding_model": None}]})
    own, plain, unset = config.directories
    assert config.embedding_for(own).backend == "multilingual"
    assert config.embedding_for(plain) == config.embedding_for(unset) == config.embedding
    assert config.embedding.model == "nomic-embed-text" and own.embedding.model != config.embedding.model


@pytest.mark.parametrize("section, message", [
    ({"directories": [{"path": "/tmp/x", "exclud": ["*.x"]}]},
     "knowledgebase.directories[0].exclud is not a known setting of a directory entry; did you mean exclude?"),
    ({"directories": [{"path": "/tmp/x", "colour": 1}]},
     "knowledgebase.directories[0].colour is not a known setting of a directory entry, which accepts path, name, "
     "index_path, exclude, embedding_model, inline_tags, chunk_size, chunk_overlap."),
    ({"directories": [{"path": "/tmp/x", "embedding_model": "multilingal"}]},
     "knowledgebase.directories[0].embedding_model.backend must be one of local, multilingual, openai, ollama, "
     "not 'multilingal'."),
    ({"directories": [{"path": "/tmp/x", "embedding_model": {"backend": "ollama", "batchsize": 3}}]},
     "knowledgebase.directories[0].embedding_model.batchsize is not a known setting of embedding_model; "
     "did you mean batch_size?"),
    ({"directories": [{"path": "/tmp/x", "embedding_model": 7}]},
     "knowledgebase.directories[0].embedding_model must be local, multilingual, openai, ollama, or a mapping with a "
     "backend key, not 7."),
    ({"embedding_model": {"backend": "local", "batchsize": 3}},
     "knowledgebase.embedding_model.batchsize is not a known setting of embedding_model; did you mean batch_size?"),
    ({"alph": 0.5}, "knowledgebase.alph is not a known setting; did you mean alpha?"),
    ({"colour": "blue"}, "knowledgebase.colour is not a known setting (see config.example.yaml)."),
    ({7: "x"}, "knowledgebase.7 is not a known setting (see config.example.yaml)."),
    ({"alpha": float("nan")}, "knowledgebase.alpha must be a number between 0.0 and 1.0, not nan."),
    ({"min_score": float("-inf")}, "knowledgebase.min_score must be a number between 0.0 and 1.0, not -inf."),
    ({"relevance_threshold": float("nan")}, "knowledgebase.relevance_threshold must be a number between 0.0 and 2.0, not nan."),
    ({"watch_debounce_s": float("inf")}, "knowledgebase.watch_debounce_s must be a number between 0.05 and 600.0, not inf."),
    ({"rrf_k": float("inf")}, "knowledgebase.rrf_k must be a whole number of at least 1, not inf."),
    ({"embedding_model": {"batch_size": float("nan")}},
     "knowledgebase.embedding_model.batch_size must be a whole number between 1 and 1024, not nan."),
    ({"directories": [{"path": "/tmp/x", "index_path": 5}]},
     "knowledgebase.directories[0].index_path must be a non-empty path string, not 5."),
    ({"directories": [{"path": "/tmp/x", "index_path": ""}]},
     "knowledgebase.directories[0].index_path must be a non-empty path string, not ''."),
    ({"directories": [""]}, "knowledgebase.directories[0] must be a non-empty path, not ''."),
    ({"directories": [{"path": ""}]}, "knowledgebase.directories[0].path must be a non-empty path string, not ''."),
    ({"directories": [{"path": 5}]}, "knowledgebase.directories[0].path must be a non-empty path string, not 5."),
    ({"directories": ["/a\0b"]}, "knowledgebase.directories[0].path '/a\\x00b' is not a usable path (embedded null byte)."),
    ({"directories": {}}, "knowledgebase.directories must be a list of paths or mappings, not {}."),
    ({"embedding_model": {"model_path": 5}},
     "knowledgebase.embedding_model.model_path must be a non-empty path string, not 5."),
    ({"embedding_model": {"api_key_env": 5}}, "knowledgebase.embedding_model.api_key_env must be a non-empty string, not 5."),
    ({"embedding_model": {"model": ""}}, "knowledgebase.embedding_model.model must be a non-empty string, not ''."),
    ({"embedding_model": "local", "embedding": "local"},
     "knowledgebase.embedding is an older name for embedding_model; keep only embedding_model."),
    ({"fusion": ["rrf"]}, "knowledgebase.fusion must be one of weighted, rrf, not ['rrf']."),
    ({"exclude": "x" * 500}, None),  # a plain string is one glob: accepted
])
def test_strict_config_one_sentence_per_fault(section, message):
    if message is None:
        assert not parse_knowledgebase(section).warnings
        return
    told = problem(section)
    assert told.removeprefix("refused: ").startswith(message)


def test_long_values_are_cut_short_in_messages():
    [warning] = parse_knowledgebase({"alpha": "x" * 10_000}).warnings
    assert len(warning) < 200 and "...." in warning


def test_null_embedding_model_and_directories_mean_defaults():
    config = parse_knowledgebase({"embedding_model": None, "directories": None})
    assert config.embedding.backend == "local" and config.directories == ()


def test_a_path_no_filesystem_accepts_is_no_configured_directory():
    config = parse_knowledgebase({})
    assert config.directory("a\0b") is None
    with pytest.raises(ConfigError, match="not a usable path"):
        config.ad_hoc("a\0b")


@pytest.mark.parametrize("url, env, message", [
    (None, {}, "store.url is needed for the postgres backend"),
    ("mysql://kb@h/db", {}, "must start with postgresql://"),
    ("postgresql://kb:${KB_NOT_SET_ANYWHERE}@h/db", {}, "environment variable KB_NOT_SET_ANYWHERE, which is not set"),
    ("postgresql://kb:Xy@Secret9@h/db", {}, "has an @ in its user or password"),
    ("postgresql://kb:ab%zzSECRET@h/db", {}, "a % that is not followed by two hex digits"),
    ("postgresql://kb:Xy/Secret9@h/db", {}, "a port that is not a number"),
    ("postgresql://kb:pw@h:99999/db", {}, "a port that is not a number"),
])
def test_a_bad_store_url_is_one_sentence_that_never_quotes_it(url, env, message, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=message) as caught:
        parse_knowledgebase({"store": {"backend": "postgres", **({"url": url} if url else {})}})
    assert "Secret9" not in str(caught.value) and "SECRET" not in str(caught.value)


def test_store_url_variables_are_percent_encoded_inside_a_url_and_taken_whole_alone(monkeypatch):
    monkeypatch.setenv("KB_PW", "Xy@S/cr#t%zz?9")
    monkeypatch.setenv("KB_URL", "postgresql://kb:p%40ss@db:5433/kb")
    inside = parse_knowledgebase({"store": {"backend": "postgres", "url": "postgresql://kb:${KB_PW}@db/kb"}}).store
    assert inside.url == "postgresql://kb:Xy%40S%2Fcr%23t%25zz%3F9@db/kb"
    assert "Xy" not in repr(inside) and "Xy" not in repr(parse_knowledgebase({"store": {"backend": "postgres",
                                                                                           "url": "${KB_URL}"}}))
    assert parse_knowledgebase({"store": {"backend": "postgres", "url": "${KB_URL}"}}).store.url == os.environ["KB_URL"]
    assert parse_knowledgebase({"store": "sqlite"}).store.backend == "sqlite"
    with pytest.raises(ConfigError, match="store.url is for the postgres backend"):
        parse_knowledgebase({"store": {"url": "postgresql://h/db"}})


def test_inline_tags_is_a_switch_globally_and_per_directory():
    config = parse_knowledgebase({"inline_tags": False, "directories": ["/tmp/a", {"path": "/tmp/b", "inline_tags": True}]})
    assert config.inline_tags == "off"  # YAML's bare off
    assert [d.inline_tags for d in config.directories] == ["off", "on"]  # a directory inherits, or says its own
    assert parse_knowledgebase({}).directories == () and parse_knowledgebase({}).inline_tags == "auto"
    typo = parse_knowledgebase({"inline_tags": "sometimes"})
    assert typo.inline_tags == "auto" and "inline_tags must be one of auto, on, off" in typo.warnings[0]
    with pytest.raises(ConfigError, match=r"directories\[0\]\.inline_tags must be one of auto, on, off"):
        parse_knowledgebase({"directories": [{"path": "/tmp/a", "inline_tags": "yes please"}]})
