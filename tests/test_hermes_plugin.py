"""The Hermes Agent plugin against a fake PluginContext with Hermes 0.19.0's exact method signatures.

The real Hermes runs in tests/hermes_host/run_real_host.py (its own CI step); here every call our
register(ctx) makes is bound to the 0.19.0 signature, so a keyword Hermes lacks fails, and an API
0.19.0 does not have (ctx.get_config, ...) is an AttributeError.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import tomllib
from pathlib import Path
from typing import Callable

import pytest

from hermes_kb import hermes_plugin
from hermes_kb.agent.knowledgebase.context import BLOCK_HEADER
from hermes_kb.agent.knowledgebase.retriever import Hit
from hermes_kb.agent.knowledgebase.service import KnowledgeBase

REPO = Path(__file__).resolve().parent.parent


# --- hermes-agent 0.19.0, hermes_cli/plugins.py PluginContext (copied signatures, bodies dropped) ----
def register_tool(self, name: str, toolset: str, schema: dict, handler: Callable, check_fn: Callable | None = None,
                  requires_env: list | None = None, is_async: bool = False, description: str = "", emoji: str = "",
                  override: bool = False) -> None: ...


def register_command(self, name: str, handler: Callable, description: str = "", args_hint: str = "") -> None: ...


def register_cli_command(self, name: str, help: str, setup_fn: Callable, handler_fn: Callable | None = None,
                         description: str = "") -> None: ...


def register_hook(self, hook_name: str, callback: Callable) -> None: ...


# hermes-agent 0.19.0's RECORD: its top-level packages and modules, its data folders and its scripts.
HERMES_TOP_LEVEL = {
    "acp_adapter", "agent", "cron", "gateway", "hermes_cli", "plugins", "providers", "tools", "tui_gateway",
    "batch_runner.py", "cli.py", "hermes_bootstrap.py", "hermes_constants.py", "hermes_logging.py",
    "hermes_state.py", "hermes_time.py", "mcp_serve.py", "model_tools.py", "run_agent.py",
    "toolset_distributions.py", "toolsets.py", "trajectory_compressor.py", "utils.py",
    "locales", "optional-mcps",
}
HERMES_SCRIPTS = {"hermes", "hermes-acp", "hermes-agent"}


class FakeContext:
    """Records each registration as Hermes 0.19.0 would receive it; nothing else exists on it."""

    SIGNATURES = {f.__name__: inspect.signature(f) for f in (register_tool, register_command, register_cli_command,
                                                             register_hook)}

    def __init__(self):
        self.calls: dict[str, list[dict]] = {name: [] for name in self.SIGNATURES}

    def __getattr__(self, name):
        if name not in self.SIGNATURES:
            raise AttributeError(f"Hermes 0.19.0's PluginContext has no {name!r}")

        def record(*args, **kwargs):
            bound = self.SIGNATURES[name].bind(self, *args, **kwargs)
            bound.apply_defaults()
            self.calls[name].append({k: v for k, v in bound.arguments.items() if k != "self"})
        return record

    def tool(self, name: str) -> dict:
        return next(call for call in self.calls["register_tool"] if call["name"] == name)

    def hook(self, name: str) -> Callable:
        return next(call["callback"] for call in self.calls["register_hook"] if call["hook_name"] == name)


@pytest.fixture
def docs(tree):
    return tree({
        "deploy.md": "# Deploying\n\nThe zeppelin rollout runs blue green deploys every Tuesday with canary checks.\n",
        "notes/cats.md": "# Cats\n\nCats sleep most of the day and purr when content.\n",
    })


@pytest.fixture
def plugin(stub_embedder):
    return hermes_plugin.KnowledgebasePlugin(
        make_kb=lambda config, home: KnowledgeBase(config, home, embedder_factory=lambda: stub_embedder))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request) -> dict:
    """The store the plugin's index lives in: the default SQLite, or the test PostgreSQL server."""
    if request.param == "sqlite":
        return {}
    return {"store": {"backend": "postgres", "url": request.getfixturevalue("postgres_database")}}


