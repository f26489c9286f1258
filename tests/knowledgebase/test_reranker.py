"""The relevance stage: the shipped model, the /v1/rerank engine, a host's judge, the blend, the cache
and the gate that reads the judgement."""

from __future__ import annotations

import json
import shutil

import pytest

from hermes_kb.agent.knowledgebase import context, reranker
from hermes_kb.agent.knowledgebase.context import AutoRetriever, looks_like_index
from hermes_kb.agent.knowledgebase.reranker import (EndpointReranker, LlmReranker, LocalReranker, RerankError,
                                                     parse_judgement)
from hermes_kb.agent.knowledgebase.service import KnowledgebaseError
from tests.helpers_http import RecordingServer

NOTES = {
    "archive.md": "# Archives\n\nTo create a gzipped archive of a folder run `tar -czf backup.tar.gz folder`. "
                  "The z flag compresses the archive with gzip.\n",
    "history.md": "# Town history\n\nThe town was founded in 1203 by monks who built a bridge over the river. "
                  "Archives of the monastery list every abbot since.\n",
    "cooking.md": "# Bread\n\nKnead the dough for ten minutes, then let it rise until doubled in size.\n",
}


@pytest.fixture(scope="module")
def local() -> LocalReranker:
    return LocalReranker()


class CountingEngine:
    """A judge that prefers passages holding `liked`, and counts what it was asked."""

    threshold, veto, reads_code, weights = 0.5, 0.0, True, reranker.RETRIEVAL_WEIGHT

    def __init__(self, liked: str, identity: str = "counting@1"):
        self.liked, self.identity, self.calls = liked, identity, []

    def reads(self, query: str) -> bool:
        return True

    def reads_passage(self, text: str) -> bool:
        return True

    def unread_words(self, query: str) -> list[str]:
        return [word for word in reranker.field_words(query) if word.startswith("zz")]

    def scores(self, query, passages):
        self.calls.append(len(passages))
        return [0.95 if self.liked in p else 0.05 for p in passages]


def test_the_shipped_model_judges_an_answer_above_a_look_alike_and_an_unrelated_passage(local):
    answer = "tar -czf backup.tar.gz folder creates a gzipped archive of the folder."
    look_alike = "The archive of the town council holds records from 1203; the folder of maps is gzipped for the web site."
    unrelated = "Knead the dough for ten minutes, then let it rise until doubled in size."
    scores = local.scores("how do I create a gzipped archive of a folder?", [look_alike, answer, unrelated])
    assert scores[1] > scores[0] > 0.0 and scores[1] > scores[2]
    assert scores[1] >= local.threshold > scores[2]
    assert local.identity.startswith(f"{local.card['name']}@{local.card['version']}#")


def test_the_shipped_model_is_small_and_records_its_hash():
    card = json.loads((reranker.MODEL_DIR / "card.json").read_text())
    assert (reranker.MODEL_DIR / "model.onnx").stat().st_size <= 25 * 1024 * 1024
    assert card["sha256"] and 0.0 < card["threshold"] < 1.0


def test_a_damaged_model_file_is_refused_with_one_sentence(tmp_path):
    folder = tmp_path / "reranker"
    shutil.copytree(reranker.MODEL_DIR, folder)
    with open(folder / "model.onnx", "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00\x01\x02\x03")
    with pytest.raises(RerankError, match="does not match its recorded hash"):
        LocalReranker(folder)


def test_the_model_reads_english_and_leaves_other_scripts_and_languages_to_retrieval(local):
    assert local.reads("how do I create a gzipped archive?")
    assert not local.reads("Wie erstelle ich ein komprimiertes Archiv eines Ordners?")
    assert not local.reads("如何创建压缩档案")
    assert not local.reads("Как создать архив?")


def test_an_english_question_naming_tools_is_read_though_their_names_are_spelt_letter_by_letter(local):
    assert local.reads("How do I install Node.js with nvm?")
    assert local.reads("How do I install nvm?")
    assert not local.reads("Wie installiere ich Node.js mit nvm?")
    assert not local.reads("如何安装 nvm?")


