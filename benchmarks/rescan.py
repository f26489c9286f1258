"""No-change rescan: index N small files once, then time re-running the index.

    python benchmarks/rescan.py --files 1000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from benchmarks._report import report, write_notes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="do not append to docs/benchmark-log.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = write_notes(Path(scratch) / "tree", args.files)
        kb = KnowledgeBase(parse_knowledgebase({"directories": [str(root)]}), Path(scratch) / "home")
        first = kb.index()[0]
        timings, embedded = [], 0
        for _ in range(args.repeats):
            started = time.perf_counter()
            summary = kb.index()[0]
            timings.append(time.perf_counter() - started)
            embedded += summary.chunks_embedded
        median = statistics.median(timings)
        report(f"No-change rescan of {args.files} files",
               ["files", "first index (s)", "rescan median (s)", "rescan files/s", "chunks embedded on rescan"],
               [[args.files, f"{first.seconds:.1f}", f"{median:.3f}", f"{args.files / median:,.0f}", embedded]],
               write=not args.no_write)


if __name__ == "__main__":
    main()
