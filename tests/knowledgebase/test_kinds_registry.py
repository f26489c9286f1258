"""The file-kind registry is the one place kind facts live: every entry must be whole and consistent
with the modules that act on it, so a new kind cannot be half-registered."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_kb.agent.knowledgebase import chunker, loaders
from hermes_kb.agent.knowledgebase.code_units import KIND_GRAMMARS
from hermes_kb.agent.knowledgebase.kinds import registry
from hermes_kb.agent.knowledgebase.kinds.document import Document, LoadError

from ..helpers_imports import assert_acyclic, sibling_imports

KINDS_FOLDER = Path(registry.__file__).parent


@pytest.mark.parametrize("kind", registry.FILE_KINDS, ids=lambda kind: kind.name)
def test_every_kind_names_a_reader_and_hooks_that_exist(kind):
    assert callable(kind.read_function())
    for hook in (kind.ocr_probe, kind.read_ahead):
        assert hook is None or callable(registry.hook(hook))
    assert kind.chunking in chunker._LAYOUTS
    assert kind.ocr == (kind.ocr_probe is not None), "a kind OCR reads says which of its files need it"


def test_each_extension_names_one_kind_and_each_kind_one_entry():
    extensions = [extension for kind in registry.FILE_KINDS for extension in kind.extensions]
    assert len(extensions) == len(set(extensions))
    assert all(extension == extension.lower() and extension.startswith(".") for extension in extensions)
    assert len(registry.NAMES) == len(registry.FILE_KINDS) and "text" in registry.NAMES


def test_kinds_cut_as_code_are_exactly_those_with_a_grammar_or_definition_patterns():
    coded = {kind.name for kind in registry.FILE_KINDS if kind.chunking == "code"}
    assert coded == set(KIND_GRAMMARS) | set(chunker._CODE_BOUNDARIES)


def test_a_file_is_given_its_kind_by_extension_and_unknown_names_are_text():
    assert [registry.kind_of(name) for name in ("a.PDF", "notes.md", "x.tsx", ".bashrc", "README", "a.weird")] == [
        "pdf", "markdown", "typescript", "text", "text", "text"]


def test_an_unregistered_kind_reads_and_cuts_as_plain_text():
    assert loaders.load(b"hello\nworld\n", "no-such-kind").text == "hello\nworld\n"
    assert loaders.is_plain_text("no-such-kind")
    chunks = chunker.chunk_document(Document("A title\n\nsome words here\n", "no-such-kind"), "x", chunker.ChunkingConfig())
    assert [chunk.heading for chunk in chunks] == ["A title"]


def test_a_document_carries_its_file_kind_not_a_second_vocabulary():
    html = loaders.load(b"<html><body><h1>T</h1><p>Body text.</p></body></html>", "html")
    csv = loaders.load(b"a,b\n1,2\n", "csv")
    assert (html.kind, csv.kind) == ("html", "csv")


def test_the_readers_form_no_import_cycle_and_the_registry_imports_none_of_them():
    graph = sibling_imports(KINDS_FOLDER)
    assert graph["registry"] == set() and graph["document"] == set()
    assert_acyclic(graph)


def test_a_binary_file_given_a_text_kind_is_one_skip():
    with pytest.raises(LoadError):
        loaders.load(b"\x00binary", "text")
