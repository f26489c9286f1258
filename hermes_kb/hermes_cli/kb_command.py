"""The `kb` verbs: one parser and one dispatch table serving both `hermes kb ...`
and the `/kb ...` slash command, so the two can never drift apart.

Over 500 lines because every verb's arguments and rendering are in the one table that makes the two
surfaces the same; the verbs' work is the engine's (KnowledgeBase).
"""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Callable

from rich import box
from rich.console import Console
from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hermes_kb.agent.knowledgebase.config import RERANK_MODES
from hermes_kb.agent.knowledgebase.retriever import MODES
from hermes_kb.agent.knowledgebase.snippets import Snippet
from hermes_kb.agent.knowledgebase.kinds import registry
from hermes_kb.agent.knowledgebase.service import USER_ERRORS, KnowledgeBase, KnowledgebaseError

from .index_progress import progress_for
from .kb_mcp import run_mcp
from .kb_token import add_parser as add_token_parser
from .kb_token import run_token
from .terminal import head_cells, printable, safe, short_path

if TYPE_CHECKING:
    from hermes_kb.agent.knowledgebase.indexer import Progress

VERBS = ("index", "search", "status", "clear", "doctor", "eval")
INTERRUPTED = {  # what a Ctrl-C left behind, and how to go on
    "index": "interrupted: every file written so far is kept and searchable; `hermes kb index` goes on from there.",
    "watch": "stopped watching; the indexes are as of the last sync.",
}
CHAT_WATCH_HINT = "In the chat, set knowledgebase.watch_for_changes: true to keep indexes fresh while you talk."
ALSO_IN_SHOWN = 3  # places named under a hit whose text repeats elsewhere (all of them in --json)


class UsageError(Exception):
    """Bad arguments to a kb verb; argparse would otherwise exit the whole REPL."""


