"""Tool registry: name -> (toolset, schema, handler, check). Dispatch never raises.

A model's tool call is untrusted input: unknown names, bad JSON, wrong types
and handler exceptions all come back as `{"error": ...}` so the conversation
goes on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 24_000
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,), "array": (list,),
}

Handler = Callable[..., str]


@dataclass(frozen=True)
class Tool:
    name: str
    toolset: str
    schema: dict  # OpenAI function-calling "function" object: name, description, parameters
    handler: Handler
    check: Callable[[], bool]


def error(message: str) -> str:
    return json.dumps({"error": message})


def argument_problem(schema: dict, args: dict) -> str | None:
    """The first way args break the schema: missing required, unknown key, or wrong type."""
    parameters = schema.get("parameters", {})
    properties = parameters.get("properties", {})
    for name in parameters.get("required", []):
        if name not in args:
            return f"missing required argument {name!r}"
    for name, value in args.items():
        if name not in properties:
            return f"unknown argument {name!r}"
        expected = properties[name].get("type")
        types = _JSON_TYPES.get(expected, (object,))
        if not isinstance(value, types) or (expected in ("integer", "number") and isinstance(value, bool)):
            return f"argument {name!r} must be of type {expected}"
        if "enum" in properties[name] and value not in properties[name]["enum"]:
            return f"argument {name!r} must be one of {', '.join(map(str, properties[name]['enum']))}"
    return None


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, name: str, toolset: str, schema: dict, handler: Handler,
                 check: Callable[[], bool] = lambda: True) -> None:
        self._tools[name] = Tool(name, toolset, {**schema, "name": name}, handler, check)

    def _available(self, tool: Tool) -> bool:
        try:
            return bool(tool.check())
        except Exception:  # a broken check hides its tool rather than breaking the chat
            log.exception("check for tool %s failed", tool.name)
            return False

    def available(self) -> list[Tool]:
        return [tool for tool in self._tools.values() if self._available(tool)]

    def schemas(self) -> list[dict]:
        """What the model is offered: only tools whose check passes right now."""
        return [{"type": "function", "function": tool.schema} for tool in self.available()]

    def dispatch(self, name: str, arguments: str | dict | None, **context: Any) -> str:
        tool = self._tools.get(name)
        if tool is None:
            return error(f"unknown tool {name!r}")
        if not self._available(tool):
            return error(f"tool {name!r} is not available (is the knowledgebase enabled with a directory configured?)")
        try:
            args = json.loads(arguments or "{}") if isinstance(arguments, str) else (arguments or {})
        except ValueError:
            return error(f"arguments for {name!r} are not valid JSON")
        if not isinstance(args, dict):
            return error(f"arguments for {name!r} must be a JSON object")
        problem = argument_problem(tool.schema, args)
        if problem:
            return error(f"{name}: {problem}")
        try:
            result = tool.handler(args, **context)
        except Exception as exc:  # the contract: a tool failure is a result, never a crash
            log.exception("tool %s failed", name)
            return error(f"{name} failed: {exc}")
        if not isinstance(result, str):
            result = json.dumps(result, default=str)
        if len(result) > MAX_RESULT_CHARS:
            return json.dumps({"truncated": True, "result": result[:MAX_RESULT_CHARS]})
        return result
