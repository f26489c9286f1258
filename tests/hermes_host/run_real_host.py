"""The knowledgebase inside the real Hermes Agent 0.19.0, end to end (a CI step of its own).

In a throwaway venv: install hermes-agent==0.19.0, hash every file of it, install
this project (non-editable) beside it, and check that pip accepts both sets of
requirements and that not one byte of Hermes changed. Then, with a throwaway
HOME and HERMES_HOME: `hermes kb index` and `hermes kb search` through Hermes's
own command line, the /kb command and the tools through Hermes's plugin
manager and tool registry, `hermes kb mcp` spoken to over raw JSON-RPC, and one
`hermes chat -Q -q` turn against a loopback
fake OpenAI-compatible server, checking what Hermes actually sent: the
injected cited block in the first request, the kb_search result in the second.

    .venv/bin/python tests/hermes_host/run_real_host.py [--python python3.11] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai import FINAL_ANSWER, JUDGE_PROMPT, MCP_MARKER, FakeOpenAI  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HERMES = "hermes-agent==0.19.0"
HERMES_WITH_MCP = "hermes-agent[mcp]==0.19.0"  # pins mcp==1.26.0; our [mcp] extra must accept it
MODEL = "fake-model"
QUESTION = "When does the zeppelin rollout run its canary checks?"

# Run inside the venv: sha256 of every file hermes-agent's RECORD lists (its `hermes` script included).
HASH_HERMES = textwrap.dedent("""
    import hashlib, importlib.metadata, json, sys
    dist = importlib.metadata.distribution("hermes-agent")
    hashes = {}
    for f in dist.files:
        path = f.locate()
        try:
            hashes[str(f)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
        except FileNotFoundError:
            hashes[str(f)] = None
    json.dump(hashes, sys.stdout)
""")

# Run inside the venv: what each distribution installs, as top-level names in site-packages and as
# paths under the venv for the rest (scripts in bin/, Hermes's data folders).
TOP_LEVEL = textwrap.dedent("""
    import importlib.metadata, json, os, sys, sysconfig
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    def names(dist):
        found = set()
        for f in importlib.metadata.distribution(dist).files:
            path = os.path.realpath(f.locate())
            if path.startswith(site + os.sep):
                found.add(os.path.relpath(path, site).split(os.sep)[0])
            else:
                found.add(os.path.relpath(path, sys.prefix))
        return sorted(found)
    json.dump({"hermes": names("hermes-agent"), "ours": names("hermes-knowledgebase")}, sys.stdout)
""")

# Run inside the venv with HERMES_HOME set: Hermes's own plugin manager and tool registry.
THROUGH_PLUGIN_MANAGER = textwrap.dedent("""
    import json
    from hermes_cli.plugins import discover_plugins, get_plugin_command_handler, get_plugin_manager
    discover_plugins()
    loaded = get_plugin_manager()._plugins["knowledgebase"]
    from tools.registry import registry
    names = ["kb_search", "kb_read", "kb_index", "kb_status", "kb_clear"]
    json.dump({
        "enabled": loaded.enabled, "error": loaded.error, "tools": sorted(loaded.tools_registered),
        "hooks": loaded.hooks_registered, "commands": loaded.commands_registered,
        "toolsets": sorted({registry.get_toolset_for_tool(n) for n in names} - {None}),
        "definitions": sorted(d["function"]["name"] for d in registry.get_definitions(set(names), quiet=True)),
        "slash_status": get_plugin_command_handler("kb")("status"),
        "clear": json.loads(registry.dispatch("kb_clear", {"directory": "kb"}, task_id="t") or "{}"),
        "bad_args": json.loads(registry.dispatch("kb_search", {"k": 3}, task_id="t")),
    }, open("plugin_manager.json", "w"))
""")


# Run inside the venv with HERMES_HOME set: kb_search with `rerank: llm` through Hermes's registry, so the
# plugin's judge asks the user's model through Hermes's own plugin LLM facade / auxiliary task.
THROUGH_LLM_RERANK = textwrap.dedent("""
    import json
    from hermes_cli.plugins import discover_plugins
    discover_plugins()
    from tools.registry import registry
    result = json.loads(registry.dispatch("kb_search", {"query": "what do cats and the zeppelin rollout do",
                                                        "rerank": "llm", "k": 3}, task_id="t"))
    json.dump(result, open("llm_rerank.json", "w"))
""")


# Run inside the venv with HERMES_HOME set: Hermes's own gateway dispatch (GatewayRunner._handle_message,
# as a platform adapter calls it) for a chat member, with a ticker measuring how long the loop stalls.
THROUGH_GATEWAY = textwrap.dedent("""
    import asyncio, json, sys, time
    from gateway.config import GatewayConfig, Platform
    from gateway.platforms.base import MessageEvent
    from gateway.session import SessionSource
    from gateway.run import GatewayRunner
    from hermes_cli.plugins import discover_plugins

    async def main():
        discover_plugins()  # the gateway does this at start, before any message
        runner = GatewayRunner(GatewayConfig())
        member = SessionSource(platform=Platform.TELEGRAM, chat_id="c1", user_id="u1", chat_type="group",
                               user_name="member")
        seen = []
        for text in sys.argv[1:]:
            gaps, last, done = [0.0], time.perf_counter(), asyncio.Event()
            async def ticker():
                nonlocal last
                while not done.is_set():
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now
            tick = asyncio.create_task(ticker())
            started = time.perf_counter()
            reply = await runner._handle_message(MessageEvent(text=text, source=member))
            seconds = time.perf_counter() - started
            done.set()
            await tick
            seen.append({"text": text, "reply": reply, "seconds": seconds, "worst_stall_ms": max(gaps) * 1000})
        json.dump(seen, open("gateway.json", "w"))
    asyncio.run(main())
""")

# Run inside the venv with HERMES_HOME set: kb_read of the `dir/path` a citation shows, through Hermes's registry.
READ_CITED = textwrap.dedent("""
    import json
    from hermes_cli.plugins import discover_plugins
    discover_plugins()
    from tools.registry import registry
    json.dump({"cited": json.loads(registry.dispatch("kb_read", {"path": "kb/deploy.md"}, task_id="t")),
               "bare": json.loads(registry.dispatch("kb_read", {"path": "deploy.md", "directory": "kb"}, task_id="t"))},
              open("read_cited.json", "w"))
""")


class Failure(AssertionError):
    pass


def check(condition: bool, what: str, detail: object = "") -> None:
    if not condition:
        raise Failure(f"{what}\n{str(detail)[-4000:]}")
    print(f"  ok: {what}")


def run(cmd: list[str], env: dict | None = None, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    started = time.monotonic()
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    shown = cmd[:2] + ["<script>"] if "-c" in cmd else cmd  # the inline scripts are long
    print(f"$ {' '.join(str(c) for c in shown)}  ({time.monotonic() - started:.1f} s, exit {result.returncode})")
    return result


def must(cmd: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    result = run(cmd, **kwargs)
    check(result.returncode == 0, what, result.stdout + result.stderr)
    return result


def install(work: Path, python: str) -> Path:
    venv = work / "venv"
    must([python, "-m", "venv", str(venv)], "a fresh venv")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    must([*pip, "install", "--quiet", HERMES_WITH_MCP], f"pip installs {HERMES_WITH_MCP}", timeout=600)
    vpython = str(venv / "bin" / "python")
    # cwd=work: run from the repository, `python -c` would also see its *.egg-info
    before = json.loads(must([vpython, "-c", HASH_HERMES], "hash Hermes's files", cwd=work).stdout)
    script = venv / "bin" / "hermes"
    check(script.is_file(), "Hermes has its hermes script")
    script_before = script.read_bytes()
    must([*pip, "install", "--quiet", f"{REPO}[mcp]"], "pip installs this project (non-editable, [mcp]) beside Hermes",
         timeout=600)
    must([*pip, "check"], "pip check: both sets of requirements hold", cwd=work)
    after = json.loads(must([vpython, "-c", HASH_HERMES], "hash Hermes's files again", cwd=work).stdout)
    changed = sorted(k for k in before if before[k] != after.get(k))
    check(before == after and len(before) > 1000, f"all {len(before)} files of Hermes are byte-identical", changed[:20])
    check(script.read_bytes() == script_before, "the hermes script is Hermes's, byte-identical")
    names = json.loads(must([vpython, "-c", TOP_LEVEL], "what each distribution installs", cwd=work).stdout)
    ours = {n for n in names["ours"] if not n.endswith(".dist-info")}
    clash = ours & set(names["hermes"])
    check(not clash and ours == {"hermes_kb", "bin/hermes-kb"},
          f"we install only hermes_kb and bin/hermes-kb ({sorted(ours)}), no name of Hermes's", clash)
    return venv


def write_home(work: Path, port: int) -> dict:
    home, hermes_home, kb = work / "home", work / "hermes-home", work / "kb"
    for folder in (home, hermes_home, kb / "notes"):
        folder.mkdir(parents=True, exist_ok=True)
    (kb / "deploy.md").write_text("# Deploying\n\nThe zeppelin rollout runs blue green deploys every Tuesday, "
                                  "with canary checks before each wave.\n")
    (kb / "notes" / "cats.md").write_text("# Cats\n\nCats sleep most of the day and purr when content.\n")
    (kb / "notes" / "kettle.txt").write_text("Descale the kettle monthly with citric acid.\n")
    (hermes_home / "config.yaml").write_text(textwrap.dedent(f"""\
        model:
          provider: custom
          base_url: http://127.0.0.1:{port}/v1
          default: {MODEL}
        plugins:
          enabled: [knowledgebase]
        knowledgebase:
          directories:
            - path: {kb}
              name: kb
        """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "OPENAI_", "ANTHROPIC_", "OPENROUTER_"))}
    env.update(HOME=str(home), HERMES_HOME=str(hermes_home), NO_COLOR="1", TERM="dumb")
    return env


def through_cli(venv: Path, env: dict, work: Path) -> None:
    hermes = str(venv / "bin" / "hermes")
    out = must([hermes, "kb", "index"], "`hermes kb index` through Hermes's CLI", env=env, cwd=work).stdout
    check("3 added" in out, "three files indexed", out)
    result = must([hermes, "kb", "search", "zeppelin", "canary", "--json"], "`hermes kb search` through Hermes's CLI",
                  env=env, cwd=work)
    hits = json.loads(result.stdout)["hits"]
    check(hits and hits[0]["path"] == "deploy.md", "the search finds deploy.md first", result.stdout)
    check(run([hermes, "kb", "search"], env=env, cwd=work).returncode == 2, "a usage error exits 2")
    help_text = must([hermes, "kb", "--help"], "`hermes kb --help`", env=env, cwd=work).stdout
    check("{index,search,status,clear" in help_text, "`hermes kb --help` lists our verbs", help_text)
    must([str(venv / "bin" / "python"), "-c", THROUGH_PLUGIN_MANAGER], "Hermes's plugin manager loads the plugin",
         env=env, cwd=work)
    seen = json.loads((work / "plugin_manager.json").read_text())
    check(seen["enabled"] and not seen["error"], "the plugin is enabled, without error", seen)
    check(seen["tools"] == ["kb_index", "kb_read", "kb_search", "kb_status"],
          "four tools registered: kb_clear only where allow_model_clear lets it run", seen)
    check(seen["definitions"] == ["kb_index", "kb_read", "kb_search", "kb_status"], "the four offered", seen)
    check(seen["toolsets"] == ["knowledgebase"] and seen["hooks"] == ["pre_llm_call", "post_api_request", "transform_llm_output"] and seen["commands"] == ["kb"],
          "toolset knowledgebase, the pre_llm_call, post_api_request and transform_llm_output hooks and /kb", seen)
    check("kb" in seen["slash_status"] and "3" in seen["slash_status"], "/kb status lists the index", seen["slash_status"])
    check("error" in seen["clear"] and "cleared" not in seen["clear"], "kb_clear from a tool call is refused",
          seen["clear"])
    check("kb_search needs a query" in seen["bad_args"].get("error", ""), "bad arguments are refused",
          seen["bad_args"])


def through_mcp(venv: Path, env: dict, work: Path) -> None:
    """`hermes kb mcp` started by Hermes's own CLI, spoken to as an MCP client would: every stdout
    line must be JSON-RPC (Hermes and the model load print nothing there), and it answers a search."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "real-host", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "kb_search", "arguments": {"query": "zeppelin canary checks"}}},
    ]
    started = time.monotonic()
    process = subprocess.Popen([str(venv / "bin" / "hermes"), "kb", "mcp"], env=env, cwd=work, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    answers: dict[int, dict] = {}
    lines: list[str] = []
    for request in requests:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        while "id" in request and request["id"] not in answers:
            line = process.stdout.readline()
            if not line:
                raise Failure(f"the MCP server closed stdout without answering\n{process.stderr.read()[-4000:]}")
            lines.append(line)
            message = json.loads(line)  # a non-JSON line on stdout fails here
            if "id" in message:
                answers[message["id"]] = message
    process.stdin.close()
    code = process.wait(timeout=30)
    print(f"$ hermes kb mcp  ({time.monotonic() - started:.1f} s, exit {code})")
    check(all(json.loads(line).get("jsonrpc") == "2.0" for line in lines), f"all {len(lines)} stdout lines are JSON-RPC")
    check(code == 0, "the server exits when stdin closes", process.stderr.read())
    tools = sorted(t["name"] for t in answers[2]["result"]["tools"])
    check(tools == ["kb_index", "kb_read", "kb_search", "kb_status"], "four tools, kb_clear off without the flag", tools)
    result = answers[3]["result"]
    hits = result.get("structuredContent", {}).get("hits", [])
    check(not result.get("isError") and hits and hits[0]["uri"] == "kb://kb/deploy.md",
          "kb_search over MCP returns the cited hit with its kb:// uri", result)


def through_chat(venv: Path, env: dict, work: Path, server: FakeOpenAI) -> None:
    result = run([str(venv / "bin" / "hermes"), "chat", "-Q", "-q", QUESTION], env=env, cwd=work, timeout=240)
    transcript = result.stdout + result.stderr
    check(result.returncode == 0 and FINAL_ANSWER in result.stdout, "`hermes chat -Q -q` answers", transcript)
    check("Sources:\n[S1] kb/deploy.md lines" in result.stdout and str(work / "kb" / "deploy.md") in result.stdout,
          "under the answer, the file behind [S1]", result.stdout)
    check(result.stdout.count("Sources:") == 1, "the footer once (Hermes prints this answer whole)", result.stdout)
    agent = [r for r in server.chat_requests
             if any((t.get("function") or {}).get("name") == "kb_search" for t in r.get("tools") or [])]
    check(len(agent) == 2, "two agent requests offering kb_search", [r.get("messages", [])[-1:] for r in server.chat_requests])
    check(all(r.get("stream") for r in agent), "both streamed")
    first_user = [m for m in agent[0]["messages"] if m.get("role") == "user"][-1]["content"]
    first_user = first_user if isinstance(first_user, str) else json.dumps(first_user)
    check(first_user.startswith(QUESTION) and "[Knowledgebase context" in first_user
          and "[S1] kb/deploy.md" in first_user and "zeppelin rollout" in first_user,
          "the first request's user message carries the injected cited block", first_user)
    tool_messages = [m for m in agent[1]["messages"] if m.get("role") == "tool"]
    check(len(tool_messages) == 1, "the second request carries one tool result", agent[1]["messages"][-3:])
    content = tool_messages[0]["content"]
    content = content if isinstance(content, str) else json.dumps(content)
    start = content.find("{")
    hits = json.loads(content[start:content.rfind("}") + 1])["hits"] if start >= 0 else []
    check(hits and hits[0]["id"] == "S1" and hits[0]["path"] == "deploy.md",
          "the kb_search tool result has cited hits", content)


def through_gateway(venv: Path, env: dict, work: Path) -> None:
    """/kb as a member of a shared gateway chat meets it: Hermes's own dispatch, a ticker on its loop."""
    messages = ["/kb search zeppelin canary", "/kb index kb", "/kb index /etc/apt", "/kb clear kb --yes",
                "/kb status /etc", "/kb index ~", "/kb status"]
    must([str(venv / "bin" / "python"), "-c", THROUGH_GATEWAY, *messages], "Hermes's gateway dispatches /kb",
         env={**env, "GATEWAY_ALLOW_ALL_USERS": "true"}, cwd=work)
    seen = {turn["text"]: turn for turn in json.loads((work / "gateway.json").read_text())}
    worst = max(turn["worst_stall_ms"] for turn in seen.values())
    check(worst < 100, f"the gateway's event loop never stalled over 100 ms (worst {worst:.0f} ms)", seen)
    check("deploy.md" in (seen["/kb search zeppelin canary"]["reply"] or ""), "a member's /kb search answers", seen)
    index = seen["/kb index kb"]
    check("in the background" in index["reply"] and index["seconds"] < 1,
          f"/kb index returns at once ({index['seconds']:.2f} s) and runs in the background", index)
    for refused in ("/kb index /etc/apt", "/kb clear kb --yes", "/kb status /etc", "/kb index ~"):
        check("gateway_full_access" in (seen[refused]["reply"] or ""), f"a member's `{refused}` is refused", seen[refused])
    status = seen["/kb status"]["reply"] or ""
    check("kb" in status and "/etc/apt" not in status, "nothing was added or cleared by the member", status)


class Terminal:
    """Hermes's REPL on a pseudo-terminal, as a person at a terminal meets it."""

    _ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>]|\r")

    def __init__(self, command: list[str], env: dict, cwd: Path):
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become Hermes
            os.chdir(cwd)
            os.execve(command[0], command, {**env, "TERM": "xterm", "COLUMNS": "120", "LINES": "40"})
        self.seen = ""

    def read(self, seconds: float) -> None:
        import select

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    return
                self.seen += self._ESCAPES.sub("", chunk.decode("utf-8", "replace"))

    def expect(self, text: str, timeout: float) -> float:
        """Seconds until `text` appears after the output seen so far; Failure if it does not."""
        start, started = len(self.seen), time.monotonic()
        while time.monotonic() - started < timeout:
            self.read(0.1)
            if text in self.seen[start:]:
                return time.monotonic() - started
        raise Failure(f"the REPL never showed {text!r} within {timeout:.0f} s\n{self.seen[-3000:]}")

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def close(self) -> None:
        try:
            self.type("/exit")
            self.read(3)
        finally:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)


