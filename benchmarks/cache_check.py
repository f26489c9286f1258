"""What the derived caches' checksums cost: the quick check when a copy is mapped, the full check
(`verify`, and an index run that finds nothing changed), and the checksum pass added to a build.

The copies are synthetic but sized like real ones: 1.77 window vectors a chunk (384 dimensions, as
SciFact's chunks have at the default size) and ~80 distinct terms a chunk. Timings are with the file in
the page cache (a copy just built, or searched before); a cold check reads the same bytes from disk.

    python benchmarks/cache_check.py --sizes 10000,100000,1000000
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

from hermes_kb.agent.knowledgebase.index import derived_file, encoding, keyword_cache, vector_cache  # noqa: E402

VECTORS_PER_CHUNK = 1.77
DIM = 384
TERMS_PER_CHUNK = 80


def timed(action, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        derived_file._checked.clear()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def vector_batches(count: int, rng):
    for begin in range(0, count, 50_000):
        n = min(50_000, count - begin)
        yield (np.arange(begin, begin + n, dtype=np.int64) << 5), rng.standard_normal((n, DIM), dtype=np.float32)


def term_rows(chunks: int, rng):
    vocabulary = 200_000
    weights = 1 / np.arange(1, vocabulary + 1)
    weights /= weights.sum()
    hashes = rng.integers(0, 2**63, size=vocabulary, dtype=np.uint64)
    drawn = rng.choice(vocabulary, size=(chunks, TERMS_PER_CHUNK), p=weights)
    for chunk in range(1, chunks + 1):
        picked = np.unique(drawn[chunk - 1])
        records = np.empty(len(picked), dtype=encoding.TERM_RECORD)
        records["hash"], records["count"] = hashes[picked], 1
        yield chunk, len(picked), records.tobytes()


def measure(kind: str, chunks: int, folder: Path, rng) -> dict:
    if kind == "vector":
        path, count = folder / f"v{chunks}.vectors", int(chunks * VECTORS_PER_CHUNK)
        started = time.perf_counter()
        vector_cache.build(path, "g:1", DIM, count, vector_batches(count, rng))
        build = time.perf_counter() - started
        module, opener = vector_cache, vector_cache.VectorCache
    else:
        path = folder / f"k{chunks}.terms"
        rows = list(term_rows(chunks, rng))
        started = time.perf_counter()
        keyword_cache.build(path, "g:1", rows)
        build = time.perf_counter() - started
        module, opener = keyword_cache, keyword_cache.KeywordCache
    size = path.stat().st_size
    places, _ = module._places_of(derived_file._parse_header(path.read_bytes()[:derived_file.HEADER_BYTES], module.MAGIC))
    table_at, _, blocks = places[derived_file.CHECKSUMS]
    with open(path, "rb") as handle:
        checksum_pass = timed(lambda: list(derived_file._block_crcs(handle.fileno(), range(blocks), table_at)), 3)
    mapped = timed(lambda: opener(path))
    full = timed(lambda: module.verify(path, full=True), 3)
    path.unlink()
    return {"cache": kind, "chunks": chunks, "file_mb": round(size / 2**20), "build_s": round(build, 2),
            "checksum_pass_in_build_s": round(checksum_pass, 3), "map_ms": round(mapped * 1000, 1),
            "full_check_ms": round(full * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--keyword-sizes", default="10000,100000,150000", help="above ~150k chunks FTS5 serves")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as folder:
        for chunks in map(int, args.sizes.split(",")):
            print(measure("vector", chunks, Path(folder), rng), flush=True)
        for chunks in map(int, args.keyword_sizes.split(",")):
            print(measure("keyword", chunks, Path(folder), rng), flush=True)


if __name__ == "__main__":
    main()
