"""Retrieval quality per language: XQuAD's 240 paragraphs and 1,190 questions, the same content in
every language (../shared/eval/xquad/<lang>, BEIR layout), through the product's own code path.

    python benchmarks/languages.py                         # every language folder, every mode
    python benchmarks/languages.py --lang zh --lang de --systems keyword --no-write
    python benchmarks/languages.py --set embedding_model=multilingual

The corpora and their indexes are cached under $HERMES_HOME/knowledgebase/eval/, so reruns embed
nothing new (an analyzer change re-analyses them, in a second).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report, settings_of  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import SYSTEMS, evaluate  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402

XQUAD = Path(__file__).resolve().parents[2] / "shared" / "eval" / "xquad"
DEFAULT_SYSTEMS = ("keyword", "vector", "hybrid (weighted)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=XQUAD)
    parser.add_argument("--lang", action="append", help="a language folder (default: all)")
    parser.add_argument("--systems", action="append", choices=list(SYSTEMS))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    settings = settings_of(args.set)
    config = parse_knowledgebase(settings)
    systems = tuple(args.systems or DEFAULT_SYSTEMS)
    languages = args.lang or sorted(p.name for p in args.root.iterdir() if (p / "corpus.jsonl").exists())
    rows, data = [], []
    for language in languages:
        found = evaluate(args.root / language, config, hermes_home(), systems=systems,
                         on_progress=lambda message: print(f"{language}: {message}", file=sys.stderr))
        scores = {s.name: s.metrics["ndcg@10"] for s in found.systems}
        best_single = max(scores.get("keyword", 0.0), scores.get("vector", 0.0))
        hybrid = scores.get("hybrid (weighted)")
        rows.append([language, found.chunks, *[f"{scores[name]:.3f}" for name in systems],
                     f"{hybrid - best_single:+.3f}" if hybrid is not None else "",
                     f"{found.index_seconds:.0f}"])
        data.append({"language": language, **found.to_dict()})
    columns = ["language", "chunks", *[f"{name} nDCG@10" for name in systems], "hybrid - best single", "index s"]
    if args.json:  # JSON alone on stdout, as retrieval.py: a table after it made it unparseable
        print(json.dumps(data, indent=2))
        return
    report("XQuAD per language" + (f" ({', '.join(args.set)})" if args.set else ""), columns, rows,
           write=not args.no_write)


if __name__ == "__main__":
    main()
