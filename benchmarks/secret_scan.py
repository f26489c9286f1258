"""The secret detector's recall and false positives.

Recall: the shapes of tests/knowledgebase/data/secrets/positives.txt removed whole. False positives:
the look-alikes of lookalikes.txt changed, and the secrets found in folders of ordinary code and docs
that hold (almost) none (by default this environment's site-packages: millions of lines of Python,
JSON and docs), per million lines, with a sample of each kind to read.

    python benchmarks/secret_scan.py [--folder DIR ...] [--no-write]
"""

from __future__ import annotations

import argparse
import collections
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report  # noqa: E402
from hermes_kb.agent.knowledgebase.secret_scan import redact, secret_spans  # noqa: E402
from tests.knowledgebase.test_secret_scan import lookalikes, positives  # noqa: E402

TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".ipynb", ".html"}


def corpus_rows() -> list[list[object]]:
    shapes = positives()
    removed = sum(1 for text, secret in shapes if secret not in redact(text).text and redact(text).found)
    alikes = lookalikes()
    changed = sum(1 for text in alikes if redact(text).text != text)
    return [["shapes removed (recall)", f"{removed}/{len(shapes)}", f"{removed / len(shapes):.3f}"],
            ["look-alikes changed (false positives)", f"{changed}/{len(alikes)}", f"{changed / len(alikes):.3f}"]]


def folder_rows(folder: Path) -> tuple[list[object], collections.Counter, dict]:
    files = lines = size = 0
    kinds: collections.Counter = collections.Counter()
    samples: dict[str, str] = {}
    started = time.perf_counter()
    for path in folder.rglob("*"):
        if path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        files, lines, size = files + 1, lines + text.count("\n"), size + len(text)
        for start, end, kind in secret_spans(text):
            kinds[kind] += 1
            line_start = text.rfind("\n", 0, start) + 1
            samples.setdefault(kind, f"{path.relative_to(folder)}: {text[line_start:start].strip()[-60:]}")
    seconds = time.perf_counter() - started
    found = sum(kinds.values())
    row = [str(folder), files, f"{lines:,}", f"{size / 1e6:.1f}", found, f"{found / max(lines, 1) * 1e6:.1f}",
           f"{size / 1e6 / seconds:.1f}"]
    return row, kinds, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", action="append", type=Path)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    write = not args.no_write
    report("Secret detector: the corpora", ["measure", "count", "rate"], corpus_rows(), write=write)
    rows = []
    for folder in args.folder or [Path(sysconfig.get_paths()["purelib"])]:
        row, kinds, samples = folder_rows(folder)
        rows.append(row)
        for kind, count in kinds.most_common():
            print(f"  {count:4} {kind:28} e.g. {samples[kind]}")
    report("Secret detector: found in ordinary code and docs (each is a false positive or an example credential)",
           ["folder", "files", "lines", "MB", "found", "per million lines", "MB/s"], rows, write=write)


if __name__ == "__main__":
    main()
