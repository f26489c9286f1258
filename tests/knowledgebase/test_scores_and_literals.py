"""Scores that mean the same in every index, and exact strings ranked first (#15, points 3 and 5)."""

import pytest

from hermes_kb.agent.knowledgebase.retriever import EXACT_FLOOR, literals


def filler(n: int, words: str) -> dict[str, str]:
    return {f"page{i}.md": f"# Page {i}\n\n{words} number {i} and some more text about it.\n" for i in range(n)}


def test_literals_are_what_a_user_types_letter_for_letter():
    assert literals("ghcr.io/astral-sh/uv:0.12.0-debian-slim") == ["ghcr.io/astral-sh/uv:0.12.0-debian-slim"]
    assert literals("writer_lock") == ["writer_lock"]
    assert literals("--no-install-project") == ["--no-install-project"]
    assert literals("divideLine") == ["divideLine"]
    assert literals('the "release train" schedule') == ["release train", 'the "release train" schedule']
    assert literals("error: the following arguments are required: query") == [
        "error: the following arguments are required: query"]
    assert literals("deploy") == [] and literals("how deploy") == []
    # a name inside a question is asked about, not quoted: no exact-first ranking for it
    assert literals("how to read JSON in Node.js") == ["how to read JSON in Node.js"]
    assert literals("JavaScript closures") == [] and literals("what does writer_lock do?") == ["what does writer_lock do?"]


def test_an_exact_version_string_ranks_its_only_file_first(tree, make_kb):
    docs = {**filler(30, "Use uv with docker images: the debian slim image of uv 0.12 pins astral tools from ghcr io."),
            "docker.md": "# Docker\n\nPin the image:\n\n    FROM ghcr.io/astral-sh/uv:0.12.0-debian-slim\n",
            "decoy.md": "# Decoy\n\nghcr io astral sh uv 0 12 0 debian slim, spelled apart.\n"}
    kb = make_kb(tree(docs))
    kb.index()
    for mode in ("keyword", "hybrid"):
        hits = kb.search("ghcr.io/astral-sh/uv:0.12.0-debian-slim", k=3, mode=mode).hits
        assert hits[0].path == "docker.md", mode
        assert hits[0].score >= EXACT_FLOOR and "exact" in hits[0].found_by
        assert all("exact" not in h.found_by for h in hits[1:])  # the same words apart are no exact occurrence


def test_keyword_scores_compare_across_indexes(tmp_path, tree, make_kb):
    answers = tree({**filler(20, "Notes on the build server."),
                    "tags.md": "# Image tags\n\nTag the docker image with the release tag before you push the image.\n"},
                   tmp_path / "answers")
    noise = tree({**filler(20, "Colours of the theme."), "palette.md": "# Palette\n\nThe tag colour is teal.\n"},
                 tmp_path / "noise")
    kb = make_kb(answers, noise)
    kb.index()
    hits = kb.search("docker image tag", k=5, mode="keyword").hits
    by_path = {h.path: h.score for h in hits}
    assert hits[0].path == "tags.md"
    # the noise index's best hit matched one word of three: it no longer scores like a full match
    assert by_path.get("palette.md", 0.0) < 0.5 * by_path["tags.md"]
    assert by_path["tags.md"] > 0.9


def test_a_chinese_message_sharing_one_common_word_with_notes_is_no_full_keyword_match(tree, make_kb):
    """A run of Han text is as many pieces of evidence as it has bigrams: sharing "怎么" ("how") with
    a note is a small share of a question, not all of it (the chat hook injected such notes)."""
    docs = {**{f"recipe{n}.md": f"# 菜谱 {n}\n\n怎么做第{n}道菜：先洗菜，再切菜，最后下锅。\n" for n in range(10)},
            **filler(20, "Notes on the build server."),
            "deploy.md": "# 部署指南\n\n数据库迁移失败时，先回滚再重新部署。\n"}
    kb = make_kb(tree(docs))
    kb.index()
    unrelated = kb.search("怎么给我的邮箱账户设置两步验证", k=3, mode="keyword").hits
    assert all(h.score < 0.3 for h in unrelated), [(h.path, h.score) for h in unrelated]
    answer = kb.search("数据库迁移失败怎么回滚", k=1, mode="keyword").hits[0]
    assert answer.path == "deploy.md" and answer.score > 0.5, answer.score


