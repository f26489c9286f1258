"""`hermes kb mcp`: time from process start to the first answered search, cold and warm.

Indexes this repository's docs/ once (not timed), then per run starts a fresh
server the way an MCP client does (stdio, HERMES_HOME in its environment) and
times, from the moment the process is spawned: the initialize answer, the
first kb_search answer (hybrid: the embedding model loads inside it), then
the round trip of warm searches in the same session, and how long the process
takes to exit once stdin is closed. A second set of runs sends the first search
only some seconds after connecting, as a chat does: the server loads the model
ahead, so that search costs what a warm one does.

    python benchmarks/mcp_latency.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HERMES = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
QUERIES = ["how are chunks sized", "what does the keyword cache store", "how does hybrid search fuse scores",
           "where is the writer lock", "what happens when a file changes on disk"]


class Server:
    def __init__(self, env: dict):
        self.started = time.perf_counter()
        self.process = subprocess.Popen([*HERMES, "kb", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=env, cwd=REPO)
        self.next_id = 0

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                             "params": params}) + "\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the server closed stdout")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message or message["result"].get("isError"):
                    raise RuntimeError(f"{method} failed: {message}")
                return message["result"]

    def notify(self, method: str) -> None:
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.process.stdin.flush()

    def since_start(self) -> float:
        return time.perf_counter() - self.started


def one_run(env: dict, warm_searches: int) -> dict[str, float]:
    server = Server(env)
    server.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "benchmark", "version": "0"}})
    initialized = server.since_start()
    server.notify("notifications/initialized")
    result = server.request("tools/call", {"name": "kb_search", "arguments": {"query": QUERIES[0]}})
    assert result["structuredContent"]["hits"], "no hits: is docs/ indexed?"
    first = server.since_start()
    warm = []
    for n in range(warm_searches):
        started = time.perf_counter()
        server.request("tools/call", {"name": "kb_search", "arguments": {"query": QUERIES[1 + n % (len(QUERIES) - 1)]}})
        warm.append(time.perf_counter() - started)
    started = time.perf_counter()
    server.process.stdin.close()
    server.process.wait(timeout=30)
    return {"initialize": initialized, "first": first, "warm": statistics.median(warm),
            "exit": time.perf_counter() - started}


def paused_first_search(env: dict, pause: float) -> float:
    """A client that connects at start-up and searches only later: the model has loaded meanwhile."""
    server = Server(env)
    server.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "benchmark", "version": "0"}})
    server.notify("notifications/initialized")
    time.sleep(pause)
    started = time.perf_counter()
    server.request("tools/call", {"name": "kb_search", "arguments": {"query": QUERIES[0]}})
    seconds = time.perf_counter() - started
    server.process.stdin.close()
    server.process.wait(timeout=30)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warm-searches", type=int, default=10)
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between connecting and a later first search")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "config.yaml").write_text(f"knowledgebase:\n  directories:\n    - {REPO / 'docs'}\n")
        env = {"HERMES_HOME": home, "PATH": os.environ.get("PATH", "")}  # what an MCP client passes
        subprocess.run([*HERMES, "kb", "index"], env=env, cwd=REPO, check=True, capture_output=True)
        runs = [one_run(env, args.warm_searches) for _ in range(args.runs)]
        later = statistics.median(paused_first_search(env, args.pause) for _ in range(args.runs))
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    rows = [["start → initialize answered", f"{median['initialize']:.2f} s"],
            ["start → first kb_search answered (cold: model load included)", f"{median['first']:.2f} s"],
            ["warm kb_search round trip (same session)", f"{median['warm'] * 1000:.1f} ms"],
            [f"first kb_search round trip, sent {args.pause:g} s after initialize", f"{later * 1000:.0f} ms"],
            ["stdin closed → process exited", f"{median['exit'] * 1000:.0f} ms"]]
    report(f"MCP server latency, hybrid kb_search over docs/ (median of {args.runs} runs)", ["measure", "time"], rows,
           write=not args.no_write)


if __name__ == "__main__":
    main()
