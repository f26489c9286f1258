"""`hermes kb mcp`: serve the knowledgebase to an MCP client over stdio.

Stdout is the protocol channel and nothing else may write a byte to it: not
a progress bar, a log line, a warning, nor whatever onnxruntime or fastembed
print while the model loads. So before anything heavy is imported the real
stdout descriptor is duplicated for the protocol alone and fd 1 is pointed
at stderr, which catches Python and C writers alike. This module imports
nothing from `mcp` at the top: `hermes kb search` never pays for the SDK.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import sys
import threading
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from hermes_kb.agent.knowledgebase.service import KnowledgeBase

log = logging.getLogger(__name__)

MISSING_SDK = "The MCP server needs the MCP SDK: pip install 'hermes-knowledgebase[mcp]'"


def claim_stdout() -> TextIO:
    """The real stdout, for the protocol alone; from now on fd 1 (print, C libraries) writes to stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)  # not inherited by child processes (PEP 446)
    os.dup2(2, 1)
    return open(protocol_fd, "w", encoding="utf-8", newline="\n")


def _load_model(kb: KnowledgeBase) -> None:
    """Load the embedding model while the SDK imports and the client connects: the first search is
    what a user waits for. A failure is left for the first tool call that needs the model to report."""
    try:
        kb.embedder()
    except Exception as exc:  # noqa: BLE001 - reported again, as a tool error, where it matters
        log.info("embedding model not loaded ahead: %s", exc)


MAX_IN_FLIGHT = 8  # requests read but not yet answered on stdout


def _answerable_id(value: object) -> bool:
    """An id the SDK answers: a string or a whole number. It drops a request whose id is `true`, `1.5`
    or an object unanswered, so counting one would hold a slot for ever (8 of them stopped the server
    reading stdin)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, (str, int)) or (isinstance(value, float) and value.is_integer())


class InFlight:
    """Backpressure: no further line is read from stdin while MAX_IN_FLIGHT requests wait for their
    answers to be written. A client that sends without reading stdout (its pipe full, our writes
    blocked) then leaves its own requests in its own pipe, instead of growing this process by each
    pending answer (~57 KB a search) without bound. Answers are counted where they are written."""

    def __init__(self, limit: int = MAX_IN_FLIGHT):
        import anyio

        self.limit, self.slots = limit, anyio.Semaphore(limit)

    @staticmethod
    def is_request(line: str) -> bool:
        try:
            message = json.loads(line)
        except ValueError:
            return False  # the SDK answers a parse error without an id; nothing waits on it
        return isinstance(message, dict) and "method" in message and _answerable_id(message.get("id"))

    async def admit(self, line: str) -> None:
        if self.is_request(line):
            await self.slots.acquire()

    def answered(self) -> None:
        """Called in the writer's worker thread once a response line is written."""
        import anyio.from_thread

        if self.slots.value < self.limit:
            anyio.from_thread.run_sync(self.slots.release)


class _AnswerCountingWriter:
    """The protocol file as the SDK's stdout: each line it writes that answers a request frees a slot."""

    def __init__(self, protocol: TextIO, flight: InFlight):
        self.protocol, self.flight = protocol, flight

    def write(self, text: str) -> int:
        written = self.protocol.write(text)
        for line in text.splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "id" in message and ("result" in message or "error" in message):
                self.flight.answered()
        return written

    def flush(self) -> None:
        self.protocol.flush()


async def _lines_until_eof(eof, flight: InFlight):
    """stdin's lines, as the SDK's stdio transport reads them, each request admitted by `flight`;
    sets `eof` when the client closes stdin."""
    import anyio

    try:
        async for line in anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")):
            await flight.admit(line)
            yield line
    finally:
        eof.set()


async def _cancel_when_set(event, scope) -> None:
    await event.wait()
    scope.cancel()


def _busy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]


