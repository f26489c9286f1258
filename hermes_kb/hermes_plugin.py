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
  chunk twice in one session;
- `post_api_request` and `transform_llm_output` hooks listing, under an answer,
  the file behind each [S3] it cites, written into the answer Hermes saves;
- the auxiliary task `knowledgebase_rerank` and a judge over Hermes's models for
  `rerank: llm` (host_judge.py).

Hermes 0.19.0 gives plugins no config accessor, so the `knowledgebase:`
section is read from Hermes's own config.yaml, under the HERMES_HOME Hermes
resolves (profiles included), at call time.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import io
import json
import logging
import re
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from hermes_kb.agent.knowledgebase.citations import Citations
from hermes_kb.agent.knowledgebase.config import ConfigError, KnowledgebaseConfig
from hermes_kb.agent.knowledgebase.context import BLOCK_FOOTER, BLOCK_HEADER, AutoRetriever, is_trivial, render_block
from hermes_kb.agent.knowledgebase.service import USER_ERRORS, KnowledgeBase, KnowledgebaseError
from hermes_kb import host_judge
from hermes_kb.streamed_footer import StreamedFooters
from hermes_kb.hermes_cli import config as kb_config_file
from hermes_kb.hermes_cli.background_index import BackgroundIndex, text_console
from hermes_kb.tools.knowledgebase_tool import HANDLERS, SCHEMAS, TOOLSET, UNTRUSTED, json_handler, tool_offered
from hermes_kb.tools.permissions import Permissions
from hermes_kb.tools.registry import argument_problem, error

log = logging.getLogger(__name__)

