"""`hermes kb mcp --http`: the team server, driven by the official SDK's streamable HTTP client.

In process (uvicorn in a thread, the stub embedder) for tokens, scopes and concurrency; as a real
subprocess for what a user types (refusals, the start line, the default model)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import anyio
import pytest

pytest.importorskip("mcp")

import httpx  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402

from hermes_kb.mcp_http import HttpSettings, ServeRefused, access_of, build_app, check_start, listen  # noqa: E402
from hermes_kb.mcp_server import build_server  # noqa: E402
from hermes_kb.mcp_tokens import TokenError, TokenFile, token_file  # noqa: E402

from .conftest import StubEmbedder  # noqa: E402

HERMES = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
NOTES = {"deploy.md": "# Deploy\n\nProduction deploys use the blue-green switch on port 4271.\n",
         "fox.md": "# Fox\n\nThe quick brown fox jumps over the lazy dog.\n"}


@contextmanager
def serving(kb, settings: HttpSettings | None = None):
    """The HTTP app on a free loopback port, in a thread; yields its /mcp URL."""
    import uvicorn

    settings = settings or HttpSettings(port=0)
    tokens = TokenFile(token_file(kb.hermes_home))
    check_start(settings, tokens)
    sock = listen(settings)
    app = build_app(build_server(kb, allow_clear=settings.allow_clear, server_instructions="test", access=access_of),
                    settings, tokens)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)


def call(url: str, token: str | None, steps):
    """Open an SDK session with `token` and return `await steps(session)`."""
    async def main():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with streamablehttp_client(url, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await steps(session)
    return anyio.run(main)


def tool_names(session):
    async def names():
        return sorted(tool.name for tool in (await session.list_tools()).tools)
    return names()


@pytest.fixture
def served(tree, make_kb):
    docs = tree(NOTES)
    kb = make_kb(docs)
    kb.index()
    return kb, docs


def test_a_token_is_shown_once_kept_as_a_hash_and_refused_from_a_file_others_can_read(hermes_home):
    tokens = TokenFile(token_file(hermes_home))
    token = tokens.add("alice", "write")
    stored = tokens.path.read_text()
    assert token.startswith("hkb_") and len(token) > 40 and token not in stored
    assert oct(tokens.path.stat().st_mode & 0o777) == "0o600"
    assert tokens.verify(token).name == "alice" and tokens.verify(token).scopes == ["read", "write"]
    assert tokens.verify(token + "x") is None and tokens.verify("") is None
    assert tokens.listed() == [{"name": "alice", "scope": "write", "created": tokens.listed()[0]["created"]}]
    for bad, scope in (("", "read"), ("a b", "read"), ("x" * 65, "read"), ("bob", "root")):
        with pytest.raises(TokenError):
            tokens.add(bad, scope)
    with pytest.raises(TokenError, match="exists"):
        tokens.add("alice", "read")
    os.chmod(tokens.path, 0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        tokens.verify(token)
    os.chmod(tokens.path, 0o600)
    os.chmod(tokens.path.parent, 0o775)  # others could swap the file for theirs
    with pytest.raises(TokenError, match="can be written by other users"):
        tokens.verify(token)
    os.chmod(tokens.path.parent, 0o700)
    planted = tokens.path.parent / "planted.json"  # a link to a private file of the attacker's choosing
    os.replace(tokens.path, planted)
    tokens.path.symlink_to(planted)
    with pytest.raises(TokenError, match="a link is not followed"):
        tokens.verify(token)
    tokens.path.unlink()
    os.replace(planted, tokens.path)
    tokens.remove("alice")
    assert tokens.verify(token) is None
    with pytest.raises(TokenError, match="No token is named alice"):
        tokens.remove("alice")


def test_the_token_verbs_print_a_new_token_alone_on_the_last_line_and_never_again(hermes_home):
    env = {**os.environ, "HERMES_HOME": str(hermes_home)}
    added = subprocess.run([*HERMES, "kb", "token", "add", "ci-bot", "--scope", "read"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0
    token = added.stdout.strip().splitlines()[-1]
    assert token.startswith("hkb_") and added.stdout.strip() == token
    listed = subprocess.run([*HERMES, "kb", "token", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(listed.stdout)[0]["name"] == "ci-bot" and token not in listed.stdout + listed.stderr
    removed = subprocess.run([*HERMES, "kb", "token", "remove", "nobody"], env=env, capture_output=True, text=True, timeout=60)
    assert removed.returncode == 1 and "No token is named nobody" in removed.stderr


def test_without_a_token_or_with_a_wrong_one_the_answer_is_401_with_www_authenticate(served):
    kb, _ = served
    TokenFile(token_file(kb.hermes_home)).add("alice", "read")
    with serving(kb) as url:
        for headers in ({}, {"Authorization": "Bearer hkb_wrong"}, {"Authorization": "Basic YWxpY2U6eA=="}):
            answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                                headers={"Accept": "application/json, text/event-stream", **headers})
            assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer")
        health = httpx.get(url.replace("/mcp", "/health"))
        assert health.json() == {"status": "ok"}  # no data, no token needed


def test_each_scope_is_offered_and_allowed_only_its_tools(served, tree):
    kb, docs = served
    tokens = TokenFile(token_file(kb.hermes_home))
    reader, writer, admin = (tokens.add(name, name) for name in ("read", "write", "admin"))
    elsewhere = tree({"new.md": "# New\n\nA folder nobody indexed: the harbour crane.\n"}, docs.parent / "elsewhere")

    async def as_reader(session):
        found = await session.call_tool("kb_search", {"query": "blue-green deploys", "k": 1})
        refused = await session.call_tool("kb_index", {})
        return await tool_names(session), found, refused

    with serving(kb) as url:
        names, found, refused = call(url, reader, as_reader)
        assert names == ["kb_read", "kb_search", "kb_status"]
        assert not found.isError and "deploy.md" in found.content[0].text
        assert found.structuredContent["hits"][0]["location"] == "docs/deploy.md:1"  # no folder of the host
        status = call(url, reader, lambda session: session.call_tool("kb_status", {}))
        assert str(docs) not in status.content[0].text + json.dumps(status.structuredContent)
        assert refused.isError and "needs a token with the write scope" in refused.content[0].text

        async def as_writer(session):
            return (await tool_names(session), await session.call_tool("kb_index", {}),
                    await session.call_tool("kb_index", {"directory": str(elsewhere)}),
                    await session.call_tool("kb_clear", {"directory": docs.name}))
        names, refreshed, new_folder, clear = call(url, writer, as_writer)
        assert names == ["kb_index", "kb_read", "kb_search", "kb_status"] and not refreshed.isError
        assert new_folder.isError and "may only refresh folders the user has indexed" in new_folder.content[0].text
        probe = call(url, writer, lambda session: session.call_tool("kb_index", {"directory": "~"}))
        assert probe.isError and os.path.expanduser("~") not in probe.content[0].text  # no path resolved for it
        assert clear.isError and "admin scope" in clear.content[0].text

        async def as_admin(session):
            return (await tool_names(session), await session.call_tool("kb_index", {"directory": str(elsewhere)}),
                    await session.call_tool("kb_clear", {"directory": docs.name}))
        names, new_folder, clear = call(url, admin, as_admin)
        assert names == ["kb_clear", "kb_index", "kb_read", "kb_search", "kb_status"]
        assert not new_folder.isError and not clear.isError
    assert docs.name not in {row["name"] for row in kb.status() if row["indexed"]}


def test_a_removed_token_stops_working_at_its_next_request(served):
    kb, _ = served
    tokens = TokenFile(token_file(kb.hermes_home))
    token = tokens.add("temp", "read")
    tokens.add("other", "read")

    async def status(session):
        return await session.call_tool("kb_status", {})

    with serving(kb) as url:
        assert not call(url, token, status).isError
        tokens.remove("temp")
        answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                            headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"})
        assert answer.status_code == 401


def test_host_and_origin_outside_the_allowlist_and_oversized_bodies_are_refused(served):
    kb, _ = served
    token = TokenFile(token_file(kb.hermes_home)).add("proxied", "read")  # a name for other machines needs tokens
    with serving(kb, HttpSettings(port=0, allowed_hosts=["kb.example.org"])) as url:
        port = url.split(":")[2].split("/")[0]
        base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                "Authorization": f"Bearer {token}"}
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        rebinding = httpx.post(url, json=initialize, headers={**base, "Host": f"attacker.example:{port}"})
        assert rebinding.status_code == 421
        foreign = httpx.post(url, json=initialize, headers={**base, "Origin": "http://attacker.example"})
        assert foreign.status_code == 403
        proxied = httpx.post(url, json=initialize, headers={**base, "Host": "kb.example.org"})
        assert proxied.status_code == 200
        huge = httpx.post(url, content=b"[" + b"1," * 600_000 + b"1]", headers=base)
        assert huge.status_code == 413


def test_binding_beyond_this_machine_without_tokens_is_refused(hermes_home):
    tokens = TokenFile(token_file(hermes_home))
    with pytest.raises(ServeRefused, match="add a token first"):
        check_start(HttpSettings(host="0.0.0.0"), tokens)
    assert check_start(HttpSettings(host="127.0.0.1"), tokens) == 0
    with pytest.raises(ServeRefused, match="--allow-host kb.example.org lets clients of other machines in"):
        check_start(HttpSettings(allowed_hosts=["kb.example.org"]), tokens)  # behind a proxy: as open
    tokens.add("team", "read")
    assert check_start(HttpSettings(host="0.0.0.0"), tokens) == 1


class SlowEmbedder(StubEmbedder):
    """Documents take a while (an index run under way); queries are as quick as ever."""

    def embed_documents(self, texts):
        time.sleep(0.05 * len(texts))
        return super().embed_documents(texts)


def test_searches_run_side_by_side_and_an_index_run_holds_none_of_them(tree, make_kb):
    docs = tree({**NOTES, **{f"n{i}.md": f"# Note {i}\n\nThe harbour crane lifts container {i}.\n" for i in range(40)}})
    kb = make_kb(docs, embedder=SlowEmbedder())
    kb.index()
    for i in range(40):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nThe harbour crane lifted container {i} again.\n")
    took: dict[str, float] = {}

    async def index_run(session):
        started = time.perf_counter()
        result = await session.call_tool("kb_index", {})
        took["index"] = time.perf_counter() - started
        return result

    async def searches(session):
        started = time.perf_counter()
        results = [await session.call_tool("kb_search", {"query": "blue-green deploys", "k": 1}) for _ in range(5)]
        took.setdefault("searches", []).append(time.perf_counter() - started)
        return results

    with serving(kb) as url:
        runner = threading.Thread(target=lambda: took.setdefault("indexed", call(url, None, index_run)))
        runner.start()
        time.sleep(0.5)  # the run is embedding now
        clients = [threading.Thread(target=lambda n=n: took.setdefault(f"c{n}", call(url, None, searches))) for n in range(4)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(60)
        searched_while_indexing = runner.is_alive()
        runner.join(120)
    assert all(not r.isError and "deploy.md" in r.content[0].text for n in range(4) for r in took[f"c{n}"])
    assert searched_while_indexing and max(took["searches"]) < took["index"] / 2
    assert not took["indexed"].isError


def test_each_client_session_numbers_its_own_sources(served):
    kb, _ = served

    async def steps(session):
        first = await session.call_tool("kb_search", {"query": "quick brown fox", "k": 1})
        second = await session.call_tool("kb_search", {"query": "blue-green deploys", "k": 1})
        return first.structuredContent["hits"][0]["id"], second.structuredContent["hits"][0]["id"]

    with serving(kb) as url:
        assert call(url, None, steps) == ("S1", "S2")  # ids run on within a session
        assert call(url, None, steps) == ("S1", "S2")  # and start afresh in another client's


def test_the_command_refuses_an_open_bind_and_serves_the_default_model(tmp_path, tree):
    home = tmp_path / "home"
    docs = tree(NOTES)
    env = {**os.environ, "HERMES_HOME": str(home)}
    subprocess.run([*HERMES, "kb", "index", str(docs)], env=env, check=True, capture_output=True, timeout=300)
    refused = subprocess.run([*HERMES, "kb", "mcp", "--http", "--host", "0.0.0.0", "--port", "0"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "add a token first" in refused.stderr and "Traceback" not in refused.stderr
    token = subprocess.run([*HERMES, "kb", "token", "add", "me", "--scope", "read"], env=env, capture_output=True,
                           text=True, timeout=60).stdout.strip()
    server = subprocess.Popen([*HERMES, "kb", "mcp", "--http", "--port", "0", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = json.loads(server.stdout.readline())
        assert started["tokens"] == 1 and started["url"].endswith("/mcp")

        async def steps(session):
            return await session.call_tool("kb_search", {"searches": [{"type": "lex", "query": "4271"},
                                                                      {"type": "vec", "query": "how do we ship to production"}]})
        found = call(started["url"], token, steps)
        assert not found.isError and found.structuredContent["hits"][0]["path"] == "deploy.md"
    finally:
        server.terminate()
        _, errors = server.communicate(timeout=30)
    assert server.returncode in (0, -15) and "Traceback" not in errors, errors  # uvicorn re-raises SIGTERM once stopped
    assert "token me: kb_search" in errors and token not in errors  # who did what, by name only


def test_a_free_port_is_told_and_a_taken_one_is_one_sentence():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    with pytest.raises(ServeRefused, match="Cannot listen on 127.0.0.1"):
        listen(HttpSettings(port=taken.getsockname()[1]))
    taken.close()


def test_a_request_without_a_token_where_one_was_required_is_allowed_nothing():
    """The second wall behind Guard: should a request ever reach the tools unauthenticated where tokens
    are required, it is offered no tool, not this machine's own client's."""
    from types import SimpleNamespace

    from hermes_kb.mcp_http import TOKENS_REQUIRED
    from hermes_kb.mcp_tokens import NO_ACCESS

    assert access_of(SimpleNamespace(scope={TOKENS_REQUIRED: True})) is NO_ACCESS and NO_ACCESS.scopes == []
    assert access_of(SimpleNamespace(scope={TOKENS_REQUIRED: False})) is None  # loopback, no tokens: the user's own
    assert access_of(SimpleNamespace(scope={})) is NO_ACCESS  # not judged by Guard: nothing