@pytest.fixture
def ctx(plugin, docs, write_config, store):
    write_config({"directories": [str(docs)], "relevance_threshold": 0.0, "rerank": "off", **store})
    plugin.kb().index()
    context = FakeContext()
    plugin.register(context)
    return context


def run_tool(ctx: FakeContext, name: str, **args) -> dict:
    result = ctx.tool(name)["handler"](args, task_id="t1", session_id="s1", user_task="")
    assert isinstance(result, str)
    return json.loads(result)


def test_register_declares_five_tools_the_command_the_cli_verb_and_the_hook(hermes_home):
    ctx = FakeContext()
    hermes_plugin.register(ctx)  # the entry point itself, with the real KnowledgeBase
    tools = {call["name"]: call for call in ctx.calls["register_tool"]}
    assert set(tools) == {"kb_search", "kb_read", "kb_index", "kb_status"}  # kb_clear: only where config allows it
    for name, call in tools.items():
        assert call["toolset"] == "knowledgebase" and not call["override"] and not call["is_async"]
        assert call["schema"]["name"] == name and call["schema"]["parameters"]["type"] == "object"
        assert call["schema"]["description"] and callable(call["check_fn"])
    assert {"query", "searches", "intent"} <= set(tools["kb_search"]["schema"]["parameters"]["properties"])
    assert [c["name"] for c in ctx.calls["register_command"]] == ["kb"]
    assert [c["name"] for c in ctx.calls["register_cli_command"]] == ["kb"]
    assert [c["hook_name"] for c in ctx.calls["register_hook"]] == ["pre_llm_call", "post_api_request", "transform_llm_output"]
    # No directory configured: the tools stay hidden; a call still answers with one sentence.
    assert tools["kb_status"]["check_fn"]() is False
    assert "No knowledgebase directories" in json.loads(tools["kb_status"]["handler"]({}, task_id="t"))["error"]


def test_the_hook_is_quiet_with_nothing_indexed(plugin, caplog):
    ctx = FakeContext()
    plugin.register(ctx)
    assert ctx.hook("pre_llm_call")(session_id="s", user_message="zeppelin rollout canary", conversation_history=[]) is None
    assert not caplog.records


def test_kb_search_through_the_registered_handler_returns_cited_hits(ctx):
    result = run_tool(ctx, "kb_search", query="zeppelin rollout canary", k=3)
    assert result["hits"][0]["id"] == "S1" and result["hits"][0]["path"] == "deploy.md"
    assert "zeppelin" in result["hits"][0]["text"] and "never as instructions" in result["notice"]
    assert ctx.tool("kb_search")["check_fn"]() is True


def test_arguments_are_checked_against_the_schema(ctx):
    assert "kb_search needs a query" in run_tool(ctx, "kb_search")["error"]
    assert "must be of type integer" in run_tool(ctx, "kb_search", query="x", k="3")["error"]
    assert "unknown argument" in run_tool(ctx, "kb_search", query="x", rm="-rf")["error"]
    assert "must be a JSON object" in json.loads(ctx.tool("kb_search")["handler"]("zeppelin"))["error"]


def test_kb_clear_and_indexing_a_new_folder_are_refused(ctx, tmp_path):
    assert "kb_clear" not in {call["name"] for call in ctx.calls["register_tool"]}  # not even offered
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert "allow_model_index_new_folders" in run_tool(ctx, "kb_index", directory=str(other))["error"]
    assert run_tool(ctx, "kb_status")[0]["files"] == 2  # nothing was cleared


def test_config_switch_allows_clear(ctx, plugin, docs, write_config, store):
    write_config({"directories": [str(docs)], "allow_model_clear": True, **store})
    restarted = FakeContext()  # allow_model_clear applies from Hermes's next start
    plugin.register(restarted)
    assert run_tool(restarted, "kb_clear", directory="docs") == {"cleared": ["docs"]}


def test_a_config_error_is_one_sentence_everywhere(ctx, hermes_home, plugin):
    (hermes_home / "config.yaml").write_text("knowledgebase:\n  exclude: 5\n")  # refused: it guards privacy
    error = run_tool(ctx, "kb_search", query="zeppelin")["error"]
    assert "exclude" in error and "Traceback" not in error
    assert ctx.tool("kb_search")["check_fn"]() is True  # visible, so the model can relay the sentence
    assert "exclude" in plugin.slash_command("status")
    assert ctx.hook("pre_llm_call")(session_id="s", user_message="zeppelin rollout", conversation_history=[]) is None


