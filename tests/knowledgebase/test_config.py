import pytest

from hermes_kb.agent.knowledgebase.config import ConfigError, parse_knowledgebase


def test_defaults_when_section_missing():
    config = parse_knowledgebase(None)
    assert config.enabled and config.alpha == 0.75 and config.fusion == "weighted"
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
    ({"embedding_model": "bert"}, "knowledgebase.embedding_model.backend must be one of local, openai, ollama"),
    ({"directories": [{"name": "x"}]}, "knowledgebase.directories[0] must be a path or a mapping with a path key"),
    ({"directories": ["/a/x", "/b/x"]}, "two entries named 'x'"),
    ({"max_file_bytes": 0}, "knowledgebase.max_file_bytes must be a whole number of at least 1"),
    ({"colour": "blue"}, "knowledgebase.colour is not a known setting"),
])
def test_bad_values_name_the_key(section, fragment):
    with pytest.raises(ConfigError) as error:
        parse_knowledgebase(section)
    assert fragment in str(error.value)


def test_embedding_mapping_for_remote_backend():
    config = parse_knowledgebase({"embedding_model": {"backend": "ollama", "model": "all-minilm"}})
    assert config.embedding.backend == "ollama"
    assert config.embedding.base_url == "http://127.0.0.1:11434"


def test_default_index_path_is_per_absolute_path(tmp_path):
    config = parse_knowledgebase({"directories": [str(tmp_path / "a" / "notes"), {"path": str(tmp_path / "b" / "notes"), "name": "notes2"}]})
    first, second = (d.resolved_index_path(tmp_path) for d in config.directories)
    assert first != second and first.name.startswith("notes-") and first.suffix == ".sqlite"
