"""The HTTP MCP server under load: concurrent clients searching a 100k-chunk index through real
streamable HTTP sessions, on SQLite and on PostgreSQL, with and without an index run under way.
Each row runs on a freshly started server (one warm-up search loads the model), so no relevance
judgement cached by an earlier row makes a later row's searches cheaper.

Per backend: a 100k-chunk index is written straight through the store (SciFact chunk texts and
vectors with small noise, as benchmarks/query_latency.py makes them; files on disk with the sizes
and times the index records, so no hit reads as stale), and a second folder of 1,000 real notes
waits unindexed. `hermes-kb kb mcp --http` is started as a user would (a read token for the
searchers, an admin token for the index runs). Then, for 1, 4 and 16 clients, each its own SDK
session issuing hybrid searches (SciFact test claims) back to back for --seconds: requests/s,
p50/p95/p99, errors, the server's RSS; the same while an admin client indexes the 1,000 notes
(cleared before each run). Last, per backend: a client killed mid-request (does the next one get
answered?) and the server stopped mid-run and started again (is what was indexed kept, and does
the next run finish the rest?).

    python benchmarks/mcp_http_load.py [--chunks 100000] [--seconds 15] [--clients 1,4,16]

The load generator runs in this process, on the same 2 cores as the server: its share of the CPU
is part of every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.index import keyword_cache, vector_cache  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import percentile  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.mcp_tokens import TokenFile, token_file  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.pg_store import SERVER_SETTINGS, corpus  # noqa: E402
from benchmarks.query_latency import scifact_material  # noqa: E402

HERMES = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
NOTES = 1_000


def write_index(kb: KnowledgeBase, root: Path, size: int, texts, vectors, rng) -> None:
    """`size` chunks through the store of the backend `kb` names, each file on disk as recorded."""
    directory = kb.config.directories[0]
    path = kb.index_path(directory)
    with kb.backend.writer_lock(path, directory.name, create=True), kb.backend.open(path, name=directory.name) as store:
        store.pin_model(kb.embedder().identity)
        for name, chunks, block in corpus(size, texts, vectors, rng):
            (root / name).write_text("synthetic")
            stat = (root / name).stat()
            store.write_file(name, stat.st_size, stat.st_mtime_ns, f"h-{name}", "text", chunks, block)
        if hasattr(store, "build_vector_index"):
            store.build_vector_index()
        else:
            store.tidy(bulk=True)
        vector_cache.refresh(store)
        keyword_cache.refresh(store)


def prepare(scratch: Path, backend: str, url: str | None, size: int, texts, vectors) -> tuple[Path, str, str]:
    """A home whose config lists the big index and the notes; returns (home, read token, admin token)."""
    root, notes, home = scratch / backend / "corpus", scratch / backend / "notes", scratch / backend / "home"
    for folder in (root, notes, home):
        folder.mkdir(parents=True)
    for n in range(NOTES):
        (notes / f"note{n:04}.md").write_text(f"# Note {n}\n\n{texts[(n * 7) % len(texts)][:600]}\n")
    section = {"directories": [str(root), str(notes)], **({"store": {"backend": "postgres", "url": url}} if url else {})}
    (home / "config.yaml").write_text(yaml.safe_dump({"knowledgebase": section}))
    started = time.perf_counter()
    write_index(KnowledgeBase(parse_knowledgebase(section), home), root, size, texts, vectors, np.random.default_rng(7))
    print(f"{backend}: {size:,} chunks written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    tokens = TokenFile(token_file(home))
    return home, tokens.add("searcher", "read"), tokens.add("indexer", "admin")


class Server:
    def __init__(self, home: Path, port: int = 0):
        self.process = subprocess.Popen([*HERMES, "kb", "mcp", "--http", "--port", str(port), "--json"],
                                        env={**os.environ, "HERMES_HOME": str(home)}, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.url = json.loads(self.process.stdout.readline())["url"]

    def rss_mb(self) -> tuple[float, float]:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


async def session_calls(url: str, token: str, calls):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"}, timeout=120,
                                     sse_read_timeout=600) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await calls(session)


async def searcher(url: str, token: str, claims: list[str], offset: int, until: float, latencies: list, errors: list):
    async def loop(session):
        n = offset
        while time.perf_counter() < until:
            started = time.perf_counter()
            try:
                result = await session.call_tool("kb_search", {"query": claims[n % len(claims)], "k": 10})
                (errors.append(result.content[0].text[:80]) if result.isError else
                 latencies.append((time.perf_counter() - started) * 1000))
            except Exception as exc:  # noqa: BLE001 - counted, the load goes on
                errors.append(repr(exc)[:80])
            n += 1
    try:
        await session_calls(url, token, loop)
    except Exception as exc:  # noqa: BLE001
        errors.append(repr(exc)[:80])


async def tool(url: str, token: str, name: str, arguments: dict):
    async def call(session):
        return await session.call_tool(name, arguments)
    return await session_calls(url, token, call)


async def load_phase(server: Server, tokens, claims, clients: int, seconds: float, index: bool) -> list:
    """One row, on a server of its own (started here, stopped after): its RSS is this row's, and no
    judgement cached by an earlier row makes this one's searches cheaper."""
    read, admin = tokens
    await tool(server.url, read, "kb_search", {"query": "warm-up: the model loaded"})
    if index:
        await tool(server.url, admin, "kb_clear", {"directory": "notes"})
    latencies, errors = [], []
    started = time.perf_counter()
    until = started + seconds
    indexing = asyncio.create_task(tool(server.url, admin, "kb_index", {"directory": "notes"})) if index else None
    await asyncio.gather(*(searcher(server.url, read, claims, n * 37, until, latencies, errors) for n in range(clients)))
    elapsed = time.perf_counter() - started
    index_note = ""
    if indexing is not None:
        index_note = "still running" if not indexing.done() else "done"
        result = await indexing
        index_note += (f"; run failed: {result.content[0].text[:120]}" if result.isError else
                       f"; run finished at {time.perf_counter() - started:.0f} s")
    rss, peak = server.rss_mb()
    server.stop()
    return [clients, "yes" if index else "no", f"{len(latencies) / elapsed:.1f}",
            *(f"{percentile(latencies, q):.0f}" if latencies else "-" for q in (0.5, 0.95, 0.99)),
            len(errors), f"{rss:.0f} / {peak:.0f}", index_note]