# Hermes spills hook context over 10,000 characters to a file and injects a preview instead;
# the block stays under that so the model gets the cited text itself.
MAX_CONTEXT_CHARS = 9_500
SPILL_MARGIN = 200  # Hermes measures the joined context; leave room for what it adds around ours
GATEWAY_WORKERS = 2  # /kb commands of gateway chats run at once; more wait their turn
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
    Hermes home (so the embedding model loads once), one Citations and one AutoRetriever per session,
    and the background index run."""

    def __init__(self, make_kb: Callable[[KnowledgebaseConfig, Path], KnowledgeBase] = KnowledgeBase):
        self._make_kb = make_kb
        self._lock = threading.Lock()
        self._configs: dict[Path, tuple[tuple[int, int] | None, KnowledgebaseConfig]] = {}
        self._kbs: dict[Path, KnowledgeBase] = {}
        self._watchers: dict[Path, Any] = {}
        self._retrievers: OrderedDict[str, AutoRetriever] = OrderedDict()
        self._citations: OrderedDict[str, Citations] = OrderedDict()
        self._platforms: OrderedDict[str, str] = OrderedDict()  # session -> where it talks (pre_llm_call says)
        self._warned: str | None = None
        self.background = BackgroundIndex()
        self.streamed_footers = StreamedFooters()
        self._workers = concurrent.futures.ThreadPoolExecutor(max_workers=GATEWAY_WORKERS, thread_name_prefix="kb-slash")

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
        for warning in config.warnings:  # once per change of the file: a mistyped tuning key costs only itself
            log.warning("%s", warning)
        self._configs[home] = (stamp, config)
        return config

    def kb(self) -> KnowledgeBase:
        """The process's KnowledgeBase for the current home; rebuilt only when its section changed."""
        config, home = self.config(), hermes_home()
        with self._lock:
            kb = self._kbs.get(home)
            if kb is None or kb.config != config:
                kb = self._kbs[home] = self._make_kb(config, home)
                self._watch(home, kb)
            return kb

    def _watch(self, home: Path, kb: KnowledgeBase) -> None:
        """watch_for_changes inside Hermes: re-index configured folders as files change, for as long as
        the Hermes process (REPL or gateway) runs."""
        previous = self._watchers.pop(home, None)
        if previous is not None:
            previous.stop()
        if not (kb.config.enabled and kb.config.watch_for_changes and kb.config.directories):
            return
        from hermes_kb.agent.knowledgebase.watcher import KnowledgebaseWatcher

        watcher = KnowledgebaseWatcher(kb, list(kb.config.directories), debounce_s=kb.config.watch_debounce_s)
        watcher.start()
        self._watchers[home] = watcher

    def permissions(self, context: dict | None = None) -> Permissions:
        """ask=None: a tool call inside Hermes has nobody to confirm it, so only config switches allow
        indexing a new folder or clearing an index. A gateway chat's results name DIRECTORY/PATH, never
        the host's folders (as its footer does)."""
        session = (context or {}).get("session_id")
        with self._lock:
            platform = self._platforms.get(session, "") if isinstance(session, str) else ""
        return Permissions(self.config(), ask=None, host_paths=platform in ("", "cli"))

    def citations(self, session_id: Any, create: bool = True) -> Citations | None:
        """The session's source ids, shared by the injected block and kb_search; with create=False,
        None for a session that was given none (nothing to look up, nothing to evict for it)."""
        key = session_id if isinstance(session_id, str) and session_id else "default"
        with self._lock:
            citations = self._citations.pop(key, None)
            if citations is None and not create:
                return None
            citations = citations or Citations()
            self._citations[key] = citations
            while len(self._citations) > MAX_SESSIONS:
                self._citations.popitem(last=False)
            return citations

    # --- tools ---------------------------------------------------------------------------
    def tool_offered(self, name: str) -> bool:
        """Hermes's check_fn. A broken config keeps the tools visible, so a call returns the sentence
        saying what is wrong instead of the tools silently vanishing; kb_clear is offered only where
        config would let it run."""
        try:
            return tool_offered(name, self.kb())
        except Exception:  # ConfigError, or anything else: never raised into Hermes
            return name != "kb_clear"

    def _clear_allowed(self) -> bool:
        try:
            return self.config().allow_model_clear
        except Exception:  # noqa: BLE001 - a broken config is said by the other tools
            return False

    def tool_handler(self, name: str) -> Callable[..., str]:
        """Hermes calls handler(args, **context) and does not check args against the schema: do it
        here, as our own registry does, then run the shared handler."""
        schema = {**SCHEMAS[name], "name": name}
        run = json_handler(name, self.kb, self.permissions, lambda context: self.citations(context.get("session_id")))

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
    def slash_command(self, raw_args: str) -> Any:
        """`/kb ...` in Hermes's chat: the same verbs as `hermes kb`, printed to a string.

        Hermes 0.19.0 calls this on its event loop in the gateway (and awaits a coroutine we return)
        and on the thread that reads the terminal in the REPL. A running loop therefore means a
        gateway: the work goes to a thread so every other chat keeps being answered, and the caller is
        a chat member, not the machine's owner (chat_member.py). `/kb index` runs in the background
        in both, so nothing waits minutes for it."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.run_slash(raw_args, member=False, announce=_announce_at_terminal)
        return self._in_worker(raw_args)

    async def _in_worker(self, raw_args: str) -> str | None:
        """A gateway's /kb on the plugin's own workers, not the loop's default pool, which Hermes uses
        for every chat's work: a burst of /kb cannot starve the rest of the gateway."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._workers, self.run_slash, raw_args, True, None)

    def run_slash(self, raw_args: str, member: bool, announce: Callable[[str], None] | None) -> str | None:
        from hermes_kb.hermes_cli.chat_member import member_refusal
        from hermes_kb.hermes_cli.kb_command import parse_slash, run_slash_kb

        if raw_args.split() == ["stop"]:  # HOST_VERBS: the background run is this host's
            try:
                allowed = not member or self.config().gateway_full_access
            except ConfigError as exc:
                return f"error: {exc}"
            return self.background.stop() if allowed else "Only the owner of this Hermes can stop its /kb index."
        args = parse_slash(raw_args)  # one reading of the line for every decision below and for the run
        try:
            if member and not self.config().gateway_full_access:
                refusal = member_refusal(args, self.kb)
                if refusal:
                    return refusal
        except ConfigError as exc:
            return f"error: {exc}"
        buffer = io.StringIO()
        console = text_console(buffer)

        def refuse(question: str) -> bool:
            console.print("Nothing is asked inside a slash command: add --yes to clear, e.g. /kb clear NAME --yes",
                          markup=False)
            return False
        # The run gets the line as it was judged (member_refusal resolves a folder to its index's name).
        try:
            watching = self.config().watch_for_changes
        except ConfigError:
            watching = False
        options = {"confirm": refuse, "watch_hint": HERMES_WATCHING if watching else HERMES_WATCH_HINT, "parsed": args,
                   "host_paths": not member, "host_verbs": HOST_VERBS}
        verb = args.verb if args is not None else None
        if verb == "index":
            try:  # a folder that cannot be indexed is said now, not announced as a run first
                self.kb().targets(args.target)
            except USER_ERRORS as exc:
                return f"error: {exc}"
            return self.background.start(
                " ".join(raw_args.split()),
                lambda out, err, progress: run_slash_kb(raw_args, self.kb, out, err, progress=progress, **options),
                announce)
        run_slash_kb(raw_args, self.kb, console, console, **options)
        if verb == "status" and not args.json:
            described = self.background.describe()
            if described:
                console.print(described, markup=False, highlight=False)
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
        citations = self.citations(session_id)
        with self._lock:
            retriever = self._retrievers.pop(session_id, None)
            if retriever is not None and retriever.citations is not citations:
                retriever.citations = citations  # its session's ids were evicted and begun again: one set, always
            if retriever is None or retriever.kb is not kb:
                previous = retriever
                retriever = AutoRetriever(kb, config, citations=citations)
                if previous:  # the same conversation goes on: what it was sent
                    previous.close()
                    retriever.injected = previous.injected
            self._retrievers[session_id] = retriever
            while len(self._retrievers) > MAX_SESSIONS:
                self._retrievers.popitem(last=False)[1].close()
            return retriever

    def pre_llm_call(self, session_id: Any = "", user_message: Any = "", conversation_history: Any = None,
                     platform: Any = "", **_: Any) -> dict | None:
        """Once per turn: {"context": cited block} appended (by Hermes) to this request's user message,
        or None. Remembers per session_id what it sent, since Hermes calls this for every turn. Never
        raises into Hermes: a failure costs this turn its context, and says why in the log."""
        try:
            return self._context_for(session_id, user_message, conversation_history, platform)
        except Exception:
            log.exception("knowledgebase auto-retrieval failed for this turn")
            return None

    def _context_for(self, session_id: Any, user_message: Any, conversation_history: Any, platform: Any) -> dict | None:
        if not isinstance(conversation_history, list):
            conversation_history = None
        session_id = session_id if isinstance(session_id, str) and session_id else "default"
        with self._lock:
            self._platforms[session_id] = platform if isinstance(platform, str) else ""
            self._platforms.move_to_end(session_id)
            while len(self._platforms) > MAX_SESSIONS:
                self._platforms.popitem(last=False)
        citations = self.citations(session_id)
        if not citations.ids and conversation_history:  # a resumed session, or a restarted gateway
            citations.restore(*replayed_citations(conversation_history))
        message = _text(user_message)
        if is_trivial(message):
            return None  # a greeting loads no model
        try:
            config = self.config()
        except ConfigError as exc:
            if self._warned != str(exc):
                self._warned = str(exc)
                log.warning("knowledgebase auto-retrieval is off: %s", exc)
                if platform in ("", "cli"):  # a person at this terminal: say it once where they look
                    print(f"📚 knowledgebase auto-retrieval is off: {exc}", file=sys.stderr, flush=True)
            return None
        if not config.enabled:
            return None
        kb = self.kb()
        if not config.directories:
            try:
                kb.targets(None)  # folders indexed by hand still count
            except KnowledgebaseError:
                return None  # nothing to search: stay quiet rather than log a failed search every turn
        retriever = self._retriever(session_id, kb, config)
        block = retriever.block_for(message, previous_user_message(conversation_history, message))
        if block is None:
            return None
        return {"context": fit_block(block.hits, retriever, block.ids, limit=context_limit())}

    def post_api_request(self, session_id: Any = "", platform: Any = "", assistant_message: Any = None,
                         **_: Any) -> None:
        """The footer written into the final answer itself, so the saved conversation keeps it: Hermes
        0.19 saves a turn (turn_finalizer.py, `_persist_session`) before `transform_llm_output` runs, so
        text that hook appends is shown but never stored, and `/history`, `--resume` and the next turn
        see a bare [S1]. Hermes builds the reply and its saved row from the `assistant_message` it hands
        this hook, so an answer (a reply that calls no tool) gets its footer here. A Hermes that passes
        a copy instead loses only this: transform_llm_output still shows the footer."""
        try:
            if assistant_message is None or getattr(assistant_message, "tool_calls", None):
                return None
            answer = getattr(assistant_message, "content", None)
            footer = self._footer(answer, session_id, platform)
            if footer is not None:
                assistant_message.content = _footed(answer, footer)
        except Exception:
            log.exception("knowledgebase sources footer failed")
        return None

    def transform_llm_output(self, response_text: Any = "", session_id: Any = "", platform: Any = "",
                             **_: Any) -> str | None:
        """The answer with its `Sources:` footer (already there when post_api_request wrote it), or None
        (unchanged) when it cites no id this session gave out. Returning the answer marks it transformed,
        which makes a gateway edit its streamed message into the footed one; at the terminal the footer
        is also held for the REPL, which prints no streamed answer again."""
        try:
            footer = self._footer(response_text, session_id, platform)
            if footer is None:
                return None
            if platform in ("", "cli"):
                self.streamed_footers.hold(session_id, footer)
            return _footed(response_text, footer)
        except Exception:
            log.exception("knowledgebase sources footer failed")
            return None

    def _footer(self, answer: Any, session_id: Any, platform: Any) -> str | None:
        """`Sources:` mapping each [S3] the answer cites to the file (and lines or page) a person opens;
        None when it cites no id this session gave out. At the terminal each source carries its absolute
        path:line; a gateway's members get DIRECTORY/PATH only, not the layout of the host's disk."""
        if not isinstance(answer, str) or "[S" not in answer:
            return None
        citations = self.citations(session_id, create=False)
        return citations.footer(answer, absolute=platform in ("", "cli")) if citations else None

    # --- registration ------------------------------------------------------------------------
    def register(self, ctx: Any) -> None:
        judge = host_judge.make_judge(ctx, host_judge.register_task(ctx))  # for `rerank: llm`
        if judge is not None and self._make_kb is KnowledgeBase:
            self._make_kb = lambda config, home: KnowledgeBase(config, home, judge=judge)
        for name in HANDLERS:
            if name == "kb_clear" and not self._clear_allowed():
                # Registered only where config lets it run: a tool whose check_fn says no is logged as a
                # warning in Hermes's errors.log on every start. allow_model_clear applies at the next start.
                continue
            ctx.register_tool(name=name, toolset=TOOLSET, schema={**SCHEMAS[name], "name": name},
                              handler=self.tool_handler(name), check_fn=lambda name=name: self.tool_offered(name),
                              description=SCHEMAS[name]["description"], emoji=EMOJI)
        ctx.register_command("kb", self.slash_command, description="knowledgebase: index, search, status, clear",
                             args_hint="index|search|status|clear ...")
        ctx.register_cli_command("kb", help="index, search, inspect and clear knowledgebase directories",
                                 setup_fn=self.setup_cli, handler_fn=self.run_cli,
                                 description="Index and search local knowledgebase directories.")
        ctx.register_hook("pre_llm_call", self.pre_llm_call)
        ctx.register_hook("post_api_request", self.post_api_request)
        ctx.register_hook("transform_llm_output", self.transform_llm_output)


