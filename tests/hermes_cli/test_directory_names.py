"""Names of indexed folders: unique, stable, and usable wherever a name is accepted (#15, points 1-2)."""

import json

from rich.console import Console

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.service import KnowledgeBase
from hermes_kb.hermes_cli.kb_command import run_kb


def cli(hermes_home, stub_embedder, *argv, config=None):
    """`hermes kb ARGV` with an empty config.yaml (folders indexed by path only) and the stub model."""
    out, err = Console(record=True, width=200), Console(record=True, width=200)
    kb = lambda: KnowledgeBase(parse_knowledgebase(config or {}), hermes_home, embedder_factory=lambda: stub_embedder)
    code = run_kb(list(argv), kb, out, err, confirm=lambda _: False)
    return code, out.export_text(), err.export_text()


def test_two_folders_with_one_base_name_get_distinct_names_and_both_are_searched(tmp_path, tree, hermes_home, stub_embedder):
    a = tree({"one.md": "# One\n\nThe wombatfrost lives in folder a.\n"}, tmp_path / "a" / "docs")
    b = tree({"two.md": "# Two\n\nThe wombatfrost lives in folder b.\n"}, tmp_path / "b" / "docs")
    assert cli(hermes_home, stub_embedder, "index", str(a))[0] == 0
    code, out, _ = cli(hermes_home, stub_embedder, "index", str(b))
    assert code == 0 and out.startswith("b-docs:"), out
    for mode in ("keyword", "hybrid"):
        code, out, _ = cli(hermes_home, stub_embedder, "search", "wombatfrost", "--mode", mode, "--json")
        hits = json.loads(out)["hits"]
        assert {(h["directory"], h["path"]) for h in hits} == {("docs", "one.md"), ("b-docs", "two.md")}, mode
        assert all(len(h["found_by"]) == len(set(h["found_by"])) for h in hits)
    # one more file in b changes nothing for a (the indexes were mixed up by name before)
    (b / "three.md").write_text("# Three\n\nAnother wombatfrost.\n")
    cli(hermes_home, stub_embedder, "index", str(b))
    _, out, _ = cli(hermes_home, stub_embedder, "search", "wombatfrost", "--mode", "keyword", "--json")
    assert {h["path"] for h in json.loads(out)["hits"]} == {"one.md", "two.md", "three.md"}
    _, out, _ = cli(hermes_home, stub_embedder, "status", "--json")
    rows = json.loads(out)
    names = [r["name"] for r in (rows["directories"] if isinstance(rows, dict) else rows)]
    assert sorted(names) == ["b-docs", "docs"]


def test_names_are_stable_when_more_folders_arrive(tmp_path, tree, hermes_home, stub_embedder):
    a = tree({"one.md": "alpha"}, tmp_path / "a" / "docs")
    b = tree({"two.md": "beta"}, tmp_path / "b" / "docs")
    c = tree({"three.md": "gamma"}, tmp_path / "c" / "b" / "docs")  # its parent is also called b
    for folder in (a, b, c):
        cli(hermes_home, stub_embedder, "index", str(folder))
    kb = KnowledgeBase(parse_knowledgebase({}), hermes_home, embedder_factory=lambda: stub_embedder)
    assert {d.name: d.path for d in kb.known_directories()} == {"docs": a, "b-docs": b, "docs-2": c}
    # indexing again by path keeps each name
    code, out, _ = cli(hermes_home, stub_embedder, "index", str(c))
    assert code == 0 and out.startswith("docs-2:")


def test_a_configured_name_wins_and_the_folder_indexed_by_hand_is_renamed_apart(tmp_path, tree, hermes_home, stub_embedder):
    loose = tree({"one.md": "alpha wombat"}, tmp_path / "x" / "notes")
    cli(hermes_home, stub_embedder, "index", str(loose))
    configured = tree({"two.md": "beta wombat"}, tmp_path / "y" / "handbook")
    config = {"directories": [{"path": str(configured), "name": "notes"}]}
    cli(hermes_home, stub_embedder, "index", config=config)
    kb = KnowledgeBase(parse_knowledgebase(config), hermes_home, embedder_factory=lambda: stub_embedder)
    assert {d.name: d.path for d in kb.known_directories()} == {"notes": configured, "x-notes": loose}
    _, out, _ = cli(hermes_home, stub_embedder, "search", "wombat", "--mode", "keyword", "--json", config=config)
    assert {(h["directory"], h["path"]) for h in json.loads(out)["hits"]} == {("notes", "two.md"), ("x-notes", "one.md")}


def test_the_name_shown_for_a_folder_indexed_by_path_works_as_a_name(tmp_path, tree, hermes_home, stub_embedder, monkeypatch):
    uvdocs = tree({"guide.md": "# Guide\n\nInstall with the quokkapipe installer.\n"}, tmp_path / "x" / "uvdocs")
    monkeypatch.chdir(tmp_path)  # elsewhere: "uvdocs" is no folder here, only a name
    code, out, _ = cli(hermes_home, stub_embedder, "index", str(uvdocs))
    assert code == 0 and out.startswith("uvdocs:")
    code, out, _ = cli(hermes_home, stub_embedder, "search", "quokkapipe", "--dir", "uvdocs", "--json")
    assert code == 0 and json.loads(out)["hits"][0]["directory"] == "uvdocs"
    code, out, _ = cli(hermes_home, stub_embedder, "status", "uvdocs", "--json")
    assert code == 0 and "uvdocs" in out
    code, out, _ = cli(hermes_home, stub_embedder, "clear", "uvdocs", "--yes")
    assert code == 0 and "Cleared: uvdocs" in out
    code, _, err = cli(hermes_home, stub_embedder, "status", "uvdocs")
    assert code != 0 and "neither the name of a knowledgebase directory nor an existing folder" in err
