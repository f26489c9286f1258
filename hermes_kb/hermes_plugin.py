"""The knowledgebase as a plugin of the real Hermes Agent (0.19.0).

Hermes finds this module through the `hermes_agent.plugins` entry point
(pyproject.toml) once the user enables it (`plugins.enabled: [knowledgebase]`)
and calls `register(ctx)`. It is a thin adapter: the tools, the kb verbs and
auto-retrieval are the ones our own chat uses, so the two hosts cannot drift.

What it registers:
- the five kb_* tools (toolset `knowledgebase`), refused the same things as
  anywhere nobody can confirm: indexing a new folder and clearing an index,
  unless config allows them;
- `/kb ...` in Hermes's chat and `hermes kb ...` on its command line;
- a `pre_llm_call` hook adding the cited block to a user turn, never the same
  chunk twice in one session.

Hermes 0.19.0 gives plugins no config accessor, so the `knowledgebase:`
section is read from Hermes's own config.yaml, under the HERMES_HOME Hermes
resolves (profiles included), at call time.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from hermes_kb.agent.knowledgebase.config import ConfigError, KnowledgebaseConfig
from hermes_kb.agent.knowledgebase.context import AutoRetriever, render_block
from hermes_kb.agent.knowledgebase.service import KnowledgeBase, KnowledgebaseError
from hermes_kb.hermes_cli import config as kb_config_file
from hermes_kb.tools.knowledgebase_tool import HANDLERS, SCHEMAS, TOOLSET, json_handler, tools_available
from hermes_kb.tools.permissions import Permissions
from hermes_kb.tools.registry import argument_problem, error

log = logging.getLogger(__name__)

# Hermes spills hook context over 10,000 characters to a file and injects a preview instead;
# the block stays under that so the model gets the cited text itself.
MAX_CONTEXT_CHARS = 9_500
MAX_SESSIONS = 64  # conversations whose injected chunks are remembered (least recently used go first)
EMOJI = "📚"
TRUNCATED = " …[truncated; kb_read shows the rest]"


def hermes_home() -> Path:
    """Hermes's home as Hermes resolves it (profile overrides included); ours when Hermes is absent."""
    try:
        from hermes_constants import get_hermes_home
    except ImportError:
        get_hermes_home = kb_config_file.hermes_home
    return Path(get_hermes_home())


