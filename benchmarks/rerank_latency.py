"""What the relevance stage costs: warm hybrid search (k = 10) with rerank off and on, the same
queries on the same warm knowledgebase in one run, and the model's load time and memory in a fresh
process (with the embedding model already loaded, as a search has it).

    python benchmarks/rerank_latency.py                  # SciFact's corpus and its first 100 test queries
    python benchmarks/rerank_latency.py --queries 50 --no-write
    python benchmarks/rerank_latency.py --set rerank_model_dir=/tmp/judge   # a model the recipe exported

Targets (issue #49): +100 ms p50 and +200 ms p95 at most, load 0.5 s, +150 MB RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report, settings_of  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import load_dataset, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.reranker import MODEL_DIR  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402

LOAD_PROBE = """
import json, time, resource
from pathlib import Path
from hermes_kb.agent.knowledgebase import embeddings
from hermes_kb.agent.knowledgebase.config import EmbeddingConfig
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
embedder = embeddings.create_embedder(EmbeddingConfig(), Path({home!r}))
embedder.embed_query('warm the embedding model')
before = rss()
started = time.perf_counter()
from hermes_kb.agent.knowledgebase.reranker import LocalReranker
model = LocalReranker({model_dir}, cache_dir=Path({home!r}) / 'knowledgebase' / 'models' / 'openvino-cache')
loaded = time.perf_counter() - started
model.scores('how do I create a gzipped archive', ['tar -czf archive.tar.gz folder'] * 20)
print(json.dumps({{'load_s': loaded, 'rss_mb': rss() - before}}))
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a knowledgebase setting for this run (e.g. rerank_model_dir=PATH)")
    args = parser.parse_args()
    home = hermes_home()
    data = load_dataset(args.dataset, "test")
    overrides = settings_of(args.set)
    _, config = workspace(data, parse_knowledgebase(overrides), home)
    kb = KnowledgeBase(config, home)
    kb.index()
    queries = [data.queries[q] for q in sorted(data.queries)][:args.queries]
    for query in queries[:5]:  # warm both paths: models, copies, OpenVINO's shapes
        kb.search(query, k=10, rerank="off")
        kb.search(query, k=10, rerank="local")
    off, on, judged = [], [], []
    for query in queries:  # interleaved, so both see the same machine
        started = time.perf_counter()
        kb.search(query, k=10, rerank="off")
        off.append((time.perf_counter() - started) * 1000)
        kb.rerankers.cache = type(kb.rerankers.cache)()  # every query judged afresh, no cached score
        started = time.perf_counter()
        result = kb.search(query, k=10, rerank="local")
        on.append((time.perf_counter() - started) * 1000)
        judged.append(result.rerank.judged)
    added = [b - a for a, b in zip(off, on)]
    model_dir = f"Path({str(config.rerank_model_dir or MODEL_DIR)!r})"
    probe = subprocess.run([sys.executable, "-c", LOAD_PROBE.format(home=str(home), model_dir=model_dir)],
                           capture_output=True, text=True, check=True)
    loaded = json.loads(probe.stdout.strip().splitlines()[-1])
    rows = [["hybrid, rerank off", f"{statistics.median(off):.1f}", f"{percentile(off, 0.95):.1f}", "-"],
            ["hybrid, rerank on", f"{statistics.median(on):.1f}", f"{percentile(on, 0.95):.1f}",
             f"{statistics.mean(judged):.1f}"],
            ["added by reranking", f"{statistics.median(added):.1f}", f"{percentile(added, 0.95):.1f}", "-"]]
    engine = kb.rerankers.for_mode("local", config).identity
    report(f"Relevance stage ({engine}): warm search latency (ms, {len(queries)} SciFact queries, k = 10); model load "
           f"{loaded['load_s']:.2f} s, +{loaded['rss_mb']:.0f} MB RSS",
           ["search", "p50", "p95", "passages judged (mean)"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
