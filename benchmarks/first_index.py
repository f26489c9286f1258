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
    python benchmarks/first_index.py --corpus scifact600 --plain   # 600 abstracts, beside plain fastembed
    python benchmarks/first_index.py --corpus scifact600 --plain --runtimes auto:off,auto   # both variants

`--plain` adds the peers' path on the same files in the same run: a new process
that imports fastembed, loads the same offline model (onnxruntime), reads every
file, sorts the texts by length and embeds them in batches of 64 (fastembed
truncates each at 256 word pieces); "vs plain" is its wall time over ours.

`--runtimes` indexes each corpus once per embedding runtime (onnxruntime was
the only one before OpenVINO), `auto:off` with int8 activations off (the
variant before them, on a CPU where `auto` chooses them); `--baseline REV` also runs that commit's code
(from a temporary git worktree, with its own defaults) in the same run, as the
"before" row. The figures of a run over every corpus (the default
`--corpus all`) also go to docs/figures/first_index.json, which benchmarks/chart.py draws.
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


PLAIN_FASTEMBED = """
import os, sys, time
from pathlib import Path
from fastembed import TextEmbedding
from hermes_kb.agent.knowledgebase.embeddings import pip_model_dir
model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(pip_model_dir(Path(sys.argv[2]))),
                      threads=os.cpu_count())
texts = sorted((p.read_text(encoding="utf-8") for p in Path(sys.argv[1]).iterdir()), key=len)
vectors = list(model.embed(texts, batch_size=64))
print(len(vectors))
"""


def plain_fastembed_in_child(folder: Path, home: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of the peers' path over the same files (module docstring)."""
    home.mkdir(parents=True)
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", PLAIN_FASTEMBED, str(folder), str(home)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0.0
    while child.poll() is None:
        with contextlib.suppress(OSError):
            peak = max(peak, peak_rss_mb(child.pid))
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"plain fastembed failed: {child.stderr.read().decode()[-2000:]}")
    return seconds, peak


def index_in_child(folder: Path, home: Path, code: Path = REPO, runtime: str | None = None
                   ) -> tuple[dict, float, float, float | None, float | None]:
    """(summary, wall seconds, peak RSS in MB, seconds to the first / to every file written) of one
    `hermes kb index` process running the code at `code`."""
    home.mkdir(parents=True)
    if runtime:
        (home / "config.yaml").write_text(json.dumps({"knowledgebase": {"embedding_model": model_settings(runtime)}}))
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


def model_settings(runtime: str) -> dict[str, str]:
    """`auto` or `auto:off` (runtime, then int8_activations) as embedding_model settings."""
    name, _, int8 = runtime.partition(":")
    return {"runtime": name, **({"int8_activations": int8} if int8 else {})}


def runtime_used(runtime: str, scratch: Path) -> str:
    """What a new index with these settings runs the default model on here, e.g. `openvino (f32)`."""
    from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
    from hermes_kb.agent.knowledgebase.service import KnowledgeBase

    config = parse_knowledgebase({"embedding_model": model_settings(runtime)})
    return KnowledgeBase(config, scratch / f"probe-home-{runtime}").embedder().runtime


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
    parser.add_argument("--corpus", choices=("all", "scifact", "scifact600", "repo"), default="all")
    parser.add_argument("--plain", action="store_true", help="also time plain fastembed on each corpus's files")
    parser.add_argument("--runtimes", default="auto", help="comma-separated embedding_model.runtime values, each "
                        "with :on or :off for int8_activations (e.g. auto,auto:off)")
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
        if args.corpus == "scifact600":
            dataset = load_dataset(DEFAULT_DATASET, "test")
            dataset.corpus = dict(list(dataset.corpus.items())[:600])
            folder = Path(scratch) / "scifact600"
            materialise(dataset, folder)
            corpora.append(("600 SciFact abstracts", folder))
        systems = [(f"{runtime} runtime: {runtime_used(runtime, Path(scratch))}", REPO, runtime)
                   for runtime in args.runtimes.split(",")]
        if args.baseline:
            systems.insert(0, (f"before ({args.baseline})", stack.enter_context(checkout(args.baseline, Path(scratch))), None))
        for label, folder in corpora:
            plain = None
            if args.plain:
                plain, peak = plain_fastembed_in_child(folder, Path(scratch) / f"home-plain-{len(figures)}")
                figures.append({"corpus": label, "system": "plain fastembed (length-sorted, batch 64)",
                                "files": len(list(folder.iterdir())), "chunks": None, "seconds": plain,
                                "first_file_s": None, "all_files_s": None, "peak_rss_mb": peak, "vs_plain": 1.0})
            for system, code, runtime in systems:
                home = Path(scratch) / f"home-{len(figures)}"
                summary, seconds, peak, first, every = index_in_child(folder, home, code, runtime)
                figures.append({"corpus": label, "system": system, "files": summary["added"],
                                "chunks": summary["chunks_embedded"] + summary["chunks_reused"], "seconds": seconds,
                                "first_file_s": first, "all_files_s": every, "peak_rss_mb": peak,
                                "vs_plain": plain / seconds if plain else None})
    def shown(value, form: str) -> str:
        return "–" if value is None else format(value, form)

    rows = [[f["corpus"], f["system"], f["files"], shown(f["chunks"], "d"), f"{f['seconds']:.1f}",
             f"{f['files'] / f['seconds']:.1f}", shown(f["chunks"] and f["chunks"] / f["seconds"], ".1f"),
             shown(f["first_file_s"], ".1f"), shown(f["all_files_s"], ".1f"), f"{f['peak_rss_mb']:.0f}",
             shown(f.get("vs_plain"), ".2f")] for f in figures]
    report("First index from scratch (new process, model load included)",
           ["corpus", "code", "files", "chunks", "wall s", "files/s", "chunks/s", "keyword-searchable: first file s",
            "all files s", "peak RSS MB", "vs plain fastembed"], rows, write=not args.no_write)
    if not args.no_write and args.corpus == "all":  # the chart draws the whole run; a partial one would replace it
        save_figures("first_index", figures)


if __name__ == "__main__":
    main()
