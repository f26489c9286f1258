"""Cold `hermes kb search`: a new process each time, model load included for hybrid.

Indexes this repository's docs/ once, then times whole commands; a bare
`python -c pass` in the same run is the floor.

    python benchmarks/cold_start.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def timed(command: list[str], env: dict, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=REPO, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    hermes = [sys.executable, "-m", "hermes_kb.hermes_cli.main"]
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HERMES_HOME": home}
        subprocess.run([*hermes, "kb", "index", str(REPO / "docs")], env=env, cwd=REPO, check=True, capture_output=True)
        floor = timed([sys.executable, "-c", "pass"], env, args.runs)
        rows = [["python -c pass", f"{floor:.2f}", "1.0x"]]
        for mode in ("keyword", "hybrid"):
            seconds = timed([*hermes, "kb", "search", "how are chunks sized", "--mode", mode], env, args.runs)
            rows.append([f"hermes kb search --mode {mode}", f"{seconds:.2f}", f"{seconds / floor:.1f}x"])
        seconds = timed([*hermes, "kb", "status"], env, args.runs)
        rows.append(["hermes kb status", f"{seconds:.2f}", f"{seconds / floor:.1f}x"])
    report("Cold command wall time (median of runs)", ["command", "seconds", "vs bare python"], rows,
           write=not args.no_write)


if __name__ == "__main__":
    main()
