"""Sweep BM25's k1 and b through the keyword cache, over the cached evaluation index.

FTS5's bm25() has k1 = 1.2 and b = 0.75 built in; the keyword cache computes its
own weights, so other constants are tried by rebuilding only that cache (a
fraction of a second) and searching through the real path. Each setting is
scored by nDCG@10 of keyword-only and weighted hybrid search; the default
cache is rebuilt at the end.

    python benchmarks/tune_keyword.py --split train --k1 0.9,1.2,1.6 --b 0.3,0.5,0.75
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.index import keyword_cache  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import CHUNK_DEPTH, doc_ranking, load_dataset, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402


def rebuild(index: Path) -> None:
    with IndexStore(index, create=False) as store, store.snapshot():
        keyword_cache.build(keyword_cache.cache_path(index), store.generation(), store.iter_terms())


def main() -> None:
    from ranx import Qrels, Run, evaluate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--split", default="train")
    parser.add_argument("--k1", default="0.9,1.2,1.6")
    parser.add_argument("--b", default="0.3,0.5,0.75")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    home = hermes_home()
    dataset = load_dataset(args.dataset, args.split)
    names, config = workspace(dataset, parse_knowledgebase({}), home)
    config = replace(config, min_score=0.0)
    indexer = KnowledgeBase(config, home)
    embedder = indexer.embedder()
    indexer.index()
    index = indexer.index_path(config.directories[0])
    qrels = Qrels(dataset.qrels)
    defaults = keyword_cache.K1, keyword_cache.B
    rows = []
    try:
        for k1 in (float(v) for v in args.k1.split(",")):
            for b in (float(v) for v in args.b.split(",")):
                keyword_cache.K1, keyword_cache.B = k1, b
                rebuild(index)
                kb = KnowledgeBase(config, home, embedder_factory=lambda: embedder)  # maps the rebuilt copy
                scores = []
                for mode in ("keyword", "hybrid"):
                    run = {q: doc_ranking(kb.search(text, k=CHUNK_DEPTH, mode=mode).hits, names) or {"__none__": 0.0}
                           for q, text in dataset.queries.items()}
                    scores.append(evaluate(qrels, Run(run), "ndcg@10"))
                rows.append([f"{k1}", f"{b}", f"{scores[0]:.4f}", f"{scores[1]:.4f}"])
                print(*rows[-1], flush=True)
    finally:
        keyword_cache.K1, keyword_cache.B = defaults
        rebuild(index)
    report(f"BM25 constants through the keyword cache, {dataset.name} {args.split} ({len(dataset.queries)} queries)",
           ["k1", "b", "keyword nDCG@10", "hybrid nDCG@10"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