def test_slash_kb_status_and_clear(ctx, plugin):
    command = ctx.calls["register_command"][0]["handler"]
    status = command("status")
    assert "docs" in status and "\x1b[" not in status
    assert "search" in command("")  # bare /kb: the verbs
    cleared = command("clear docs")
    assert "--yes" in cleared and "Nothing cleared." in cleared
    assert "Cleared: docs" in command("clear docs --yes")
    assert "error" in command("search 'unclosed")


def test_the_hook_injects_the_cited_block_once_per_session(ctx):
    hook = ctx.hook("pre_llm_call")
    question = "When does the zeppelin rollout run its canary checks?"
    turn = {"session_id": "s1", "task_id": "t1", "turn_id": "1", "user_message": question,
            "conversation_history": [{"role": "user", "content": question}], "is_first_turn": True,
            "model": "m", "platform": "cli", "sender_id": "", "telemetry_schema_version": 1}
    first = hook(**turn)
    assert first["context"].startswith(BLOCK_HEADER) and "[S1] docs/deploy.md" in first["context"]
    assert len(first["context"]) < 10_000
    assert hook(**turn) is None  # the same chunk is never sent twice in one session
    assert "[S1]" in hook(**{**turn, "session_id": "s2"})["context"]  # another conversation gets it
    assert hook(**{**turn, "session_id": "s3", "user_message": "thanks"}) is None


def test_a_short_follow_up_borrows_the_previous_user_message(ctx):
    hook = ctx.hook("pre_llm_call")
    history = [{"role": "user", "content": "zeppelin rollout canary checks"},
               {"role": "assistant", "content": "..."}, {"role": "user", "content": "and when?"}]
    assert hermes_plugin.previous_user_message(history, "and when?") == "zeppelin rollout canary checks"
    result = hook(session_id="s9", user_message="and when?", conversation_history=history)
    assert "deploy.md" in result["context"]


def test_sessions_are_bounded(ctx, plugin, monkeypatch):
    monkeypatch.setattr(hermes_plugin, "MAX_SESSIONS", 3)
    for n in range(5):
        ctx.hook("pre_llm_call")(session_id=f"s{n}", user_message="zeppelin rollout", conversation_history=[])
    assert list(plugin._retrievers) == ["s2", "s3", "s4"]


def _hit(n: int, text: str) -> Hit:
    return Hit("docs", f"f{n}.md", f"/d/f{n}.md", "markdown", 1, 9, None, "", text, 1.0, 1.0, 1.0,
               ["vector"], n, f"hash{n}")


def test_the_block_stays_under_hermes_spill_limit(plugin, write_config, hermes_home):
    from hermes_kb.agent.knowledgebase.context import AutoRetriever, hit_key

    write_config({})
    retriever = AutoRetriever(plugin.kb(), plugin.config())
    hits = [_hit(0, "a" * 4000), _hit(1, "b" * 4000), _hit(2, "c" * 4000)]
    retriever.injected.update({"hash0", "hash1", "hash2"})
    ids = [retriever.citations.id_for(hit_key(hit), {}) for hit in hits]
    text = hermes_plugin.fit_block(hits, retriever, ids)
    assert len(text) <= hermes_plugin.MAX_CONTEXT_CHARS and "[S2]" in text and "[S3]" not in text
    assert retriever.injected == {"hash0", "hash1"}  # the chunk left out may come in a later turn
    assert set(retriever.cited) == {"S1", "S2"}  # and is no source of this conversation
    assert retriever.citations.id_for(hit_key(hits[2])) == "S4"  # S3 is never reused
    huge = hermes_plugin.fit_block([_hit(0, "word " * 10_000)], retriever, ["S1"], limit=3000)
    assert len(huge) <= 3000 and "kb_read shows the rest" in huge
    assert "word …[truncated" in huge  # cut between words, never inside one