# `/kb` verbs this plugin answers itself, before the kb parser (bare `/kb` lists them with the rest)
HOST_VERBS = {"stop": "stop the background /kb index after its current file (what it indexed is kept)"}
HERMES_WATCH_HINT = ("Inside Hermes, set knowledgebase.watch_for_changes: true in config.yaml to keep the configured "
                     "folders fresh while Hermes runs; /kb index refreshes them now.")
HERMES_WATCHING = ("Inside Hermes, watch_for_changes is on: the configured folders are re-indexed as their files change, "
                   "for as long as Hermes runs; /kb index refreshes them now.")


def _announce_at_terminal(text: str) -> None:
    """The REPL's output goes through prompt_toolkit's patched stdout, which prints above the prompt
    from any thread."""
    print(text, flush=True)


_BLOCK = re.compile(re.escape(BLOCK_HEADER) + r" ([0-9a-f]{8}):.*?" + re.escape(BLOCK_FOOTER) + r" \1\.", re.S)


def _footed(answer: str, footer: str) -> str:
    """The answer ending in its footer, written once: the answer post_api_request footed comes back to
    transform_llm_output."""
    answer = answer.rstrip()
    return answer if answer.endswith(footer) else f"{answer}\n\n{footer}"


def replayed_citations(history: list) -> tuple[list[str], list[dict]]:
    """What a replayed conversation shows this plugin gave out: the cited block of each user turn and
    each kb_search result. Only where Hermes put them: a block is the last one Hermes appended after
    the user's own text (its `api_content` is the text plus the injected context), fence and all,
    and a result is the answer to a kb_search call. What a user typed, a model answered or another
    tool returned can hold any `[S9] path` line and is never read."""
    blocks, results, searches = [], [], set()
    for message in history:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "user":
            typed, sent = _text(message.get("content")), _text(message.get("api_content"))
            if sent.startswith(typed) and len(sent) > len(typed):
                found = [match.group() for match in _BLOCK.finditer(sent[len(typed):])]
                if found:
                    blocks.append(found[-1])
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and (call.get("function") or {}).get("name") == "kb_search":
                    searches.add(call.get("id"))
        elif role == "tool" and message.get("tool_call_id") in searches:
            result = _json_object(_text(message.get("content")))
            if result.get("notice") == UNTRUSTED and isinstance(result.get("hits"), list):
                results.append(result)
    return blocks, results


