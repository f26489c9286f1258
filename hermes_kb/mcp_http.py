"""The MCP server for a team: the same tools and resources over the SDK's streamable HTTP transport.

`/mcp` is the SDK's transport (sessions, SSE, DNS-rebinding checks), `/health` says only that the
server answers. Who may do what comes from bearer tokens (mcp_tokens.py), checked by the SDK's
own auth middleware (401 with its WWW-Authenticate) and, per tool, by KnowledgebaseMCP. Without
tokens the server answers this machine only: binding another address without them is refused.

What is ours, and why: a per-client cap on requests in flight and a cap on a request's body,
applied before the SDK reads anything (the SDK's own body cap is missing from 1.26, which Hermes
Agent 0.19.0 pins), so one client that floods or never reads its answers holds only its own slots.
"""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
import json
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hermes_kb.mcp_tokens import NO_ACCESS, Grant, TokenError, TokenFile

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20  # a tool call's arguments: the longest, a query, is capped far below this
MAX_IN_FLIGHT_PER_SESSION = 8  # requests one client session has unanswered
MAX_IN_FLIGHT_PER_CLIENT = 64  # all sessions of one token (or, without tokens, one address) together
REFUSALS_SAID_EVERY_S = 60.0  # unknown tokens are counted and said at most this often
MAX_CONNECTIONS = 512  # open connections and requests the server holds at once (uvicorn's limit_concurrency)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class _ClientGone(logging.Filter):
    """The SDK logs a client that closed its event stream as an ERROR with a traceback (every session
    that ends does it); it is how sessions end, so it is left out of the server's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        import anyio

        return not (record.exc_info and isinstance(record.exc_info[1], (anyio.ClosedResourceError, anyio.BrokenResourceError)))



class ServeRefused(Exception):
    """A sentence saying why the server will not start as asked."""


def is_loopback(host: str) -> bool:
    """Whether an address to bind serves this machine only; anything it cannot tell is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    allowed_hosts: list[str] = field(default_factory=list)  # names clients use (behind a proxy: its name)
    allow_clear: bool = False  # without tokens only; with tokens kb_clear is an admin token's

    def security(self) -> TransportSecuritySettings:
        """The SDK's DNS-rebinding protection, on: Host and Origin must name this server."""
        names = [*LOCAL_HOSTS, *self.allowed_hosts]
        if not is_loopback(self.host) and self.host not in ("0.0.0.0", "::"):
            names.append(f"[{self.host}]" if ":" in self.host else self.host)
        hosts = [pattern for name in names for pattern in (name, f"{name}:*")]
        origins = [f"{scheme}://{pattern}" for scheme in ("http", "https") for pattern in hosts]
        return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)


class TokenVerifier:
    """The SDK's TokenVerifier over our token file; a file that became unsafe refuses every token."""

    def __init__(self, tokens: TokenFile):
        self.tokens = tokens
        self._refused, self._said = 0, -REFUSALS_SAID_EVERY_S

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            grant = self.tokens.verify(token)
        except TokenError as exc:
            log.error("%s", exc)
            return None
        if grant is None:
            self._refused += 1
            if time.monotonic() - self._said >= REFUSALS_SAID_EVERY_S:  # said, not flooded: one line a minute
                log.info("%d request(s) with an unknown token refused", self._refused)
                self._refused, self._said = 0, time.monotonic()
            return None
        return AccessToken(token="", client_id=grant.name, scopes=grant.scopes)  # the token itself is not kept


TOKENS_REQUIRED = "hermes_kb.tokens_required"  # set in the ASGI scope by Guard for every request it judged


def access_of(request: object) -> Grant | None:
    """What the client of an HTTP request may do: its token's grant; None without tokens (this machine
    only), which offers what the stdio server offers. A request that reached here without a token where
    one was required gets nothing (Guard turns it away first; this is the second wall, not the first)."""
    scope = getattr(request, "scope", None) or {}
    user = scope.get("user")
    if isinstance(user, AuthenticatedUser):
        token = user.access_token
        return Grant(token.client_id, token.scopes[-1])
    return NO_ACCESS if scope.get(TOKENS_REQUIRED, True) else None


