"""Filtered search at 100k chunks: p50 of tag and date filters against the unfiltered search, in the
same run, on the same synthetic index as benchmarks/query_latency.py (real SciFact texts and window
vectors, repeated with noise; queries are SciFact claims embedded by the real model).

Files carry tags so that a filter admits 1%, 10% or 50% of the chunks, and dates spread over a year;
the first filtered search after an index change also reads the file table (timed on its own);
each filtered vector search is also checked against an exact product over the admitted chunks
(recall@10), since a filter must not come back short or miss what it admits.

    python benchmarks/filtered_search.py --size 100000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.evaluation import percentile  # noqa: E402
from hermes_kb.agent.knowledgebase.filters import FileMetadata  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.query_latency import CHUNKS_PER_FILE, build, scifact_material  # noqa: E402

DAY = 86400.0
NOW = time.time()
# filter -> (its search arguments, the share of files it admits)
FILTERS = {
    "none": ({}, 1.0),
    "tag on 1% of files": ({"tags": ["rare"]}, 0.01),
    "tag on 10% of files": ({"tags": ["team"]}, 0.10),
    "tag on 50% of files": ({"tags": ["half"]}, 0.50),
    "since 36 days (10%)": ({"since": NOW - 36.5 * DAY}, 0.10),
    "tag 50% and since 36 days (5%)": ({"tags": ["half"], "since": NOW - 36.5 * DAY}, 0.05),
}


def metadata(file_no: int) -> FileMetadata:
    tags = [name for name, every in (("rare", 100), ("team", 10), ("half", 2)) if file_no % every == 0]
    return FileMetadata(tuple(tags), NOW - (file_no * 7919 % 365) * DAY)  # dates spread over a year


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    texts, vectors, queries = scifact_material(args.queries)
    files = args.size // CHUNKS_PER_FILE
    admitted = {name: np.array([_admits(f, name) for f in range(files)]) for name in FILTERS}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        kb, matrix, starts, _ = build(Path(scratch) / "index", args.size, texts, vectors, np.random.default_rng(7),
                                      metadata)
        embedder = kb.embedder()
        for query in queries[:5]:
            kb.search(query, k=10)
        baseline: dict[str, float] = {}
        for name, (options, _) in FILTERS.items():
            chunk_ok = np.repeat(admitted[name], CHUNKS_PER_FILE)
            for mode in ("hybrid", "vector", "keyword"):
                timings, recall, counts = [], [], []
                for query in queries:
                    started = time.perf_counter()
                    hits = kb.search(query, k=10, mode=mode, **options).hits
                    timings.append((time.perf_counter() - started) * 1000)
                    counts.append(len(hits))
                    if mode == "vector":
                        best = np.maximum.reduceat(matrix @ embedder.embed_query(query), starts)
                        best[~chunk_ok] = -np.inf
                        exact = {(f"f{i // CHUNKS_PER_FILE:06}.txt", i % CHUNKS_PER_FILE + 1)
                                 for i in np.argpartition(-best, 10)[:10]}
                        recall.append(len({(h.path, h.start_line) for h in hits} & exact) / 10)
                p50 = statistics.median(timings)
                baseline.setdefault(mode, p50)
                rows.append([name, f"{admitted[name].mean():.0%}", mode, f"{p50:.1f}", f"{percentile(timings, 0.95):.1f}",
                             f"{p50 / baseline[mode]:.2f}x", f"{statistics.mean(counts):.1f}",
                             f"{statistics.mean(recall):.3f}" if recall else ""])
        with IndexStore(kb.index_path(kb.config.directories[0]), create=False) as store:
            table_ms = statistics.median(_timed(store.file_facets) for _ in range(5))
    print(f"file table (read once per index change, then kept): {table_ms:.1f} ms")
    report(f"Filtered search at {args.size:,} chunks, embedding included (k=10); the file table filters read "
           f"once per index change: {table_ms:.0f} ms",
           ["filter", "files admitted", "search", "p50 ms", "p95 ms", "vs unfiltered", "hits returned",
            "recall@10 vs exact over admitted"], rows, write=not args.no_write)


def _timed(function) -> float:
    started = time.perf_counter()
    function()
    return (time.perf_counter() - started) * 1000


def _admits(file_no: int, name: str) -> bool:
    options, _ = FILTERS[name]
    meta = metadata(file_no)
    return all(tag in meta.tags for tag in options.get("tags", ())) and meta.dated >= options.get("since", -np.inf)


if __name__ == "__main__":
    main()
