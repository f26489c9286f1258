"""Retrieval quality on a BEIR dataset (default: SciFact test) through the product's own code path.

    python benchmarks/retrieval.py                       # ../shared/eval/scifact, test split
    python benchmarks/retrieval.py --split train --no-write
    python benchmarks/retrieval.py --set alpha=0.5 --set chunk_size=160   # try settings

Also reachable as `hermes kb eval DATASET_DIR`. The corpus and its index are
cached under $HERMES_HOME/knowledgebase/eval/, so reruns embed nothing new.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import evaluate  # noqa: E402
from benchmarks._report import report, settings_of  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402
from hermes_kb.hermes_cli.kb_command import EVALUATION_COLUMNS, evaluation_rows  # noqa: E402

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a knowledgebase setting (yaml value)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="do not append to docs/benchmark-log.md")
    args = parser.parse_args()
    overrides = settings_of(args.set)
    config = parse_knowledgebase(overrides)
    home = hermes_home()
    result = evaluate(args.dataset, config, home, split=args.split, limit=args.limit,
                      on_progress=lambda message: print(message, file=sys.stderr))
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    settings = " ".join(f"{k}={v}" for k, v in overrides.items()) or "defaults"
    report(f"Retrieval: {result.dataset} {result.split} ({result.queries} queries, {result.documents} docs, "
           f"{result.chunks} chunks, {settings}; index {result.index_seconds:.0f} s, {result.chunks_embedded} embedded)",
           EVALUATION_COLUMNS, evaluation_rows(result), write=not args.no_write)


if __name__ == "__main__":
    main()
