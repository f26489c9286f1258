"""`hermes kb eval` without the eval extra says how to install it: one sentence, exit 1, no traceback."""

import json
import sys

import pytest

from hermes_kb.hermes_cli.main import main

from ..knowledgebase.test_evaluation import write_beir

INSTALL = "install the eval extra: pip install 'hermes-knowledgebase[eval]'"


@pytest.fixture
def without_ranx(monkeypatch):
    for name in [m for m in sys.modules if m == "ranx" or m.startswith("ranx.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ranx", None)  # `import ranx` now fails as if it were not installed


def test_eval_without_ranx_names_the_extra(without_ranx, tmp_path, capsys):
    dataset = write_beir(tmp_path / "tiny")
    assert main(["kb", "eval", str(dataset)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and INSTALL in " ".join(captured.err.split())
    assert captured.err.strip().startswith("error: hermes kb eval needs ranx;")


def test_eval_without_ranx_json(without_ranx, tmp_path, capsys):
    assert main(["kb", "eval", str(write_beir(tmp_path / "tiny")), "--json"]) == 1
    assert INSTALL in json.loads(capsys.readouterr().out)["error"]
