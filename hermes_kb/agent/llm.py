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


class LLMClient:
    def __init__(self, config: LLMConfig):
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=headers, timeout=config.timeout_s)

    def complete(self, messages: list[dict], tools: list[dict] | None = None,
                 on_token: Callable[[str], None] | None = None) -> Completion:
        """One model call; streams content tokens to on_token as they arrive."""
        payload: dict = {"model": self.config.model, "messages": messages, "stream": True}
        if tools:
            payload["tools"] = tools
        try:
            with self._client.stream("POST", "/chat/completions", json=payload) as response:
                if response.status_code >= 400:
                    response.read()
                    raise LLMError(f"The model endpoint {self.config.base_url} answered {response.status_code}: "
                                   f"{response.text[:200]}")
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    response.read()
                    return _from_message(response.json()["choices"][0]["message"], on_token)
                return _from_stream(response.iter_lines(), on_token)
        except httpx.HTTPError as exc:
            raise LLMError(f"Cannot reach the model endpoint {self.config.base_url} ({exc}).") from None
        except (KeyError, IndexError, ValueError) as exc:
            raise LLMError(f"The model endpoint {self.config.base_url} sent a malformed answer ({exc}).") from None


def _from_message(message: dict, on_token: Callable[[str], None] | None) -> Completion:
    content = message.get("content") or ""
    if content and on_token:
        on_token(content)
    calls = [ToolCall(c.get("id", f"call_{i}"), c["function"]["name"], c["function"].get("arguments") or "{}")
             for i, c in enumerate(message.get("tool_calls") or [])]
    return Completion(content, calls)


def _from_stream(lines, on_token: Callable[[str], None] | None) -> Completion:
    """Assemble content and tool calls from `data:` chunks; tool arguments arrive in fragments."""
    parts: list[str] = []
    calls: dict[int, dict] = {}
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        for choice in chunk.get("choices", []):
            delta = choice.get("delta") or {}
            if delta.get("content"):
                parts.append(delta["content"])
                if on_token:
                    on_token(delta["content"])
            for fragment in delta.get("tool_calls") or []:
                call = calls.setdefault(fragment.get("index", 0), {"id": "", "name": "", "arguments": ""})
                call["id"] = fragment.get("id") or call["id"]
                function = fragment.get("function") or {}
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
    tool_calls = [ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"] or "{}") for i, c in sorted(calls.items())]
    return Completion("".join(parts), tool_calls)
