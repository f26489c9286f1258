"""`hermes chat`: the REPL, or one question with -q.

Wires the pieces together: the model client from `model:` in config.yaml,
the kb tools, the auto-retrieval hook, slash commands, and a background sync
of changed files at start-up.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console

from hermes_kb.agent.hooks import PRE_LLM_CALL, HookRegistry
from hermes_kb.agent.knowledgebase.config import KnowledgebaseConfig
from hermes_kb.agent.knowledgebase.citations import Citations, cited_ids
from hermes_kb.agent.knowledgebase.context import AutoRetriever
from hermes_kb.agent.knowledgebase.service import USER_ERRORS, KnowledgeBase
from hermes_kb.agent.knowledgebase.watcher import KnowledgebaseWatcher
from hermes_kb.agent.llm import LLMClient, LLMError
from hermes_kb.agent.loop import ChatSession
from hermes_kb.tools.knowledgebase_tool import register_knowledgebase_tools
from hermes_kb.tools.registry import ToolRegistry

from . import config as hermes_config
from .commands import CommandRegistry, SlashCommand
from .kb_command import VERBS, ask_terminal, run_slash_kb
from .model_config import llm_config
from .terminal import printable, safe

log = logging.getLogger(__name__)


@dataclass
class ChatRuntime:
    session: ChatSession
    commands: CommandRegistry
    retriever: AutoRetriever | None
    kb: KnowledgeBase
    citations: Citations


def _start_freshness(kb: KnowledgeBase, config: KnowledgebaseConfig) -> KnowledgebaseWatcher | None:
    """Start-up sync and the optional watcher, both off the prompt's path."""
    if not (config.enabled and config.directories):
        return None

    def sync() -> None:
        try:
            for summary in kb.index():
                log.info("startup sync of %s: %d added, %d changed, %d removed", summary.directory,
                         summary.added, summary.changed, summary.removed)
        except USER_ERRORS as exc:
            log.warning("startup sync skipped: %s", exc)
    if config.reindex_on_change:
        threading.Thread(target=sync, name="kb-startup-sync", daemon=True).start()
    if not config.watch_for_changes:
        return None
    watcher = KnowledgebaseWatcher(kb, list(config.directories), debounce_s=config.watch_debounce_s)
    watcher.start()
    return watcher


def build_runtime(out: Console, err: Console, llm: LLMClient, auto_retrieve: bool = True,
                  confirm: Callable[[str], bool] | None = None) -> ChatRuntime:
    """`confirm` asks the person at the terminal; None (as in `chat -q`) means nobody can answer, so
    a model's request to index a new folder or clear an index is refused."""
    kb_config = hermes_config.load_kb_config()
    home = hermes_config.hermes_home()
    kb = KnowledgeBase(kb_config, home)  # one per chat: the embedding model loads once
    tools = ToolRegistry()
    citations = Citations()  # one conversation: the injected blocks and kb_search number sources together
    register_knowledgebase_tools(tools, lambda: kb, lambda: kb_config, ask=confirm, citations=citations)
    hooks = HookRegistry()
    retriever = None
    if kb_config.enabled and auto_retrieve:
        retriever = AutoRetriever(kb, kb_config, citations=citations)
        hooks.register(PRE_LLM_CALL, lambda user_message, previous_user_message:
                       retriever.block_for(user_message, previous_user_message))
    session = ChatSession(llm, tools, hooks)
    commands = CommandRegistry()

    def kb_command(rest: str) -> bool:
        kwargs = {"confirm": confirm} if confirm else {}
        run_slash_kb(rest, lambda: kb, out, err, **kwargs)
        return True

    def help_command(rest: str) -> bool:
        out.print(safe(commands.help_text()))
        return True

    def new_command(rest: str) -> bool:
        session.reset()
        citations.clear()
        if retriever:
            retriever.reset()
        out.print("Started a new conversation.")
        return True

    commands.register(SlashCommand("kb", "knowledgebase: index, search, status, clear", kb_command,
                                   "index|search|status|clear ...", VERBS))
    commands.register(SlashCommand("help", "list commands", help_command))
    commands.register(SlashCommand("new", "start a new conversation", new_command))
    commands.register(SlashCommand("quit", "leave the chat", lambda rest: False))
    commands.register(SlashCommand("exit", "leave the chat", lambda rest: False))
    return ChatRuntime(session, commands, retriever, kb, citations)