def run_mcp(kb: KnowledgeBase, args, out: Console, err: Console, foreground: bool = True) -> int:
    """Serve until the client closes stdin; returns the exit code."""
    if not foreground:
        err.print("The MCP server runs as its own process: point your MCP client at `hermes-kb kb mcp`.")
        return 1
    if importlib.util.find_spec("mcp") is None:
        err.print(escape(MISSING_SDK))
        return 1
    if getattr(args, "http", False):
        return run_http(kb, args, out, err)
    protocol = claim_stdout()  # before the SDK and the model are imported: they may print
    # Daemon: it never holds up an exit; tool calls wait for it (KnowledgebaseMCP `ready`).
    model = threading.Thread(target=_load_model, args=(kb,), name="hermes-kb model load", daemon=True)
    model.start()
    try:
        from mcp.server.stdio import stdio_server
    except ImportError as exc:  # installed but broken
        log.debug("cannot import the MCP SDK: %s", exc)
        err.print(escape(MISSING_SDK))
        model.join()
        return 1
    import anyio

    from hermes_kb.mcp_server import build_server, instructions

    allow_clear = bool(getattr(args, "allow_clear", False))

    async def serve() -> None:
        text = await anyio.to_thread.run_sync(instructions, kb)  # status scans the folders (stat only)
        server = build_server(kb, allow_clear=allow_clear, server_instructions=text, ready=model.join)
        err.print(f"hermes-kb MCP server on stdio; kb_clear {'enabled' if allow_clear else 'off'}.",
                  markup=False, highlight=False)
        eof, flight = anyio.Event(), InFlight()
        async with stdio_server(stdin=_lines_until_eof(eof, flight),
                                stdout=anyio.wrap_file(_AnswerCountingWriter(protocol, flight))) as (read, write):
            async with anyio.create_task_group() as group:
                # stdin closed means the client is gone: stop now, in-flight tool calls included. SDK 1.30
                # does this itself; 1.26.0 waits for them, which could be a whole index run.
                group.start_soon(_cancel_when_set, eof, group.cancel_scope)
                await server.run(read, write, server.create_initialization_options())
                group.cancel_scope.cancel()

    anyio.run(serve)
    if _busy_threads() or model.is_alive():
        # stdin closed while a tool call (an index, a search) or the model load was still running: its
        # thread was abandoned, and waiting for it would keep the client waiting (nor should the
        # interpreter be torn down under onnxruntime). Every index write is one transaction and the
        # writer lock is an flock, so ending here leaves nothing half-written.
        if _busy_threads():
            log.warning("client closed the connection during a tool call; exiting without waiting for it")
        sys.stderr.flush()
        os._exit(0)
    return 0


def run_http(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    """Serve streamable HTTP until interrupted (Ctrl-C, SIGTERM); returns the exit code."""
    from hermes_kb.mcp_http import HttpSettings, ServeRefused, access_of, build_app, check_start, listen, serve
    from hermes_kb.mcp_server import build_server, instructions
    from hermes_kb.mcp_tokens import TokenFile, token_file

    settings = HttpSettings(host=args.host, port=args.port, allowed_hosts=list(args.allow_host),
                            allow_clear=bool(args.allow_clear))
    tokens = TokenFile(token_file(kb.hermes_home))
    try:
        count = check_start(settings, tokens)
        sock = listen(settings)
    except ServeRefused as exc:
        if args.json:
            out.print(json.dumps({"error": str(exc)}), markup=False, highlight=False)
        else:
            err.print(f"[red]error:[/] {escape(str(exc))}")
        return 1
    model = threading.Thread(target=_load_model, args=(kb,), name="hermes-kb model load", daemon=True)
    model.start()
    # Every client is told the directories by name only: whoever connects over HTTP may be on another machine.
    server = build_server(kb, allow_clear=settings.allow_clear, server_instructions=instructions(kb, host_paths=False),
                          ready=model.join, access=access_of)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/mcp"

    def started() -> None:
        if args.json:
            print(json.dumps({"url": url, "tokens": count, "health": url[:-len("/mcp")] + "/health"}), flush=True)
        else:
            who = (f"{count} token{'s' if count != 1 else ''} (hermes kb token list)" if count
                   else "no tokens: this machine only")
            err.print(f"hermes-kb MCP server at {url}; {who}; Ctrl-C stops it.", markup=False, highlight=False)

    for audited in ("hermes_kb.mcp_server", "hermes_kb.mcp_http"):  # which token did what, by name
        logging.getLogger(audited).setLevel(logging.INFO)
    serve(build_app(server, settings, tokens), sock, started)
    if _busy_threads():
        # A tool call (an index run) was still running: every write is one transaction, so ending
        # here loses nothing indexed; waiting could take a whole run.
        log.warning("stopped during a tool call; exiting without waiting for it")
        sys.stderr.flush()
        os._exit(0)
    return 0
