"""End-to-end first index of real corpora: files/s, chunks/s, time to searchable and peak RSS.

Each corpus is indexed from scratch by `hermes kb index --json` in a new
process with an empty HERMES_HOME, so model loading, scanning, chunking,
embedding, writing and the vector cache are all counted, and the peak RSS is
that process's own high-water mark (VmHWM, sampled until it exits). While it
runs, the index file is read (read-only, as another process's search would)
every 0.2 s: "first file" is when the first file could be found, "all files"
when every file the run indexes could be found by keyword search.

    python benchmarks/first_index.py                  # SciFact as 5,183 files, and this repository
    python benchmarks/first_index.py --corpus repo    # only this repository
    python benchmarks/first_index.py --baseline dc031bb --runtimes onnxruntime,auto

`--runtimes` indexes each corpus once per embedding runtime (onnxruntime was
the only one before OpenVINO); `--baseline REV` also runs that commit's code
(from a temporary git worktree, with its own defaults) in the same run, as the
"before" row. The figures also go to docs/figures/first_index.json, which
benchmarks/chart.py draws.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.evaluation import load_dataset, materialise  # noqa: E402
from benchmarks._report import peak_rss_mb, report, save_figures  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def files_written(home: Path) -> int:
    """Files with their chunks in the index now, as a concurrent reader sees them."""
    indexes = list((home / "knowledgebase" / "indexes").glob("*.sqlite"))
    if not indexes:
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{indexes[0]}?mode=ro", uri=True, timeout=1)) as conn:
            return conn.execute("SELECT COUNT(*) FROM files WHERE error IS NULL").fetchone()[0]
    except sqlite3.Error:
        return 0


def index_in_child(folder: Path, home: Path, code: Path = REPO, runtime: str | None = None
                   ) -> tuple[dict, float, float, float | None, float | None]:
    """(summary, wall seconds, peak RSS in MB, seconds to the first / to every file written) of one
    `hermes kb index` process running the code at `code`."""
    home.mkdir(parents=True)
    if runtime:
        (home / "config.yaml").write_text(json.dumps({"knowledgebase": {"embedding_model": {"runtime": runtime}}}))
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(code)}
    started = time.perf_counter()
    samples: list[tuple[float, int]] = []
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen([sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb", "index", str(folder), "--json"],
                                 env=env, cwd=code, stdout=stdout, stderr=stderr)
        peak = 0.0
        while child.poll() is None:  # VmHWM only grows; the last reading before exit is the peak
            with contextlib.suppress(OSError):
                peak = max(peak, peak_rss_mb(child.pid))
            samples.append((time.perf_counter() - started, files_written(home)))
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        stdout.seek(0)
        stderr.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"indexing {folder} failed: {stderr.read().decode()[-2000:]}")
        summary = json.loads(stdout.read())[0]
    first = next((t for t, n in samples if n > 0), None)
    every = next((t for t, n in samples if n >= summary["added"]), None)
    return summary, seconds, peak, first, every


@contextlib.contextmanager
def checkout(revision: str, scratch: Path):
    """That commit's tree in a temporary git worktree."""
    where = scratch / f"code-{revision}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), revision],
                   check=True, capture_output=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=("all", "scifact", "repo"), default="all")
    parser.add_argument("--runtimes", default="auto", help="comma-separated embedding_model.runtime values")
    parser.add_argument("--baseline", metavar="REV", help="also index with this commit's code, as the before row")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    figures = []
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        corpora = []
        if args.corpus in ("all", "repo"):
            corpora.append(("this repository", REPO))
        if args.corpus in ("all", "scifact"):
            folder = Path(scratch) / "scifact"
            materialise(load_dataset(DEFAULT_DATASET, "test"), folder)
            corpora.append(("SciFact corpus", folder))
        systems = [(f"{runtime} runtime", REPO, runtime) for runtime in args.runtimes.split(",")]
        if args.baseline:
            systems.insert(0, (f"before ({args.baseline})", stack.enter_context(checkout(args.baseline, Path(scratch))), None))
        for label, folder in corpora:
            for system, code, runtime in systems:
                home = Path(scratch) / f"home-{len(figures)}"
                summary, seconds, peak, first, every = index_in_child(folder, home, code, runtime)
                figures.append({"corpus": label, "system": system, "files": summary["added"],
                                "chunks": summary["chunks_embedded"] + summary["chunks_reused"], "seconds": seconds,
                                "first_file_s": first, "all_files_s": every, "peak_rss_mb": peak})
    rows = [[f["corpus"], f["system"], f["files"], f["chunks"], f"{f['seconds']:.0f}", f"{f['files'] / f['seconds']:.1f}",
             f"{f['chunks'] / f['seconds']:.1f}", "–" if f["first_file_s"] is None else f"{f['first_file_s']:.1f}",
             "–" if f["all_files_s"] is None else f"{f['all_files_s']:.1f}", f"{f['peak_rss_mb']:.0f}"] for f in figures]
    report("First index from scratch (new process, model load included)",
           ["corpus", "code", "files", "chunks", "wall s", "files/s", "chunks/s", "keyword-searchable: first file s",
            "all files s", "peak RSS MB"], rows, write=not args.no_write)
    if not args.no_write:
        save_figures("first_index", figures)


if __name__ == "__main__":
    main()