class HelpRequested(Exception):
    """-h/--help: the help text, printed once on stdout by run_kb, which then returns 0."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message}\n{self.format_usage().strip()}")

    def print_help(self, file=None):
        raise HelpRequested(self.format_help())

    def exit(self, status: int = 0, message: str | None = None):
        raise UsageError((message or "").strip() or self.format_help())


def build_parser(prog: str = "hermes kb") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Index and search local knowledgebase directories.")
    verbs = parser.add_subparsers(dest="verb", parser_class=_Parser)
    index = verbs.add_parser("index", help="index configured directories, one of them, or any folder")
    index.add_argument("target", nargs="?", help="directory name or path (default: every configured directory)")
    index.add_argument("--full", action="store_true", help="re-chunk every file and re-embed on a model change")
    search = verbs.add_parser("search", help="hybrid search over the indexes")
    search.add_argument("query", nargs="*", help="what to look for (with --lex/--vec/--hyde: the intent they serve)")
    for kind, meaning in (("lex", "exact words, names, identifiers (keyword search)"),
                          ("vec", "the question in other words (vector search)"),
                          ("hyde", "a passage written as the answer would be (vector search)")):
        search.add_argument(f"--{kind}", action="append", default=[], metavar="TEXT",
                            help=f"a typed search of your own, fused with the others: {meaning}; repeatable")
    search.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    search.add_argument("--dir", dest="directory", help="only this directory (name or path)")
    search.add_argument("--mode", choices=MODES, default="hybrid")
    search.add_argument("--path", dest="path_glob", help="only files matching this glob, e.g. 'docs/*.md'")
    search.add_argument("--kind", help=f"only this file kind: {', '.join(registry.NAMES)}")
    search.add_argument("--tag", dest="tags", action="append", default=[], metavar="TAG",
                        help="only notes with this tag (front matter or #tag; nested tags count; repeat for all of several)")
    search.add_argument("--since", metavar="WHEN", help="only files dated at or after WHEN: 2026-11-30, 7d, 2w, 12h, today "
                                                        "(a note's front matter date, else the file's modification time)")
    search.add_argument("--before", metavar="WHEN", help="only files dated before WHEN (as --since)")
    search.add_argument("--rerank", choices=RERANK_MODES, help="the relevance stage for this search (default: "
                                                               "knowledgebase.rerank, auto: the shipped model)")
    search.add_argument("--explain", action="store_true", help="show each hit's vector, keyword and relevance scores")
    parser.set_defaults(search_parser=search)  # its usage, for a search that names nothing to look for
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
    mcp = verbs.add_parser("mcp", help="serve the knowledgebase to MCP clients (stdio, or --http for a team)")
    mcp.add_argument("--allow-clear", action="store_true",
                     help="also offer kb_clear, which deletes an index (with tokens: admin tokens only)")
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp (and /health) instead of stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="address to bind with --http (default 127.0.0.1; any other "
                                                         "needs tokens: hermes kb token add)")
    mcp.add_argument("--port", type=int, default=8765, help="port with --http (default 8765; 0 picks a free one)")
    mcp.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                     help="a host name clients (or your reverse proxy) use, accepted in Host/Origin; repeatable")
    mcp.add_argument("--json", action="store_true", help="with --http: print the start line as JSON")
    add_token_parser(verbs)
    evaluate = verbs.add_parser("eval", help="measure retrieval quality on a BEIR-layout dataset folder")
    evaluate.add_argument("dataset", help="folder with corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    evaluate.add_argument("--split", default="test", help="qrels split to evaluate (default test)")
    evaluate.add_argument("--limit", type=int, help="only the first N queries, over a small corpus (smoke run)")
    for sub in (index, search, status, clear, doctor, watch, evaluate):
        sub.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _emit_json(out: Console, data) -> None:
    text = json.dumps(data, default=str)
    if out.is_terminal:
        out.print_json(text, ensure_ascii=True)  # C1 controls stay escaped too
    else:
        out.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


def _index(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    summaries = kb.index(args.target, full=args.full, progress=args.progress or progress_for(err, args.json))
    failed = 1 if any(s.error for s in summaries) else 0  # the others were indexed all the same
    if args.json:
        _emit_json(out, [s.to_dict() for s in summaries])
        return failed
    for s in summaries:
        if s.error:
            err.print(f"[red]error:[/] {safe(s.error)}")
            continue
        repeats = s.chunks_embedded - s.texts_embedded
        embedded = (f"{s.chunks_embedded} chunks embedded"
                    + (f" ({repeats} repeat another chunk's text, embedded once)" if repeats else "")
                    + f", {s.chunks_reused} reused")
        resumed = f" ({s.resumed} finished after an interrupted run)" if s.resumed else ""
        out.print(f"[bold]{safe(s.directory)}[/]: {s.added} added, {s.changed} changed, {s.removed} removed, "
                  f"{s.unchanged} unchanged{resumed}, {len(s.skipped)} skipped; {embedded}; {s.seconds:.2f} s")
        _print_skipped(s, out)
        if s.secrets_redacted:
            count = sum(n for _, n in s.secrets_redacted)
            out.print(f"  {count} secrets redacted before indexing, in {len(s.secrets_redacted)} files: "
                      f"{safe(', '.join(p for p, _ in s.secrets_redacted[:5]))}"
                      f"{' ...' if len(s.secrets_redacted) > 5 else ''} (allow_secrets opts a file back in)")
    return failed


def _print_skipped(summary, out: Console, shown: int = 20) -> None:
    """The files this run left out, each said once: a rerun does not repeat an unchanged one."""
    for path, reason in summary.skipped[:shown]:
        out.print(f"  skipped {safe(path)}: {safe(reason)}")
    if len(summary.skipped) > shown:
        out.print(f"  ... and {len(summary.skipped) - shown} more skipped (see --json)")
    for path, reason in summary.partly_read:
        out.print(f"  partly read {safe(path)}: {safe(reason)}")


def _search(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    query = " ".join(args.query)
    searches = [{"type": kind, "query": text} for kind in ("lex", "vec", "hyde") for text in getattr(args, kind)]
    result = kb.search(searches or query, k=args.k, directory=args.directory, mode=args.mode, path_glob=args.path_glob,
                       kind=args.kind, tags=args.tags, since=args.since, before=args.before, rerank=args.rerank,
                       intent=query or None)
    if args.json:
        _emit_json(out, {"query": query, **({"searches": searches} if searches else {}), "hits": [h.to_dict() for h in result.hits], "warnings": result.warnings,
                         "rerank": asdict(result.rerank) if result.rerank else None,
                         "setting": result.setting.to_dict() if result.setting else None})
        return 0
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {safe(warning)}")
    if args.explain:
        _explain_judgement(result, err, kb.config.max_context_chunks)
    if not result.hits:
        out.print("No results.")
    for n, hit in enumerate(result.hits, 1):
        where = f" {hit.part}" if hit.part else f":{hit.start_line}-{hit.end_line}"
        heading = f" — {safe(hit.heading)}" if hit.heading else ""
        out.print(f"[bold cyan][S{n}][/] {safe(hit.directory)}:{safe(hit.path)}{where}"
                  f"  [dim](score {hit.score:.3f}, {'+'.join(hit.found_by)}{_scores(hit) if args.explain else ''})[/]"
                  f"{heading}", highlight=False)
        for line in snippet_text(hit.snippet):
            out.print(line, highlight=False, soft_wrap=True)
        if hit.also_in:
            more = f" and {len(hit.also_in) - ALSO_IN_SHOWN} more" if len(hit.also_in) > ALSO_IN_SHOWN else ""
            out.print(f"    [dim]the same text is also in {safe(', '.join(place.label() for place in hit.also_in[:ALSO_IN_SHOWN]))}{more}[/]",
                      highlight=False)
    return 0


def _scores(hit) -> str:
    """`; vector 0.612, keyword 0.420, relevance 0.930` for --explain (a score a hit lacks is left out)."""
    parts = [(name, value) for name, value in (("vector", hit.vector_score), ("keyword", hit.keyword_score),
                                               ("relevance", hit.rerank_score)) if value is not None]
    return "; " + ", ".join(f"{name} {value:.3f}" for name, value in parts) if parts else ""


def _explain_judgement(result, err: Console, block_size: int) -> None:
    judged = result.rerank
    if judged is not None:
        notes = [judged.skipped] if judged.skipped else []
        if judged.unread:
            words = ", ".join(judged.unread[:3]) + (", ..." if len(judged.unread) > 3 else "")
            notes.append(f"the query names words it never read ({words}): no veto")
        note = f": {'; '.join(notes)}" if notes else ""
        err.print(f"[dim]relevance stage {safe(judged.engine)}: {judged.judged} judged in "
                  f"{judged.seconds * 1000:.0f} ms{safe(note)}[/]", highlight=False)
    setting = result.setting
    if setting is not None:
        if not setting.foreign:
            verdict = "the collection's own subject"
        elif setting.shuts(result.hits, block_size):
            verdict = "no hit the chat hook could inject names it, so it injects nothing"
        else:
            verdict = "a hit the chat hook could inject names it"
        err.print(f"[dim]set in {safe(setting.name)}: {setting.share:.2%} of passages say {safe(setting.word)!r}; "
                  f"{verdict}[/]", highlight=False)


def snippet_text(snippet: Snippet) -> list[Text]:
    """The snippet's lines for a terminal, the query's words in bold (control characters made visible)."""
    out = []
    for line, marks in snippet.lines():
        text, at = Text("    "), 0
        for start, end in marks:  # each piece made printable on its own, so escapes never shift a mark
            text.append(printable(line[at:start]))
            text.append(printable(line[start:end]), style="bold yellow")
            at = end
        text.append(printable(line[at:]))
        out.append(text)
    return out


def _human_size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def _state(row: dict) -> str:
    """One word or two for the status table: indexing, never, ok, 3 changed, or what is wrong."""
    if row.get("indexing"):
        return "indexing"
    if row["health"] != "ok":
        return row["health"]
    if "files" not in row:
        return "never"
    if not row.get("last_indexed"):
        return "unfinished"  # a first run cut short; the next `hermes kb index` resumes it
    changed = row.get("changed_on_disk")
    return f"{changed} changed" if changed else "ok"


def _age(last_indexed: str | None) -> str:
    """'5 min ago' from the status row's local timestamp: short enough for 80 columns."""
    if not last_indexed:
        return "-"
    try:
        seconds = max(0.0, time.time() - time.mktime(time.strptime(last_indexed, "%Y-%m-%d %H:%M:%S")))
    except ValueError:
        return last_indexed
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