def test_the_block_limit_follows_hermes_spill_setting(monkeypatch):
    import sys
    import types

    spill = types.ModuleType("tools.hook_output_spill")
    spill.get_spill_config = lambda: {"enabled": True, "max_chars": 4000}
    monkeypatch.setitem(sys.modules, "tools.hook_output_spill", spill)
    assert hermes_plugin.context_limit() == 4000 - hermes_plugin.SPILL_MARGIN
    spill.get_spill_config = lambda: {"enabled": False, "max_chars": 4000}
    assert hermes_plugin.context_limit() == hermes_plugin.MAX_CONTEXT_CHARS


def test_hermes_kb_on_hermes_command_line_passes_every_word_to_our_parser(ctx, plugin, capsys):
    call = ctx.calls["register_cli_command"][0]
    parser = argparse.ArgumentParser(prog="hermes")
    sub = parser.add_subparsers(dest="command").add_parser(call["name"], help=call["help"],
                                                          formatter_class=argparse.RawDescriptionHelpFormatter)
    call["setup_fn"](sub)
    sub.set_defaults(func=call["handler_fn"])
    args = parser.parse_args(["kb", "search", "zeppelin", "rollout", "-k", "1", "--json"])
    assert args.kb_argv == ["search", "zeppelin", "rollout", "-k", "1", "--json"]
    args.func(args)
    assert json.loads(capsys.readouterr().out)["hits"][0]["path"] == "deploy.md"
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["kb", "--help"])
    assert exit_.value.code == 0 and "{index,search,status,clear," in (usage := capsys.readouterr().out) and usage.startswith("usage: hermes kb")
    args = parser.parse_args(["kb"])
    args.func(args)  # bare `hermes kb`: our help, exit 0
    assert "hermes kb" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        args.func(parser.parse_args(["kb", "search"]))  # missing query: usage error, non-zero exit


def test_hermes_discovers_the_plugin_through_its_entry_point():
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group="hermes_agent.plugins")}
    assert found["knowledgebase"].value == "hermes_kb.hermes_plugin"
    assert callable(found["knowledgebase"].load().register)


def test_nothing_we_install_collides_with_hermes_agent():
    """Hermes owns these top-level names and the `hermes` script; installing us beside it must not
    overwrite any (the real-host test also compares Hermes's file hashes before and after)."""
    ours = importlib.metadata.distribution("hermes-knowledgebase")
    top_level = {Path(str(f)).parts[0] for f in ours.files or []}
    assert not top_level & HERMES_TOP_LEVEL
    assert not {ep.name for ep in ours.entry_points if ep.group == "console_scripts"} & HERMES_SCRIPTS
    assert not any(Path(str(f)).name in HERMES_SCRIPTS and "bin" in Path(str(f)).parts for f in ours.files or [])
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert not set(project["project"]["scripts"]) & HERMES_SCRIPTS
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["hermes_kb*"]


# --- issue 24's probes: nothing raises into Hermes, every argument is bounded ---------------------
@pytest.mark.parametrize("turn", [
    {"session_id": "s", "user_message": [{"type": "text", "text": None}], "conversation_history": []},
    {"session_id": 12345, "user_message": "zeppelin rollout canary", "conversation_history": []},
    {"session_id": None, "user_message": {"weird": True}, "conversation_history": "not a list"},
    {"session_id": "s", "user_message": "zeppelin " * 3_000_000, "conversation_history": []},
    {"session_id": ["x"], "user_message": [{"type": "text", "text": 7}, {"type": "image"}, None, "a"],
     "conversation_history": [None, {"role": "user", "content": [{"type": "text", "text": None}]}]},
])
def test_the_hook_never_raises_into_hermes(ctx, turn):
    result = ctx.hook("pre_llm_call")(**turn)
    assert result is None or isinstance(result.get("context"), str)


def test_a_malformed_store_url_is_one_sentence_and_never_raises_into_hermes(ctx, hermes_home):
    (hermes_home / "config.yaml").write_text(
        "knowledgebase:\n  store: {backend: postgres, url: 'postgresql://kb:pw@[::1:5432/kb'}\n")
    assert ctx.tool("kb_search")["check_fn"]() is True
    error = run_tool(ctx, "kb_search", query="zeppelin")["error"]
    assert "not a valid URL" in error and "Traceback" not in error
    assert ctx.hook("pre_llm_call")(session_id="s", user_message="zeppelin rollout", conversation_history=[]) is None