def through_repl(venv: Path, env: dict, work: Path) -> None:
    """/kb index in the REPL: the prompt comes back at once, progress shows while the run goes on, other
    input is answered meanwhile, and the result is printed when it ends; then a streamed answer shows
    its Sources footer."""
    bulk = work / "kb" / "bulk"
    bulk.mkdir()
    for n in range(400):
        (bulk / f"note{n:03}.md").write_text(f"# Note {n}\n\n" + " ".join(f"word{n}x{i} hangar" for i in range(60)) + "\n")
    terminal = Terminal([str(venv / "bin" / "hermes")], env, work)
    try:
        terminal.expect("❯", 90)
        started = time.monotonic()
        terminal.type("/kb index kb")
        terminal.expect("Indexing in the background", 20)
        back = time.monotonic() - started
        check(back < 10, f"/kb index gives the prompt back at once ({back:.1f} s)")
        terminal.type("/kb status")
        terminal.expect("/kb index kb is running", 20)
        terminal.read(1)
        running = terminal.seen[terminal.seen.rfind("/kb index kb is running"):][:200]
        check("files" in running or "scanning" in running, "/kb status shows the run's progress while it runs", running)
        terminal.expect("/kb index kb finished", 300)
        done = terminal.seen[terminal.seen.rfind("/kb index kb finished"):][:400]
        check("400 added" in done, "the REPL prints the run's result when it ends", done)
        # A streamed answer: Hermes prints no final response after streaming, the plugin prints the footer.
        asked = len(terminal.seen)
        terminal.type(QUESTION)
        terminal.expect("Sources:", 120)  # the answer and its footer may come in one read
        terminal.read(1)
        shown = terminal.seen[asked:]
        answer, footer = shown.find("every Tuesday"), shown.rfind("Sources:")
        check(0 <= answer < footer and shown.count("Sources:") == 1 and "[S1]" in shown[footer:footer + 300]
              and "deploy.md" in shown[footer:footer + 300],
              "under the answer the REPL streamed, the file behind [S1]", shown[-1500:])
        # The footer is part of the answer Hermes keeps: /history shows it under the answer.
        asked = len(terminal.seen)
        terminal.type("/history")
        terminal.expect("Conversation History", 30)
        terminal.read(2)
        history = terminal.seen[asked:]
        answer = history.rfind("every Tuesday")
        check(0 <= answer < history.find("Sources:", answer) and "[S1] kb/deploy.md" in history[answer:],
              "/history shows the streamed answer with its footer", history[-1500:])
    finally:
        terminal.close()


