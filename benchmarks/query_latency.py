"""Warm query latency at 10k / 100k / 1M chunks, beside an exact numpy baseline in the same run.

Large indexes are synthetic but shaped like real ones: texts and window
vectors are real SciFact chunks (taken from the evaluation index that
benchmarks/retrieval.py builds), repeated with small Gaussian noise on the
vectors, so both FTS statistics and vector neighbourhoods look like a real
corpus. Queries are SciFact test claims, embedded by the real model, and the
timings include that embedding. Also reported: the sqlite-vec scan the vector
cache replaces, the time to bring the vector and keyword caches up to date from scratch and after
one file (50 chunks) changed (a vector copy of 50k+ vectors is then kept, and the searches measured
run with it and that change beside it: vector_cache.VectorDelta, as after a real edit), and the peak
RSS of a separate process that opens the index and answers the same hybrid queries.

    python benchmarks/query_latency.py --sizes 10000,100000,1000000

The figures also go to docs/figures/query_latency.json, which benchmarks/chart.py draws.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.index import keyword_cache, vector_cache  # noqa: E402
from hermes_kb.agent.knowledgebase.chunker import Chunk  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.filters import FileMetadata  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import load_dataset, percentile, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402
from benchmarks._report import peak_rss_mb, report, save_figures  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402

CHUNKS_PER_FILE = 50


def real_chunks(home: Path) -> tuple[list[str], list[np.ndarray]]:
    """SciFact chunks' texts and window vectors (one row per window)."""
    dataset = load_dataset(DEFAULT_DATASET, "test")
    _, config = workspace(dataset, parse_knowledgebase({}), home)
    kb = KnowledgeBase(config, home)
    kb.index()
    with IndexStore(kb.index_path(config.directories[0]), create=False) as store:
        rows = store.conn.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()
        vectors = store.vectors_for([r[0] for r in rows])
    return [r[1] for r in rows], [vectors[r[0]] for r in rows]


def scifact_material(queries: int) -> tuple[list[str], list[np.ndarray], list[str]]:
    """What the synthetic indexes are made of: SciFact's chunk texts and window vectors, and its first
    `queries` test claims."""
    texts, vectors = real_chunks(hermes_home())
    return texts, vectors, list(load_dataset(DEFAULT_DATASET, "test").queries.values())[:queries]