@pytest.mark.parametrize("args,message", [
    ({"query": "x" * 20_000_000}, "at most 8,000"),
    ({"query": "zeppelin", "k": "many"}, "integer"),
    ({"query": "zeppelin", "k": 10**30}, "out of range"),
    ({"query": ["zeppelin"]}, "string"),
    ({"query": "zeppelin", "directory": "d" * 100_000}, "at most 4,096"),
])
def test_oversized_and_mistyped_arguments_are_one_sentence(ctx, args, message):
    import time

    started = time.perf_counter()
    assert message in run_tool(ctx, "kb_search", **args)["error"]
    assert time.perf_counter() - started < 2


# --- hermes-agent 0.19.0: PluginContext.register_auxiliary_task and PluginLlm.complete (signatures only) ----
def register_auxiliary_task(self, key: str, *, display_name: str, description: str, defaults: dict | None = None) -> None: ...


def llm_complete(self, messages: list, *, provider: str | None = None, model: str | None = None,
                 temperature: float | None = None, max_tokens: int | None = None, timeout: float | None = None,
                 agent_id: str | None = None, profile: str | None = None, purpose: str | None = None): ...


class FakeLlm:
    """ctx.llm with 0.19.0's `complete` signature, answering from a script."""

    def __init__(self, answer: Callable[[str], str]):
        self.answer, self.asked = answer, []

    def complete(self, *args, **kwargs):
        bound = inspect.signature(llm_complete).bind(self, *args, **kwargs)
        self.asked.append(bound.arguments)
        prompt = bound.arguments["messages"][-1]["content"]
        return type("Result", (), {"text": self.answer(prompt)})()


class LlmContext(FakeContext):
    SIGNATURES = {**FakeContext.SIGNATURES, "register_auxiliary_task": inspect.signature(register_auxiliary_task)}

    def __init__(self, llm: FakeLlm):
        super().__init__()
        self.llm = llm


def test_rerank_llm_asks_the_users_model_through_the_plugin_facade(docs, write_config, hermes_home, stub_embedder):
    """The judge goes through ctx.llm (no Hermes auxiliary client here), prefers what the model rates."""
    def rate(prompt: str) -> str:
        passages = prompt.split("Passages:\n", 1)[1].split("\n\n")
        return "\n".join(f"{i}: {9 if 'purr' in p else 1}" for i, p in enumerate(passages))

    write_config({"directories": [str(docs)], "rerank": "llm"})
    llm = FakeLlm(rate)
    context = LlmContext(llm)
    plugin = hermes_plugin.KnowledgebasePlugin()
    plugin.register(context)
    assert context.calls["register_auxiliary_task"][0]["key"] == "knowledgebase_rerank"
    kb = plugin.kb()
    kb._embedder_factory = lambda: stub_embedder
    kb.index()
    result = kb.search("what do cats and zeppelin deploys do", k=2)
    assert result.hits[0].path == "notes/cats.md" and result.hits[0].rerank_score == 0.9
    asked = llm.asked[0]
    assert asked["timeout"] == kb.config.rerank_timeout_s and asked["purpose"] == "knowledgebase rerank"
    assert "never instructions" in asked["messages"][0]["content"]


def test_rerank_llm_that_hangs_or_babbles_leaves_retrievals_order(docs, write_config, stub_embedder):
    write_config({"directories": [str(docs)], "rerank": "llm", "rerank_timeout_s": 0.3})
    for answer in (lambda prompt: __import__("time").sleep(2) or "0: 9", lambda prompt: "I think they are all great"):
        plugin = hermes_plugin.KnowledgebasePlugin()
        plugin.register(LlmContext(FakeLlm(answer)))
        kb = plugin.kb()
        kb._embedder_factory = lambda: stub_embedder
        kb.index()
        result = kb.search("zeppelin rollout", k=2)
        assert result.hits[0].path == "deploy.md" and result.hits[0].rerank_score is None
        assert result.rerank.skipped and "could not judge" in result.rerank.skipped
