"""$HERMES_HOME/config.yaml and .env as `hermes` reads them: bad bytes and stray top-level keys."""

import pytest

from hermes_kb.hermes_cli import config as hermes_config
from hermes_kb.hermes_cli.main import main


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(hermes_config, "_warned", set())


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name, content, where", [
    ("config.yaml", b"knowledgebase:\n  # caf\xe9\n", "(byte 0xe9 at offset 22)"),
    (".env", b"OPENAI_API_KEY=\xff\xfe\n", "(byte 0xff at offset 15)"),
])
@pytest.mark.parametrize("command", [["kb", "status"], ["chat", "-q", "hi"]])
def test_non_utf8_files_are_one_sentence_and_exit_1(hermes_home, capsys, name, content, where, command):
    (hermes_home / name).write_bytes(content)
    code, out, err = run(capsys, *command)
    assert code == 1 and "Traceback" not in err
    assert " ".join(err.split()) == f"error: {hermes_home / name} is not UTF-8 text {where}; save it as UTF-8."


def test_a_byte_order_mark_is_not_content(hermes_home, monkeypatch):
    (hermes_home / "config.yaml").write_bytes("\ufeffknowledgebase:\n  alpha: 0.5\n".encode())
    (hermes_home / ".env").write_bytes("\ufeffHERMES_TEST_BOM=1\n".encode())
    monkeypatch.delenv("HERMES_TEST_BOM", raising=False)
    assert hermes_config.load_kb_config().alpha == 0.5
    hermes_config.apply_env()
    import os
    assert os.environ.pop("HERMES_TEST_BOM") == "1"


def test_unknown_top_level_key_is_warned_once_with_did_you_mean(hermes_home, capsys):
    (hermes_home / "config.yaml").write_text("modle: {name: x}\nzebra: 1\ntoolsets: [web]\nknowledgebase: {}\n")
    code, out, err = run(capsys, "kb", "status", "--json")
    lines = [" ".join(line.split()) for line in err.strip().splitlines()]
    path = hermes_home / "config.yaml"
    assert lines == [f"warning: {path} has a top-level key 'modle' that nothing reads; did you mean model?",
                     f"warning: {path} has a top-level key 'zebra' that nothing reads "
                     f"(hermes reads model, knowledgebase, plugins)."]
    assert "warning" not in run(capsys, "kb", "status", "--json")[2]  # once per process


def test_known_top_level_keys_and_a_broken_file_warn_nothing_extra(hermes_home, capsys):
    (hermes_home / "config.yaml").write_text("model: {name: x}\nplugins: {}\nknowledgebase: {}\nmemory: {}\n")
    assert "warning" not in run(capsys, "kb", "status")[2]
    (hermes_home / "config.yaml").write_text("knowledgebase: [unclosed\n")
    code, out, err = run(capsys, "kb", "status")
    assert code == 1 and err.count("not valid YAML") == 1 and "warning" not in err


def test_the_hermes_plugin_path_never_warns(hermes_home, capsys):
    (hermes_home / "config.yaml").write_text("modle: {}\n")
    hermes_config.load_config(hermes_home)
    hermes_config.load_kb_config(hermes_home)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("section, message", [
    ({"name": 5}, "model.name must be a model name, not 5."),
    ({"api_key_env": ["X"]}, "model.api_key_env must be the name of an environment variable, not ['X']."),
    ({"base_url": "ftp://x"}, "model.base_url must be an http:// or https:// URL, not 'ftp://x'."),
])
def test_model_section_values_are_checked(hermes_home, capsys, section, message):
    import yaml
    (hermes_home / "config.yaml").write_text(yaml.safe_dump({"model": section}))
    code, out, err = run(capsys, "chat", "-q", "hi")
    assert code == 1 and " ".join(err.split()) == f"error: {message}"


def test_an_unusable_model_url_is_one_sentence(hermes_home, capsys):
    (hermes_home / "config.yaml").write_text("model: {base_url: 'http://[::1'}\n")
    code, out, err = run(capsys, "chat", "-q", "hi")
    assert code == 1 and "is not a usable URL" in err and "Traceback" not in err


@pytest.mark.parametrize("text, reason", [
    ("knowledgebase:\n  since: 2001-13-45\n", "(month must be in 1..12)."),
    ("a: !!int 1.5\n", "(invalid literal for int() with base 10: '1.5')."),
    ("a: !!timestamp x\n", "("),
    ("a: " + "[" * 5000 + "\n", "(it is nested too deeply)."),
    ("knowledgebase: [unclosed\n", "at line 2."),
])
def test_yaml_a_constructor_cannot_build_is_one_sentence(hermes_home, capsys, text, reason):
    (hermes_home / "config.yaml").write_text(text)
    code, out, err = run(capsys, "kb", "status")
    err = " ".join(err.split())
    assert code == 1 and "Traceback" not in err
    assert err.startswith(f"error: {hermes_home / 'config.yaml'} is not valid YAML") and reason in err


from hypothesis import given, settings, strategies as st  # noqa: E402

TOKENS = [*"ab:-[]{}!?&*|>'\"#%@`,.01 \n\t", "!!int ", "!!float ", "!!timestamp ", "!!binary ", "2001-13-45",
          "knowledgebase:", "\n  ", "alpha: ", "directories:", ".nan", ".inf", "\ufeff", "\x85", "\u2028"]
yamlish = st.lists(st.sampled_from(TOKENS), max_size=25).map("".join)


@settings(max_examples=200, deadline=None)
@given(yamlish)
def test_any_config_text_loads_or_is_a_config_error(text):
    import tempfile
    from pathlib import Path

    from hermes_kb.agent.knowledgebase.config import ConfigError
    with tempfile.TemporaryDirectory() as home:
        Path(home, "config.yaml").write_text(text, encoding="utf-8")
        try:
            data = hermes_config.load_config(Path(home))
            hermes_config.load_kb_config(Path(home))
        except ConfigError as error:
            assert "\n" not in str(error)
        else:
            assert isinstance(data, dict)


def test_hermes_agents_model_section_is_read_not_ignored(monkeypatch):
    from hermes_kb.hermes_cli.model_config import llm_config

    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or")
    chosen, notes = llm_config({"provider": "openrouter", "default": "anthropic/claude-sonnet-4", "context_length": 8})
    assert (chosen.base_url, chosen.model, chosen.api_key) == (
        "https://openrouter.ai/api/v1", "anthropic/claude-sonnet-4", "sk-or")
    assert notes == ["model.context_length is a Hermes Agent setting; `hermes chat` here does not use it."]
    chosen, _ = llm_config("llama3.1")
    assert chosen.model == "llama3.1" and chosen.base_url == "https://api.openai.com/v1"
    chosen, _ = llm_config({"provider": "custom", "base_url": "http://127.0.0.1:8080/v1", "default": "m", "api_key": "k"})
    assert (chosen.base_url, chosen.model, chosen.api_key) == ("http://127.0.0.1:8080/v1", "m", "k")


@pytest.mark.parametrize("section, message", [
    ({"provider": "nosuch"}, "model.provider 'nosuch' is not one this chat knows"),
    ({"provider": "custom"}, "model.provider custom needs model.base_url"),
    ({"defualt": "x"}, "model.defualt is not a known setting; did you mean default?"),
])
def test_a_model_section_this_chat_cannot_use_is_one_sentence(hermes_home, capsys, section, message):
    import yaml
    (hermes_home / "config.yaml").write_text(yaml.safe_dump({"model": section}))
    code, out, err = run(capsys, "chat", "-q", "hi")
    assert code == 1 and message in " ".join(err.split()) and "Traceback" not in err
