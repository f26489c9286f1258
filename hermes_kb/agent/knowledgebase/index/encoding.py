"""How an index names what it holds, the same in both stores and in the copies searches read: a
vector's id is its chunk's id and its window, a chunk's terms are packed records of 64-bit term
hashes and counts, and each copy's file sits beside the index under a fixed name."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

WINDOW_BITS = 5  # a vector's id is chunk_id << 5 | window: at most 32 windows a chunk (chunker.MAX_WINDOWS)


def vector_ids(chunk_id: int, windows: int) -> list[int]:
    return [(chunk_id << WINDOW_BITS) + window for window in range(windows)]


def all_vector_ids(chunk_ids: Iterable[int]) -> list[int]:
    """Every id a chunk's vectors may have: how a caller that does not know its window count asks for them."""
    return [vector_id for chunk_id in chunk_ids for vector_id in vector_ids(chunk_id, 1 << WINDOW_BITS)]


def best_per_chunk(ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """(chunk id, its best window's score), best first: a chunk is as close as its closest window."""
    order = np.argsort(-scores, kind="stable")
    chunks = ids[order] >> WINDOW_BITS
    _, first = np.unique(chunks, return_index=True)
    first = np.sort(first)[:k]
    return list(zip(chunks[first].tolist(), scores[order][first].tolist()))


EXACT_BATCH_CHUNKS = 4_096  # chunks whose vectors are read at once when a filtered search compares exactly


def exact_knn(vectors_for: Callable[[Sequence[int]], dict[int, np.ndarray]], query: np.ndarray, k: int,
              allowed: np.ndarray) -> list[tuple[int, float]]:
    """The k allowed chunks nearest the query, every one compared: a store's filtered search when no
    current copy exists (its own KNN index cannot be limited to a set of chunks)."""
    query = np.asarray(query, dtype=np.float32)
    if not np.any(query) or k < 1:
        return []
    best: list[tuple[int, float]] = []
    for begin in range(0, len(allowed), EXACT_BATCH_CHUNKS):
        stored = vectors_for(allowed[begin:begin + EXACT_BATCH_CHUNKS].tolist())
        best += [(chunk_id, float((windows @ query).max())) for chunk_id, windows in stored.items()]
        best = sorted(best, key=lambda pair: (-pair[1], pair[0]))[:k]
    return best


def group_by_chunk(ids: np.ndarray, vectors: np.ndarray) -> dict[int, np.ndarray]:
    """Rows of vectors gathered per chunk, in window order."""
    if not len(ids):
        return {}
    order = np.argsort(ids, kind="stable")
    chunks = ids[order] >> WINDOW_BITS
    starts = np.flatnonzero(np.r_[True, chunks[1:] != chunks[:-1]])
    return {int(chunks[a]): vectors[order[a:b]] for a, b in zip(starts, [*starts[1:], len(chunks)])}


def term_hash(term: str) -> int:
    """A 64-bit name for a term: fixed-width keys search with numpy, and collisions are ~2^-64 a pair."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little")


# One packed record per distinct term of a chunk: records of all chunks concatenate into one array.
TERM_RECORD = np.dtype([("hash", "<u8"), ("count", "<u2")])


def pack_terms(text_terms: Sequence[str], heading_terms: Sequence[str]) -> tuple[int, bytes]:
    """(tokens in the chunk, packed term records) over both FTS columns, weighted 1 each as in FTS5."""
    counts = Counter(text_terms)
    counts.update(heading_terms)
    records = np.empty(len(counts), dtype=TERM_RECORD)
    records["hash"] = np.fromiter((term_hash(t) for t in counts), dtype=np.uint64, count=len(counts))
    records["count"] = np.minimum(np.fromiter(counts.values(), dtype=np.int64, count=len(counts)), 65535)
    return sum(counts.values()), records.tobytes()


def term_hashes(packed: bytes) -> list[int]:
    """The term hashes of packed records, as signed 64-bit integers (what PostgreSQL's bigint holds)."""
    return np.frombuffer(packed, dtype=TERM_RECORD)["hash"].astype(np.int64).tolist()


def query_hashes(terms: Sequence[str]) -> list[int]:
    """Terms' hashes as term_hashes writes them."""
    return np.array([term_hash(t) for t in terms], dtype=np.uint64).astype(np.int64).tolist()


def posting_count(packed_bytes: int) -> int:
    return packed_bytes // TERM_RECORD.itemsize


def vector_copy_path(index_path: Path) -> Path:
    return Path(f"{index_path}.vectors")


def keyword_copy_path(index_path: Path) -> Path:
    return Path(f"{index_path}.terms")
