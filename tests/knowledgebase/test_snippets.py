"""Snippets show where a hit matched, with the words the keyword search matched marked."""

from hypothesis import given, settings, strategies as st

from hermes_kb.agent.knowledgebase import analysis, snippets


def marked(snippet: snippets.Snippet) -> list[str]:
    return [snippet.text[s:e] for s, e in snippet.highlights]


def test_the_window_moves_to_the_match_and_starts_at_its_sentence():
    text = " ".join(f"filler{i} text." for i in range(80)) + " Rotating the signing keys needs two people. More."
    snippet = snippets.make(text, "markdown", ["signing", "keys"])
    assert snippet.text.startswith("…Rotating the signing keys needs two people.")
    assert marked(snippet) == ["signing", "keys"]
    assert len(snippet.text) <= snippets.PROSE_CHARS + 2


def test_a_chunk_matching_at_its_start_keeps_its_start():
    text = "Rollback steps come first. " + "padding words here. " * 40 + "rollback again."
    snippet = snippets.make(text, "text", ["rollback"])
    assert snippet.text.startswith("Rollback steps") and snippet.text.endswith("…")
    assert marked(snippet) == ["Rollback"]


def test_stems_match_like_the_keyword_search():
    snippet = snippets.make("The indexes were rebuilt; indexing is slow.", "text", ["index"])
    assert marked(snippet) == ["indexes", "indexing"]


def test_markup_is_not_shown_in_prose():
    text = "## Install\n\nRun **make** and see [the guide](https://example.org/guide) <br/> then `make test`.\n"
    snippet = snippets.make(text, "markdown", ["guide"])
    assert snippet.text == "Install Run make and see the guide then `make test`."
    assert marked(snippet) == ["guide"]


def test_chinese_is_marked_by_the_bigrams_the_search_matched():
    snippet = snippets.make("部署指南：先备份，再执行数据库迁移，失败时回滚。", "markdown", ["数据库迁移"])
    assert marked(snippet) == ["数据库迁移"]
    snippet = snippets.make("部署指南：先备份，再执行数据库迁移，失败时回滚。", "markdown", ["回滚"])
    assert marked(snippet) == ["回滚"]


def test_a_word_with_vowel_signs_is_marked_whole():
    snippet = snippets.make("यह हिंदी भाषा में लिखा गया है", "text", ["हिंदी"])
    assert marked(snippet) == ["हिंदी"]


def test_text_without_spaces_is_cut_between_graphemes():
    thai = "การตั้งค่าเซิร์ฟเวอร์" * 40
    snippet = snippets.make(thai, "text", [])
    body = snippet.text.rstrip("…")
    assert thai.startswith(body)
    boundaries = {m.end() for m in analysis.regex.finditer(r"\X", thai)}
    assert 0 < len(body) < len(thai) and len(body) in boundaries  # never inside a cluster


def test_code_keeps_its_lines_and_shows_the_lines_that_match():
    lines = [f"    value_{i} = compute({i})" for i in range(30)] + ["    return rotate_keys(value_29)"]
    code = "def build():\n" + "\n".join(lines)
    snippet = snippets.make(code, "python", ["rotate_keys"])
    shown = snippet.text.split("\n")
    assert shown[0] == "…" and "return rotate_keys(value_29)" in shown[-1]
    assert len(shown) <= snippets.LINES + 2
    assert marked(snippet) == ["rotate", "keys"]


def test_a_long_line_is_cut_around_its_match():
    line = "x = '" + "y " * 150 + "needle' + rest" + " z" * 50
    snippet = snippets.make(line, "python", ["needle"])
    assert snippet.text.startswith("…") and len(snippet.text) <= snippets.LINE_CHARS + 1
    assert marked(snippet) == ["needle"]


def test_lines_give_each_line_its_own_offsets():
    snippet = snippets.make("- alpha one\n- beta two\n- alpha three", "markdown", ["alpha"])
    assert [(line, [line[s:e] for s, e in marks]) for line, marks in snippet.lines()] == [
        ("- alpha one", ["alpha"]), ("- beta two", []), ("- alpha three", ["alpha"])]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=800), st.lists(st.text(min_size=1, max_size=8), max_size=3),
       st.sampled_from(["markdown", "python", "text"]))
def test_any_text_gives_highlights_inside_the_snippet(text, words, kind):
    snippet = snippets.make(text, kind, words)
    for start, end in snippet.highlights:
        assert 0 <= start < end <= len(snippet.text)
    for line, marks in snippet.lines():
        assert all(0 <= s < e <= len(line) for s, e in marks)


def test_an_index_of_one_language_highlights_in_it_without_the_detector(monkeypatch):
    """A cold search loaded the language detector (0.4 s) for each snippet of a text with a dash in it;
    an index whose chunks were all stemmed in one language is highlighted in that language."""
    def no_detector(text):
        raise AssertionError("the detector ran")

    monkeypatch.setattr(analysis, "chunk_language", no_detector)
    text = "Die Datenbanken werden morgen migriert — und alle Tabellen werden danach neu erstellt."
    assert marked(snippets.make(text, "text", ["Datenbank"], ("german",))) == ["Datenbanken"]
    assert marked(snippets.make("The indexes — rebuilt.", "text", ["index"], (analysis.ENGLISH,))) == ["indexes"]


def test_an_index_of_several_languages_still_asks_the_detector_per_chunk():
    text = "Die Datenbanken werden morgen migriert — und alle Tabellen werden danach neu erstellt."
    snippet = snippets.make(text, "text", ["Datenbank"], (analysis.ENGLISH, "german"))
    assert marked(snippet) == ["Datenbanken"]
