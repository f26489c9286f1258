"""A loopback OpenAI-compatible server scripted for one Hermes chat turn.

The agent request (it offers tools) whose last message is the user's gets one
kb_search tool call; the one that follows with the tool result gets a final
answer. Anything else Hermes asks (model listings, auxiliary completions)
gets a plain, harmless answer. Every request is kept for the test to inspect.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEARCH_QUERY = "zeppelin rollout canary"
MCP_MARKER = "[through mcp]"  # a user message with it gets the MCP server's kb_search instead of the plugin's
MCP_SEARCH = "mcp__kb__kb_search"
FINAL_ANSWER = "The zeppelin rollout runs every Tuesday [S1]."
JUDGE_PROMPT = "Rate how well each passage answers the question"  # reranker.judge_prompt's first words


def _chunk(model: str, delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class FakeOpenAI:
    def __init__(self, model: str):
        self.model = model
        self.requests: list[dict] = []  # {"method", "path", "body"}
        self.chat_requests: list[dict] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send_json(self, status: int, data: dict) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                with owner._lock:
                    owner.requests.append({"method": "GET", "path": self.path, "body": None})
                if self.path.rstrip("/").endswith("/models"):
                    self._send_json(200, {"object": "list", "data": [
                        {"id": owner.model, "object": "model", "created": 0, "owned_by": "fake",
                         "context_length": 128000}]})
                elif "/models/" in self.path:
                    self._send_json(200, {"id": owner.model, "object": "model", "created": 0, "owned_by": "fake",
                                          "context_length": 128000})
                else:
                    self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                with owner._lock:
                    owner.requests.append({"method": "POST", "path": self.path, "body": body})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})
                    return
                with owner._lock:
                    owner.chat_requests.append(body)
                self._answer(body, owner.respond(body))

            def _answer(self, body: dict, delta_and_finish: tuple[list[dict], str]) -> None:
                deltas, finish = delta_and_finish
                model = body.get("model") or owner.model
                if not body.get("stream"):
                    message = {"role": "assistant", "content": None}
                    for delta in deltas:
                        if "content" in delta:
                            message["content"] = (message["content"] or "") + delta["content"]
                        if "tool_calls" in delta:
                            message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"}
                                                     for c in delta["tool_calls"]]
                    self._send_json(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                                          "model": model, "choices": [{"index": 0, "message": message,
                                                                       "finish_reason": finish}],
                                          "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                                    "total_tokens": 15}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(_chunk(model, {"role": "assistant", "content": ""}))
                for delta in deltas:
                    self.wfile.write(_chunk(model, delta))
                self.wfile.write(_chunk(model, {}, finish))
                usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
                         "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def respond(self, body: dict) -> tuple[list[dict], str]:
        """(deltas, finish_reason) for one chat request."""
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
        offers_kb = "kb_search" in offered
        if MCP_SEARCH in offered and last.get("role") == "user" and MCP_MARKER in json.dumps(last.get("content")):
            arguments = json.dumps({"query": SEARCH_QUERY, "k": 3})
            return [{"tool_calls": [{"index": 0, "id": "call_mcp_kb_1", "type": "function",
                                     "function": {"name": MCP_SEARCH, "arguments": arguments}}]}], "tool_calls"
        if offers_kb and last.get("role") == "user":
            arguments = json.dumps({"query": SEARCH_QUERY, "k": 3})
            return [{"tool_calls": [{"index": 0, "id": "call_kb_1", "type": "function",
                                     "function": {"name": "kb_search", "arguments": arguments}}]}], "tool_calls"
        if last.get("role") == "tool":
            return [{"content": FINAL_ANSWER}], "stop"
        text = json.dumps(last.get("content"))
        if JUDGE_PROMPT in text:  # the knowledgebase's relevance judge (rerank: llm): passages about cats rate 9
            passages = re.findall(r"\[(\d+)\] ([^\[]*)", text.split("Passages:", 1)[1])
            return [{"content": "\n".join(f"{i}: {9 if 'Cats' in p else 1}" for i, p in passages)}], "stop"
        return [{"content": "ok"}], "stop"

    def __enter__(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