STATUS_COLUMNS = ("name", "files", "chunks", "size", "indexed", "state")  # and root, which gets the width left
OPTIONAL_STATUS_COLUMNS = ("size", "indexed")  # give way, in this order, so the root keeps ROOT_MIN_WIDTH
ROOT_MIN_WIDTH = 24
NAME_MAX_WIDTH = 18
COLUMN_GAP = 2


def _status_cells(row: dict) -> dict[str, str]:
    """Every cell but the root."""
    name = printable(row["name"])
    name = name if cell_len(name) <= NAME_MAX_WIDTH else head_cells(name, NAME_MAX_WIDTH - 1) + "…"
    if "files" not in row:  # never indexed, being built, or an index that cannot be read (said below the table)
        return {"name": name, "files": "-", "chunks": "-", "size": "-", "indexed": "-", "state": row["state"]}
    indexed = row["files"] - row.get("files_with_errors", 0)
    return {"name": name, "files": str(indexed), "chunks": str(row["chunks"]), "size": _human_size(row["size_bytes"]),
            "indexed": _age(row.get("last_indexed")), "state": row["state"]}


def _status_table(rows: list[dict], width: int) -> Table:
    """Name, counts, state and root in the console's width: the root shortened in the middle, never cut."""
    cells = [_status_cells(row) for row in rows]
    widths = {column: max([len(column), *(cell_len(line[column]) for line in cells)]) for column in STATUS_COLUMNS}
    columns = list(STATUS_COLUMNS)

    def root_width() -> int:
        return width - sum(widths[c] for c in columns) - COLUMN_GAP * len(columns)

    for optional in OPTIONAL_STATUS_COLUMNS:
        if root_width() < ROOT_MIN_WIDTH:
            columns.remove(optional)
    table = Table(title="Knowledgebase", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    for column in (*columns, "root"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("files", "chunks", "size") else "left")
    for row, line in zip(rows, cells):
        root = short_path(printable(row.get("root") or "-"), max(ROOT_MIN_WIDTH // 2, root_width()))
        table.add_row(*(escape(line[column]) for column in columns), escape(root))
    return table


def _status(kb: KnowledgeBase, args, out: Console, err: Console) -> int:
    rows = kb.status(args.target, host_paths=args.host_paths)  # a gateway chat's members: no folder of the host
    for row in rows:
        row["state"] = _state(row)
    if args.json:
        _emit_json(out, rows)
        return 0
    table = _status_table(rows, out.width)
    out.print(table)
    models = {row["model"] for row in rows if row.get("model")}
    if len(models) == 1:
        out.print(f"model: {safe(models.pop())}")
    elif models:
        out.print("models: " + "; ".join(f"{safe(r['name'])}: {safe(r['model'])}" for r in rows if r.get("model")))
    if rows:
        out.print(f"store: {safe(rows[0]['driver'])}")
        if rows[0].get("ocr_reader"):
            out.print(f"ocr: {safe(rows[0]['ocr_reader'])}")
    for row in rows:
        count = row.get("files_with_errors", 0) - row.get("waiting_for_ocr", 0)  # those are said below
        if count > 0:
            reasons = "; ".join(f"{skip['reason']}" + (f" ({skip['files']} files)" if skip["files"] > 1 else "")
                                for skip in row.get("skipped", []))
            out.print(f"note: {count} file{'s' if count > 1 else ''} of {safe(row['name'])} could not be indexed: "
                      f"{safe(reasons)}. `hermes kb index {safe(row['name'])} --full` lists "
                      f"{'them' if count > 1 else 'it'}.", highlight=False)
        if row.get("problem") and row["state"] == "indexing":
            continue  # not an orphan: its first run is under way
        if row.get("problem"):
            out.print(f"[yellow]warning:[/] {safe(row['problem'])}")
        if row.get("vector_search", "ok") != "ok":
            out.print(f"[yellow]warning:[/] {safe(row['vector_search'])}")
        if row.get("ocr"):
            out.print(f"[yellow]note:[/] {safe(row['ocr'])}")
        if row.get("model_variant"):
            out.print(f"note: {safe(row['model_variant'])}")
        if row.get("indexing"):
            continue  # the caches are rebuilt when the run under way ends: nothing for the user to run
        if row.get("vector_search", "ok") == "ok" and row.get("vector_cache") == "stale" and row.get("vectors"):
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


def _clear(kb: KnowledgeBase, args, out: Console, err: Console, confirm: Callable[[str], bool],
           foreground: bool = True) -> int:
    names = [name for name, _ in kb.clear_targets(args.target)]
    if not args.target and not foreground and len(names) > 1:
        # A slash command cannot be confirmed where it is typed (a gateway chat, the REPL's --yes): one
        # name at a time there; every index at once only from a terminal.
        raise KnowledgebaseError(f"Name the index to clear ({', '.join(names)}): /kb clear NAME. Clearing every index "
                                 f"at once is done from a terminal: hermes kb clear.")
    try:
        confirmed = args.yes or confirm(f"Delete the index of {printable(', '.join(names))}? Your files are not touched. [y/N] ")
    except NoTerminal:
        raise KnowledgebaseError(f"Not clearing {', '.join(names)} without confirmation: stdin is not a terminal; "
                                 f"add --yes.") from None
    if not confirmed:
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
        for summary in kb.index(str(directory.path), progress=progress_for(err, args.json)):
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
    elif summary.added or summary.changed or summary.removed or summary.skipped or not summary.unchanged:
        skipped = f", {len(summary.skipped)} skipped" if summary.skipped else ""
        out.print(f"{time.strftime('%H:%M:%S')} [bold]{safe(summary.directory)}[/]: {summary.added} added, "
                  f"{summary.changed} changed, {summary.removed} removed{skipped} ({summary.seconds:.2f} s)")
        _print_skipped(summary, out)


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


class NoTerminal(Exception):
    """There is no one to ask: stdin is not a terminal."""


def confirm_at_terminal(prompt: str) -> bool:
    """Yes only from a person typing y at a terminal; with no terminal, NoTerminal, so the caller can say
    what to add (--yes) instead of a bare no."""
    if not sys.stdin.isatty():
        raise NoTerminal()
    try:
        return input(printable(prompt)).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def ask_terminal(prompt: str) -> bool:
    """Yes only from a person typing y at a terminal; piped input never confirms anything."""
    try:
        return confirm_at_terminal(prompt)
    except NoTerminal:
        return False


def _with_dash_hint(message: str, argv: list[str], parser: argparse.ArgumentParser, prog: str) -> str:
    """A search for text starting with '-' reads as an unknown option: say how to search for it. A
    misspelt verb gets the verb it was probably meant to be."""
    verbs = parser._subparsers._group_actions[0].choices  # argparse keeps no public handle on them
    if argv and argv[0] not in verbs and not argv[0].startswith("-"):
        close = difflib.get_close_matches(argv[0], list(verbs), n=1, cutoff=0.6)
        if close:
            first, _, usage = message.partition("\n")
            return f"{first}; did you mean {close[0]}?\n{usage}"
    if not argv or argv[0] != "search" or "--" in argv:
        return message
    search = verbs["search"]
    options, words, tokens = [], [], iter(argv[1:])
    for token in tokens:
        action = search._option_string_actions.get(token.split("=", 1)[0])
        if action is None:
            words.append(token)
            continue
        options.append(token)
        if action.nargs is None and "=" not in token:  # the option's value follows it
            options.extend(value for value in [next(tokens, None)] if value is not None)
    if not any(word.startswith("-") for word in words):
        return message
    first, _, usage = message.partition("\n")
    for word in (w for w in words if w.startswith("--")):  # --directory for --dir: a misspelt option, not a query
        close = difflib.get_close_matches(word.split("=", 1)[0], list(search._option_string_actions), n=1, cutoff=0.6)
        if close:
            return f"{first}; did you mean {close[0]}?\n{usage}"
    suggestion = " ".join([prog, "search", *map(shlex.quote, options), "--", *map(shlex.quote, words)])
    return f"{first}; to search for text starting with '-', put -- before it: {suggestion}\n{usage}"


TERMINAL_ONLY = ("watch", "mcp", "token", "eval")  # refused, or pointless, inside a chat


def _chat_help(parser: argparse.ArgumentParser, prog: str, host_verbs: dict[str, str]) -> str:
    """Bare `/kb` in a chat: the verbs that work there, one line each (the terminal's help lists all),
    with the verbs the host answers itself (`host_verbs`: Hermes's plugin has `stop`)."""
    verbs = parser._subparsers._group_actions[0]  # argparse keeps no public handle on the subparsers
    helps = {action.dest: action.help for action in verbs._choices_actions}
    lines = [f"{prog} VERB ...  (in the terminal, `hermes kb` also has {', '.join(TERMINAL_ONLY)})"]
    lines += [f"  {name:<8} {helps.get(name, '')}" for name in verbs.choices if name not in TERMINAL_ONLY]
    lines += [f"  {name:<8} {what}" for name, what in host_verbs.items()]
    return "\n".join(lines)


def run_kb(argv: list[str], kb_factory: Callable[[], KnowledgeBase], out: Console, err: Console,
           confirm: Callable[[str], bool] = confirm_at_terminal, prog: str = "hermes kb", foreground: bool = True,
           progress: Callable[[], Progress] | None = None, watch_hint: str = CHAT_WATCH_HINT,
           parsed: argparse.Namespace | None = None, host_paths: bool = True,
           host_verbs: dict[str, str] | None = None) -> int:
    """Parse and run one kb verb; every user error becomes one sentence and exit code 1 (2 for usage).
    `progress` makes an index run's progress display (default: one that suits err). `parsed`: the line
    as a host already parsed and judged it (parse_slash), run as it was judged, never read again."""
    parser = build_parser(prog)
    try:
        args = parsed if parsed is not None else parser.parse_args(argv)
        if args.verb == "search" and not (args.query or args.lex or args.vec or args.hyde):
            args.search_parser.error("a query is required (or --lex/--vec/--hyde searches)")
    except HelpRequested as shown:
        out.print(safe(str(shown)), highlight=False)
        return 0
    except UsageError as exc:
        err.print(safe(_with_dash_hint(str(exc), argv, parser, prog)))
        return 2
    if args.verb is None:
        out.print(safe(parser.format_help() if foreground else _chat_help(parser, prog, host_verbs or {})))
        return 0 if not argv else 2
    args.progress, args.host_paths = progress, host_paths
    if args.verb == "watch" and not foreground:
        err.print(safe(watch_hint))
        return 1
    handlers = {"index": _index, "search": _search, "status": _status, "eval": _eval, "watch": _watch, "doctor": _doctor,
                "clear": lambda kb, a, o, e: _clear(kb, a, o, e, confirm, foreground),
                "mcp": lambda kb, a, o, e: run_mcp(kb, a, o, e, foreground),
                "token": lambda kb, a, o, e: run_token(kb, a, o, e, foreground)}
    try:
        return handlers[args.verb](kb_factory(), args, out, err)
    except KeyboardInterrupt:  # Ctrl-C: one line, under Hermes's CLI too (it printed a 30-line traceback)
        err.print(INTERRUPTED.get(args.verb, "interrupted"), markup=False, highlight=False)
        return 130
    except USER_ERRORS as exc:
        if getattr(args, "json", False):
            _emit_json(out, {"error": str(exc)})
        else:
            err.print(f"[red]error:[/] {safe(str(exc))}")
        return 1


def parse_slash(line: str) -> argparse.Namespace | None:
    """A `/kb` line as run_slash_kb will read it; None when it does not parse or asks for help (what it
    then prints is left to run_slash_kb). Hosts deciding anything about a line decide on this."""
    try:
        return build_parser("/kb").parse_args(shlex.split(line))
    except (ValueError, UsageError, HelpRequested):
        return None


def run_slash_kb(line: str, kb_factory: Callable[[], KnowledgeBase], out: Console, err: Console,
                 confirm: Callable[[str], bool] = confirm_at_terminal, **options) -> int:
    """`/kb index docs` in the chat runs exactly what `hermes kb index docs` runs."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        err.print(f"[red]error:[/] {safe(str(exc))}")
        return 2
    return run_kb(argv, kb_factory, out, err, confirm, prog="/kb", foreground=False, **options)