def through_resume(venv: Path, env: dict, work: Path, server: FakeOpenAI) -> None:
    """`hermes chat --continue`: a new process replays the session; source ids go on, nothing is
    injected twice, and no id names two passages."""
    before = len(server.chat_requests)
    result = run([str(venv / "bin" / "hermes"), "chat", "-c", "-Q", "-q", "And the zeppelin canary waves, again?"],
                 env=env, cwd=work, timeout=240)
    check(result.returncode == 0, "`hermes chat -c -Q -q` answers", result.stdout + result.stderr)
    final = server.chat_requests[-1]
    check(len(server.chat_requests) > before, "the resumed session asked the model", len(server.chat_requests))
    meaning: dict[str, set] = {}
    for message in final["messages"]:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        for source_id, where in re.findall(r"^\[(S\d+)\] (\S+)", text, re.M):
            meaning.setdefault(source_id, set()).add(where)
        start = text.find("{")
        if message.get("role") == "tool" and start >= 0:
            for hit in json.loads(text[start:text.rfind("}") + 1]).get("hits", []):
                meaning.setdefault(hit["id"], set()).add(f"{hit['directory']}/{hit['path']}")
    check(meaning and all(len(paths) == 1 for paths in meaning.values()),
          f"across the resumed session every id names one passage ({meaning})")
    blocks = sum(str(m.get("content")).count("[S1] kb/deploy.md") for m in final["messages"] if m.get("role") == "user")
    saved = [str(m.get("content")) for m in final["messages"] if m.get("role") == "assistant" and FINAL_ANSWER in str(m.get("content"))]
    check(saved and "Sources:\n[S1] kb/deploy.md lines" in saved[0],
          "the answer the session saved kept its footer (Hermes saves a turn before transform_llm_output)", saved)
    check(blocks == 1, "deploy.md was injected once across both processes", blocks)


