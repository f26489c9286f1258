"""`/kb` through the same dispatch the REPL uses, and `hermes chat` in a real pseudo-terminal."""

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prompt_toolkit.document import Document
from rich.console import Console

from hermes_kb.hermes_cli.chat import build_runtime
from hermes_kb.agent.llm import LLMClient, LLMConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime(tree, write_config):
    root = tree({"deploy.md": "# Deploy\n\nThe release train leaves on port 4271.\n", "b.md": "# B\n\nbananas\n"})
    write_config({"directories": [{"path": str(root), "name": "notes"}], "auto_retrieve": False})
    out = Console(record=True, width=200)
    return build_runtime(out, out, LLMClient(LLMConfig("http://127.0.0.1:9/v1", "none")), confirm=lambda _: True), out


def run(runtime, out, line):
    out.export_text()  # drop earlier output
    keep_going = runtime.commands.dispatch(line, lambda name: out.print(f"Unknown command /{name}."))
    return keep_going, out.export_text()


def test_kb_verbs_through_the_repl_dispatch(runtime):
    rt, out = runtime
    assert run(rt, out, "/kb index notes")[1].startswith("notes: 2 added")
    _, text = run(rt, out, "/kb search release train --mode keyword")
    assert "[S1] notes:deploy.md:1-3" in text
    _, text = run(rt, out, "/kb status")
    assert "notes" in text and "store: sqlean.py" in text or "store: sqlite3" in text
    _, text = run(rt, out, "/kb search 4271 --json")
    assert json.loads(text)["hits"][0]["path"] == "deploy.md"
    _, text = run(rt, out, "/kb clear notes")
    assert "Cleared: notes" in text


def test_usage_help_unknown_and_quit(runtime):
    rt, out = runtime
    _, text = run(rt, out, "/kb")
    assert "index" in text and "search" in text and "status" in text and "clear" in text
    _, text = run(rt, out, "/kb search")
    assert "usage" in text
    _, text = run(rt, out, "/help")
    assert all(f"/{name}" in text for name in ("kb", "help", "new", "quit"))
    _, text = run(rt, out, "/frobnicate")
    assert "Unknown command /frobnicate" in text
    assert run(rt, out, "/quit")[0] is False


def test_tab_completion_of_commands_and_kb_verbs(runtime):
    rt, _ = runtime
    completer = rt.commands.completer()

    def complete(text):
        return sorted(c.text for c in completer.get_completions(Document(text), None))

    assert "/kb" in complete("/k") and "/help" in complete("/h")
    assert complete("/kb s") == ["search", "status"]
    assert complete("/kb ") == ["clear", "doctor", "eval", "index", "search", "status"]


@pytest.mark.integration
def test_hermes_chat_in_a_pseudo_terminal_shows_kb_status(tree, write_config, hermes_home):
    root = tree({"a.md": "# A\n\nalpha\n"})
    write_config({"directories": [{"path": str(root), "name": "ptynotes"}], "reindex_on_change": False})
    subprocess.run([sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", "index", "ptynotes"], check=True, cwd=REPO,
                   env={**os.environ, "HERMES_HOME": str(hermes_home)}, capture_output=True)
    pid, fd = pty.fork()
    if pid == 0:  # child: the chat, on the pty
        os.environ.update({"HERMES_HOME": str(hermes_home), "TERM": "xterm", "COLUMNS": "160", "LINES": "40",
                           "PROMPT_TOOLKIT_NO_CPR": "1"})
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "hermes_kb.hermes_cli.main", "chat"])
    screen = b""

    def read_until(marker: bytes, timeout: float = 30) -> None:
        nonlocal screen
        deadline = time.time() + timeout
        while marker not in screen and time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    screen += os.read(fd, 65536)
                except OSError:
                    break
        assert marker in screen, screen[-2000:]

    try:
        read_until(b"you>")
        os.write(fd, b"/kb status\r")
        read_until(b"store: ")
        text = screen.decode(errors="replace")
        assert "ptynotes" in text and "files" in text
        os.write(fd, b"/quit\r")
        deadline = time.time() + 15
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                break
            time.sleep(0.1)
        else:
            pytest.fail("hermes chat did not exit after /quit")
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.close(fd)
