"""Documentation-shaped training pairs (training/docs_corpus.py, training/docs_pairs.py): a section's
heading is asked as people ask documentation, its first chunk as the product cut it is the answer, and
no negative is the answer or a section nested with it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("scipy")  # pairs.bm25_top's sparse products; training's own dependency
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import docs_corpus  # noqa: E402
import docs_pairs  # noqa: E402


@pytest.mark.parametrize(("title", "expected"), [
    ("Can I use third-party Python packages in my app?", "Can I use third-party Python packages in my app?"),
    ("How to configure workspace environments", "How do I configure workspace environments"),
    ("Cleaning up old externals", "How do I clean up old externals"),
    ("Adding missing columns", "How do I add missing columns"),
    ("Installation", "How do I install acme?"),
    ("`--baseline-prune`", "What does --baseline-prune do"),
])
def test_a_heading_is_asked_as_documentation_is_asked(title, expected):
    assert docs_pairs.asked(title, "acme", random.Random(0)).startswith(expected)


@pytest.mark.parametrize("title", ["Examples", "Overview", "See also", "1.9.2 - 2024-01-21", "I think I've got a bug!",
                                   ".. _api-core:", "Security"])
def test_a_heading_that_names_no_question_is_not_asked(title):
    assert docs_pairs.asked(title, "acme", random.Random(0)) is None


def write_corpus(path: Path, chunks: list[dict]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for chunk in chunks:
            out.write(json.dumps(chunk) + "\n")
    return path


BODY = "The cache keeps every rendered page for ten minutes and drops the oldest entry when it is full."


def test_a_section_is_shown_as_the_product_shows_it_and_hidden_without_its_own_heading(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl.gz", [
        {"project": "acme", "page": "cache.md", "heading": "Caching > Expiring entries",
         "text": f"## Expiring entries\n\n{BODY}"},
        # a shell comment opening the tail of a code block is no heading the chunker saw
        {"project": "acme", "page": "cli.md", "heading": "Command line",
         "text": f"# Disable all warnings\nacme run --quiet\n\n{BODY}"},
        {"project": "acme", "page": "api.rst", "heading": "",
         "text": f"the end of the section before.\n\nRouting\n-------\n\n{BODY}"},
        {"project": "acme", "page": "ref.rst", "heading": "",
         "text": "Reference\n=========\n\n.. autoclass:: acme.Cache\n    :members:\n" + BODY},
    ])
    found = docs_pairs.sections(corpus)
    assert [s["title"] for s in found] == ["Expiring entries", "Routing"]
    markdown, rst = found
    assert markdown["shown"] == f"Caching > Expiring entries\n## Expiring entries\n\n{BODY}"
    assert markdown["hidden"] == f"Caching\n{BODY}"
    assert markdown["path"] == ("Caching", "Expiring entries") and rst["path"] == ()
    assert "Routing" not in rst["hidden"] and "-------" not in rst["hidden"]
    assert rst["hidden"].startswith("the end of the section before.") and rst["hidden"].endswith(BODY)


def section(project: str, page: str, heading: str, body: str) -> dict:
    title = heading.split(" > ")[-1]
    return {"project": project, "page": page, "heading": heading, "text": f"## {title}\n\n{body}"}


def test_no_negative_is_the_answer_or_a_section_nested_with_it(tmp_path):
    words = "session pool connection timeout retries cache render template route".split()
    chunks = []
    for project in ("acme", "zeta"):
        for page in range(3):
            for topic in words[page * 3:page * 3 + 3]:
                body = f"Set the {topic} for each {project} request; the {topic} defaults to ten and is read at start. " * 2
                chunks.append(section(project, f"p{page}.md", f"Guide {page} > Configuring the {topic}", body))
                chunks.append(section(project, f"p{page}.md", f"Guide {page} > Configuring the {topic} > Per host",
                                      f"Each host may set its own {topic} in its block, {body}"))
    found = docs_pairs.sections(write_corpus(tmp_path / "c.jsonl.gz", chunks))
    made = docs_pairs.docs_tuples(found, random.Random(1))
    path_of = {text: s["path"] for s in found for text in (s["shown"], s["hidden"])}
    project_of = {text: s["project"] for s in found for text in (s["shown"], s["hidden"])}
    assert len(made) >= 12
    for query, answer, *negatives in made:
        assert len(negatives) == 3 and answer not in negatives
        for negative in negatives:
            if project_of[negative] == project_of[answer]:
                shorter = min(len(path_of[negative]), len(path_of[answer]))
                assert path_of[negative][:shorter] != path_of[answer][:shorter], (query, path_of[negative])
        named = project_of[answer] in query
        assert (project_of[negatives[2]] != project_of[answer]) == named  # only a named question meets another project


def test_an_unnamed_question_may_meet_a_section_of_another_project_about_something_else(tmp_path):
    topics = {"acme": ["Rotating the logs", "Clearing the cache", "Pooling connections", "Renaming routes"],
              "zeta": ["Deploying behind nginx", "Upgrading the schema", "Signing requests", "Tracing spans"]}
    chunks = []
    for project, titles in topics.items():
        for n, title in enumerate(titles):
            mentions = " ".join(f"{w.lower()} logs cache connections routes" for w in title.split())
            body = f"In {project}, {title.lower()} is done once per worker at start; {mentions} are all read then. " * 2
            chunks.append(section(project, f"p{n % 2}.md", f"Guide > {title}", body))
    found = docs_pairs.sections(write_corpus(tmp_path / "c.jsonl.gz", chunks))
    shown = {text: s for s in found for text in (s["shown"], s["hidden"])}
    made = docs_pairs.docs_tuples(found, random.Random(3), foreign_share=1.0)
    unnamed = [t for t in made if shown[t[1]]["project"] not in t[0]]
    assert unnamed and len(unnamed) < len(made)
    for query, answer, *negatives in made:
        third, answer = shown[negatives[2]], shown[answer]
        assert third["project"] != answer["project"], query
    for query, answer, *negatives in unnamed:
        third, answer = shown[negatives[2]], shown[answer]
        assert not set(docs_pairs.words(third["title"])) & set(docs_pairs.words(answer["title"])), query
    plain = docs_pairs.docs_tuples(found, random.Random(3))
    assert all(shown[t[4]]["project"] == shown[t[1]]["project"] for t in plain if shown[t[1]]["project"] not in t[0])


def test_sections_nest_by_whole_headings_and_reStructuredText_ones_with_none():
    assert docs_pairs.nested(("Guide", "Sessions"), ("Guide", "Sessions", "Per host"))
    assert docs_pairs.nested(("Guide", "Sessions"), ("Guide", "Sessions"))
    assert not docs_pairs.nested(("Guide", "Session"), ("Guide", "Sessions", "Per host"))
    assert not docs_pairs.nested(("Guide", "Session"), ("Guide", "Pools"))
    assert not docs_pairs.nested((), ()) and not docs_pairs.nested((), ("Guide",))


def sdist(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_only_the_docs_folders_pages_are_read_and_a_changed_sdist_is_refused(tmp_path):
    data = sdist({"acme-1.0/docs/guide/cache.md": b"# Cache\n", "acme-1.0/docs/changelog.md": b"# 1.0\n",
                  "acme-1.0/docs/release-notes/1.0.rst": b"x", "acme-1.0/README.md": b"# acme\n",
                  "acme-1.0/doc/api.rst": b"API\n===\n", "acme-1.0/docs/conf.py": b""})
    assert [name for name, _ in docs_corpus.doc_files(data)] == ["api.rst", "guide/cache.md"]
    source = {"project": "acme", "version": "1.0", "sdist": "acme-1.0.tar.gz",
              "sha256": hashlib.sha256(data).hexdigest(), "licence": "MIT"}
    (tmp_path / "acme-1.0.tar.gz").write_bytes(data)
    assert docs_corpus.fetched(source, tmp_path) == data
    (tmp_path / "acme-1.0.tar.gz").write_bytes(data + b"tampered")
    with pytest.raises(SystemExit, match="sha256 differs"):
        docs_corpus.fetched(source, tmp_path)


def test_an_sdist_that_cannot_be_fetched_is_one_sentence(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request

    source = {"project": "acme", "version": "1.0", "sdist": "acme-1.0.tar.gz", "sha256": "0" * 64, "licence": "MIT"}

    def offline(url, timeout):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(SystemExit, match="could not fetch acme-1.0.tar.gz from PyPI"):
        docs_corpus.fetched(source, tmp_path)
    listing = io.BytesIO(json.dumps({"releases": {"0.9": [{"filename": "acme-0.9.tar.gz", "url": "x"}]}}).encode())
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: listing)
    with pytest.raises(SystemExit, match="is not among acme 1.0's files"):
        docs_corpus.fetched(source, tmp_path)
    assert not (tmp_path / "acme-1.0.tar.gz").exists()


def test_every_pinned_source_is_permissive_and_none_is_a_benchmark_collection():
    from benchmarks.collection_builders import CODE_PACKAGES

    pinned = docs_corpus.sources()
    assert len(pinned) >= 20
    assert all(s["licence"] in {"MIT", "BSD", "BSD-3-Clause", "BSD-2-Clause", "Apache-2.0"} for s in pinned)
    assert not {s["project"] for s in pinned} & {*CODE_PACKAGES, "click", "npm", "postgresql"}
    assert docs_pairs.HELD_OUT <= {s["project"] for s in pinned}


def test_a_general_questions_traps_are_sections_sharing_its_words_never_held_out_ones():
    found = [{"project": project, "page": "p.md", "title": topic, "shown": f"{topic}\n{text}", "hidden": text}
             for project in ("acme", "emmett")
             for topic, text in (("Consistency", f"{project} keeps replicas consistent: eventual consistency of reads."),
                                 ("Replicas", f"{project} replicas follow the primary; consistency is eventual."),
                                 ("Sorting", f"{project} sorts with quicksort when the list fits in memory."),
                                 ("Logging", f"{project} writes its log to stderr."))]
    rows = [{"source": "squad_v1.1_train", "query": "What is eventual consistency in distributed replicas?",
             "positive": "Eventual consistency is a model used in distributed computing.", "answer": "a model"},
            {"source": "tldr_pages", "query": "sort: sort a list with quicksort", "positive": "sort -n file"},
            {"source": "medquad", "query": "Who wrote Hamlet?", "positive": "Shakespeare wrote Hamlet."}]
    pool = [row["positive"] for row in rows] + ["An unrelated passage about rivers."]
    made = docs_pairs.general_traps(rows, found, pool, random.Random(4), count=5)
    assert len(made) == 1  # tldr's command questions may be answered by a tool's docs; Hamlet shares no words
    query, answer, first, second, other = made[0]
    assert answer == rows[0]["positive"] and other != answer
    acme = {text for s in found if s["project"] == "acme" for text in (s["shown"], s["hidden"])}
    assert {first, second} <= acme and first != second
    assert all("consisten" in trap for trap in (first, second))