def test_both_runtimes_give_the_same_judgement():
    pytest.importorskip("openvino")
    passages = ["tar -czf backup.tar.gz folder creates a gzipped archive.", "The town was founded in 1203."]
    by_openvino = LocalReranker(runtime="openvino").scores("create a gzipped archive", passages)
    by_onnxruntime = LocalReranker(runtime="onnxruntime").scores("create a gzipped archive", passages)
    assert by_openvino == pytest.approx(by_onnxruntime, abs=0.03)


def test_search_reorders_by_judgement_and_records_it(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local")
    kb.index()
    result = kb.search("how do I make a gzipped archive of a folder", k=3)
    assert result.hits[0].path == "archive.md"
    assert all(h.rerank_score is not None for h in result.hits)
    assert result.rerank.engine.startswith("hermes-kb-relevance") and result.rerank.judged == len(result.hits)
    off = kb.search("how do I make a gzipped archive of a folder", k=3, rerank="off")
    assert off.rerank is None and all(h.rerank_score is None for h in off.hits)


def test_the_judge_reorders_and_scores_are_cached_by_query_and_passage(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local")
    kb.index()
    engine = CountingEngine("Knead")
    kb.rerankers._loaded["local"] = engine
    first = kb.search("archive folder dough", k=3)
    judged = len(first.hits)
    assert first.hits[0].path == "cooking.md" and first.hits[0].rerank_score == 0.95 and judged >= 2
    assert engine.calls == [judged]
    kb.search("archive folder dough", k=3)
    assert engine.calls == [judged]  # every passage's score came from the cache
    kb.search("archive folder bread dough", k=3)
    assert len(engine.calls) == 2  # another query is judged again


def test_an_engine_judges_as_deep_as_its_blend_reaches(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local")
    kb.index()
    engine = CountingEngine("Knead")
    engine.weights = ((2, 0.5),)  # a slower judge's card: two candidates
    kb.rerankers._loaded["local"] = engine
    result = kb.search("archive folder dough monks", k=3)
    assert engine.calls == [2]
    assert [h.rerank_score is not None for h in result.hits] == [True, True, False]
    assert kb.search("archive folder bread dough", k=1).hits[0].path == "cooking.md"  # two gathered for k=1
    assert engine.calls == [2, 2]


def test_an_exact_occurrence_stays_first_whatever_the_judge_says(tree, make_kb):
    kb = make_kb(tree({**NOTES, "codes.md": "# Codes\n\nThe error code is XK-4471 for a failed archive upload.\n"}),
                 rerank="local")
    kb.index()
    kb.rerankers._loaded["local"] = CountingEngine("Knead")
    hits = kb.search("XK-4471", k=3).hits
    assert hits[0].path == "codes.md" and "exact" in hits[0].found_by


def test_a_model_folder_the_user_names_replaces_the_shipped_one_card_and_all(tree, make_kb, tmp_path):
    folder = tmp_path / "my-judge"
    shutil.copytree(reranker.MODEL_DIR, folder)
    card = json.loads((folder / "card.json").read_text())
    card.update(name="my-judge", version="0.1", threshold=0.93, blend=[[2, 0.5]])
    (folder / "card.json").write_text(json.dumps(card))
    kb = make_kb(tree(NOTES), rerank="local", rerank_model_dir=str(folder))
    kb.index()
    result = kb.search("how do I make a gzipped archive of a folder", k=3)
    assert result.rerank.engine.startswith("my-judge@0.1#") and result.rerank.threshold == 0.93
    assert kb.rerankers.for_mode("auto", kb.config).weights == ((2, 0.5),)
    shipped = make_kb(tree(NOTES), rerank="local")
    assert shipped.rerankers.for_mode("auto", shipped.config).identity.startswith("hermes-kb-relevance")


def test_a_model_folder_that_is_not_there_is_one_sentence_for_local_and_retrievals_order_for_auto(tree, make_kb, tmp_path):
    missing = tmp_path / "no-judge"
    kb = make_kb(tree(NOTES), rerank="local", rerank_model_dir=str(missing))
    kb.index()
    with pytest.raises(KnowledgebaseError, match=f"missing from {missing}; check knowledgebase.rerank_model_dir"):
        kb.search("gzipped archive folder", k=3)
    kb = make_kb(tree(NOTES), rerank="auto", rerank_model_dir=str(missing))
    kb.index()
    expected = [h.path for h in kb.search("gzipped archive folder", k=3, rerank="off").hits]
    result = kb.search("gzipped archive folder", k=3)
    assert [h.path for h in result.hits] == expected and all(h.rerank_score is None for h in result.hits)


def test_a_failing_engine_leaves_retrieval_order_and_says_why(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local")
    kb.index()

    class Broken(CountingEngine):
        def scores(self, query, passages):
            raise RerankError("the engine is down")

    kb.rerankers._loaded["local"] = Broken("x")
    expected = [h.path for h in kb.search("gzipped archive folder", k=3, rerank="off").hits]
    result = kb.search("gzipped archive folder", k=3)
    assert [h.path for h in result.hits] == expected and result.rerank.skipped == "the engine is down"


def test_a_query_the_model_cannot_read_is_not_judged(tree, make_kb):
    kb = make_kb(tree({"de.md": "# Archiv\n\nMit tar -czf erstellt man ein komprimiertes Archiv.\n"}), rerank="local")
    kb.index()
    result = kb.search("Wie erstellt man ein komprimiertes Archiv?", k=3)
    assert result.hits and result.hits[0].rerank_score is None
    assert "does not read" in result.rerank.skipped


def test_a_fields_words_are_plain_words_and_acronyms_not_identifiers():
    assert reranker.field_words("Interferon-induced genes in H2A.Z, it's CTCF; see filehandle.appendFile") == [
        "interferon", "induced", "genes", "ctcf", "see"]
    assert reranker.field_words("Rapamycin/triacylglycerols \u2014 non\u2011toxic GAPDH\u2019s \u201cgoitre\u201d") == [
        "rapamycin", "triacylglycerols", "non", "toxic", "gapdh", "goitre"]
    assert reranker.field_words("") == [] and reranker.field_words(" \n ") == []


def test_the_shipped_model_knows_which_words_it_never_read(local):
    card = json.loads((reranker.MODEL_DIR / "card.json").read_text())
    assert card["vocabulary"]["words"] == len(local._vocabulary) > 50000
    assert local.unread_words("How do I create a gzipped archive of a folder with tar?") == []
    field = local.unread_words("Rapamycin decreases the concentration of triacylglycerols in fruit flies.")
    assert "triacylglycerols" in field and len(field) >= reranker.UNREAD_FIELD
    assert local.unread_words("How do I install Node.js with nvm?") == []
    assert local.unread_words("What is the time complexity of quicksort?") == ["quicksort"]  # one: still judged


def test_a_model_folder_without_a_readable_vocabulary_counts_every_word_as_read(tmp_path):
    folder = tmp_path / "reranker"
    folder.mkdir()
    for name in ("model.onnx", "card.json", "tokenizer.json"):
        (folder / name).symlink_to(reranker.MODEL_DIR / name)
    claim = "Rapamycin decreases triacylglycerols in fruit flies."
    assert LocalReranker(folder).unread_words(claim) == []
    shipped = (reranker.MODEL_DIR / reranker.VOCABULARY).read_bytes()
    for damaged in (shipped[:len(shipped) // 2], shipped[:20] + bytes(200) + shipped[220:]):
        (folder / reranker.VOCABULARY).write_bytes(damaged)
        judge = LocalReranker(folder)  # the judge itself still loads and judges
        assert judge.unread_words(claim) == [] and judge.scores(claim, ["Fruit flies."])


def test_two_unknown_words_in_a_long_message_are_not_a_field(local):
    claim = "Rapamycin decreases the concentration of triacylglycerols in fruit flies."
    assert reranker.unread_field(local, claim) == ("rapamycin", "triacylglycerols")
    pasted = (claim + " The town was founded by monks who built a bridge over the river, kept bees, brewed beer"
              " and copied books until the abbey burned down in a winter storm that also flooded the market square.")
    assert len(set(reranker.field_words(pasted))) > reranker.UNREAD_FIELD / reranker.UNREAD_SHARE
    assert reranker.unread_field(local, pasted) == ()  # two unknown words among 34: names in passing


def test_in_a_field_the_model_never_read_its_veto_does_not_count_and_its_judgement_still_ranks(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local", relevance_threshold=0.0)  # retrieval alone would always open it
    kb.index()
    engine = CountingEngine("nothing holds this")  # calls a word unread when it starts with "zz"
    engine.threshold, engine.veto = 0.99, 0.1  # every passage judged 0.05: under the veto
    kb.rerankers._loaded["local"] = engine
    field = kb.search("how do I make a gzipped archive zzfoo zzbar?", k=3)
    assert field.rerank.unread == ("zzfoo", "zzbar") and field.rerank.veto == 0.0
    assert all(h.rerank_score == 0.05 for h in field.hits)
    one_name = kb.search("how do I make a gzipped archive zzfoo?", k=3)
    assert one_name.rerank.unread == () and one_name.rerank.veto == 0.1
    hook = AutoRetriever(kb, kb.config)
    assert hook.block_for("how do I make a gzipped archive zzfoo zzbar?") is not None
    assert hook.block_for("how do I make a gzipped archive zzfoo?") is None  # one unknown name: vetoed


def test_the_model_reads_passages_in_scripts_it_learned_and_no_others(local):
    assert local.reads_passage("To create a gzipped archive of a folder run tar -czf backup.tar.gz folder.")
    assert local.reads_passage("Mit tar -czf erstellt man ein komprimiertes Archiv eines Ordners.")
    assert not local.reads_passage("لإنشاء أرشيف مضغوط لمجلد، شغّل الأمر tar مع الخيارات المناسبة.")
    assert not local.reads_passage("要创建文件夹的压缩档案，请运行 tar 命令。")
    assert not local.reads_passage("Чтобы создать сжатый архив папки, выполните команду tar.")


def test_an_english_question_about_pages_in_another_script_is_left_to_retrieval(tree, make_kb):
    pages = {"ar1.md": "# الأرشيف\n\nلإنشاء أرشيف مضغوط لمجلد، شغّل الأمر tar مع الخيارات المناسبة.\n",
             "ar2.md": "# التاريخ\n\nتأسست المدينة عام 1203 على يد رهبان بنوا جسرا فوق النهر.\n",
             "zh.md": "# 面包\n\n揉面十分钟，然后让它发酵到两倍大。\n"}
    kb = make_kb(tree(pages), rerank="local")
    kb.index()
    result = kb.search("How do I create a tar archive?", k=3)
    assert result.hits and all(h.rerank_score is None for h in result.hits)
    assert "script" in result.rerank.skipped


def test_the_endpoint_engine_speaks_the_rerank_api_of_a_local_server(tree, make_kb, monkeypatch):
    def cohere(body):
        return 200, {"results": [{"index": i, "relevance_score": 0.9 if "Knead" in d else 0.1}
                                 for i, d in enumerate(body["documents"])]}

    monkeypatch.setenv("RERANK_KEY", "secret-token")
    with RecordingServer({"/v1/rerank": cohere}) as server:
        kb = make_kb(tree(NOTES), rerank="endpoint", rerank_url=f"{server.url}/v1/rerank",
                     rerank_model="bge-reranker", rerank_api_key_env="RERANK_KEY")
        kb.index()
        result = kb.search("archive folder dough", k=3)
    assert result.hits[0].path == "cooking.md" and result.hits[0].rerank_score == 0.9
    path, headers, body = server.requests[0]
    assert body["model"] == "bge-reranker" and body["query"] == "archive folder dough"
    assert headers["Authorization"] == "Bearer secret-token"


@pytest.mark.parametrize("answer, expected", [
    ([{"index": 1, "score": 2.0}, {"index": 0, "score": -2.0}], [0.1192, 0.8808]),  # TEI: a bare list of logits
    ({"data": [{"index": 0, "relevance_score": 0.3}, {"index": 1, "relevance_score": 0.6}]}, [0.3, 0.6]),  # Voyage
])
def test_the_endpoint_reads_each_servers_answer_shape(answer, expected):
    with RecordingServer({"/rerank": lambda body: (200, json.dumps(answer).encode())}) as server:
        engine = EndpointReranker(f"{server.url}/rerank")
        assert engine.scores("q", ["a", "b"]) == pytest.approx(expected, abs=1e-3)


def test_an_endpoint_that_fails_or_answers_nonsense_is_one_sentence():
    with RecordingServer({"/rerank": lambda body: (500, {"error": "boom"}),
                          "/odd": lambda body: (200, {"results": [{"index": 0}]})}) as server:
        with pytest.raises(RerankError, match="failed"):
            EndpointReranker(f"{server.url}/rerank").scores("q", ["a"])
        with pytest.raises(RerankError, match="did not score every passage|unexpected shape"):
            EndpointReranker(f"{server.url}/odd").scores("q", ["a", "b"])


def test_modes_that_cannot_serve_say_so(tree, make_kb, monkeypatch):
    kb = make_kb(tree(NOTES))
    kb.index()
    with pytest.raises(KnowledgebaseError, match="rerank_url"):
        kb.search("archive", rerank="endpoint")
    with pytest.raises(KnowledgebaseError, match="host agent's own model"):
        kb.search("archive", rerank="llm")
    with pytest.raises(KnowledgebaseError, match="rerank must be one of"):
        kb.search("archive", rerank="sometimes")
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    kb = make_kb(tree(NOTES), rerank="endpoint", rerank_url="http://127.0.0.1:9/v1/rerank", rerank_api_key_env="NO_SUCH_KEY")
    kb.index()
    with pytest.raises(KnowledgebaseError, match=r"\$NO_SUCH_KEY"):
        kb.search("archive")


def test_a_hosts_llm_judges_within_its_time_and_fails_open():
    def judge(query, passages, seconds):
        return parse_judgement("0: 9\n1: 2", len(passages))

    assert LlmReranker(judge).scores("q", ["a", "b"]) == [0.9, 0.2]

    def slow(query, passages, seconds):
        raise TimeoutError(f"no answer within {seconds} s")

    with pytest.raises(RerankError, match="no answer within"):
        LlmReranker(slow, timeout_s=0.5).scores("q", ["a"])
    assert parse_judgement("[0]: 10\nnonsense\n2 = 4.5", 3) == [1.0, 0.0, 0.45]


def test_the_gate_opens_on_the_judgement_not_on_retrievals_confidence(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local", relevance_threshold=2.0)  # retrieval alone could never open it
    kb.index()
    kb.rerankers._loaded["local"] = CountingEngine("gzipped")
    hook = AutoRetriever(kb, kb.config)
    block = hook.block_for("how do I make a gzipped archive of a folder?")
    assert block is not None and [h.path for h in block.hits] == ["archive.md"]
    kb.rerankers._loaded["local"] = CountingEngine("nothing holds this", identity="another@1")
    hook.reset()
    assert hook.block_for("how do I make a gzipped archive of a folder?") is None


def test_tables_of_contents_and_back_of_book_indexes_are_never_injected():
    index_page = "\n".join(["Index", "quicksort, 213, 217", "radix sort, 219", "recursion, 45-47, 102",
                            "red-black tree, 310", "relational algebra, 12", "rounding . . . . 77"])
    toc = "\n".join(f"{n}.{m} Section title number {m} ........ {n * 10 + m}" for n in range(1, 3) for m in range(1, 5))
    prose = "\n".join(["The planner estimates 17 rows.", "It then sorts them with quicksort in 23 ms.",
                       "A hash join would need 40 MB.", "Memory is limited by work_mem.", "Set it per session.",
                       "See chapter 14 for details."])
    assert looks_like_index(index_page) and looks_like_index(toc) and not looks_like_index(prose)


def test_a_confident_retrieval_is_vetoed_when_the_judge_is_sure_the_passage_does_not_answer(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local", relevance_threshold=0.0)  # retrieval alone would always open it
    kb.index()
    for liked, injected in (("nothing holds this", False), ("gzipped", True)):
        engine = CountingEngine(liked, identity=f"veto-{liked}")
        engine.threshold, engine.veto = 0.99, 0.1  # 0.05 for a passage it dislikes: under the veto
        kb.rerankers._loaded["local"] = engine
        block = AutoRetriever(kb, kb.config).block_for("how do I make a gzipped archive of a folder?")
        assert (block is not None) is injected


def test_rerank_off_written_plainly_in_yaml_means_off():
    import yaml

    from hermes_kb.agent.knowledgebase.config import parse_knowledgebase

    assert parse_knowledgebase(yaml.safe_load("rerank: off")).rerank == "off"  # YAML 1.1 reads `off` as false
    assert parse_knowledgebase(yaml.safe_load("rerank: endpoint")).rerank == "endpoint"


def test_candidates_that_are_mostly_program_source_keep_retrievals_order_for_an_engine_that_cannot_read_code(tree, make_kb):
    code = {f"m{i}.py": f"def split_line_{i}(text, width):\n    rows = []\n    for i in range(0, len(text), width):\n"
                         f"        rows.append(text[i:i + width])\n    return rows\n" for i in range(4)}
    kb = make_kb(tree(code), rerank="local")
    kb.index()
    engine = CountingEngine("split_line_3")
    engine.reads_code = False
    kb.rerankers._loaded["local"] = engine
    result = kb.search("how do I split a line of text into rows", k=4)
    assert result.hits and all(h.rerank_score is None for h in result.hits) and engine.calls == []
    assert "program source" in result.rerank.skipped


def test_the_shipped_model_reads_code(local):
    assert local.reads_code
    wanted = ("def read_config(path):\n    with open(path, encoding='utf-8') as handle:\n"
              "        return yaml.safe_load(handle) or {}")
    other = ("def write_log(lines, path):\n    with open(path, 'a', encoding='utf-8') as handle:\n"
             "        handle.writelines(line + '\\n' for line in lines)")
    scores = local.scores("load the YAML settings file into a dict", [other, wanted])
    assert scores[1] > scores[0]


def test_a_keyword_search_loads_no_relevance_model(tree, make_kb):
    kb = make_kb(tree(NOTES), rerank="local")
    kb.index()
    assert kb.search("gzipped", mode="keyword").hits and kb.rerankers._loaded == {}
    kb.search("gzipped archive")
    assert kb.rerankers._loaded["local"] is not None


@pytest.mark.parametrize("rerank, liked, bar, veto, retrieval_bar, expected", [
    ("local", "gzipped", 0.5, 0.1, 2.0, context.JUDGED_ANSWER),
    ("local", "gzipped", 0.99, 0.1, 0.0, context.CONFIDENT),
    ("local", "nothing holds this", 0.99, 0.1, 0.0, context.VETOED),
    ("local", "nothing holds this", 0.5, 0.0, 2.0, context.UNDER_BAR),
    ("off", "", 0.5, 0.0, 0.0, context.CONFIDENT_UNJUDGED),
    ("off", "", 0.5, 0.0, 2.0, context.UNSURE_UNJUDGED),
])
def test_the_gate_says_why_it_opened_or_stayed_shut(tree, make_kb, rerank, liked, bar, veto, retrieval_bar, expected):
    kb = make_kb(tree(NOTES), rerank=rerank, relevance_threshold=retrieval_bar)
    kb.index()
    if rerank == "local":
        engine = CountingEngine(liked, identity=f"why-{liked}-{bar}")
        engine.threshold, engine.veto = bar, veto
        kb.rerankers._loaded["local"] = engine
    question = "how do I make a gzipped archive of a folder?"
    hook = AutoRetriever(kb, kb.config)
    query, forced, result = hook.searched(question)
    assert (query, forced) == (question, None)
    assert hook.verdict(result.hits, result.rerank, setting=result.setting) == expected
    assert (AutoRetriever(kb, kb.config).block_for(question) is not None) == (expected in context.OPENING)


def test_a_message_asking_for_no_search_is_not_searched(tree, make_kb):
    kb = make_kb(tree(NOTES))
    kb.index()
    assert AutoRetriever(kb, kb.config).searched("thanks!") is None