def client_process(url: str, token: str, name: str, arguments: dict) -> subprocess.Popen:
    """One tool call from a client process of its own (to be killed, or left to its fate)."""
    script = ("import asyncio,sys; sys.path.insert(0, %r); from benchmarks.mcp_http_load import tool; "
              "asyncio.run(tool(%r, %r, %r, %r))") % (str(Path(__file__).resolve().parents[1]), url, token, name, arguments)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def killed_client(url: str, token: str, claim: str) -> str:
    """A client process killed while its search runs; then: is the next client answered, and how fast?"""
    victim = client_process(url, token, "kb_search", {"query": claim, "k": 10})
    time.sleep(2.5)  # its session is open and its search sent
    victim.kill()
    victim.wait()
    started = time.perf_counter()
    result = asyncio.run(tool(url, token, "kb_search", {"query": claim, "k": 10}))
    return f"next client answered in {(time.perf_counter() - started) * 1000:.0f} ms, error: {result.isError}"


def restarted(home: Path, server: Server, tokens) -> tuple[Server, str]:
    """Stop the server during an index run of the notes, start it again, let a run finish the rest."""
    read, admin = tokens
    asyncio.run(tool(server.url, admin, "kb_clear", {"directory": "notes"}))
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    runner = client_process(server.url, admin, "kb_index", {"directory": "notes"})
    time.sleep(4)  # the session open, a few hundred notes in
    server.stop()
    runner.kill()
    runner.wait()
    server = Server(home, port)

    def notes_row() -> dict:
        rows = asyncio.run(tool(server.url, read, "kb_status", {})).structuredContent["directories"]
        return next(row for row in rows if row["name"] == "notes")
    kept = notes_row()
    rerun = asyncio.run(tool(server.url, admin, "kb_index", {"directory": "notes"})).structuredContent["directories"][0]
    after = notes_row()
    return server, (f"stopped mid-run: {kept.get('files', 0)} of {NOTES} notes recorded, {kept.get('vectors', 0)} "
                    f"vectors (health {kept.get('health')}); the next run: {rerun['added']} added, {rerun['changed']} "
                    f"changed, {rerun['unchanged']} unchanged ({rerun.get('resumed', 0)} of them finished), "
                    f"{rerun['chunks_embedded']} chunks embedded; now "
                    f"{after.get('files')} files, {after.get('vectors')} vectors, health {after.get('health')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    texts, vectors, claims = scifact_material(300)
    rows, events = [], []
    from tests.postgres_server import server_url

    with tempfile.TemporaryDirectory() as scratch:
        for backend in args.backends.split(","):
            pg = server_url(SERVER_SETTINGS) if backend == "postgres" else None
            url = pg.__enter__() if pg else None
            try:
                home, *tokens = prepare(Path(scratch), backend, url, args.chunks, texts, vectors)
                for index in (False, True):
                    for clients in (int(c) for c in args.clients.split(",")):
                        row = asyncio.run(load_phase(Server(home), tokens, claims, clients, args.seconds, index))
                        rows.append([backend, *row])
                        print(rows[-1], file=sys.stderr)
                server = Server(home)
                events.append([backend, "client killed mid-request", killed_client(server.url, tokens[0], claims[1])])
                print(events[-1], file=sys.stderr)
                server, outcome = restarted(home, server, tokens)
                events.append([backend, "server stopped mid-run, started again", outcome])
                print(events[-1], file=sys.stderr)
                server.stop()
            finally:
                if pg:
                    pg.__exit__(None, None, None)
    report(f"HTTP MCP server, {args.chunks:,}-chunk index, hybrid kb_search through real SDK sessions, "
           f"{args.seconds:.0f} s per row (the load generator shares the 2 cores)",
           ["backend", "clients", "index run (1,000 notes)", "req/s", "p50 ms", "p95 ms", "p99 ms", "errors",
            "server RSS / peak MB", "index run"], rows, write=not args.no_write)
    report("HTTP MCP server: faults", ["backend", "fault", "outcome"], events, write=not args.no_write)


if __name__ == "__main__":
    main()