def _answer(runtime: ChatRuntime, question: str, out: Console, err: Console) -> bool:
    """Stream one turn's answer to stdout; a turn without an answer (the endpoint failed, answered in the
    wrong shape, or the model kept calling tools) ends with one sentence on stderr and False."""
    streamed = False

    def on_token(token: str) -> None:
        nonlocal streamed
        streamed = True
        out.file.write(printable(token))  # the model's words can carry escape sequences from documents
        out.file.flush()

    def on_tool(name: str, arguments: str, result: str) -> None:
        err.print(f"[dim]→ {safe(name)}({safe(arguments[:120])})[/]")

    try:
        answer = runtime.session.ask(question, on_token=on_token, on_tool=on_tool)
    except LLMError as exc:  # TurnStopped (max tool rounds) included
        if streamed:  # end the half-written line so the sentence stands on its own
            out.file.write("\n")
            out.file.flush()
        err.print(f"[red]error:[/] {safe(str(exc))}")
        return False
    out.file.write("\n")
    out.file.flush()
    _show_sources(runtime, answer, err)
    return True


def _show_sources(runtime: ChatRuntime, answer: str, err: Console) -> None:
    """Under the answer (on stderr, so a piped answer stays clean): this turn's injected sources and any
    earlier one the answer cites, each with a location a terminal or editor opens."""
    shown = {record["id"]: record for record in runtime.session.turn_sources()}
    cited = runtime.citations.records
    for source_id in cited_ids(answer):
        if source_id in cited:
            shown.setdefault(source_id, cited[source_id])
    if not shown:
        return
    err.print("[dim]Sources:[/]")
    for source_id, record in sorted(shown.items(), key=lambda item: int(item[0][1:])):
        heading = f" § {safe(record['heading'])}" if record["heading"] else ""
        err.print(f"[dim]  [{source_id}] {safe(record['directory'])}/{safe(record['path'])}{heading} — "
                  f"[link={record['link']}]{safe(record['location'])}[/link][/]")


def run_chat(argv: list[str], out: Console, err: Console) -> int:
    parser = argparse.ArgumentParser(prog="hermes chat", description="Chat with the agent.")
    parser.add_argument("-q", "--query", help="ask one question, print the answer and exit")
    parser.add_argument("--model", help="model name (default: model.name in config.yaml)")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: model.base_url)")
    parser.add_argument("--no-auto-retrieve", action="store_true", help="do not inject knowledgebase context")
    args = parser.parse_args(argv)
    try:
        chosen, notes = llm_config(hermes_config.load_config().get("model"), args.base_url, args.model)
        llm = LLMClient(chosen)
    except LLMError as exc:
        err.print(f"[red]error:[/] {safe(str(exc))}")
        return 1
    for note in notes:
        err.print(f"[yellow]note:[/] {safe(note)}")
    runtime = build_runtime(out, err, llm, auto_retrieve=not args.no_auto_retrieve,
                            confirm=None if args.query else ask_terminal)
    home = hermes_config.hermes_home()
    if args.query:
        return 0 if _answer(runtime, args.query, out, err) else 1
    watcher = _start_freshness(runtime.kb, runtime.kb.config)
    transcript = home / "sessions" / time.strftime("%Y%m%d-%H%M%S.json")
    read = _line_reader(runtime, home)
    out.print("Hermes chat. /help lists commands, /quit leaves.", markup=False)
    while True:
        try:
            line = read()
        except (EOFError, KeyboardInterrupt):
            break
        if not line.strip():
            continue
        if runtime.commands.is_command(line):
            if not runtime.commands.dispatch(line, lambda name: err.print(
                    f"Unknown command /{safe(name)}. /help lists the commands.")):
                break
            continue
        if _answer(runtime, line, out, err):
            runtime.session.save(transcript)
    if runtime.retriever:
        runtime.retriever.close()
    if watcher:
        watcher.stop()
    return 0


def _line_reader(runtime: ChatRuntime, home) -> Callable[[], str]:
    """prompt_toolkit with history and completion on a terminal; plain lines when piped."""
    if not sys.stdin.isatty():
        return input
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    home.mkdir(parents=True, exist_ok=True)
    prompt = PromptSession(history=FileHistory(str(home / "chat_history")), completer=runtime.commands.completer(lambda: [d.name for d in runtime.kb.known_directories()]),
                           complete_while_typing=False)
    return lambda: prompt.prompt("you> ")