def _json_object(text: str) -> dict:
    start, end = text.find("{"), text.rfind("}")
    try:
        value = json.loads(text[start:end + 1]) if start >= 0 else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def context_limit() -> int:
    """Under Hermes's spill threshold (hooks.output_spill.max_chars): a block over it would be written to
    a file and the model sent a preview, not the cited text."""
    try:
        from tools.hook_output_spill import get_spill_config
        spill = get_spill_config()
    except Exception:  # Hermes absent (tests) or changed: keep to the default threshold
        return MAX_CONTEXT_CHARS
    if not spill.get("enabled", True):
        return MAX_CONTEXT_CHARS
    return max(500, min(MAX_CONTEXT_CHARS, int(spill.get("max_chars") or MAX_CONTEXT_CHARS) - SPILL_MARGIN))


def fit_block(hits: list, retriever: AutoRetriever, ids: list[str], limit: int = MAX_CONTEXT_CHARS) -> str:
    """The cited block under `limit` characters: drop the last hits (forgetting they were injected, so
    a later turn may still send them), then cut the one left at a word boundary."""
    hits = list(hits)
    text = render_block(hits, ids=ids)
    while len(text) > limit and len(hits) > 1:
        retriever.forget(hits.pop())
        text = render_block(hits, ids=ids)
    if len(text) > limit:
        keep = max(0, len(hits[0].text) - (len(text) - limit) - len(TRUNCATED))
        cut = hits[0].text[:keep]
        words = re.match(r"(?s).*\s", cut)  # the last whole word
        cut = words.group().rstrip() if words else cut
        text = render_block([dataclasses.replace(hits[0], text=cut + TRUNCATED)], ids=ids)
    return text


def register(ctx: Any) -> None:
    """Hermes's entry point: called once per process when the plugin is enabled."""
    KnowledgebasePlugin().register(ctx)
