"""What the per-file extraction budget costs on ordinary files: every parsed-format file of a real
folder read in this process (no bound) and through the bounded worker (extraction.Extractor), in one
run, alternating, so both see the same machine.

    python benchmarks/extraction_budget.py /usr/share/doc/postgresql-doc-15/html
    python benchmarks/extraction_budget.py ~/Documents --no-write
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report  # noqa: E402
from hermes_kb.agent.knowledgebase import loaders  # noqa: E402
from hermes_kb.agent.knowledgebase.extraction import Extractor, bounded_kinds  # noqa: E402
from hermes_kb.agent.knowledgebase.scanner import scan  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    kinds = bounded_kinds()
    files = [f for f in scan(args.folder).files if f.kind in kinds]
    if not files:
        raise SystemExit(f"{args.folder} holds no file of a parsed format ({', '.join(sorted(kinds))})")
    extractor = Extractor()
    started = time.perf_counter()
    extractor.load(b"<p>start the worker</p>", "html")  # its start-up is paid once a run: counted apart
    start_up = time.perf_counter() - started
    direct = bounded = 0.0
    size = 0
    for file in files:
        data = file.abs_path.read_bytes()
        size += len(data)
        for way in ("direct", "bounded"):
            began = time.perf_counter()
            try:
                loaders.load(data, file.kind) if way == "direct" else extractor.load(data, file.kind)
            except loaders.LoadError:
                pass
            spent = time.perf_counter() - began
            direct, bounded = (direct + spent, bounded) if way == "direct" else (direct, bounded + spent)
    extractor.close()
    rows = [["in this process (no bound)", f"{direct:.2f}", f"{1000 * direct / len(files):.2f}"],
            ["in the bounded worker", f"{bounded:.2f}", f"{1000 * bounded / len(files):.2f}"],
            ["worker start-up, once a run", f"{start_up:.2f}", "-"]]
    report(f"Extraction budget: reading {len(files):,} files ({size / 1e6:.1f} MB) of {args.folder}",
           ["how", "seconds", "ms a file"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