def _text(content: Any) -> str:
    """A message's text: Hermes passes a string, or a list of parts for multimodal turns."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content if isinstance(part, dict)
                         and part.get("type") in ("text", "input_text") and isinstance(part.get("text"), str))
    return ""


def previous_user_message(history: list | None, current: str) -> str | None:
    """The user message before this turn's; Hermes's history already ends with the current one."""
    skipped_current = False
    for message in reversed(history or []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        text = _text(message.get("content"))
        if not skipped_current and text == current:
            skipped_current = True
            continue
        return text or None
    return None


class KnowledgebasePlugin:
    """Everything the plugin keeps for the life of the Hermes process: one KnowledgeBase per
    Hermes home (so the embedding model loads once) and one AutoRetriever per session."""

    def __init__(self, make_kb: Callable[[KnowledgebaseConfig, Path], KnowledgeBase] = KnowledgeBase):
        self._make_kb = make_kb
        self._lock = threading.Lock()
        self._configs: dict[Path, tuple[tuple[int, int] | None, KnowledgebaseConfig]] = {}
        self._kbs: dict[Path, KnowledgeBase] = {}
        self._retrievers: OrderedDict[str, AutoRetriever] = OrderedDict()
        self._warned: str | None = None

    # --- configuration and the knowledgebase --------------------------------------------
    def config(self) -> KnowledgebaseConfig:
        """The `knowledgebase:` section, re-read when config.yaml changes; ConfigError is one sentence."""
        home = hermes_home()
        path = kb_config_file.config_path(home)
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        cached = self._configs.get(home)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        config = kb_config_file.load_kb_config(home)
        self._configs[home] = (stamp, config)
        return config

    def kb(self) -> KnowledgeBase:
        """The process's KnowledgeBase for the current home; rebuilt only when its section changed."""
        config, home = self.config(), hermes_home()
        with self._lock:
            kb = self._kbs.get(home)
            if kb is None or kb.config != config:
                kb = self._kbs[home] = self._make_kb(config, home)
            return kb

    def permissions(self) -> Permissions:
        """ask=None: a tool call inside Hermes has nobody to confirm it, so only config switches allow
        indexing a new folder or clearing an index."""
        return Permissions(self.config(), ask=None)

    # --- tools ---------------------------------------------------------------------------
    def tools_available(self) -> bool:
        """Hermes's check_fn. A broken config keeps the tools visible, so a call returns the sentence
        saying what is wrong instead of the tools silently vanishing."""
        try:
            return tools_available(self.config())
        except Exception:  # ConfigError, or anything else: never raised into Hermes
            return True

    def tool_handler(self, name: str) -> Callable[..., str]:
        """Hermes calls handler(args, **context) and does not check args against the schema: do it
        here, as our own registry does, then run the shared handler."""
        schema = {**SCHEMAS[name], "name": name}
        run = json_handler(name, self.kb, self.permissions)

        def handler(args: dict, **context: Any) -> str:
            if not isinstance(args, dict):
                return error(f"arguments for {name!r} must be a JSON object")
            problem = argument_problem(schema, args)
            if problem:
                return error(f"{name}: {problem}")
            try:
                return run(args, **context)
            except Exception as exc:  # a tool failure is a result, never a crash of Hermes's turn
                log.exception("tool %s failed", name)
                return error(f"{name} failed: {exc}")
        handler.__name__ = f"{name}_handler"
        return handler

    # --- /kb and `hermes kb` ----------------------------------------------------------------
    def slash_command(self, raw_args: str) -> str | None:
        """`/kb ...` in Hermes's chat (and gateway): the same verbs as `hermes kb`, printed to a string.
        Nothing can be asked from inside a slash command, so `/kb clear` needs --yes."""
        from hermes_kb.hermes_cli.kb_command import run_slash_kb
        from rich.console import Console

        buffer = io.StringIO()
        console = Console(file=buffer, width=100, force_terminal=False, no_color=True, highlight=False,
                          emoji=False, soft_wrap=True)

        def refuse(question: str) -> bool:
            console.print("Nothing is asked inside a slash command: add --yes to clear, e.g. /kb clear NAME --yes",
                          markup=False)
            return False
        run_slash_kb(raw_args, self.kb, console, console, confirm=refuse)
        return buffer.getvalue().rstrip() or None

    @staticmethod
    def setup_cli(parser: argparse.ArgumentParser) -> None:
        """Hermes builds `hermes kb`'s subparser; every word after `kb` goes to our own parser, so the
        verbs (index, search, status, clear, watch, mcp, ...) and their --help are exactly ours."""
        def our_help() -> str:
            from hermes_kb.hermes_cli.kb_command import build_parser
            return build_parser("hermes kb").format_help()
        parser.format_help = our_help  # `hermes kb --help` lists our verbs, not this one catch-all argument
        parser.add_argument("kb_argv", nargs=argparse.REMAINDER, metavar="VERB ...")

    def run_cli(self, args: argparse.Namespace) -> None:
        """Hermes ignores a handler's return value: a failing verb exits non-zero itself."""
        from hermes_kb.hermes_cli.kb_command import run_kb
        from rich.console import Console

        code = run_kb(list(args.kb_argv or []), self.kb, Console(soft_wrap=True), Console(stderr=True, soft_wrap=True),
                      prog="hermes kb")
        if code:
            sys.exit(code)

    # --- auto-retrieval ------------------------------------------------------------------------
    def _retriever(self, session_id: str, kb: KnowledgeBase, config: KnowledgebaseConfig) -> AutoRetriever:
        with self._lock:
            retriever = self._retrievers.pop(session_id, None)
            if retriever is None or retriever.kb is not kb:
                previous = retriever
                retriever = AutoRetriever(kb, config)
                if previous:  # the same conversation goes on: what it was sent, and its source ids
                    previous.close()
                    retriever.injected, retriever.cited, retriever.next_id = previous.injected, previous.cited, previous.next_id
            self._retrievers[session_id] = retriever
            while len(self._retrievers) > MAX_SESSIONS:
                self._retrievers.popitem(last=False)[1].close()
            return retriever

    def pre_llm_call(self, session_id: Any = "", user_message: Any = "", conversation_history: Any = None,
                     **_: Any) -> dict | None:
        """Once per turn: {"context": cited block} appended (by Hermes) to this request's user message,
        or None. Remembers per session_id what it sent, since Hermes calls this for every turn. Never
        raises into Hermes: a failure costs this turn its context, and says why in the log."""
        try:
            return self._context_for(session_id, user_message, conversation_history)
        except Exception:
            log.exception("knowledgebase auto-retrieval failed for this turn")
            return None

    def _context_for(self, session_id: Any, user_message: Any, conversation_history: Any) -> dict | None:
        if not isinstance(conversation_history, list):
            conversation_history = None
        session_id = session_id if isinstance(session_id, str) else repr(session_id)
        try:
            config = self.config()
        except ConfigError as exc:
            if self._warned != str(exc):
                self._warned = str(exc)
                log.warning("knowledgebase auto-retrieval is off: %s", exc)
            return None
        if not config.enabled:
            return None
        kb = self.kb()
        if not config.directories:
            try:
                kb.targets(None)  # folders indexed by hand still count
            except KnowledgebaseError:
                return None  # nothing to search: stay quiet rather than log a failed search every turn
        message = _text(user_message)
        retriever = self._retriever(session_id or "default", kb, config)
        block = retriever.block_for(message, previous_user_message(conversation_history, message))
        if block is None:
            return None
        return {"context": fit_block(block.hits, retriever, first_id=block.first_id)}

    # --- registration ------------------------------------------------------------------------
    def register(self, ctx: Any) -> None:
        for name in HANDLERS:
            ctx.register_tool(name=name, toolset=TOOLSET, schema={**SCHEMAS[name], "name": name},
                              handler=self.tool_handler(name), check_fn=self.tools_available,
                              description=SCHEMAS[name]["description"], emoji=EMOJI)
        ctx.register_command("kb", self.slash_command, description="knowledgebase: index, search, status, clear",
                             args_hint="index|search|status|clear ...")
        ctx.register_cli_command("kb", help="index, search, inspect and clear knowledgebase directories",
                                 setup_fn=self.setup_cli, handler_fn=self.run_cli,
                                 description="Index and search local knowledgebase directories.")
        ctx.register_hook("pre_llm_call", self.pre_llm_call)


def fit_block(hits: list, retriever: AutoRetriever, limit: int = MAX_CONTEXT_CHARS, first_id: int = 1) -> str:
    """The cited block under `limit` characters: drop the last hits (forgetting they were injected, so
    a later turn may still send them), then cut the one left."""
    hits = list(hits)
    text = render_block(hits, first_id=first_id)
    while len(text) > limit and len(hits) > 1:
        dropped = hits.pop()
        retriever.injected.discard(dropped.content_hash)
        retriever.cited.pop(f"S{first_id + len(hits)}", None)
        text = render_block(hits, first_id=first_id)
    if len(text) > limit:
        keep = max(0, len(hits[0].text) - (len(text) - limit) - len(TRUNCATED))
        text = render_block([dataclasses.replace(hits[0], text=hits[0].text[:keep] + TRUNCATED)], first_id=first_id)
    return text


def register(ctx: Any) -> None:
    """Hermes's entry point: called once per process when the plugin is enabled."""
    KnowledgebasePlugin().register(ctx)