def test_identifiers_match_by_their_parts_and_keep_exact_matches(tree, make_kb):
    from hermes_kb.agent.knowledgebase.retriever import identifier_terms

    assert identifier_terms("divideLine", ["divideline"]) == ["divide", "line"]
    assert "divideline" in identifier_terms("divide line", ["divide", "line"])
    files = {**filler(20, "Geometry helpers for shapes and points."),
             "snake.py": "def divide_line(segment, parts):\n    return [segment / parts] * parts\n",
             "camel.js": "function divideLine(segment, parts) {\n  return Array(parts).fill(segment / parts);\n}\n",
             "pascal.cs": "class Geometry {\n  public static double[] DivideLine(double segment, int parts) { return null; }\n}\n"}
    kb = make_kb(tree(files))
    kb.index()
    found = {h.path for h in kb.search("divide line", k=3, mode="keyword").hits}
    assert found == {"snake.py", "camel.js", "pascal.cs"}
    for identifier, path in (("divideLine", "camel.js"), ("DivideLine", "pascal.cs"), ("divide_line", "snake.py")):
        hits = kb.search(identifier, k=3, mode="keyword").hits
        assert hits[0].path == path and "exact" in hits[0].found_by, identifier  # the exact spelling first
        assert {h.path for h in hits} == {"snake.py", "camel.js", "pascal.cs"}, identifier  # and its other spellings


@pytest.mark.parametrize("common", [False, True])
def test_the_exact_pass_finds_the_same_chunks_with_or_without_the_phrase_query(tree, make_kb, monkeypatch, common):
    """A literal whose terms few chunks hold together is checked in those chunks' text. Otherwise a
    whole query taken literally is checked in the text of the chunks the keyword pass ranked first (a
    phrase query over every word of it costs most of a search at 1M chunks), and a quoted phrase goes
    to FTS5's phrase query. Either way the same chunks are marked exact."""
    from hermes_kb.agent.knowledgebase.index import store
    from hermes_kb.agent.knowledgebase.index.keyword_cache import KeywordCache

    word = "ordinary" if common else "zeppelinx"
    docs = {**filler(60, "An ordinary deployment note: train the release, restart after the ordinary run."),
            "yes.md": f"# Yes\n\nRestart the {word} release train after the deploy.\n",
            "apart.md": f"# Apart\n\nThe {word} train. Restart it after a release.\n"}
    kb = make_kb(tree(docs))
    kb.index()
    phrases = []
    original = store.IndexStore.keyword_phrase
    monkeypatch.setattr(store.IndexStore, "keyword_phrase",
                        lambda self, literal, k, query=None: phrases.append(literal) or original(self, literal, k, query))
    query = f"restart the {word} release train"
    quoted = f'"{word} release" restart'

    def exact(text: str) -> list[str]:
        return [h.path for h in kb.search(text, k=5, mode="keyword").hits if "exact" in h.found_by]

    assert exact(query) == ["yes.md"] and exact(quoted) == ["yes.md"]
    # With a rare word the keyword copy shows which chunks hold the words: no phrase query at all.
    assert phrases == ([f"{word} release"] if common else [])
    phrases.clear()
    monkeypatch.setattr(KeywordCache, "holders_of_all_terms", lambda *_, **__: None)  # as if every term were common
    assert exact(query) == ["yes.md"] and phrases == []  # the whole query: the ranked chunks' text
    assert exact(quoted) == ["yes.md"] and phrases == [f"{word} release"]  # a quoted phrase: FTS5


def test_a_quoted_name_in_a_pasted_error_does_not_outrank_the_answer(tree, make_kb):
    """#27: `FATAL: password authentication failed for user "app"` ranked four pages that merely hold
    the word app above the page about password authentication."""
    assert literals('FATAL: password authentication failed for user "app"') == [
        'FATAL: password authentication failed for user "app"']
    assert literals('how do I pass "--no-deps" to it') == ["--no-deps", 'how do I pass "--no-deps" to it']
    assert literals('what does "app" mean') == ["app", 'what does "app" mean']  # the query is about it
    docs = {f"app{i}.md": f"# Callback {i}\n\nThe app callback {i} registers the app with the SSL layer.\n"
            for i in range(4)}
    docs["auth.md"] = ("# Password authentication\n\nWhen password authentication failed for a user, check "
                       "pg_hba.conf and the user's password.\n")
    kb = make_kb(tree(docs))
    kb.index()
    hits = kb.search('FATAL: password authentication failed for user "app"', k=3).hits
    assert hits[0].path == "auth.md" and not any("exact" in h.found_by for h in hits)