def build(root: Path, size: int, texts: list[str], vectors: list[np.ndarray], rng,
          metadata: Callable[[int], FileMetadata] = lambda file_no: FileMetadata()) -> tuple[KnowledgeBase, np.ndarray, np.ndarray, dict]:
    """Write `size` chunks straight through the store (the indexer would only re-embed them), each
    file with `metadata(file_no)`.

    Returns the knowledgebase, the exact matrix of every window vector with the row where each
    chunk's windows start, and the seconds each derived copy's refresh took: from scratch, then
    after one file (50 chunks) was written again."""
    root.mkdir(parents=True)
    config = parse_knowledgebase({"directories": [str(root)]})
    kb = KnowledgeBase(config, root.parent / "home")
    windows = np.array([len(vectors[i % len(texts)]) for i in range(size)])
    starts = np.concatenate([[0], np.cumsum(windows)[:-1]])
    matrix = np.empty((int(windows.sum()), vectors[0].shape[1]), dtype=np.float32)
    with IndexStore(kb.index_path(config.directories[0])) as store:
        store.pin_model(kb.embedder().identity)
        for file_no in range(size // CHUNKS_PER_FILE):
            chunks, block = [], []
            for j in range(CHUNKS_PER_FILE):
                i = file_no * CHUNKS_PER_FILE + j
                base = i % len(texts)
                chunks.append(Chunk(texts[base], 0, len(texts[base]), j + 1, j + 1, None, ""))
                noisy = vectors[base] + rng.normal(0, 0.02, vectors[base].shape).astype(np.float32)
                block.append(noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
                matrix[starts[i]:starts[i] + windows[i]] = block[-1]
            path = f"f{file_no:06}.txt"
            (root / path).write_text("synthetic")
            stat = (root / path).stat()
            store.write_file(path, stat.st_size, stat.st_mtime_ns, f"h{file_no}", "text", chunks, block,
                             metadata=metadata(file_no))
        store.tidy(bulk=True)
        rebuild: dict[str, list[float]] = {"vector": [], "keyword": []}
        for _ in ("from scratch", "one file changed"):
            for name, copy in (("vector", vector_cache), ("keyword", keyword_cache)):
                started = time.perf_counter()
                copy.refresh(store)
                rebuild[name].append(time.perf_counter() - started)
            store.write_file(path, stat.st_size, stat.st_mtime_ns, f"h{file_no}", "text", chunks, block)
        vector_cache.refresh(store)
        keyword_cache.refresh(store)
    return kb, matrix, starts, rebuild


def serve_queries(root: str, home: str, queries: list[str]) -> float:
    """In a fresh process: open the index, answer every query in hybrid mode, return peak RSS in MB."""
    kb = KnowledgeBase(parse_knowledgebase({"directories": [root]}), Path(home))
    for query in queries:
        kb.search(query, k=10)
    return peak_rss_mb()


def vec0_timings(kb: KnowledgeBase, queries: list[str]) -> list[float]:
    """The brute-force sqlite-vec KNN the vector cache replaces, query embedding included."""
    timings = []
    with IndexStore(kb.index_path(kb.config.directories[0]), create=False) as store:
        for query in queries:
            started = time.perf_counter()
            store.knn(kb.embedder().embed_query(query), 50)
            timings.append((time.perf_counter() - started) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    texts, vectors, queries = scifact_material(args.queries)
    rng = np.random.default_rng(7)
    rows, figures = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for size in (int(s) for s in args.sizes.split(",")):
            kb, matrix, starts, rebuild = build(Path(scratch) / f"n{size}", size, texts, vectors, rng)
            embedder = kb.embedder()
            for query in queries[:5]:  # warm caches and the model
                kb.search(query, k=10)
            timings: dict[str, list[float]] = {"keyword": [], "vector": [], "hybrid": [], "query embedding alone": [],
                                               "numpy exact": []}
            found = []
            for query in queries:
                for mode in ("keyword", "vector", "hybrid"):
                    started = time.perf_counter()
                    hits = kb.search(query, k=10, mode=mode).hits
                    timings[mode].append((time.perf_counter() - started) * 1000)
                    if mode == "vector":  # a text repeated word for word is one hit, its copies in also_in
                        found.append({(place.path, place.start_line) for h in hits for place in (h, *h.also_in)})
                started = time.perf_counter()
                embedder.embed_query(query)
                timings["query embedding alone"].append((time.perf_counter() - started) * 1000)
            recall = []
            # The baseline runs after our searches, with numpy's default BLAS threads: its workers keep
            # spinning after each product, which would slow whatever runs next.
            for query, ours in zip(queries, found):
                started = time.perf_counter()
                q = embedder.embed_query(query)
                best = np.maximum.reduceat(matrix @ q, starts)  # each chunk's best window
                top = np.argpartition(-best, 10)[:10]
                timings["numpy exact"].append((time.perf_counter() - started) * 1000)
                exact = {(f"f{i // CHUNKS_PER_FILE:06}.txt", i % CHUNKS_PER_FILE + 1) for i in top}
                recall.append(len(ours & exact) / 10)
            timings["vector via sqlite-vec scan"] = vec0_timings(kb, queries[:10])
            with IndexStore(kb.index_path(kb.config.directories[0]), create=False) as opened:
                size_mb = opened.size_bytes() / 1e6
            with multiprocessing.get_context("spawn").Pool(1) as child:
                rss = child.apply(serve_queries, (str(kb.config.directories[0].path), str(kb.hermes_home), queries))
            baseline = statistics.median(timings["numpy exact"])
            for mode, values in timings.items():
                p50 = statistics.median(values)
                rows.append([f"{size:,} ({len(matrix):,} vectors)", mode, f"{p50:.1f}", f"{percentile(values, 0.95):.1f}", f"{p50 / baseline:.2f}x",
                             f"{statistics.mean(recall):.3f}" if mode == "vector" else "",
                             f"{size_mb / size * 1e6 / 1024:.1f} KB" if mode == "keyword" else "",
                             f"{rss:.0f} MB" if mode == "hybrid" else "",
                             " / ".join(f"{t:.2f} s" for t in rebuild[mode]) if mode in rebuild else ""])
                figures.append({"chunks": size, "vectors": len(matrix), "search": mode, "p50_ms": p50,
                                "p95_ms": percentile(values, 0.95), "peak_rss_mb": rss,
                                "recall_at_10": statistics.mean(recall) if mode == "vector" else None})
            del matrix
    report("Warm query latency, embedding included (k=10)",
           ["chunks", "search", "p50 ms", "p95 ms", "vs numpy exact", "recall@10 vs exact", "index bytes/chunk",
            "peak RSS, fresh process", "cache refresh: from scratch / one file changed"],
           rows, write=not args.no_write)
    if not args.no_write:
        save_figures("query_latency", figures)


if __name__ == "__main__":
    main()