class Guard:
    """In front of /mcp: the token check (whenever tokens exist, or always off this machine), then the
    per-client cap on requests in flight and the cap on a request's body."""

    def __init__(self, app: ASGIApp, tokens: TokenFile, local_only: bool):
        self.app, self.tokens, self.local_only = app, tokens, local_only
        self.authenticated = RequireAuthMiddleware(self._bounded, required_scopes=["read"])
        self.in_flight: dict[str, int] = {}

    def _tokens_required(self) -> bool:
        if not self.local_only:
            return True
        try:
            return self.tokens.configured()
        except TokenError as exc:  # unsafe now: nobody gets in until it is fixed
            log.error("%s", exc)
            return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        required = scope[TOKENS_REQUIRED] = self._tokens_required()
        if required:
            await self.authenticated(scope, receive, send)
        else:
            await self._bounded(scope, receive, send)

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        lengths = Headers(scope=scope).getlist("content-length")
        declared = lengths[0].encode() if lengths else None
        if declared is not None and (len(set(lengths)) > 1 or not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
            await _refuse(send, 413, f"A request body is at most {MAX_BODY_BYTES:,} bytes.")
            return
        if scope.get("method") != "POST":  # a GET holds the session's event stream open: not a request
            await self.app(scope, _capped(receive), send)
            return
        user = scope.get("user")
        client = "token:" + user.display_name if isinstance(user, AuthenticatedUser) else \
            "address:" + str((scope.get("client") or ("?",))[0])
        # The first header of a name, as the SDK reads it (a second copy must not count as another session).
        session = Headers(scope=scope).get("mcp-session-id", "")
        counted = [(client, MAX_IN_FLIGHT_PER_CLIENT)] + ([("session:" + session, MAX_IN_FLIGHT_PER_SESSION)] if session else [])
        if any(self.in_flight.get(key, 0) >= limit for key, limit in counted):
            await _refuse(send, 429, "Too many requests of this client are unanswered; wait for their answers.")
            return
        for key, _ in counted:
            self.in_flight[key] = self.in_flight.get(key, 0) + 1
        try:
            await self.app(scope, _capped(receive), send)
        finally:
            for key, _ in counted:
                self.in_flight[key] -= 1
                if not self.in_flight[key]:
                    del self.in_flight[key]


def _capped(receive: Receive) -> Receive:
    """receive, cut off once a body without a Content-Length passes the cap (the SDK then answers
    its parse error instead of buffering it whole)."""
    seen = 0

    async def bounded() -> dict:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                return {"type": "http.disconnect"}
        return message
    return bounded


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _session_manager(server: Any, security: TransportSecuritySettings) -> StreamableHTTPSessionManager:
    """The SDK's manager; its own body cap and session limit where this SDK version has them."""
    wanted = {"max_request_body_size": MAX_BODY_BYTES, "max_sessions": 1000}
    known = inspect.signature(StreamableHTTPSessionManager.__init__).parameters
    return StreamableHTTPSessionManager(app=server, security_settings=security,
                                        **{key: value for key, value in wanted.items() if key in known})


def build_app(server: Any, settings: HttpSettings, tokens: TokenFile) -> Starlette:
    sdk_log = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _ClientGone) for f in sdk_log.filters):
        sdk_log.addFilter(_ClientGone())
    manager = _session_manager(server, settings.security())
    guarded = Guard(manager.handle_request, tokens, local_only=is_loopback(settings.host))

    async def health(request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=_Endpoint(guarded), methods=["GET", "POST", "DELETE"]),
                             Route("/health", endpoint=health, methods=["GET"])],
                     middleware=[Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(TokenVerifier(tokens)),
                                            on_error=_unauthenticated),
                                 Middleware(AuthContextMiddleware)],
                     lifespan=lifespan)


def _unauthenticated(conn, exc) -> JSONResponse:
    return JSONResponse({"error": "invalid_token"}, status_code=401)


class _Endpoint:
    """An ASGI app as a Starlette route endpoint (a plain callable would be called as a view)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def check_start(settings: HttpSettings, tokens: TokenFile) -> int:
    """Refuse what must not start; the number of tokens otherwise."""
    try:
        count = len(tokens.entries())
    except TokenError as exc:
        raise ServeRefused(str(exc)) from None
    if not is_loopback(settings.host) and count == 0:
        raise ServeRefused(f"Serving on {settings.host} would let anyone who can reach it search your files; add a "
                           f"token first (`hermes kb token add NAME --scope read`), or serve on 127.0.0.1.")
    if settings.allowed_hosts and count == 0:
        # A name for clients elsewhere means a proxy forwards their requests: as open as any other address.
        raise ServeRefused(f"--allow-host {settings.allowed_hosts[0]} lets clients of other machines in (through a "
                           f"proxy); add a token first (`hermes kb token add NAME --scope read`).")
    return count


def listen(settings: HttpSettings) -> socket.socket:
    """The listening socket, bound before the server starts (so `--port 0` can say which port it got)."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    try:
        return socket.create_server((settings.host.strip("[]"), settings.port), family=family, reuse_port=False)
    except OSError as exc:
        raise ServeRefused(f"Cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}.") from None


def serve(app: Starlette, sock: socket.socket, on_started: Callable[[], None] | None = None) -> None:
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
                            limit_concurrency=MAX_CONNECTIONS)  # past it: 503, before any body is read
    server = uvicorn.Server(config)
    if on_started is not None:
        original = server.startup

        async def startup(sockets=None):
            await original(sockets=sockets)
            on_started()
        server.startup = startup
    server.run(sockets=[sock])
