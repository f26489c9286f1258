"""The offline evaluation collections (benchmarks/collection_builders.py) on a tiny fake package and docs folder."""

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.collection_builders import (  # noqa: E402
    CollectionError, build_code_search, build_docs, first_sentence, function_pairs, heading_question, is_test,
    parse_markdown)
from hermes_kb.agent.knowledgebase.evaluation import load_dataset  # noqa: E402

MODULE = '''
import os


def read_config(path):
    """Load the settings file and merge environment overrides.

    Longer explanation that is not part of the query.
    """
    with open(path) as handle:
        data = handle.read()
    return data + os.environ.get("X", "")


def stub():
    """This function does nothing useful at all."""
    pass


def undocumented(a):
    return a * 2


def duplicate_a(x):
    """Compute the checksum of the given bytes."""
    return sum(x) % 255


def duplicate_b(x):
    """Compute the checksum of the given bytes."""
    return sum(x) % 256


class Store:
    @property
    def size(self):
        """Number of records currently held in memory."""
        total = 0
        for record in self.records:
            total += 1
        return total

    async def flush(self, force=False):
        """
        Write pending records to disk, then clear the queue.
        """
        await self._write(self.pending)
        self.pending.clear()
'''


def fake_package(root: Path, modules: int = 12) -> Path:
    package = root / "fakepkg"
    (package / "tests").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for i in range(modules):
        text = MODULE.replace("settings file", f"settings file number {i}").replace(
            "Number of records", f"Number of records in shard {i}").replace(
            "Write pending", f"Write pending batch {i}").replace('"X"', f'"X{i}"').replace("total = 0", f"total = {i}").replace(
            "self.pending)", f"self.pending, {i})")
        (package / f"mod{i}.py").write_text(text)
    (package / "tests" / "test_x.py").write_text('def test_a():\n    """A test that must never be a document."""\n'
                                                 '    assert True\n    assert 1\n')
    return package


def read_split(folder: Path, split: str) -> dict[str, str]:
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as handle:
        return {row["query-id"]: row["corpus-id"] for row in csv.DictReader(handle, delimiter="\t")}


def check_beir(folder: Path) -> tuple[dict, dict, dict, dict]:
    corpus = {d["_id"]: d for d in map(json.loads, (folder / "corpus.jsonl").read_text().splitlines())}
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    train, test = read_split(folder, "train"), read_split(folder, "test")
    assert not set(train) & set(test)
    assert set(train) | set(test) == set(queries)
    assert set(train.values()) | set(test.values()) <= set(corpus)
    for split, qrels in (("train", train), ("test", test)):  # what hermes kb eval reads (ranx itself is slow to load)
        dataset = load_dataset(folder, split)
        assert set(dataset.queries) == set(qrels) and all(len(r) == 1 for r in dataset.qrels.values())
    return corpus, queries, train, test


def test_function_pairs_remove_the_docstring_and_keep_decorators():
    pairs = {p.doc_id.split(":")[1]: p for p in function_pairs(MODULE, "pkg/m.py", "pkg")}
    assert set(pairs) == {"read_config", "duplicate_a", "duplicate_b", "Store.size", "Store.flush"}  # stub is trivial
    config = pairs["read_config"]
    assert config.query == "Load the settings file and merge environment overrides"
    assert "settings file" not in config.code and "Longer explanation" not in config.code
    assert config.code.startswith("def read_config(path):") and "handle.read()" in config.code
    size = pairs["Store.size"]
    assert size.code.startswith("@property\ndef size(self):")  # dedented, decorator kept
    assert '"""' not in size.code
    assert pairs["Store.flush"].query == "Write pending records to disk, then clear the queue"


def test_first_sentence():
    assert first_sentence("Return the sum. Then more.") == "Return the sum"
    assert first_sentence("Split a path\ninto parts on e.g. slashes\n\nMore.") == "Split a path into parts on e.g"


def test_code_search_collection(tmp_path):
    package = fake_package(tmp_path / "src")
    out = tmp_path / "code"
    sizes = build_code_search(out, packages=("fakepkg", "notinstalledpkg"), roots={"fakepkg": package},
                              max_docs=1000, test_fraction=0.3, log=lambda m: None)
    corpus, queries, train, test = check_beir(out)
    assert sizes == {"documents": len(corpus), "train": len(train), "test": len(test)}
    assert train and test
    texts = {d["text"] for d in corpus.values()}
    assert len(texts) == len(corpus)  # no duplicate bodies
    assert not any("must never be a document" in q for q in queries.values())  # tests/ skipped
    assert not any("checksum" in q for q in queries.values())  # a docstring shared by several functions
    for query_id, doc_id in {**train, **test}.items():
        assert queries[query_id].split()[0] not in ("", None)
        assert queries[query_id] not in corpus[doc_id]["text"]  # the docstring is gone from its document
    again = tmp_path / "again"
    build_code_search(again, packages=("fakepkg",), roots={"fakepkg": package}, max_docs=1000, test_fraction=0.3,
                      log=lambda m: None)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        assert (out / name).read_bytes() == (again / name).read_bytes()  # deterministic


