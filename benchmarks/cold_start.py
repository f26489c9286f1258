"""Cold everyday commands: a new process each time, model load included for hybrid.

Indexes this repository's docs/ once, then times whole commands; a bare
`python -c pass` in the same run is the floor. With `--rescan-files N` it also
indexes N small notes once and times a no-change `hermes kb index` of them.
`--baseline REV` runs the same commands with that commit's code (a temporary
git worktree, its own HERMES_HOME) in the same run, as the before column.

    python benchmarks/cold_start.py --runs 5 --rescan-files 10000 --baseline 8f8e69b
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report, write_notes  # noqa: E402
from benchmarks.first_index import checkout  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def timed(command: list[str], env: dict, runs: int, cwd: Path) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=cwd, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def measure(code: Path, home: Path, notes: Path | None, runs: int) -> dict[str, float]:
    """Median seconds of each command, run with the code at `code`."""
    hermes = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(code)}
    subprocess.run([*hermes, "kb", "index", str(REPO / "docs")], env=env, cwd=code, check=True, capture_output=True)
    times = {}
    for mode in ("keyword", "hybrid"):
        times[f"hermes kb search --mode {mode}"] = timed([*hermes, "kb", "search", "how are chunks sized", "--mode", mode],
                                                         env, runs, code)
    times["hermes kb status"] = timed([*hermes, "kb", "status"], env, runs, code)
    if notes is not None:
        subprocess.run([*hermes, "kb", "index", str(notes)], env=env, cwd=code, check=True, capture_output=True)
        count = sum(1 for _ in notes.rglob("*.md"))
        times[f"hermes kb index, no change ({count:,} files)"] = timed([*hermes, "kb", "index", str(notes)], env, runs, code)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rescan-files", type=int, default=0)
    parser.add_argument("--baseline", metavar="REV")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        scratch = Path(scratch)
        notes = write_notes(scratch / "notes", args.rescan_files) if args.rescan_files else None
        floor = timed([sys.executable, "-c", "pass"], dict(os.environ), args.runs, REPO)
        now = measure(REPO, scratch / "home-now", notes, args.runs)
        before = {}
        if args.baseline:
            before = measure(stack.enter_context(checkout(args.baseline, scratch)), scratch / "home-before", notes, args.runs)
    columns = ["command", "seconds", "vs bare python"] + ([f"before ({args.baseline}) s", "speed-up"] if before else [])
    rows = [["python -c pass", f"{floor:.2f}", "1.0x"] + (["", ""] if before else [])]
    for command, seconds in now.items():
        row = [command, f"{seconds:.2f}", f"{seconds / floor:.1f}x"]
        if before:
            row += [f"{before[command]:.2f}", f"{before[command] / seconds:.2f}x"]
        rows.append(row)
    report("Cold command wall time (median of runs)", columns, rows, write=not args.no_write)

if __name__ == "__main__":
    main()