def through_read(venv: Path, env: dict, work: Path) -> None:
    must([str(venv / "bin" / "python"), "-c", READ_CITED], "kb_read through Hermes's registry", env=env, cwd=work)
    read = json.loads((work / "read_cited.json").read_text())
    check("zeppelin" in read["cited"].get("text", "") and "zeppelin" in read["bare"].get("text", ""),
          "kb_read reads the `kb/deploy.md` a citation shows, and a path with its directory", read)


def through_llm_rerank(venv: Path, env: dict, work: Path, server: FakeOpenAI) -> None:
    """`rerank: llm`: the user's own model (the scripted server) judges the passages through Hermes."""
    before = len(server.chat_requests)
    must([str(venv / "bin" / "python"), "-c", THROUGH_LLM_RERANK], "kb_search with rerank llm through Hermes",
         env=env, cwd=work)
    result = json.loads((work / "llm_rerank.json").read_text())
    asked = [r for r in server.chat_requests[before:] if JUDGE_PROMPT in json.dumps(r.get("messages"))]
    check(len(asked) == 1, "the judge asked the user's model once, through Hermes", server.chat_requests[before:])
    hits = result.get("hits") or []
    check(hits and hits[0]["path"] == "notes/cats.md" and hits[0].get("relevance") == 0.9,
          "the model's judgement reorders the hits and is shown beside them", result)


