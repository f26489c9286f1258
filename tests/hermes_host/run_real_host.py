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
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai import FINAL_ANSWER, FakeOpenAI  # noqa: E402

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
        "toolsets": sorted({registry.get_toolset_for_tool(n) for n in names}),
        "definitions": sorted(d["function"]["name"] for d in registry.get_definitions(set(names), quiet=True)),
        "slash_status": get_plugin_command_handler("kb")("status"),
        "clear": json.loads(registry.dispatch("kb_clear", {"directory": "kb"}, task_id="t")),
        "bad_args": json.loads(registry.dispatch("kb_search", {"k": 3}, task_id="t")),
    }, open("plugin_manager.json", "w"))
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
    check(seen["tools"] == ["kb_clear", "kb_index", "kb_read", "kb_search", "kb_status"] == seen["definitions"],
          "five tools registered and offered", seen)
    check(seen["toolsets"] == ["knowledgebase"] and seen["hooks"] == ["pre_llm_call"] and seen["commands"] == ["kb"],
          "toolset knowledgebase, the pre_llm_call hook and /kb", seen)
    check("kb" in seen["slash_status"] and "3" in seen["slash_status"], "/kb status lists the index", seen["slash_status"])
    check("allow_model_clear" in seen["clear"].get("error", ""), "kb_clear from a tool call is refused", seen["clear"])
    check("missing required argument 'query'" in seen["bad_args"].get("error", ""), "bad arguments are refused",
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
