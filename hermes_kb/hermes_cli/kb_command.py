"""The `kb` verbs: one parser and one dispatch table serving both `hermes kb ...`
and the `/kb ...` slash command, so the two can never drift apart.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from hermes_kb.agent.knowledgebase.retriever import MODES
from hermes_kb.agent.knowledgebase.service import USER_ERRORS, KnowledgeBase, KnowledgebaseError

from .kb_mcp import run_mcp
from .terminal import printable, safe

VERBS = ("index", "search", "status", "clear", "doctor", "eval")


class UsageError(Exception):
    """Bad arguments to a kb verb; argparse would otherwise exit the whole REPL."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message}\n{self.format_usage().strip()}")

    def exit(self, status: int = 0, message: str | None = None):
        raise UsageError((message or "").strip() or self.format_help())


def build_parser(prog: str = "hermes kb") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Index and search local knowledgebase directories.")
    verbs = parser.add_subparsers(dest="verb", parser_class=_Parser)
    index = verbs.add_parser("index", help="index configured directories, one of them, or any folder")
    index.add_argument("target", nargs="?", help="directory name or path (default: every configured directory)")
    index.add_argument("--full", action="store_true", help="re-chunk every file and re-embed on a model change")
    search = verbs.add_parser("search", help="hybrid search over the indexes")
    search.add_argument("query", nargs="+")
    search.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    search.add_argument("--dir", dest="directory", help="only this directory (name or path)")
    search.add_argument("--mode", choices=MODES, default="hybrid")
    search.add_argument("--path", dest="path_glob", help="only files matching this glob, e.g. 'docs/*.md'")
    search.add_argument("--kind", help="only this file kind, e.g. markdown, python, pdf")
    status = verbs.add_parser("status", help="what is indexed, how big, and how stale")
    status.add_argument("target", nargs="?")
    clear = verbs.add_parser("clear", help="delete an index (the files themselves are untouched)")
    clear.add_argument("target", nargs="?")
    clear.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    doctor = verbs.add_parser("doctor", help="check every index thoroughly; --repair rebuilds what is damaged")
    doctor.add_argument("target", nargs="?", help="directory name or path (default: every index)")
    doctor.add_argument("--repair", action="store_true", help="rebuild what is damaged (your files are never touched)")
    doctor.add_argument("--full", action="store_true", help="SQLite's full integrity check (slower) instead of the quick one")
    watch = verbs.add_parser("watch", help="stay in the foreground, re-indexing files as they change")
    watch.add_argument("target", nargs="?", help="directory name or path (default: every configured directory)")
    watch.add_argument("--debounce", type=float, help="seconds of quiet before a sync (default: watch_debounce_s)")
    mcp = verbs.add_parser("mcp", help="serve the knowledgebase to an MCP client over stdio")
    mcp.add_argument("--allow-clear", action="store_true", help="also offer kb_clear, which deletes an index")
    evaluate = verbs.add_parser("eval", help="measure retrieval quality on a BEIR-layout dataset folder")
    evaluate.add_argument("dataset", help="folder with corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    evaluate.add_argument("--split", default="test", help="qrels split to evaluate (default test)")
    evaluate.add_argument("--limit", type=int, help="only the first N queries, over a small corpus (smoke run)")
    for sub in (index, search, status, clear, doctor, watch, evaluate):
        sub.add_argument("--json", action="store_true", help="print JSON")
    return parser


class RichProgress:
    """Files, chunks, rate and ETA on a terminal; nothing when output is piped."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None
        self.task = None
        self.chunks = 0

    def start(self, directory: str, total_files: int) -> None:
        if not self.console.is_terminal or total_files == 0:
            return
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("files · {task.fields[chunks]} chunks · {task.fields[rate]}"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task(f"indexing {safe(directory)}", total=total_files, chunks=0, rate="")

    def advance(self, files: int = 0, chunks: int = 0) -> None:
        self.chunks += chunks
        if self.progress is not None:
            self.progress.update(self.task, advance=files, chunks=self.chunks)
            task = self.progress.tasks[0]
            if task.elapsed:
                self.progress.update(self.task, rate=f"{task.completed / task.elapsed:.1f} files/s")

    def note(self, text: str) -> None:
        self.console.print(safe(text))

    def finish(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _emit_json(out: Console, data) -> None:
    text = json.dumps(data, default=str)
    if out.is_terminal:
        out.print_json(text, ensure_ascii=True)  # C1 controls stay escaped too
    else:
        out.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


def _index(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    summaries = kb.index(args.target, full=args.full, progress=lambda: RichProgress(err))
    failed = 1 if any(s.error for s in summaries) else 0  # the others were indexed all the same
    if args.json:
        _emit_json(out, [s.to_dict() for s in summaries])
        return failed
    for s in summaries:
        if s.error:
            err.print(f"[red]error:[/] {safe(s.error)}")
            continue
        embedded = f"{s.chunks_embedded} chunks embedded, {s.chunks_reused} reused"
        out.print(f"[bold]{safe(s.directory)}[/]: {s.added} added, {s.changed} changed, {s.removed} removed, "
                  f"{s.unchanged} unchanged, {len(s.skipped)} skipped; {embedded}; {s.seconds:.2f} s")
        for path, reason in s.skipped[:20]:
            out.print(f"  skipped {safe(path)}: {safe(reason)}")
        if len(s.skipped) > 20:
            out.print(f"  ... and {len(s.skipped) - 20} more skipped (see --json)")
        if s.secrets_redacted:
            count = sum(n for _, n in s.secrets_redacted)
            out.print(f"  {count} secrets redacted before indexing, in {len(s.secrets_redacted)} files: "
                      f"{safe(', '.join(p for p, _ in s.secrets_redacted[:5]))}"
                      f"{' ...' if len(s.secrets_redacted) > 5 else ''} (allow_secrets opts a file back in)")
    return failed


def _search(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    query = " ".join(args.query)
    result = kb.search(query, k=args.k, directory=args.directory, mode=args.mode,
                       path_glob=args.path_glob, kind=args.kind)
    if args.json:
        _emit_json(out, {"query": query, "hits": [h.to_dict() for h in result.hits], "warnings": result.warnings})
        return 0
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {safe(warning)}")
    if not result.hits:
        out.print("No results.")
    for n, hit in enumerate(result.hits, 1):
        page = f" page {hit.page}" if hit.page else ""
        heading = f" — {safe(hit.heading)}" if hit.heading else ""
        out.print(f"[bold cyan][S{n}][/] {safe(hit.directory)}:{safe(hit.path)}:{hit.start_line}-{hit.end_line}{page}"
                  f"  [dim](score {hit.score:.3f}, {'+'.join(hit.found_by)})[/]{heading}")
        snippet = " ".join(hit.text.split())
        out.print("    " + safe(snippet[:300] + ("…" if len(snippet) > 300 else "")))
    return 0


def _human_size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def _status(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    rows = kb.status(args.target)
    if args.json:
        _emit_json(out, rows)
        return 0
    table = Table(title="Knowledgebase", title_justify="left")
    for column in ("name", "files", "chunks", "last indexed", "size", "changed on disk", "model", "root"):
        table.add_column(column)
    for row in rows:
        if "files" not in row:  # never indexed, or an index that cannot be read (said below the table)
            state = "never" if not row["indexed"] else row["health"]
            table.add_row(safe(row["name"]), "-", "-", state, "-", "-", "-", safe(row["root"] or "?"))
            continue
        table.add_row(safe(row["name"]), str(row["files"]), str(row["chunks"]), row["last_indexed"] or "never",
                      _human_size(row["size_bytes"]), str(row["changed_on_disk"]),
                      safe((row["model"] or "-").rsplit("/", 1)[-1]), safe(row["root"]))
    out.print(table)
    if rows:
        out.print(f"SQLite driver: {safe(rows[0]['driver'])}")
    for row in rows:
        if row.get("problem"):
            out.print(f"[yellow]warning:[/] {safe(row['problem'])}")
        if row.get("vector_search", "ok") != "ok":
            out.print(f"[yellow]warning:[/] {safe(row['vector_search'])}")
        elif row.get("vector_cache") == "stale" and row.get("vectors"):
            out.print(f"note: {safe(row['name'])}'s vector cache is behind its index, so vector search scans "
                      f"sqlite-vec (slower) until `hermes kb index {safe(row['name'])}` rebuilds it.")
        for kind in ("vector_cache", "keyword_cache"):
            if row.get(kind) == "corrupt":
                out.print(f"[yellow]warning:[/] {safe(row['name'])}'s {kind.replace('_', ' ')} fails its checksums, so "
                          f"search uses SQLite directly (slower) until `hermes kb index {safe(row['name'])}` rebuilds it.")
        if row.get("keyword_cache") == "stale" and row.get("chunks"):
            out.print(f"note: {safe(row['name'])}'s keyword cache is behind its index, so keyword search uses "
                      f"FTS5 (slower) until `hermes kb index {safe(row['name'])}` rebuilds it.")
    return 0


def _doctor(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    from hermes_kb.agent.knowledgebase.doctor import examine

    findings = examine(kb, args.target, repair=args.repair, full=args.full)
    unresolved = [f for f in findings if not f.repaired]
    if args.json:
        _emit_json(out, {"findings": [f.to_dict() for f in findings], "healthy": not unresolved})
        return 1 if unresolved else 0
    if not findings:
        out.print("Every index is healthy.")
    for finding in findings:
        state = "[green]repaired[/]" if finding.repaired else "[yellow]problem[/]"
        out.print(f"{state} {safe(finding.index)}: {safe(finding.problem)} → {safe(finding.repair)}")
    if unresolved and not args.repair:
        out.print("Run `hermes kb doctor --repair` to fix what can be rebuilt.")
    return 1 if unresolved else 0


def _clear(kb: KnowledgeBase, args, out: Console, err: Console, confirm: Callable[[str], bool]) -> int:
    names = [name for name, _ in kb.clear_targets(args.target)]
    if not args.yes and not confirm(f"Delete the index of {printable(', '.join(names))}? Your files are not touched. [y/N] "):
        out.print("Nothing cleared.")
        return 1
    cleared = kb.clear(args.target)
    if args.json:
        _emit_json(out, {"cleared": cleared})
    else:
        out.print(f"Cleared: {safe(', '.join(cleared))}" if cleared else "Nothing to clear.")
    return 0


def _watch(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    """Index, then sync on every change. A folder that vanishes is said once and re-attached when it is
    back; once every watched folder has been gone for WATCH_GRACE_S the command exits 1 (see watcher.py)."""
    from hermes_kb.agent.knowledgebase.watcher import WATCH_GRACE_S, KnowledgebaseWatcher

    directories = kb.targets(args.target)
    present = [d for d in directories if d.path.is_dir()]
    if not present:
        raise KnowledgebaseError("Nothing to watch: " + ", ".join(f"{d.path} ({d.name})" for d in directories)
                                 + (" does not exist." if len(directories) == 1 else " do not exist."))
    for directory in present:
        for summary in kb.index(str(directory.path), progress=lambda: RichProgress(err)):
            _print_sync(summary, out, args.json)
    watcher = KnowledgebaseWatcher(kb, directories, debounce_s=args.debounce or kb.config.watch_debounce_s,
                                   on_sync=lambda summary: _print_sync(summary, out, args.json),
                                   on_error=lambda message: err.print(f"[red]error:[/] {safe(message)}"),
                                   on_missing=lambda message: err.print(f"[yellow]warning:[/] {safe(message)}"),
                                   on_return=lambda message: err.print(safe(message)),
                                   grace_s=WATCH_GRACE_S)
    watcher.start()
    if not args.json:
        out.print(f"Watching {safe(', '.join(d.name for d in directories))}; Ctrl-C stops.")
    gave_up = None
    try:
        gave_up = watcher.wait()
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
    if gave_up:
        raise KnowledgebaseError(gave_up)
    return 0


def _print_sync(summary, out: Console, as_json: bool) -> None:
    if as_json:
        _emit_json(out, summary.to_dict())
    elif summary.added or summary.changed or summary.removed or not summary.unchanged:
        out.print(f"{time.strftime('%H:%M:%S')} [bold]{safe(summary.directory)}[/]: {summary.added} added, "
                  f"{summary.changed} changed, {summary.removed} removed ({summary.seconds:.2f} s)")


def evaluation_rows(report) -> list[list[object]]:
    from hermes_kb.agent.knowledgebase.evaluation import METRICS

    return [[s.name, *(f"{s.metrics[m]:.4f}" for m in METRICS),
             f"{s.p50_ms:.1f}", f"{s.p95_ms:.1f}"] for s in report.systems]


EVALUATION_COLUMNS = ["system", "nDCG@10", "R@10", "R@100", "MRR@10", "p50 ms", "p95 ms"]


def _eval(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    import importlib.util
    from pathlib import Path

    from hermes_kb.agent.knowledgebase.evaluation import EvaluationError, evaluate

    missing = "hermes kb eval needs ranx; install the eval extra: pip install 'hermes-knowledgebase[eval]'"
    if importlib.util.find_spec("ranx") is None:  # evaluate imports it late; say so before any indexing
        raise KnowledgebaseError(missing)
    try:
        report = evaluate(Path(args.dataset), kb.config, kb.hermes_home, split=args.split, limit=args.limit,
                          on_progress=lambda message: err.print(f"[dim]{safe(message)}[/]"))
    except EvaluationError as exc:
        raise KnowledgebaseError(str(exc)) from None
    except ModuleNotFoundError as exc:  # a part of ranx is missing: a broken install of the extra
        if (exc.name or "").split(".")[0] != "ranx":
            raise
        raise KnowledgebaseError(missing) from None
    if args.json:
        _emit_json(out, report.to_dict())
        return 0
    table = Table(title=f"{report.dataset} ({report.split}): {report.queries} queries, {report.documents} documents, "
                        f"{report.chunks} chunks; index {report.index_seconds:.1f} s", title_justify="left")
    for column in EVALUATION_COLUMNS:
        table.add_column(column)
    for row in evaluation_rows(report):
        table.add_row(*row)
    out.print(table)
    return 0


def ask_terminal(prompt: str) -> bool:
    """Yes only from a person typing y at a terminal; piped input never confirms anything."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(printable(prompt)).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def run_kb(argv: list[str], kb_factory: Callable[[], KnowledgeBase], out: Console, err: Console,
           confirm: Callable[[str], bool] = ask_terminal, prog: str = "hermes kb", foreground: bool = True) -> int:
    """Parse and run one kb verb; every user error becomes one sentence and exit code 1 (2 for usage)."""
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        err.print(safe(str(exc)))
        return 2
    if args.verb is None:
        out.print(safe(parser.format_help()))
        return 0 if not argv else 2
    if args.verb == "watch" and not foreground:
        err.print("In the chat, set knowledgebase.watch_for_changes: true to keep indexes fresh while you talk.")
        return 1
    handlers = {"index": _index, "search": _search, "status": _status, "eval": _eval, "watch": _watch, "doctor": _doctor,
                "clear": lambda kb, a, o, e: _clear(kb, a, o, e, confirm),
                "mcp": lambda kb, a, o, e: run_mcp(kb, a, o, e, foreground)}
    try:
        return handlers[args.verb](kb_factory(), args, out, err)
    except USER_ERRORS as exc:
        if getattr(args, "json", False):
            _emit_json(out, {"error": str(exc)})
        else:
            err.print(f"[red]error:[/] {safe(str(exc))}")
        return 1


def run_slash_kb(line: str, kb_factory: Callable[[], KnowledgeBase], out: Console, err: Console,
                 confirm: Callable[[str], bool] = ask_terminal) -> int:
    """`/kb index docs` in the chat runs exactly what `hermes kb index docs` runs."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        err.print(f"[red]error:[/] {safe(str(exc))}")
        return 2
    return run_kb(argv, kb_factory, out, err, confirm, prog="/kb", foreground=False)