def through_mcp_client(venv: Path, env: dict, work: Path, server: FakeOpenAI) -> None:
    """Hermes's own MCP client on `hermes kb mcp`: the tool message holds each passage once."""
    config = env["HERMES_HOME"] + "/config.yaml"
    with open(config, "a") as handle:
        handle.write(textwrap.dedent(f"""\
            mcp_servers:
              kb:
                command: {venv / "bin" / "hermes"}
                args: [kb, mcp]
                env: {{HERMES_HOME: {env["HERMES_HOME"]}, HOME: {env["HOME"]}}}
            """))
    result = run([str(venv / "bin" / "hermes"), "chat", "-Q", "-q", f"{MCP_MARKER} zeppelin canary"], env=env, cwd=work,
                 timeout=300)
    check(result.returncode == 0, "`hermes chat` with the kb MCP server answers", result.stdout + result.stderr)
    tool_messages = [m for r in server.chat_requests for m in r.get("messages", []) if m.get("role") == "tool"
                     and "call_mcp_kb" in str(m.get("tool_call_id"))]
    check(tool_messages, "Hermes called mcp__kb__kb_search", [r.get("tools") for r in server.chat_requests[-1:]])
    content = str(tool_messages[-1]["content"])
    passage = "blue green deploys every Tuesday"
    check(content.count(passage) == 1 and "never as instructions" in content,
          "through Hermes's MCP client each passage reaches the model once, with the data-not-instructions notice",
          content)


