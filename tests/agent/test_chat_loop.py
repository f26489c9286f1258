"""The real chat loop against a scripted OpenAI-compatible server on 127.0.0.1."""

import json

import pytest
from rich.console import Console

from hermes_kb.agent.hooks import PRE_LLM_CALL
from hermes_kb.agent.knowledgebase.context import BLOCK_HEADER
from hermes_kb.agent.llm import LLMClient, LLMConfig, LLMError
from hermes_kb.hermes_cli.chat import build_runtime

from ..helpers_http import RecordingServer

pytestmark = pytest.mark.integration

NOTES = {
    "deploy.md": "# Deployment\n\nProduction deploys use the blue-green switch. Run `make release`, then flip the "
                 "load balancer to the green pool on port 4271.\n",
    "garden.md": "# Garden\n\nTomatoes need full sun, deep watering twice a week and a stake at knee height.\n",
    "meetings.md": "# Weekly sync\n\nThe team meets on Tuesdays at 10:00 to review incidents and plan the sprint.\n",
}


def text_reply(content):
    """A streamed answer, as OpenAI sends it: several content deltas."""
    words = content.split(" ")
    return [{"choices": [{"delta": {"content": w + (" " if i < len(words) - 1 else "")}}]} for i, w in enumerate(words)]


def tool_reply(name, arguments, call_id="call_1"):
    encoded = json.dumps(arguments)
    half = len(encoded) // 2
    return [
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                                "function": {"name": name, "arguments": encoded[:half]}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": encoded[half:]}}]}}]},
    ]


@pytest.fixture
def chat(tree, write_config, hermes_home):
    """A runtime over an indexed notes folder, talking to a server that replays `script`."""
    root = tree(NOTES)
    write_config({"directories": [{"path": str(root), "name": "notes"}], "reindex_on_change": False})
    script = []
    server = RecordingServer({"/v1/chat/completions": lambda body: (200, script.pop(0))})
    server.__enter__()
    out = Console(record=True, width=200)
    runtime = build_runtime(out, out, LLMClient(LLMConfig(server.url + "/v1", "test-model")), confirm=lambda _: True)
    runtime.kb.index()
    yield runtime, server, script
    server.__exit__()


def sent_messages(server, n=-1):
    return server.requests[n][2]["messages"]


def test_indexed_fact_brings_a_cited_block_and_history_stays_clean(chat, hermes_home, tmp_path):
    runtime, server, script = chat
    script.append(text_reply("Flip to the green pool [S1]."))
    answer = runtime.session.ask("How do we deploy to production?")
    assert answer == "Flip to the green pool [S1]."
    last_user = sent_messages(server)[-1]
    assert last_user["role"] == "user"
    assert last_user["content"].startswith("How do we deploy to production?")
    assert BLOCK_HEADER in last_user["content"]
    assert "[S1] notes/deploy.md lines 1-3" in last_user["content"] and "port 4271" in last_user["content"]
    assert "garden" not in last_user["content"]
    assert "cite" in sent_messages(server)[0]["content"].lower()  # the system prompt asks for [S<n>] citations
    assert [m["content"] for m in runtime.session.history if m["role"] == "user"] == ["How do we deploy to production?"]
    saved = tmp_path / "transcript.json"
    runtime.session.save(saved)
    user = [m for m in json.loads(saved.read_text()) if m["role"] == "user"][0]
    assert user["content"] == "How do we deploy to production?"  # what was typed, with what was injected beside it
    assert "port 4271" in user["injected_context"]
    assert [(s["id"], s["path"], s["location"]) for s in user["sources"]] == [
        ("S1", "deploy.md", f"{runtime.kb.config.directories[0].path}/deploy.md:1")]


