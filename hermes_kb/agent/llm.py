"""A minimal OpenAI-compatible chat-completions client with streaming and tool calls.

Hand-written over httpx rather than the `openai` SDK: we need one endpoint,
streamed deltas and tool-call assembly, and this keeps the dependency set (and
start-up time) small.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Callable

import httpx

log = logging.getLogger(__name__)


class LLMError(RuntimeError):
    """The model endpoint could not answer; the message says which and why."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str

    def as_message_part(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Completion:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 120.0


class _Malformed(ValueError):
    """The endpoint answered, but not in the chat-completions shape; the message says what is off."""


def _describe(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _expect(value: object, kind: type, what: str) -> object:
    """`value` if it has the type the protocol gives `what`, else _Malformed naming both."""
    if isinstance(value, kind):
        return value
    noun = {dict: "an object", list: "a list", str: "a string"}[kind]
    raise _Malformed(f"{what} is {_describe(value)}, not {noun}")


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


class LLMClient:
    def __init__(self, config: LLMConfig):
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        try:
            self._client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=headers, timeout=config.timeout_s)
        except (httpx.InvalidURL, ValueError) as exc:  # a bad port, a bracket left open, a non-ASCII header
            raise LLMError(f"The model endpoint {config.base_url} is not a usable URL ({_one_line(str(exc))}).") from None

    def complete(self, messages: list[dict], tools: list[dict] | None = None,
                 on_token: Callable[[str], None] | None = None) -> Completion:
        """One model call; streams content tokens to on_token as they arrive. Every way the endpoint can fail,
        including an answer in the wrong shape, is an LLMError with one sentence."""
        payload: dict = {"model": self.config.model, "messages": messages, "stream": True}
        if tools:
            payload["tools"] = tools
        try:
            with self._client.stream("POST", "/chat/completions", json=payload) as response:
                if response.status_code >= 400:
                    response.read()
                    raise LLMError(f"The model endpoint {self.config.base_url} answered {response.status_code}: "
                                   f"{_one_line(response.text)}.")
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    response.read()
                    return _from_body(response.text, on_token)
                return _from_stream(response.iter_lines(), on_token)
        except httpx.HTTPError as exc:
            raise LLMError(f"Cannot reach the model endpoint {self.config.base_url} ({_one_line(str(exc))}).") from None
        except _Malformed as exc:
            raise LLMError(f"The model endpoint {self.config.base_url} sent a malformed answer: {exc}.") from None


def _json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise _Malformed(f"{what} is not JSON ({_describe(text)})") from None


def _choices(body: object, what: str, default: object = None) -> list:
    body = _expect(body, dict, what)
    if "error" in body and "choices" not in body:  # some servers report errors with status 200
        error = body["error"]
        detail = error.get("message") if isinstance(error, dict) else error
        raise _Malformed(f"{what} is an error: {_one_line(str(detail), 160)}")
    return _expect(body.get("choices", default), list, f"{what}'s choices")


def _from_body(text: str, on_token: Callable[[str], None] | None) -> Completion:
    """A whole (non-streamed) answer: {"choices": [{"message": {...}}]}."""
    choices = _choices(_json(text, "the reply"), "the reply")
    if not choices:
        raise _Malformed("the reply has no choices")
    choice = _expect(choices[0], dict, "choices[0]")
    return _from_message(_expect(choice.get("message"), dict, "choices[0].message"), on_token)


def _text(value: object, what: str) -> str:
    return "" if value is None else _expect(value, str, what)


def _arguments(value: object, what: str) -> str:
    """Tool arguments are a JSON string; a server that sends the object itself is forgiven."""
    if isinstance(value, dict):
        return json.dumps(value)
    return _text(value, what)


def _from_message(message: dict, on_token: Callable[[str], None] | None) -> Completion:
    content = _text(message.get("content"), "the message's content")
    calls = []
    for i, call in enumerate(_expect(message.get("tool_calls") or [], list, "the message's tool_calls")):
        call = _expect(call, dict, f"tool_calls[{i}]")
        function = _expect(call.get("function"), dict, f"tool_calls[{i}].function")
        name = _text(function.get("name"), f"tool_calls[{i}].function.name")
        if not name:
            raise _Malformed(f"tool_calls[{i}] has no function name")
        calls.append(ToolCall(_text(call.get("id"), f"tool_calls[{i}].id") or f"call_{i}", name,
                              _arguments(function.get("arguments"), f"tool_calls[{i}].function.arguments") or "{}"))
    if content and on_token:
        on_token(content)
    return Completion(content, calls)


def _from_stream(lines, on_token: Callable[[str], None] | None) -> Completion:
    """Assemble content and tool calls from `data:` chunks; tool arguments arrive in fragments."""
    parts: list[str] = []
    calls: dict[int, dict] = {}
    chunks = 0
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunks += 1
        where = f"stream chunk {chunks}"
        for choice in _choices(_json(data, where), where, default=[]):  # a usage-only chunk may have none
            delta = _expect(_expect(choice, dict, f"{where}'s choice").get("delta") or {}, dict, f"{where}'s delta")
            content = _text(delta.get("content"), f"{where}'s content")
            if content:
                parts.append(content)
                if on_token:
                    on_token(content)
            for fragment in _expect(delta.get("tool_calls") or [], list, f"{where}'s tool_calls"):
                fragment = _expect(fragment, dict, f"{where}'s tool call")
                index = fragment.get("index", 0)
                if not isinstance(index, int) or isinstance(index, bool):
                    raise _Malformed(f"{where}'s tool call index is {_describe(index)}, not a whole number")
                call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                call["id"] = _text(fragment.get("id"), f"{where}'s tool call id") or call["id"]
                function = _expect(fragment.get("function") or {}, dict, f"{where}'s tool call function")
                call["name"] += _text(function.get("name"), f"{where}'s tool call name")
                call["arguments"] += _arguments(function.get("arguments"), f"{where}'s tool call arguments")
    if not chunks:
        raise _Malformed("the event stream held no data")
    tool_calls = []
    for i, (_, call) in enumerate(sorted(calls.items())):
        if not call["name"]:
            raise _Malformed(f"tool call {i} in the stream has no function name")
        tool_calls.append(ToolCall(call["id"] or f"call_{i}", call["name"], call["arguments"] or "{}"))
    return Completion("".join(parts), tool_calls)
