"""Sweep fusion settings over a cached evaluation index without re-running searches.

Candidates (cosine and bm25 for every chunk either retriever proposed) are
gathered once per query through the retriever's own `_gather`; each setting is
then re-fused offline. Use it to choose defaults on train, then confirm with
benchmarks/retrieval.py on test (which goes through the full search path).

    python benchmarks/tune_fusion.py --split train
    python benchmarks/tune_fusion.py .benchmarks-cache/collections/code --pools 75 --alphas 0.7,0.75,0.8 --shares 0,0.5,1

(the code search and docs collections are built by benchmarks/transfer.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase import analysis, retriever  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import DOC_DEPTH, load_dataset, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.retriever import SearchOptions, SearchResult, SearchSource  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402


def gather(kb: KnowledgeBase, queries: dict[str, str], pool_k: int) -> dict[str, list]:
    directory = kb.config.directories[0]
    store = IndexStore(kb.index_path(directory), create=False)
    source = SearchSource(directory.name, str(directory.path), store)
    options = SearchOptions(k=pool_k, mode="hybrid")
    gathered = {}
    for query_id, text in queries.items():
        asked = replace(source, model=kb.query_model(text, directory))
        candidates = retriever._gather([asked], analysis.AnalysedQuery(text), options, SearchResult(), {})
        paths = {i: row.path for i, row in store.chunks([c.chunk_id for c in candidates]).items()}
        gathered[query_id] = [(paths[c.chunk_id], c) for c in candidates]
    return gathered


def fuse(gathered, names, options: SearchOptions) -> dict[str, dict[str, float]]:
    run = {}
    for query_id, items in gathered.items():
        scored = retriever._fuse([c for _, c in items], options)
        path_of = {id(c): p for p, c in items}
        ranking: dict[str, float] = {}
        for score, candidate in scored:
            doc = names[path_of[id(candidate)]]
            if doc not in ranking:
                ranking[doc] = float(DOC_DEPTH * 10 - len(ranking))
        run[query_id] = ranking or {"__none__": 0.0}
    return run


def main() -> None:
    from ranx import Qrels, Run, evaluate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--split", default="train")
    parser.add_argument("--pools", default="10,25,50,100", help="k values whose pool max(50, 4k) is gathered")
    parser.add_argument("--alphas", default="0.6,0.65,0.7,0.75,0.8")
    parser.add_argument("--shares", default=str(retriever.KEYWORD_SCALE_SHARE),
                        help="values of KEYWORD_SCALE_SHARE to sweep for weighted fusion")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    home = hermes_home()
    dataset = load_dataset(args.dataset, args.split)
    names, config = workspace(dataset, parse_knowledgebase({}), home)
    kb = KnowledgeBase(config, home)
    kb.index()
    qrels = Qrels(dataset.qrels)
    rows = []
    for pool_k in (int(p) for p in args.pools.split(",")):
        gathered = gather(kb, dataset.queries, pool_k)
        base = SearchOptions(k=pool_k, mode="hybrid")
        settings = [(f"weighted alpha={a} share={share}", replace(base, alpha=float(a)), float(share))
                    for share in args.shares.split(",") for a in args.alphas.split(",")]
        settings += [(f"rrf k={k}", replace(base, fusion="rrf", rrf_k=k), 0.0) for k in (10, 30, 60)]
        for label, options, share in settings:
            retriever.KEYWORD_SCALE_SHARE = share  # a module constant: this script alone sweeps it
            scores = evaluate(qrels, Run(fuse(gathered, names, options)), ["ndcg@10", "recall@100"])
            rows.append([max(50, 4 * pool_k), label, f"{scores['ndcg@10']:.4f}", f"{scores['recall@100']:.4f}"])
    report(f"Fusion sweep on {dataset.name} {args.split} ({len(dataset.queries)} queries)",
           ["pool per retriever", "fusion", "nDCG@10", "R@100"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
