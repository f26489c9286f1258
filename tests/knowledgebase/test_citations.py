"""Source ids across one conversation: never two passages under one id, restored from history."""

from __future__ import annotations

from hermes_kb.agent.knowledgebase.citations import Citations, passage_key
from hermes_kb.agent.knowledgebase.context import looks_like_debris, render_block
from hermes_kb.agent.knowledgebase.retriever import Hit


def _hit(path: str, start: int, end: int, page: int | None = None, directory: str = "docs") -> Hit:
    return Hit(directory, path, f"/d/{path}", "markdown", start, end, page, "", "text", 0.9, 0.9, 0.9,
               ["vector"], 1, f"h{path}{start}")


def test_a_passage_keeps_its_id_and_an_id_is_never_reused():
    citations = Citations()
    a, b = passage_key("docs", "a.md", 1, 9, None), passage_key("docs", "b.md", 1, 9, None)
    assert citations.id_for(a) == "S1" and citations.id_for(b) == "S2" and citations.id_for(a) == "S1"
    citations.forget(b)
    assert citations.id_for(passage_key("docs", "c.md", 3, 4, None)) == "S3"
    assert citations.id_for(b) == "S4"  # S2 may already be in the model's context: it keeps its meaning


def test_each_chunk_of_a_pdf_page_is_its_own_passage_with_its_own_id():
    """Issue #52, 4: two chunks of one page shared an id ([S1], [S2], [S3], [S3]): a reader could not
    tell which text was cited, and once one was sent the page's other chunk was never injected."""
    citations = Citations()
    assert citations.id_for(passage_key("docs", "m.pdf", 1, 20, 8)) == "S1"
    assert citations.id_for(passage_key("docs", "m.pdf", 21, 40, 8)) == "S2"
    assert citations.id_for(passage_key("docs", "m.pdf", 1, 20, 8)) == "S1"  # the same chunk keeps its id
    block = render_block([_hit("m.pdf", 1, 20, page=8), _hit("m.pdf", 21, 40, page=8)], ids=["S1", "S2"])
    assert "[S1] docs/m.pdf page 8 (lines 1-20) " in block and "[S2] docs/m.pdf page 8 (lines 21-40) " in block
    restored = Citations()
    assert restored.restore([block]) == 2
    assert restored.id_for(passage_key("docs", "m.pdf", 21, 40, 8)) == "S2"


def test_restore_reads_blocks_and_tool_results():
    hits = [_hit("deploy.md", 4, 9), _hit("my notes/plan.md", 1, 3), _hit("manual.pdf", 1, 30, page=8),
            _hit("deploy.md lines 1-3.md", 7, 7)]
    block = render_block(hits, ids=["S3", "S4", "S5", "S6"])
    result = {"hits": [{"id": "S7", "directory": "code", "path": "x.py", "lines": "10-20", "page": None},
                       {"id": "S9", "directory": "code", "path": "y.py", "lines": "bad"}]}
    citations = Citations()
    assert citations.restore([block], [result]) == 5
    assert citations.id_for(passage_key("docs", "deploy.md", 4, 9, None)) == "S3"
    assert citations.id_for(passage_key("docs", "my notes/plan.md", 1, 3, None)) == "S4"
    assert citations.id_for(passage_key("docs", "manual.pdf", 1, 30, 8)) == "S5"
    assert citations.id_for(passage_key("docs", "deploy.md lines 1-3.md", 7, 7, None)) == "S6"  # a name stays a name
    assert citations.id_for(passage_key("code", "x.py", 10, 20, None)) == "S7"
    assert citations.id_for(passage_key("docs", "new.md", 1, 2, None)) == "S8"


def test_table_debris_is_recognised_and_prose_is_not():
    debris = "\n".join(f"│ {cell}" for cell in ["4", "CARD32", "MIME_TYPE_OFFSET", "4", "CARD32", "LENGTH", "8", "x"])
    assert looks_like_debris(debris)
    assert not looks_like_debris("The zeppelin rollout runs blue green deploys.\nCanary checks run before each wave.")
    assert not looks_like_debris("| field | type | meaning |\n" * 8)  # rows of a table read as rows


def test_a_command_page_with_headings_and_a_synopsis_is_not_debris():
    """npm's own docs: the page that answers "how do I produce a software bill of materials" was
    held back from the chat as table debris (six of its eight lines are short: headings, a fence)."""
    page = ("# npm-sbom\n\n### Synopsis\n\n```bash\nnpm sbom\n```\n\n### Description\n\n"
            "The `npm sbom` command generates a Software Bill of Materials (SBOM) listing the dependencies.\n"
            "SBOMs can be generated in either SPDX or CycloneDX format.")
    assert not looks_like_debris(page)
    code = "```\n" + "\n".join(["x = 1", "y = 2", "f(x)", "g(y)", "h()", "return"] * 2) + "\n```"
    assert not looks_like_debris(code)
    debris_under_heading = "## Layout\n" + "\n".join(f"│ {cell}" for cell in ["4", "CARD32", "OFFSET", "8", "x", "y"])
    assert looks_like_debris(debris_under_heading)


def test_a_passage_of_text_made_from_a_file_is_located_by_the_file_not_a_line_of_it(tree, make_kb):
    """Issue #52, 8: an e-mail was cited at `mail.eml:16`, a line of its rendered attachment, where the
    file's line 16 is quoted-printable; a picture at `:1`. Those are located by path alone."""
    from hermes_kb.agent.knowledgebase.context import cited_location, location

    mail = ("From: ops@example.org\nTo: team@example.org\nSubject: Rollout\nMIME-Version: 1.0\n"
            "Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n\n"
            + "Filler line.\n" * 20 + "The zeppelin rollout waits for the canary=20checks.\n")
    root = tree({"mail.eml": mail, "deploy.md": "# Deploy\n\n" + "Filler.\n" * 20 + "The zeppelin rollout goes on.\n"})
    kb = make_kb(root)
    kb.index()
    hits = {hit.path: hit for hit in kb.search("zeppelin rollout", k=5, mode="keyword").hits}
    assert location(hits["mail.eml"]) == str(root / "mail.eml") and cited_location(hits["mail.eml"]) == "docs/mail.eml"
    assert location(hits["deploy.md"]) == f"{root / 'deploy.md'}:{hits['deploy.md'].start_line}"
