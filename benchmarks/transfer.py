"""Does retrieval quality transfer beyond SciFact? Every system on every collection, test split.

    python benchmarks/transfer.py --skip-scifact          # code search + docs; SciFact's known figures
    python benchmarks/transfer.py                         # SciFact too (~12 min to index it from scratch)
    python benchmarks/transfer.py --split train --no-write --runs /tmp/runs   # tuning: train only

Builds the code search and docs collections (benchmarks/collection_builders.py)
under .benchmarks-cache/collections/ (git-ignored; rebuilt each run, which takes
seconds and gives the same files for the same installed packages), evaluates
keyword, vector, weighted hybrid (the default) and RRF hybrid on each through
the product's search path (the same `evaluate` as `hermes kb eval`), prints the
table and appends it to docs/benchmark-log.md. Indexes are cached under
$HERMES_HOME/knowledgebase/eval/, so a rerun embeds nothing new. `--runs DIR`
also writes each system's per-query document ranking (query id -> doc id ->
pseudo-score, best first) as JSON, for offline fusion tuning.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report, settings_of  # noqa: E402
from benchmarks.collection_builders import CollectionError, build_code_search, build_docs  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import SYSTEMS, evaluate  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402

# SciFact test nDCG@10 with the defaults (benchmarks/retrieval.py, 2026-12-08, relevance model 1.2), used with
# --skip-scifact.
KNOWN_SCIFACT = {"keyword": 0.6910, "vector": 0.6692, "hybrid (weighted)": 0.7412, "hybrid (rrf)": 0.7199,
                 "hybrid + rerank": 0.7418}
CACHE = Path(__file__).resolve().parents[1] / ".benchmarks-cache" / "collections"
BUILDERS = {"code search": ("code", build_code_search), "docs (npm + Node.js)": ("docs", build_docs)}


def cell(metrics: dict[str, float] | None) -> str:
    if metrics is None:
        return "–"
    return f"{metrics['ndcg@10']:.4f} / {metrics['recall@10']:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-scifact", action="store_true", help="reuse SciFact's known test figures")
    parser.add_argument("--scifact", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--only", choices=[key for key, _ in BUILDERS.values()], action="append",
                        help="evaluate only this built collection (repeatable)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the built collections go")
    parser.add_argument("--split", default="test")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a knowledgebase setting (yaml value)")
    parser.add_argument("--runs", type=Path, help="write per-query rankings of every system here")
    parser.add_argument("--no-write", action="store_true", help="do not append to docs/benchmark-log.md")
    args = parser.parse_args()
    overrides = settings_of(args.set)
    config = parse_knowledgebase(overrides)
    home = hermes_home()
    progress = lambda message: print(message, file=sys.stderr)  # noqa: E731

    targets: list[tuple[str, Path | None]] = []
    if args.skip_scifact:
        targets.append(("SciFact", None))
    elif args.scifact.is_dir():
        targets.append(("SciFact", args.scifact))
    else:
        progress(f"SciFact is not at {args.scifact}; its row is left out (or pass --skip-scifact)")
    for label, (key, build) in BUILDERS.items():
        if args.only and key not in args.only:
            continue
        try:
            build(args.cache / key)
            targets.append((label, args.cache / key))
        except CollectionError as exc:
            progress(f"{label}: {exc}")

    rows, notes = [], []
    for label, folder in targets:
        if folder is None:
            rows.append([f"{label} test (known figures, not rerun)", 300, 5183, "–",
                         *(f"{KNOWN_SCIFACT[name]:.4f} / –" for name in SYSTEMS)])
            continue
        started = time.perf_counter()
        result = evaluate(folder, config, home, split=args.split, on_progress=progress)
        wall = time.perf_counter() - started
        metrics = {s.name: s.metrics for s in result.systems}
        rows.append([f"{label} {args.split}", result.queries, result.documents, f"{wall:.0f}",
                     *(cell(metrics.get(name)) for name in SYSTEMS)])
        notes.append(f"{label}: {result.chunks} chunks, index {result.index_seconds:.0f} s "
                     f"({result.chunks_embedded} embedded), " + ", ".join(
                         f"{s.name} p50 {s.p50_ms:.0f} ms" for s in result.systems))
        if args.runs:
            out = args.runs / folder.name
            out.mkdir(parents=True, exist_ok=True)
            for system in result.systems:
                name = system.name.replace(" ", "_").replace("(", "").replace(")", "")
                (out / f"{args.split}-{name}.json").write_text(json.dumps(system.runs))
    for note in notes:
        progress(note)
    settings = " ".join(f"{k}={v}" for k, v in overrides.items()) or "defaults"
    columns = ["collection", "queries", "docs", "wall s", *(f"{name} nDCG@10 / R@10" for name in SYSTEMS)]
    report(f"Transfer: every system on every collection ({args.split}, {settings})", columns, rows,
           write=not args.no_write)


if __name__ == "__main__":
    main()
