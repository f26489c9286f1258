"""Malformed chat-endpoint replies end as one LLMError sentence, never a traceback: the client against a
real local HTTP server, and `hermes chat -q` end to end (exit 1, the sentence on stderr)."""

import json
import types

import pytest
import yaml

from hermes_kb.agent.llm import LLMClient, LLMConfig, LLMError
from hermes_kb.hermes_cli.main import main

from .. import helpers_http
from ..helpers_http import RecordingServer


class Raw(str):
    """An SSE data line sent as is, not JSON-encoded: how a broken server sends garbage."""


@pytest.fixture(autouse=True)
def raw_events(monkeypatch):
    """Let a scripted event be raw text; everything else is encoded as RecordingServer always does."""
    shim = types.SimpleNamespace(loads=json.loads,
                                 dumps=lambda value: str(value) if isinstance(value, Raw) else json.dumps(value))
    monkeypatch.setattr(helpers_http, "json", shim)


def ask(reply):
    with RecordingServer({"/v1/chat/completions": lambda body: (200, reply)}) as server:
        client = LLMClient(LLMConfig(server.url + "/v1", "test-model"))
        return client.complete([{"role": "user", "content": "hi"}])


MALFORMED = [
    ({"choices": None}, "the reply's choices is null, not a list"),
    ({"choices": []}, "the reply has no choices"),
    ({"choices": [{"message": None}]}, "choices[0].message is null, not an object"),
    ({"choices": ["text"]}, "choices[0] is 'text', not an object"),
    ({"choices": [{"message": {"content": 5}}]}, "the message's content is 5, not a string"),
    ({"choices": [{"message": {"tool_calls": [{"id": "c1", "function": None}]}}]},
     "tool_calls[0].function is null, not an object"),
    ({"choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": None}}]}}]},
     "tool_calls[0] has no function name"),
    ({"choices": [{"message": {"tool_calls": "kb_search"}}]}, "the message's tool_calls is 'kb_search', not a list"),
    ("hello", "the reply is 'hello', not an object"),
    ({"error": {"message": "model overloaded"}}, "the reply is an error: model overloaded"),
    ([{"choices": None}], "stream chunk 1's choices is null, not a list"),
    ([{"choices": [{"delta": "hello"}]}], "stream chunk 1's delta is 'hello', not an object"),
    ([{"choices": [{"delta": {"content": "Hi"}}]}, Raw("{not json")], "stream chunk 2 is not JSON ('{not json')"),
    ([{"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": None}]}}]}],
     "tool call 0 in the stream has no function name"),
    ([{"choices": [{"delta": {"tool_calls": [{"index": "first", "function": {"name": "kb_search"}}]}}]}],
     "stream chunk 1's tool call index is 'first', not a whole number"),
    ([{"choices": [{"delta": {"tool_calls": {"index": 0}}}]}], "stream chunk 1's tool_calls is {\"index\": 0}, not a list"),
    ([Raw("[1, 2]")], "stream chunk 1 is [1, 2], not an object"),
]


@pytest.mark.parametrize("reply, detail", MALFORMED)
def test_malformed_replies_are_one_llm_error_sentence(reply, detail):
    with pytest.raises(LLMError) as error:
        ask(reply)
    message = str(error.value)
    assert message.startswith("The model endpoint http://127.0.0.1:")
    assert message.endswith(f"/v1 sent a malformed answer: {detail}.")
    assert "\n" not in message


def test_well_formed_replies_still_parse():
    assert ask({"choices": [{"message": {"content": "Hi", "tool_calls": [
        {"id": "c1", "function": {"name": "kb_search", "arguments": {"query": "x"}}}]}}]}).tool_calls[0].arguments \
        == '{"query": "x"}'
    streamed = ask([{"choices": []}, {"choices": [{"delta": {"content": "He"}}]}, {"usage": {"total_tokens": 3}},
                    {"choices": [{"delta": {"content": "llo", "tool_calls": None}}]}])
    assert streamed.content == "Hello" and streamed.tool_calls == []


def test_an_unusable_endpoint_url_is_an_llm_error():
    with pytest.raises(LLMError, match=r"^The model endpoint http://\[::1 is not a usable URL"):
        LLMClient(LLMConfig("http://[::1", "m"))


def test_an_error_status_is_one_line():
    with RecordingServer({"/v1/chat/completions": lambda body: (503, {"error": "busy\nretry later"})}) as server:
        with pytest.raises(LLMError) as error:
            LLMClient(LLMConfig(server.url + "/v1", "m")).complete([])
    assert "\n" not in str(error.value) and "answered 503" in str(error.value)


# --- `hermes chat -q` end to end ----------------------------------------------------------------

@pytest.fixture
def chat_q(hermes_home, capsys):
    """Run `hermes chat -q` against a server replaying `script` (one reply per request)."""
    def run(*script):
        replies = list(script)
        with RecordingServer({"/v1/chat/completions": lambda body: (200, replies.pop(0))}) as server:
            (hermes_home / "config.yaml").write_text(yaml.safe_dump(
                {"model": {"base_url": server.url + "/v1", "name": "m"}, "knowledgebase": {"enabled": False}}))
            code = main(["chat", "-q", "hello"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run


@pytest.mark.parametrize("reply, detail", [MALFORMED[0], MALFORMED[2], MALFORMED[5], MALFORMED[11], MALFORMED[12]])
def test_chat_q_malformed_reply_exits_1_with_one_sentence(chat_q, reply, detail):
    code, out, err = chat_q(reply)
    assert code == 1
    assert "Traceback" not in err and detail in " ".join(err.split())
    assert err.strip().startswith("error: The model endpoint") and err.strip().endswith(".")


def test_chat_q_partial_answer_then_garbage_ends_the_line(chat_q):
    code, out, err = chat_q([{"choices": [{"delta": {"content": "Hi"}}]}, Raw("{not json")])
    assert code == 1 and out == "Hi\n" and "stream chunk 2 is not JSON" in err


def test_chat_q_answers_normally(chat_q):
    assert chat_q([{"choices": [{"delta": {"content": "Hello there"}}]}]) == (0, "Hello there\n", "")


def tool_call(n):
    return [{"choices": [{"delta": {"tool_calls": [{"index": 0, "id": f"c{n}", "type": "function",
                                                    "function": {"name": "kb_status", "arguments": "{}"}}]}}]}]


def test_chat_q_after_max_tool_rounds_prints_the_stop_sentence_and_exits_1(chat_q):
    code, out, err = chat_q(*(tool_call(n) for n in range(8)))
    assert code == 1 and out == ""
    assert "error: I stopped after too many tool calls in one turn; ask again or narrow the question." in err


# --- any JSON at all: a Completion or the one malformed-answer error, never another exception -----------

from hypothesis import given, settings, strategies as st  # noqa: E402

from hermes_kb.agent.llm import _from_body, _from_stream, _Malformed  # noqa: E402

SHAPE_KEYS = ["choices", "message", "delta", "content", "tool_calls", "function", "name", "arguments", "id", "index",
              "error"]
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.one_of(st.sampled_from(SHAPE_KEYS), st.text(max_size=3)), children,
                                               max_size=4)),
    max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_body_is_a_completion_or_malformed(value):
    try:
        _from_body(json.dumps(value), None)
    except _Malformed as error:
        assert "\n" not in str(error)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(json_values.map(json.dumps), st.text(max_size=8)), max_size=4))
def test_any_event_stream_is_a_completion_or_malformed(events):
    try:
        _from_stream([f"data: {e}" for e in events] + ["data: [DONE]"], None)
    except _Malformed as error:
        assert "\n" not in str(error)
