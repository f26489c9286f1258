"""Agent-written query variants against the plain query: nDCG@10 and MRR@10 on 20 queries.

benchmarks/data/typed_variants.json holds, for 10 SciFact test claims and 10 questions of the docs
collection (npm + Node.js; benchmarks/transfer.py builds it), lex/vec/hyde variants written from the
query text alone before any result was seen. Each query runs as the plain hybrid search (the
relevance stage as configured) and as its variants fused with the query as the intent; also each
variant type alone beside the query (query as `vec` + one typed variant), to see which type helps.

    python benchmarks/typed_searches.py [--docs .benchmarks-cache/collections/docs]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import CHUNK_DEPTH, doc_ranking, load_dataset, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from benchmarks.transfer import CACHE  # noqa: E402

VARIANTS = Path(__file__).resolve().parent / "data" / "typed_variants.json"


def scores(ranking: dict[str, float], relevant: dict[str, int]) -> tuple[float, float]:
    """(nDCG@10, MRR@10) of one query from doc_ranking's pseudo-scores."""
    import math

    order = sorted(ranking, key=ranking.get, reverse=True)[:10]
    gains = [relevant.get(doc, 0) for doc in order]
    ideal = sorted(relevant.values(), reverse=True)[:10]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal)) or 1.0
    mrr = next((1 / (i + 1) for i, g in enumerate(gains) if g > 0), 0.0)
    return dcg / idcg, mrr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--docs", type=Path, default=CACHE / "docs")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    variants = json.loads(VARIANTS.read_text())
    home = hermes_home()
    rows = []
    for label, root in (("scifact", args.scifact), ("docs", args.docs)):
        dataset = load_dataset(root, "test")
        names, config = workspace(dataset, parse_knowledgebase({}), home)
        kb = KnowledgeBase(config, home)
        corpus = config.directories[0].name
        kb.index(corpus)
        systems = {"plain query (hybrid)": lambda q, v: q, "query + lex/vec/hyde": lambda q, v: [{"type": "vec", "query": q}, *v]}
        for kind in ("lex", "vec", "hyde"):
            systems[f"query + {kind} only"] = lambda q, v, kind=kind: [{"type": "vec", "query": q}, *(s for s in v if s["type"] == kind)]
        systems["lex/vec/hyde without the query"] = lambda q, v: v
        for name, make in systems.items():
            per_query = []
            for query_id, typed in variants[label].items():
                query = dataset.queries[query_id]
                hits = kb.search(make(query, typed), k=CHUNK_DEPTH, directory=corpus, intent=query).hits
                per_query.append(scores(doc_ranking(hits, names), dataset.qrels[query_id]))
            rows.append([label, name, f"{statistics.mean(s[0] for s in per_query):.3f}",
                         f"{statistics.mean(s[1] for s in per_query):.3f}"])
            print(rows[-1], file=sys.stderr)
    report("Agent-written typed searches on 20 hand-written queries (10 SciFact, 10 docs)",
           ["collection", "system", "nDCG@10", "MRR@10"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
