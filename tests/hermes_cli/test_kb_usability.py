"""A new user's findings, each met the way they met it: `hermes kb ...` through run_kb (stub embedder), or
the real command in a subprocess where no model is needed."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prompt_toolkit.document import Document
from rich.console import Console

from hermes_kb.agent.knowledgebase.kinds import registry
from hermes_kb.hermes_cli import index_progress
from hermes_kb.hermes_cli.commands import CommandRegistry, SlashCommand
from hermes_kb.hermes_cli.index_progress import IndexingEstimate
from hermes_kb.hermes_cli.kb_command import VERBS, run_kb, run_slash_kb
from hermes_kb.hermes_cli.terminal import short_path

from ..conftest import StubEmbedder

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4


def consoles(width: int = 400, terminal: bool = False):
    return (Console(record=True, width=width, force_terminal=terminal),
            Console(record=True, width=width, force_terminal=terminal))


def kb_cli(kb, *argv, width: int = 400, **kwargs):
    out, err = consoles(width)
    code = run_kb(list(argv), lambda: kb, out, err, **kwargs)
    return code, out.export_text(), err.export_text()


def hermes(*args, home: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "hermes_kb.hermes_cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120, **kwargs)


def paragraphs(n: int, tag: str) -> str:
    return "\n\n".join(f"## Part {i}\n\n" + " ".join(f"{tag}{i}w{j}" for j in range(40)) for i in range(n))


class SlowEmbedder(StubEmbedder):
    """Each embedding call takes a while, as a real model on two cores does."""

    def __init__(self, delay: float):
        super().__init__()
        self.delay = delay

    def embed_documents(self, texts):
        time.sleep(self.delay)
        return super().embed_documents(texts)


# --- 8: progress moves with chunks, the estimate is honest, and piped output hears about it ---------

def test_estimate_is_chunks_left_over_the_measured_rate():
    now = [0.0]
    estimate = IndexingEstimate("docs", total_files=4, total_bytes=1000, clock=lambda: now[0])
    assert estimate.seconds_left() is None and "estimating" in estimate.line()
    estimate.advance(chunked_bytes=100, chunks_planned=50)  # one file chunked: about 500 chunks in all
    assert estimate.chunks_expected() == 500
    estimate.advance(chunks=10)  # the first batch, after the model loaded: the rate starts here
    now[0] = 10.0
    estimate.advance(chunks=60)
    assert estimate.chunks_per_second() == pytest.approx(6.0)
    assert estimate.seconds_left() == pytest.approx((500 - 70) / 6.0)
    assert estimate.line() == "0/4 files, 70 chunks embedded, 6.0 chunks/s, ~1 min left"
    now[0] = 70.0  # a minute with nothing embedded: the rate falls, the time left grows
    assert estimate.seconds_left() > (500 - 70) / 6.0


def test_one_big_file_moves_the_progress_lines_while_it_embeds(tree, make_kb, monkeypatch):
    monkeypatch.setattr(index_progress, "PROGRESS_EVERY_S", 0.0)
    root = tree({"big.md": paragraphs(200, "alpha"), "small.md": "# Small\n\nbeta gamma\n"})
    code, out, err = kb_cli(make_kb(root), "index", "docs")
    assert code == 0 and "docs: 2 added" in out
    # keyword first: both files are written (and keyword-searchable) before the big one's vectors
    while_big = [line for line in err.splitlines() if line.startswith("docs: 2/2 files, ")]
    counts = [int(line.split(", ")[1].split()[0]) for line in while_big]
    assert counts == sorted(counts) and len(set(counts)) >= 3 and counts[-1] >= 100  # chunks moved after the files
    assert "left" in err.splitlines()[-1]


def test_json_progress_events_go_to_stderr_one_object_per_line(tree, make_kb, monkeypatch):
    monkeypatch.setattr(index_progress, "PROGRESS_EVERY_S", 0.0)
    root = tree({"big.md": paragraphs(100, "delta"), "b.md": "# B\n\nepsilon\n"})
    code, out, err = kb_cli(make_kb(root), "index", "docs", "--json")
    assert code == 0 and json.loads(out)[0]["added"] == 2
    events = [json.loads(line) for line in err.splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "finish"
    assert {e["event"] for e in events[1:-1]} == {"progress"}
    assert events[-1]["files_done"] == events[-1]["files_total"] == 2
    assert events[-1]["chunks_embedded"] == events[-1]["chunks_expected"] == json.loads(out)[0]["chunks_embedded"]


def test_a_terminal_gets_a_bar_counting_chunks(tree, make_kb):
    root = tree({"big.md": paragraphs(400, "zeta")})
    kb = make_kb(root)
    seen = []
    original = index_progress.RichProgress.advance

    def spy(self, **counts):
        original(self, **counts)
        task = self.progress.tasks[0]
        seen.append((task.completed, task.total))

    index_progress.RichProgress.advance = spy
    try:
        out, err = consoles(terminal=True)
        assert run_kb(["index", "docs"], lambda: kb, out, err) == 0
    finally:
        index_progress.RichProgress.advance = original
    assert seen[-1][0] == seen[-1][1] > 0  # the bar ends full, counted in chunks
    assert len({completed for completed, _ in seen}) > 2  # and moved while the one file embedded


# --- 9: a skipped file is reported once and counted once -------------------------------------------

def test_a_binary_file_is_reported_skipped_once_and_not_counted_as_a_file(tree, make_kb):
    root = tree({"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n", "blob.bin": PNG})
    kb = make_kb(root, max_file_bytes=5000)
    (root / "huge.txt").write_text("x " * 4000)
    code, out, _ = kb_cli(kb, "index", "docs")
    assert "2 added, 0 changed, 0 removed, 0 unchanged, 2 skipped" in out
    assert "skipped blob.bin: binary file" in out and "skipped huge.txt: larger than max_file_bytes" in out
    code, out, _ = kb_cli(kb, "index", "docs")
    assert "0 added, 0 changed, 0 removed, 3 unchanged, 0 skipped" in out and "skipped blob.bin" not in out
    summary = json.loads(kb_cli(kb, "index", "docs", "--json")[1])[0]
    assert summary["skipped"] == [] and summary["unchanged"] == 3
    (root / "blob.bin").write_bytes(PNG + b"changed")
    code, out, _ = kb_cli(kb, "index", "docs")
    assert "1 changed" not in out and "1 skipped" in out and "skipped blob.bin" in out  # changed: said again
    _, status, _ = kb_cli(kb, "status")
    row = next(line for line in status.splitlines() if line.startswith("docs"))
    assert row.split()[1] == "2"  # files indexed: the binary file is not one of them
    assert "1 file of docs could not be indexed" in status


# --- 10: help once, on stdout, exit 0 ---------------------------------------------------------------

@pytest.mark.parametrize("verb", [*VERBS, "watch", "mcp"])
def test_help_of_every_verb_prints_once_on_stdout_and_exits_0(verb, make_kb):
    code, out, err = kb_cli(make_kb(), verb, "--help")
    assert code == 0 and err == ""
    assert out.count(f"usage: hermes kb {verb}") == 1


def test_hermes_kb_search_help_as_a_user_runs_it(tmp_path):
    result = hermes("kb", "search", "--help", home=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.count("usage: hermes kb search") == 1 and "--kind" in result.stdout


# --- 11: a query starting with '-' ------------------------------------------------------------------

def test_a_dash_query_says_how_and_works_after_double_dash(tree, make_kb):
    root = tree({"uv.md": "# uv\n\nPass --no-install-project to skip installing the project itself.\n"})
    kb = make_kb(root)
    kb.index()
    code, _, err = kb_cli(kb, "search", "--no-install-project")
    assert code == 2
    assert ("unrecognized arguments: --no-install-project; to search for text starting with '-', put -- before "
            "it: hermes kb search -- --no-install-project") in err
    code, _, err = kb_cli(kb, "search", "--mode", "keyword", "skip", "--no-install-project")
    assert code == 2 and "hermes kb search --mode keyword -- skip --no-install-project" in err
    code, out, _ = kb_cli(kb, "search", "--mode", "keyword", "--", "--no-install-project")
    assert code == 0 and "[S1] docs:uv.md" in out
    code, _, err = kb_cli(kb, "search", "skip", "--directory", "docs")
    assert code == 2 and "unrecognized arguments: --directory docs; did you mean --dir?" in " ".join(err.split())


def test_a_dash_query_in_the_chat_says_how_with_the_slash_command(tree, make_kb):
    kb = make_kb(tree({"a.md": "alpha"}))
    out, err = consoles()
    assert run_slash_kb("search --no-install-project", lambda: kb, out, err) == 2
    assert "put -- before it: /kb search -- --no-install-project" in err.export_text()


# --- 12: unknown kinds, and clear without a terminal ------------------------------------------------

def test_an_unknown_kind_is_refused_with_the_kinds(tree, make_kb):
    kb = make_kb(tree({"a.md": "# A\n\nalpha apples\n"}))
    kb.index()
    code, _, err = kb_cli(kb, "search", "alpha", "--kind", "md")
    assert code == 1 and f"error: Unknown kind 'md'; the kinds are {', '.join(registry.NAMES)}." in err
    assert "markdown" in registry.NAMES and "python" in registry.NAMES and "pdf" in registry.NAMES
    code, out, _ = kb_cli(kb, "search", "alpha", "--kind", "markdown", "--mode", "keyword")
    assert code == 0 and "docs:a.md" in out


def test_clear_without_yes_and_without_a_terminal_says_add_yes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    result = hermes("kb", "clear", str(folder), home=tmp_path / "home", stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: Not clearing notes without confirmation: stdin is not a terminal; "
                                     "add --yes.")


def test_a_slash_clear_without_a_name_clears_nothing_and_asks_for_one(tree, tmp_path, make_kb):
    """`/kb clear --yes` with no name cleared every index (issue #52, 5): nothing can be confirmed in a
    slash command, so there it takes one name; the terminal's `hermes kb clear` still clears all."""
    kb = make_kb(tree({"a.md": "alpha"}, tmp_path / "one"), tree({"b.md": "beta"}, tmp_path / "two"))
    kb.index()
    out, err = consoles()
    assert run_slash_kb("clear --yes", lambda: kb, out, err) == 1
    assert "Name the index to clear (one, two): /kb clear NAME" in err.export_text()
    assert all(row["indexed"] for row in kb.status())
    out, err = consoles()
    assert run_slash_kb("clear one --yes", lambda: kb, out, err) == 0 and "Cleared: one" in out.export_text()
    assert kb_cli(kb, "clear", "--yes")[0] == 0 and not any(row["indexed"] for row in kb.status())


def test_a_misspelt_verb_or_directory_gets_what_was_probably_meant(tree, make_kb):
    kb = make_kb(tree({"a.md": "# A\n\nalpha apples\n"}))
    kb.index()
    code, _, err = kb_cli(kb, "serch", "alpha")
    assert code == 2 and "did you mean search?" in err
    code, _, err = kb_cli(kb, "search", "alpha", "--dir", "doc")
    assert code == 1 and "did you mean docs?" in err
    code, _, err = kb_cli(kb, "search", "alpha", "--dir", "zzz")
    assert code == 1 and "(the directories: docs)" in err


class InterruptedEmbedder(StubEmbedder):
    """Ctrl-C arrives while the second batch of vectors is being made."""

    def embed_documents(self, texts):
        if len(self.calls) == 1:  # StubEmbedder keeps each batch's size in `calls`
            raise KeyboardInterrupt
        return super().embed_documents(texts)


def test_ctrl_c_says_what_it_left_and_the_next_run_calls_unchanged_files_unchanged(tree, make_kb):
    """Issue #52, 3: the resumed run reported `0 added, 949 changed` when no file had changed."""
    root = tree({f"n{i:03}.md": f"# Note {i}\n\nThe harbour crane lifts container {i}.\n" for i in range(300)})
    code, _, err = kb_cli(make_kb(root, embedder=InterruptedEmbedder()), "index")
    assert code == 130 and "interrupted: every file written so far is kept and searchable" in err
    assert "Traceback" not in err
    code, out, _ = kb_cli(make_kb(root), "index")
    assert code == 0 and " 0 changed, 0 removed, " in out  # the files it never reached are added, as they should be
    assert "finished after an interrupted run)" in out


def test_bare_slash_kb_lists_only_what_works_in_a_chat(tree, make_kb):
    kb = make_kb(tree({"a.md": "alpha"}))
    out, err = consoles()
    assert run_slash_kb("", lambda: kb, out, err) == 0
    listed = [line.split()[0] for line in out.export_text().splitlines()[1:] if line.strip()]
    assert listed == ["index", "search", "status", "clear", "doctor"]
    code, shown, _ = kb_cli(kb)
    assert code == 0 and "watch" in shown and "mcp" in shown  # the terminal lists every verb


# --- 13: status at 80 and 120 columns, and an index being built -------------------------------------

@pytest.mark.parametrize("width", [80, 120])
def test_status_fits_the_terminal_and_shows_the_model_once(width, tmp_path, make_kb, monkeypatch):
    home = tmp_path / "home" / "user"
    monkeypatch.setenv("HOME", str(home))
    roots = []
    for name in ("notes", "research-papers-archive"):
        root = home / "projects" / "clients" / "acme-corporation" / "knowledge" / name
        root.mkdir(parents=True)
        (root / "a.md").write_text(f"# {name}\n\nsome words about {name}\n")
        roots.append(root)
    kb = make_kb(*roots)
    kb.index()
    code, out, _ = kb_cli(kb, "status", width=width)
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    header = lines[1].split()
    assert [c for c in header if c in ("name", "files", "chunks", "state", "root")] == \
        ["name", "files", "chunks", "state", "root"]
    rows = [line for line in lines if line.startswith(("notes", "research"))]
    assert len(rows) == 2 and all(" ok " in row for row in rows)
    assert [row.split()[1:3] for row in rows] == [["1", "1"], ["1", "1"]]  # files and chunks, never cut
    roots = [row.split()[-1] for row in rows]
    assert all(root.startswith("~/") for root in roots) and roots[1].endswith("/research-papers-archive")
    if width == 120:
        assert header == ["name", "files", "chunks", "size", "indexed", "state", "root"]
        assert roots[0] == "~/projects/clients/acme-corporation/knowledge/notes"  # room enough: not shortened
    else:
        assert roots[0].startswith("~/…/") and roots[0].endswith("/notes")
    assert out.count("stub (test, 64d)") == 1 and "model: stub (test, 64d)" in out


def test_short_path_keeps_home_start_and_end():
    assert short_path("/home/u/a/b/c/docs", 80, home="/home/u") == "~/a/b/c/docs"
    assert short_path("/home/u/a/b/c/docs", 10, home="/home/u") == "~/…/c/docs"
    assert short_path("/srv/data/very/long/path/docs", 20, home="/home/u") == "/srv/…/path/docs"
    assert len(short_path("/srv/" + "x" * 50, 12, home="/home/u")) == 12


def test_chinese_names_and_paths_fit_the_status_table_by_terminal_cells(tree, make_kb):
    from rich.cells import cell_len

    assert cell_len(short_path("/srv/" + "资料" * 20 + "/部署指南", 12, home="/home/u")) <= 12
    root = tree({"指南.md": "# 部署\n\n回滚步骤。\n"}, root=tree({}).parent / ("知识库文档目录" * 3))
    kb = make_kb(root)
    kb.index()
    _, out, _ = kb_cli(kb, "status", width=80)
    assert all(cell_len(line) <= 80 for line in out.splitlines())
    row = next(line for line in out.splitlines() if "知识库" in line)
    assert "…" in row and "ok" in row


def test_an_index_built_for_the_first_time_shows_as_indexing(tree, make_kb):
    root = tree({"a.md": "# A\n\nalpha\n"}, root=tree({}).parent / "fresh")
    looked, embedding = threading.Event(), threading.Event()

    class WaitingEmbedder(StubEmbedder):
        def embed_documents(self, texts):
            embedding.set()  # the run is under way: its file written, its lock held
            looked.wait(30)  # and stays so until status has been read
            return super().embed_documents(texts)

    kb = make_kb(embedder=WaitingEmbedder())
    runner = threading.Thread(target=lambda: kb.index(str(root)), daemon=True)
    runner.start()
    assert embedding.wait(20)
    try:
        code, out, _ = kb_cli(kb, "status", width=80)
        states = [row["state"] for row in json.loads(kb_cli(kb, "status", "--json")[1])]
    finally:
        looked.set()
        runner.join(timeout=30)
    assert code == 0 and "indexing" in out and "stopped before it wrote a file" not in out
    assert states == ["indexing"]
    assert [row["state"] for row in json.loads(kb_cli(kb, "status", "--json")[1])] == ["ok"]  # done: its own row


# --- 14: snippets keep code and lists readable; PDF hits say the page; chat completion --------------

def test_code_hits_keep_their_lines_and_prose_stays_flat(tree, make_kb):
    code_text = ("def install(name, skip=False):\n    \"\"\"Install unless told not to.\"\"\"\n    if skip:\n"
                 "        return None\n    for step in ('resolve', 'fetch', 'build'):\n        run(step, name)\n"
                 "    log(name)\n    return name\n")
    root = tree({"setup.py": code_text, "notes.md": "# Notes\n\nWe install\nthe tool with a long\nprose paragraph.\n"})
    kb = make_kb(root)
    kb.index()
    _, out, _ = kb_cli(kb, "search", "install", "--mode", "keyword", "--kind", "python")
    assert "    def install(name, skip=False):\n" in out and "        if skip:\n" in out
    assert "            return None\n" in out and out.rstrip().endswith("…")  # six lines, then more
    _, out, _ = kb_cli(kb, "search", "install", "--mode", "keyword", "--kind", "markdown")
    assert "We install the tool with a long prose paragraph." in out


def test_a_word_at_the_end_of_a_long_paragraph_is_shown_and_marked(tree, make_kb):
    filler = " ".join(f"plain{i} words" for i in range(120))
    kb = make_kb(tree({"notes.md": f"# Notes\n\n## Deploying\n\n{filler}. The **rollback** needs a ticket.\n"}))
    kb.index()
    _, out, _ = kb_cli(kb, "search", "rollback", "--mode", "keyword")
    assert "The rollback needs a ticket." in out and "##" not in out and "**" not in out
    code, out, _ = kb_cli(kb, "search", "rollback", "--mode", "keyword", "--json")
    snippet = json.loads(out)["hits"][0]["snippet"]
    assert [snippet["text"][s:e] for s, e in snippet["highlights"]] == ["rollback"]


def test_pdf_hits_show_the_page_not_line_numbers(tree, make_kb):
    import pymupdf

    pdf = pymupdf.open()
    for n in range(3):
        words = [f"Page {n + 1} talks about zebra{n} migrations"] + [f"herd{n} grazing line {i}" for i in range(40)]
        pdf.new_page().insert_text((72, 72), "\n".join(words), fontsize=8)
    root = tree({"animals.pdf": pdf.tobytes()})
    kb = make_kb(root)
    kb.index()
    _, out, _ = kb_cli(kb, "search", "zebra2", "--mode", "keyword")
    assert "[S1] docs:animals.pdf page 3  (score" in out


def test_chat_completion_of_directory_names_and_index_paths(tmp_path):
    (tmp_path / "projects" / "alpha-notes").mkdir(parents=True)
    registry = CommandRegistry()
    registry.register(SlashCommand("kb", "knowledgebase", lambda rest: True, "", ("index", "search", "status")))
    completer = registry.completer(directory_names=lambda: ["notes", "docs", "papers"])

    def complete(text):
        return sorted(c.text for c in completer.get_completions(Document(text), None))

    assert complete("/kb search deploy --dir ") == ["docs", "notes", "papers"]
    assert complete("/kb search deploy --dir p") == ["papers"]
    assert complete("/kb status n") == ["notes"]
    assert complete(f"/kb index {tmp_path}/projects/al") == ["pha-notes"]
    assert complete("/kb search deploy ") == []  # a query is not completed
    assert sorted(c.text for c in registry.completer().get_completions(Document("/kb search x --dir "), None)) == []


def test_watch_says_a_skipped_image_once_not_on_every_sync(tree, make_kb):
    root = tree({"a.md": "# A\n\nalpha\n", "photo.png": PNG})
    kb = make_kb(root)
    out, err = consoles()
    runner = threading.Thread(target=lambda: run_kb(["watch", "docs", "--debounce", "0.2"], lambda: kb, out, err),
                              daemon=True)
    runner.start()

    def wait_for(text: str, times: int = 1) -> str:
        deadline = time.time() + 20
        while out.export_text(clear=False).count(text) < times and time.time() < deadline:
            time.sleep(0.05)
        return out.export_text(clear=False)

    assert "skipped photo.png: " in wait_for("Watching docs")
    (root / "b.md").write_text("# B\n\nbeta\n")
    wait_for("docs: 1 added", times=2)  # the first run added a.md
    (root / "drawing.png").write_bytes(PNG + b"2")
    text = wait_for("skipped drawing.png: ")
    assert "0 added, 0 changed, 0 removed, 1 skipped" in text  # a new image alone is said, not silent
    (root / "c.md").write_text("# C\n\ngamma\n")
    text = wait_for("docs: 1 added", times=3)
    assert text.count("skipped photo.png") == 1 and text.count("skipped drawing.png") == 1


def test_a_word_no_chunk_holds_gets_meaning_only_hits_with_a_warning(tree, make_kb):
    kb = make_kb(tree({"a.md": "# Giraffes\n\nTall animals eat leaves.\n"}), min_score=0.0)
    kb.index()
    code, out, err = kb_cli(kb, "search", "okapi")
    assert code == 0 and "[S1]" in out
    assert "No indexed text contains okapi: these hits are only close in meaning." in " ".join(err.split())
    _, _, err = kb_cli(kb, "search", "giraffes")
    assert "No indexed text" not in err
