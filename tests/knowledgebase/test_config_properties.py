"""Property tests for the config loader: whatever YAML can hold, `parse_knowledgebase` answers with a
config or one ConfigError sentence, never another exception; and valid settings come back unchanged."""

from __future__ import annotations

import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_kb.agent.knowledgebase.config import (
    _CHUNKING_KEYS, _KNOWN_DIRECTORY, _KNOWN_EMBEDDING, _KNOWN_TOP, ConfigError, KnowledgebaseConfig,
    parse_knowledgebase,
)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Scalars YAML produces, with the awkward ones over-represented: nan/inf, empty and NUL strings, bools, huge ints.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 0, 1, -1, 0.5, 100, 2000, "", " ", "\0",
                     "local", "openai", "ollama", "rrf", "weighted", "~", "${HOME}/x", "/tmp", "http://x", "a\0b"]),
    st.text(max_size=12),
)
# Keys: mostly the real ones (so values reach their checkers), some misspelt or not strings at all.
ALL_KEYS = sorted({*_KNOWN_TOP, *_KNOWN_DIRECTORY, *_KNOWN_EMBEDDING})
keys = st.one_of(st.sampled_from(ALL_KEYS), st.sampled_from(ALL_KEYS).map(lambda k: k[:-1]), st.text(max_size=6),
                 st.integers(), st.booleans(), st.none())
values = st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=4),
                                                          st.dictionaries(keys, children, max_size=5)), max_leaves=12)


def answers_in_one_sentence(section) -> None:
    try:
        config = parse_knowledgebase(section)
    except ConfigError as error:
        message = str(error)
        assert message and "\n" not in message and message.endswith((".", "?")), message
        assert len(message) < 400, message
    else:
        assert isinstance(config, KnowledgebaseConfig)


@FAST
@given(values)
def test_any_yaml_value_is_a_config_or_a_config_error(section):
    answers_in_one_sentence(section)


@FAST
@given(st.dictionaries(keys, values, max_size=6))
def test_any_mapping_is_a_config_or_a_config_error(section):
    answers_in_one_sentence(section)


directory_entries = st.one_of(values, st.fixed_dictionaries({"path": values}, optional={k: values for k in _KNOWN_DIRECTORY if k != "path"}))
embedding_models = st.one_of(values, st.fixed_dictionaries({}, optional={k: values for k in _KNOWN_EMBEDDING}))


@FAST
@given(st.lists(directory_entries, max_size=3), embedding_models)
def test_directory_entries_and_embedding_mappings_never_crash(directories, embedding):
    answers_in_one_sentence({"directories": directories, "embedding_model": embedding})


@FAST
@given(st.text(max_size=40))
def test_any_yaml_text_is_a_config_or_a_config_error(text):
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    answers_in_one_sentence(data)


unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
valid = st.fixed_dictionaries({}, optional={
    "enabled": st.booleans(),
    "alpha": unit,
    "min_score": unit,
    "relevance_threshold": st.floats(min_value=0.0, max_value=2.0),
    "fusion": st.sampled_from(["weighted", "rrf"]),
    "rrf_k": st.integers(min_value=1, max_value=10**6),
    "keyword_row_budget": st.one_of(st.none(), st.integers(min_value=100, max_value=10**7)),
    "max_context_chunks": st.integers(min_value=0, max_value=100),
    "max_context_tokens": st.integers(min_value=0, max_value=100_000),
    "auto_retrieve": st.booleans(),
    "watch_debounce_s": st.floats(min_value=0.05, max_value=600.0),
    "max_file_bytes": st.integers(min_value=1, max_value=10**10),
    "exclude": st.lists(st.text(alphabet="abc*?/.", min_size=1, max_size=8), max_size=3),
    "chunk_size": st.integers(min_value=101, max_value=2000),
    "chunk_overlap": st.integers(min_value=0, max_value=100),
})
names = st.from_regex(r"[A-Za-z0-9_-]{1,10}", fullmatch=True)


@FAST
@given(valid, st.lists(names, max_size=3, unique=True), st.integers(min_value=1, max_value=1024))
def test_valid_settings_round_trip(section, dir_names, batch_size):
    directories = [{"path": f"/srv/kb/{name}", "name": name, "exclude": ["*.tmp"]} for name in dir_names]
    raw = {**section, "directories": directories, "embedding_model": {"backend": "ollama", "batch_size": batch_size}}
    config = parse_knowledgebase(yaml.safe_load(yaml.safe_dump(raw)))  # through YAML, as a user's file goes
    for key, value in section.items():
        if key in _CHUNKING_KEYS:
            assert getattr(config.chunking, key) == value
        elif key == "exclude":
            assert config.exclude == tuple(value)
        else:
            got = getattr(config, key)
            assert got == value or (isinstance(value, float) and math.isclose(got, value)), (key, got, value)
    assert [d.name for d in config.directories] == dir_names
    assert [str(d.path) for d in config.directories] == [f"/srv/kb/{n}" for n in dir_names]
    assert all(d.exclude == ("*.tmp",) and d.chunking == config.chunking for d in config.directories)
    assert config.embedding.backend == "ollama" and config.embedding.batch_size == batch_size