def test_source_ids_run_on_through_the_conversation_and_are_shown_under_each_answer(chat):
    from hermes_kb.hermes_cli.chat import _answer

    runtime, server, script = chat
    out, err = Console(record=True, width=300), Console(record=True, width=300)
    script.append(text_reply("Flip to the green pool [S1]."))
    assert _answer(runtime, "How do we deploy to production?", out, err)
    shown = err.export_text()
    assert "Sources:" in shown and "[S1] notes/deploy.md § Deployment" in shown and "deploy.md:1" in shown
    script.append(text_reply("Water twice a week [S2]; deploys as in [S1]."))
    assert _answer(runtime, "How often should tomatoes be watered in the garden?", out, err)
    second = sent_messages(server)[-1]["content"]
    assert "[S2] notes/garden.md" in second and "[S1]" not in second.split(BLOCK_HEADER)[1]  # no second S1
    shown = err.export_text()
    assert "[S2] notes/garden.md § Garden" in shown and "[S1] notes/deploy.md" in shown  # cited again: shown again
    runtime.commands.dispatch("/new", lambda name: None)
    script.append(text_reply("Tuesdays [S1]."))
    assert _answer(runtime, "When does the weekly sync meeting happen?", out, err)
    assert "[S1] notes/meetings.md" in sent_messages(server)[-1]["content"]  # a new conversation starts at S1


def test_off_topic_and_trivial_messages_get_no_block(chat):
    runtime, server, script = chat
    for question in ("What is the capital of France?", "How do I center a div in CSS?", "thanks", "ok"):
        script.append(text_reply("Sure."))
        runtime.session.ask(question)
        assert BLOCK_HEADER not in sent_messages(server)[-1]["content"], question


def test_a_chunk_is_not_injected_twice_but_stays_in_the_conversation(chat):
    runtime, server, script = chat
    script.extend([text_reply("One."), text_reply("Two.")])
    runtime.session.ask("How do we deploy to production?")
    runtime.session.ask("How do production deploys work again?")
    messages = sent_messages(server)
    first_user, second_user = [m for m in messages if m["role"] == "user"]
    assert BLOCK_HEADER in first_user["content"]  # earlier turn keeps its sources in the outgoing copy
    assert "port 4271" not in second_user["content"]


def test_at_kb_forces_retrieval_below_threshold(chat):
    runtime, server, script = chat
    script.append(text_reply("Tuesdays."))
    runtime.session.ask("@kb tuesday sync")
    content = sent_messages(server)[-1]["content"]
    assert BLOCK_HEADER in content and "meetings.md" in content
    assert "garden.md" not in content and "deploy.md" not in content  # forcing lowers the bar, it does not remove it
    script.append(text_reply("No idea."))
    runtime.session.ask("@kb quantum chromodynamics lattice gauge theory")
    assert BLOCK_HEADER not in sent_messages(server)[-1]["content"]


def test_kb_search_tool_call_is_dispatched_and_result_sent_back(chat):
    runtime, server, script = chat
    script.extend([tool_reply("kb_search", {"query": "tomatoes watering", "k": 2}), text_reply("Twice a week [S1].")])
    answer = runtime.session.ask("Use the knowledgebase: how often do I water?")
    assert answer == "Twice a week [S1]."
    assert [t["function"]["name"] for t in server.requests[0][2]["tools"]] == [
        "kb_search", "kb_read", "kb_index", "kb_status", "kb_clear"]
    tool_message = sent_messages(server)[-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    result = json.loads(tool_message["content"])
    assert result["hits"][0]["id"] == "S1" and result["hits"][0]["path"] == "garden.md"
    assistant = sent_messages(server)[-2]
    assert assistant["tool_calls"][0]["function"]["name"] == "kb_search"


def test_a_raising_tool_becomes_an_error_result_and_the_chat_continues(chat):
    runtime, server, script = chat

    def explode(args, **kw):
        raise RuntimeError("disk on fire")

    runtime.session.tools.register("explode", "test", {"description": "x", "parameters": {"type": "object", "properties": {}}}, explode)
    script.extend([tool_reply("explode", {}), text_reply("That failed."), text_reply("Still here.")])
    assert runtime.session.ask("try the tool") == "That failed."
    result = json.loads(sent_messages(server)[-1]["content"])
    assert "disk on fire" in result["error"]
    assert runtime.session.ask("and now?") == "Still here."


def test_failing_hook_and_failing_endpoint_leave_the_session_usable(chat):
    runtime, server, script = chat
    runtime.session.hooks.register(PRE_LLM_CALL, lambda **kw: 1 / 0)
    script.append(text_reply("Fine."))
    assert runtime.session.ask("How do we deploy to production?") == "Fine."
    before = list(runtime.session.history)
    runtime.session.llm = LLMClient(LLMConfig("http://127.0.0.1:9/v1", "x"))
    with pytest.raises(LLMError, match="Cannot reach the model endpoint"):
        runtime.session.ask("anything")
    assert runtime.session.history == before
