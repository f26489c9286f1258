"""Idle CPU of `hermes kb watch` on a 10,000-file tree, over 60 s.

    python benchmarks/watch_idle.py --files 10000 --seconds 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report, write_notes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = write_notes(Path(scratch) / "tree", args.files)
        env = {**os.environ, "HERMES_HOME": str(Path(scratch) / "home")}
        hermes = [sys.executable, "-m", "hermes_kb.hermes_cli.main", "kb"]
        subprocess.run([*hermes, "index", str(root)], env=env, cwd=REPO, check=True, capture_output=True)
        watcher = subprocess.Popen([*hermes, "watch", str(root)], env=env, cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            while "Watching" not in (watcher.stdout.readline() or "Watching"):
                pass
            time.sleep(3)
            before, started = cpu_seconds(watcher.pid), time.monotonic()
            time.sleep(args.seconds)
            used, elapsed = cpu_seconds(watcher.pid) - before, time.monotonic() - started
        finally:
            watcher.terminate()
            watcher.wait(timeout=30)
    report(f"Idle CPU of hermes kb watch ({args.files} files)", ["files", "seconds watched", "CPU seconds", "% of one core"],
           [[args.files, f"{elapsed:.0f}", f"{used:.2f}", f"{100 * used / elapsed:.2f}%"]], write=not args.no_write)


if __name__ == "__main__":
    main()