def through_mcp_http(venv: Path, env: dict, work: Path, server: FakeOpenAI) -> None:
    """A teammate's Hermes (another HERMES_HOME, no plugin) searches the knowledgebase served over
    streamable HTTP from the first home, with a read token, through Hermes's own MCP client."""
    hermes = str(venv / "bin" / "hermes")
    refused = run([hermes, "kb", "mcp", "--http", "--host", "0.0.0.0", "--port", "0"], env=env, cwd=work, timeout=120)
    check(refused.returncode == 1 and "add a token first" in refused.stderr, "an open bind without tokens is refused",
          refused.stderr)
    token = must([hermes, "kb", "token", "add", "teammate", "--scope", "read"], "`hermes kb token add`",
                 env=env, cwd=work).stdout.strip().splitlines()[-1]
    check(token.startswith("hkb_"), "the new token is printed alone on the last line", token)
    started = time.monotonic()
    served = subprocess.Popen([hermes, "kb", "mcp", "--http", "--port", "0", "--json"], env=env, cwd=work, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = json.loads(served.stdout.readline())["url"]
        teammate = work / "teammate-home"
        teammate.mkdir(exist_ok=True)
        (teammate / "config.yaml").write_text(textwrap.dedent(f"""\
            model:
              provider: custom
              base_url: http://127.0.0.1:{server.port}/v1
              default: {MODEL}
            mcp_servers:
              kb:
                url: {url}
                headers:
                  Authorization: Bearer {token}
            """))
        before = len(server.chat_requests)
        result = run([hermes, "chat", "-Q", "-q", f"{MCP_MARKER} zeppelin canary"], env={**env, "HERMES_HOME": str(teammate)},
                     cwd=work, timeout=300)
        check(result.returncode == 0, "a teammate's `hermes chat` with the kb server over HTTP answers",
              result.stdout + result.stderr)
        tool_messages = [m for r in server.chat_requests[before:] for m in r.get("messages", [])
                         if m.get("role") == "tool" and "call_mcp_kb" in str(m.get("tool_call_id"))]
        check(tool_messages and "blue green deploys every Tuesday" in str(tool_messages[-1]["content"]),
              "Hermes's MCP client searched over HTTP with the token", tool_messages[-1:])
    finally:
        served.terminate()
        _, errors = served.communicate(timeout=60)
    # Under Hermes's CLI, Hermes owns logging: the lines go to its agent.log (under `hermes-kb`, to stderr).
    logs = "".join(path.read_text(errors="replace") for path in (Path(env["HERMES_HOME"]) / "logs").glob("*.log"))
    check("token teammate: kb_search" in errors + logs and token not in errors + logs,
          "the server logged which token searched, by name only", (errors + logs)[-2000:])
    teammate_logs = "".join(p.read_text(errors="replace") for p in (work / "teammate-home").glob("logs/*.log"))
    check(token not in teammate_logs, "the teammate's Hermes does not log the token either")
    print(f"$ hermes kb mcp --http  ({time.monotonic() - started:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=shutil.which("python3.11") or sys.executable,
                        help="interpreter for the throwaway venv (Hermes 0.19.0 wants 3.11+)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="hermes-real-host-"))
    print(f"Hermes real-host test in {work}")
    try:
        venv = install(work, args.python)
        installed = time.monotonic()
        with FakeOpenAI(MODEL) as server:
            env = write_home(work, server.port)
            through_cli(venv, env, work)
            through_mcp(venv, env, work)
            through_chat(venv, env, work, server)
            through_resume(venv, env, work, server)
            through_read(venv, env, work)
            through_llm_rerank(venv, env, work, server)
            through_gateway(venv, env, work)
            through_repl(venv, env, work)
            through_mcp_client(venv, env, work, server)
            through_mcp_http(venv, env, work, server)
        verdict = (f"PASS: the knowledgebase plugin works inside {HERMES} (install {installed - started:.1f} s, "
                   f"host checks {time.monotonic() - installed:.1f} s)")
        code = 0
    except (Failure, subprocess.TimeoutExpired) as exc:
        verdict, code, args.keep = f"FAIL: {exc}\n(files kept in {work})", 1, True
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{verdict}\nwall time {time.monotonic() - started:.1f} s", file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