def test_code_search_cap_and_a_query_per_document(tmp_path):
    package = fake_package(tmp_path / "src", modules=20)
    out = tmp_path / "code"
    sizes = build_code_search(out, packages=("fakepkg",), roots={"fakepkg": package}, max_docs=10,
                              test_fraction=0.5, log=lambda m: None)
    corpus, queries, train, test = check_beir(out)
    assert sizes["documents"] == 10 and len(queries) == len(corpus)  # one package fills the cap on its own


def test_no_package_is_a_clear_error(tmp_path):
    with pytest.raises(CollectionError, match="none of"):
        build_code_search(tmp_path / "x", packages=("surely_not_installed_pkg",), log=lambda m: None)


def test_split_is_a_function_of_the_id_alone():
    ids = [f"q-{i}" for i in range(2000)]
    chosen = [i for i in ids if is_test(i, 0.25)]
    assert chosen == [i for i in ids if is_test(i, 0.25)]
    assert 400 < len(chosen) < 600


NPM_PAGE = """---
title: npm-frob
section: 1
description: Frob a package
---

### Synopsis

```bash
npm frob <pkg>
# not a heading inside a fence
```

### Description

This command frobs the package in the current folder, rewriting its manifest so that every dependency is pinned.

### Configuration

#### `frob-level`

* Default: 3

The level of frobbing to apply when the command runs against a workspace of many packages.

### See Also

* [npm install](/commands/npm-install)
"""

NODE_PAGE = """# Widgets

<!-- YAML
added: v0.1
-->

Widgets turn gadgets into gizmos for every caller that asks nicely and waits.

## Class: `Widget`

A widget holds one gadget and the state of its transformation into a gizmo.

### Event: `'spin'`

Emitted when the widget starts spinning its gadget around the central axis of the gizmo.

### `widget.turn(angle[, options])`

* `angle` {number}

Rotates the gadget by the given angle, in degrees, waiting for the previous rotation to finish.

## Installing widgets

Copy the widget module into the project folder and require it from the entry point of the app.
"""


def test_markdown_sections_are_leaves_and_skip_fenced_hashes():
    sections = parse_markdown(NPM_PAGE, "npm/commands/npm-frob.md", "npm-frob")
    headings = [s.heading for s in sections]
    assert headings == ["Synopsis", "Description", "Configuration", "`frob-level`", "See Also"]
    assert sections[0].page == "npm-frob"
    assert "not a heading inside a fence" in sections[0].body
    assert "frob-level" not in sections[2].body  # a section stops at the next heading of any level
    node = parse_markdown(NODE_PAGE, "node/widgets.md", "widgets")
    assert node[0].page == "Widgets" and "added: v0.1" not in node[0].body
    assert node[2].path == ("Widgets", "Class: `Widget`", "Event: `'spin'`")


def test_heading_questions():
    npm = {s.heading: heading_question(s) for s in parse_markdown(NPM_PAGE, "npm/commands/npm-frob.md", "npm-frob")}
    assert npm["Description"] == "what is npm frob for"
    assert npm["See Also"] is None
    assert npm["`frob-level`"] == "what does the frob-level setting do"
    node = {s.heading: heading_question(s) for s in parse_markdown(NODE_PAGE, "node/widgets.md", "widgets")}
    assert node["Event: `'spin'`"] == "when does `Widget` emit the 'spin' event".replace("`", "")
    assert node["`widget.turn(angle[, options])`"] == (
        "in Widgets, which API rotates the gadget by the given angle, in degrees, waiting for the previous "
        "rotation to finish")
    assert node["Installing widgets"] == "how do I install widgets"


def test_docs_collection(tmp_path):
    npm = tmp_path / "npm"
    (npm / "commands").mkdir(parents=True)
    (npm / "commands" / "npm-frob.md").write_text(NPM_PAGE)
    # npm copies each option's section into every command page: kept once, asked once
    (npm / "commands" / "npm-twiddle.md").write_text(NPM_PAGE.replace("npm-frob", "npm-twiddle").replace(
        "frobs the package", "twiddles the package"))
    node = tmp_path / "node"
    node.mkdir()
    (node / "widgets.md").write_text(NODE_PAGE)
    messages = []
    out = tmp_path / "docs"
    build_docs(out, npm_docs=npm, node_docs=node, node_pages=("widgets", "absent"), test_fraction=0.5,
               log=messages.append)
    corpus, queries, train, test = check_beir(out)
    assert any("absent.md is missing" in m for m in messages)
    assert sum("frob-level" in d["title"] for d in corpus.values()) == 1
    assert sum(q == "what does the frob-level setting do" for q in queries.values()) == 1
    assert any(d["title"] == "Widgets > Class: Widget > widget.turn(angle[, options])" for d in corpus.values())
    assert "what is npm twiddle for" in queries.values()


def test_docs_without_any_folder_says_so(tmp_path):
    messages = []
    with pytest.raises(CollectionError, match="needs npm's or Node.js's Markdown documentation"):
        build_docs(tmp_path / "out", npm_docs=tmp_path / "no-npm", node_docs=tmp_path / "no-node", log=messages.append)
    assert any("not on this machine" in m for m in messages)
