"""A memory-mapped copy of one index's vectors, so vector search stays fast at a million chunks.

`chunk_vec` (sqlite-vec) stays the source of truth, but its KNN is a brute-force
scan inside SQLite: about 100 ms at 100k chunks on this hardware, against 9 ms
for a numpy product over the same vectors. This file holds the vectors as one
float32 matrix (unit rows), an int8 copy (per-dimension scale) and 1-bit
codes of the mean-centred vectors. Up to EXACT_SCAN_ROWS rows the matrix is
scanned exactly; above that, Hamming distance over the codes picks a
shortlist, the int8 copy ranks it, and its best rows are re-scored in float32.
That keeps 1M chunks searchable in tens of milliseconds, and a long-running
process maps at most the codes and the int8 copy (432 MB at 1M), never the
1.5 GB float matrix.

The file is written beside the index after an index run changed something, by
the process holding the writer lock, and swapped in with one rename (hence one
hand-laid-out file rather than several .npy files). It records the index's
generation; a reader uses it only when that equals the generation in the same
read snapshot, so a stale copy is never searched: the caller falls back to
sqlite-vec until the next rebuild. A large copy a few changes behind is kept
instead of rebuilt: searches take it with the current vectors of the chunks
the index logged as changed since (VectorDelta, store.VECTOR_LOG). Its
checksums (derived_file) are checked when it is mapped: in full up to 64 MB
of data (~19k vectors); above that the arrays every search reads in full or
indexes with (ids, codes, mean, scale) and 8 random 1 MiB blocks, so a
damaged copy is refused like a stale one. The index run checks every block
before it keeps a copy as current.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from . import derived_file
from .derived_file import replacing, write_header
from .encoding import WINDOW_BITS, best_per_chunk, exact_knn, group_by_chunk
from .encoding import vector_copy_path as cache_path

MAGIC = b"HERMESKBVEC2\n"  # 2: checksums
EXACT_SCAN_ROWS = 10_000  # up to this an exact product is ~2 ms; at 17k SciFact window vectors 4.3 ms vs 0.9 ms shortlisted, recall@10 1.000
MIN_SHORTLIST = 1_500  # rows kept by the Hamming pass
SHORTLIST_FRACTION = 1 / 320  # of the vectors: recall@10 0.989 at 1.77M window vectors (0.996 at 1/160, 0.981 at 1/480)
HAMMING_BLOCK = 16_384  # rows per step of the Hamming pass: its working set (~0.9 MB at 384 bits) stays in L2
RESCORE_ROWS = 200  # shortlist rows re-scored in float32 after the int8 pass (at least 4k)
MAPPED_FLOAT_BYTES = 256 << 20  # float matrices up to this are read through the mapping; larger ones with pread
ALWAYS_CHECKED = ("ids", "sorted_ids", "sorted_rows", "mean", "scale", "codes")  # on every mapping: searches index with them
# A copy of at least DELTA_MIN_ROWS vectors is not rebuilt after a change touching at most DELTA_CHUNKS
# chunks: searches take it with those chunks' vectors (VectorDelta). At 1M chunks a rebuild costs ~10 s
# and meanwhile other processes' searches scan sqlite-vec (1.3 s a query); reading 2,000 recently written
# chunks' vectors costs a reader 0.065 s once per index change. Below 50k vectors a rebuild costs < 0.5 s.
DELTA_CHUNKS = 2_000
DELTA_MIN_ROWS = 50_000


def spans(begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Every position in [begins[i], ends[i]) for each i, concatenated."""
    lengths = ends - begins
    if not lengths.sum():
        return np.empty(0, dtype=np.int64)
    return np.repeat(begins - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))


@functools.lru_cache(maxsize=1)
def _blas():
    """One BLAS thread for our products: OpenBLAS workers spin after a call and starve onnxruntime,
    which embeds the next query; the products here are small enough not to need them."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _words(dim: int) -> int:
    return (dim + 63) // 64


def _places(count: int, dim: int) -> tuple[derived_file.Places, int]:
    return derived_file.layout({
        "ids": (np.int64, count), "sorted_ids": (np.int64, count), "sorted_rows": (np.int64, count),
        "vectors": (np.float32, count * dim), "mean": (np.float32, dim), "codes": (np.uint64, _words(dim) * count),
        "scale": (np.float32, dim), "quantized": (np.int8, count * dim)})


def _places_of(info: dict) -> tuple[derived_file.Places, int]:
    return _places(int(info["count"]), int(info["dim"]))


def _sign_codes(block: np.ndarray, mean: np.ndarray, words: int) -> np.ndarray:
    """(words, rows) uint64: bit set where a component is above the corpus mean."""
    bits = np.packbits(block > mean, axis=1)
    padded = np.zeros((len(block), words * 8), dtype=np.uint8)
    padded[:, :bits.shape[1]] = bits
    return padded.view(np.uint64).T


def build(path: Path, generation: str, dim: int, count: int,
          batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> None:
    """Write the cache from (ids, vectors) batches in any order; memory stays at one batch plus
    the codes and id arrays (72 bytes a row)."""
    places, size = _places(count, dim)
    at = {name: place[0] for name, place in places.items()}
    words = _words(dim)
    total = np.zeros(dim, dtype=np.float64)
    peak = np.zeros(dim, dtype=np.float32)
    ids = np.empty(count, dtype=np.int64)
    written = 0
    with replacing(path) as handle:
        handle.truncate(size)
        handle.seek(at["vectors"])
        for batch_ids, block in batches:
            block = _unit_rows(np.asarray(block, dtype=np.float32))
            if written + len(block) > count:
                raise ValueError("more vectors than announced; the index changed during the rebuild")
            ids[written:written + len(block)] = batch_ids
            handle.write(block.tobytes())
            total += block.sum(axis=0, dtype=np.float64)
            if len(block):
                peak = np.maximum(peak, np.abs(block).max(axis=0))
            written += len(block)
        if written != count:
            raise ValueError("fewer vectors than announced; the index changed during the rebuild")
        mean = (total / max(count, 1)).astype(np.float32)
        scale = (np.where(peak == 0, 1, peak) / 127).astype(np.float32)
        codes = np.empty((words, count), dtype=np.uint64)
        handle.flush()
        with open(handle.name, "rb") as reader:
            for begin, block in _read_blocks(reader, at["vectors"], count, dim):
                codes[:, begin:begin + len(block)] = _sign_codes(block, mean, words)
                handle.seek(at["quantized"] + begin * dim)
                handle.write(np.clip(np.round(block / scale), -127, 127).astype(np.int8).tobytes())
        order = np.argsort(ids, kind="stable")
        handle.seek(at["ids"])
        handle.write(ids.tobytes())
        handle.write(ids[order].tobytes())
        handle.write(order.astype(np.int64).tobytes())
        handle.seek(at["mean"])
        handle.write(mean.tobytes())
        handle.seek(at["codes"])
        handle.write(codes.tobytes())
        handle.seek(at["scale"])
        handle.write(scale.tobytes())
        write_header(handle, MAGIC, {"generation": generation, "count": count, "dim": dim}, places)


def _unit_rows(block: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    return block / np.where(norms == 0, 1, norms)


def _read_blocks(reader, start: int, count: int, dim: int, rows: int = 8192) -> Iterator[tuple[int, np.ndarray]]:
    """The matrix back in blocks through read(), not a mapping, so building leaves no pages mapped."""
    reader.seek(start)
    for begin in range(0, count, rows):
        n = min(rows, count - begin)
        yield begin, np.frombuffer(reader.read(4 * n * dim), dtype=np.float32).reshape(n, dim)


def refresh(store) -> bool:
    """Rebuild the cache of an open store (contract.Store) whose content moved on; True when it was rebuilt.

    The caller holds the writer lock, so nothing changes underneath; the snapshot is belt and braces.
    """
    path = cache_path(store.path)
    derived_file.remove_leftovers(path)  # temporaries of a build that was killed
    with store.snapshot():
        generation = store.generation()
        # Every block is checked (a damaged copy is rebuilt), but only of a copy whose header claims
        # this state: checking an older copy read all of it for nothing (7 s of 19 at 1M chunks).
        header = derived_file.claimed(path, MAGIC) or {}
        if header.get("generation") == generation and read_generation(path, full=True) == generation:
            return False
        # A large copy a few changes behind stays (quick check only: every block was checked when it
        # became current); searches take it with the changed chunks' vectors.
        if delta_since(store, header, generation) is not None and read_generation(path) == header["generation"]:
            return False
        identity = store.model_identity()
        if identity is None or not store.has_vector_table():
            path.unlink(missing_ok=True)
            return False
        # Closed before the snapshot ends, even when the build fails: on PostgreSQL the rows come
        # through a server-side cursor inside its own transaction block.
        with contextlib.closing(store.iter_vectors()) as batches:
            build(path, generation, identity.dim, store.vector_count(), batches)
    store.prune_vector_log(generation)
    return True


def delta_since(store, header: dict | None, generation: str) -> np.ndarray | None:
    """The chunk ids (ascending) whose vectors changed between the state of a copy (its `header`) and
    the index's current one, when that copy may be searched with them (VectorDelta); else None: it is
    small, of another state or model, not the copy this index's history last built (an index restored
    from a backup, a copy an older version built), or too far behind."""
    header = header or {}
    if not derived_file.earlier_state(header.get("generation"), generation):
        return None
    try:
        if int(header["count"]) < DELTA_MIN_ROWS or int(header["dim"]) != int(store.meta("dimension") or 0):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    if header["generation"] != store.meta("vector_copy_built"):
        return None
    touched = store.vectors_touched_since(derived_file.counter(header["generation"]), DELTA_CHUNKS)
    return None if touched is None else np.array(touched, dtype=np.int64)


def read_generation(path: Path, full: bool = False) -> str | None:
    """The generation of the copy at `path` (a cache_path), or None when it is missing, from another
    version, or fails its checksums: the quick check of a mapping, or every block with `full`."""
    return derived_file.read_generation(path, MAGIC, _places_of, ALWAYS_CHECKED, full)


def verify(path: Path, full: bool = True) -> str | None:
    """One sentence saying what is wrong with the copy at `path` (a cache_path), or None when it passes
    or does not exist. `full` reads every block (~0.3 s at 100k chunks); without it, the quick check."""
    return derived_file.check(path, MAGIC, "vector cache", _places_of, full, ALWAYS_CHECKED)


def state(path: Path, generation: str, full: bool = False) -> str:
    """"current", "stale" (missing, older, or from another version) or "corrupt" (fails its checks):
    what status shows for the copy at `path` (a cache_path) against the index's generation."""
    return derived_file.state(path, generation, MAGIC, "vector cache", _places_of, full, ALWAYS_CHECKED)


def serving_state(store) -> tuple[str, int | None]:
    """state() of this store's copy, where a copy kept a few changes behind (delta_since) counts as
    current; with how many changed chunks searches compare beside it (None: none, or not current)."""
    path, generation = cache_path(store.path), store.generation()
    found = state(path, generation)
    touched = delta_since(store, derived_file.claimed(path, MAGIC), generation) if found == "stale" else None
    return (found, None) if touched is None else ("current", len(touched))


def leftovers(index_path: Path) -> list[Path]:
    """Temporary files of this index's vector cache left by a killed build."""
    return derived_file.leftovers(cache_path(index_path))


def remove_leftovers(index_path: Path) -> list[Path]:
    """Delete them; the paths removed."""
    return derived_file.remove_leftovers(cache_path(index_path))


class VectorCache:
    """An open cache file. Cheap to keep open: only the codes are read in full per query."""

    def __init__(self, path: Path):
        mapped = derived_file.open_mapped(path, MAGIC, "vector cache", _places_of, ALWAYS_CHECKED)
        self._file = mapped.file  # for pread()
        self._vectors_at = mapped.places["vectors"][0]
        self.header: dict = mapped.info  # generation, count and dim (delta_since)
        self.generation: str = mapped.info["generation"]
        self.count, self.dim = int(mapped.info["count"]), int(mapped.info["dim"])
        arrays = mapped.arrays
        self.ids, self.sorted_ids, self.sorted_rows = arrays["ids"], arrays["sorted_ids"], arrays["sorted_rows"]
        self.vectors = arrays["vectors"].reshape(self.count, self.dim)
        self.mean, self.scale = arrays["mean"].copy(), arrays["scale"].copy()
        self.codes = arrays["codes"].reshape(_words(self.dim), self.count)
        self.quantized = arrays["quantized"].reshape(self.count, self.dim)

    def knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None,
            without: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine of its best window), best first; exact up to EXACT_SCAN_ROWS rows. With
        `allowed` (a filter's chunk ids, ascending), only those chunks' rows are ranked: exactly when
        they are few, else shortlisted among themselves, so a narrow filter never comes back short.
        The chunks of `without` (ascending ids: changed since this copy, VectorDelta) are left out."""
        query = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if self.count == 0 or norm == 0 or k < 1:
            return []
        query = query / norm
        dropped = None
        if without is not None and len(without):
            if allowed is not None:
                allowed = allowed[~np.isin(allowed, without)]
            else:
                dropped = self._rows_of(without)
        among = None if allowed is None else self._rows_of(allowed)
        ranked = (self.count - (0 if dropped is None else len(dropped))) if among is None else len(among)
        if ranked > EXACT_SCAN_ROWS:  # no row list of the whole index first: 14 MB a query at 1M chunks
            rows = self._shortlist(query, max(MIN_SHORTLIST, 20 * k, int(ranked * SHORTLIST_FRACTION)), among, dropped)
        elif among is None:
            rows = np.arange(self.count) if dropped is None else np.setdiff1d(np.arange(self.count), dropped)
        else:
            rows = among
        if not len(rows):
            return []
        rescore = max(RESCORE_ROWS, 4 * k)
        with _blas().limit(limits=1, user_api="blas"):
            if len(rows) > rescore:
                # The int8 copy ranks the shortlist; only the best few rows are read in float32.
                approx = self.quantized[rows].astype(np.float32) @ (query * self.scale)
                rows = rows[np.argpartition(-approx, rescore - 1)[:rescore]]
            scores = self._float_rows(rows) @ query
        if len(rows) > 4 * k:  # enough windows for k chunks: most have one or two
            best = np.argpartition(-scores, 4 * k - 1)[:4 * k]
            rows, scores = rows[best], scores[best]
        return best_per_chunk(self.ids[rows], scores, k)

    def _rows_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Row positions of these chunks' window vectors, ascending."""
        begins = np.searchsorted(self.sorted_ids, chunk_ids << WINDOW_BITS)
        ends = np.searchsorted(self.sorted_ids, (chunk_ids + 1) << WINDOW_BITS)
        return np.sort(self.sorted_rows[spans(begins, ends)])

    def _shortlist(self, query: np.ndarray, size: int, among: np.ndarray | None = None,
                   dropped: np.ndarray | None = None) -> np.ndarray:
        """Row positions of the `size` codes nearest the query's (ties cut by position), in row order;
        only rows of `among` (ascending positions) when given, never rows of `dropped`."""
        code = _sign_codes(query[None, :], self.mean, self.codes.shape[0])[:, 0]
        distance = np.empty(self.count, dtype=np.uint16)

        # In blocks that stay in cache, with no temporaries: whole-array expressions wrote and re-read
        # three arrays the size of the index per code word (32 ms at 1.77M rows). Each step takes every
        # code word at once: four numpy calls a block, each releasing the GIL for the keyword pass that a
        # hybrid search runs beside it (retriever._gather). One thread: split over two, the pass measured
        # no faster at 1.77M rows, alone or beside the keyword pass.
        words = self.codes.shape[0]
        flipped = np.empty((words, HAMMING_BLOCK), dtype=np.uint64)
        bits = np.empty((words, HAMMING_BLOCK), dtype=np.uint8)
        histogram = np.zeros(64 * words + 1, dtype=np.int64)
        for begin in range(0, self.count, HAMMING_BLOCK):
            end = min(begin + HAMMING_BLOCK, self.count)
            x, b, part = flipped[:, :end - begin], bits[:, :end - begin], distance[begin:end]
            np.bitwise_xor(self.codes[:, begin:end], code[:, None], out=x)
            np.bitwise_count(x, out=b)
            np.add.reduce(b, axis=0, dtype=np.uint16, out=part)
            histogram += np.bincount(part, minlength=len(histogram))
        if among is not None:  # the rows left out go past every distance, so the cut-off counts the rest
            histogram = np.bincount(distance[among], minlength=len(histogram))
            kept = distance[among]
            distance[:] = np.iinfo(distance.dtype).max
            distance[among] = kept
            size = min(size, len(among))
        elif dropped is not None:
            histogram -= np.bincount(distance[dropped], minlength=len(histogram))
            distance[dropped] = np.iinfo(distance.dtype).max
            size = min(size, self.count - len(dropped))
        # A histogram threshold instead of argpartition: distances are small integers, and a
        # partial sort of a million of them costs more than the Hamming pass itself.
        cumulative = np.cumsum(histogram)
        cutoff = int(np.searchsorted(cumulative, min(size, self.count)))
        below = np.flatnonzero(distance < cutoff)
        tied = np.flatnonzero(distance == cutoff)[:size - len(below)]
        return np.sort(np.concatenate([below, tied]))

    def vectors_for(self, chunk_ids: Iterable[int]) -> dict[int, np.ndarray]:
        """Each chunk's window vectors, one row per window."""
        wanted = np.fromiter(chunk_ids, dtype=np.int64)
        if self.count == 0 or len(wanted) == 0:
            return {}
        begins = np.searchsorted(self.sorted_ids, wanted << WINDOW_BITS)
        ends = np.searchsorted(self.sorted_ids, (wanted + 1) << WINDOW_BITS)
        positions = spans(begins, ends)
        return group_by_chunk(self.sorted_ids[positions], self._float_rows(self.sorted_rows[positions]))

    def _float_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the float32 matrix. A large matrix is read with pread, not through the mapping:
        the kernel maps 64 KB around every faulted row (fault-around), so a long session would map
        most of the 1.5 GB matrix at 1M chunks. 200 preads cost ~1.3 ms more than the mapping, so
        a matrix small enough to be mapped whole (150 MB at 100k chunks) is read through it."""
        if 4 * self.count * self.dim <= MAPPED_FLOAT_BYTES:
            return np.asarray(self.vectors[rows])
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        row_bytes, start = 4 * self.dim, self._vectors_at
        for i, row in enumerate(rows.tolist()):
            os.preadv(self._file.fileno(), [out[i]], start + row * row_bytes)
        return out


class VectorDelta:
    """A copy a few changes behind its index, and the current vectors of the chunks changed since,
    searched as one (see DELTA_CHUNKS). Exact, not approximate: the changed chunks' rows of the copy
    are left out, and their current vectors compared in full, so it finds what a rebuilt copy finds
    (equal scores may come in another order)."""

    def __init__(self, copy: VectorCache, generation: str, touched: np.ndarray, vectors: dict[int, np.ndarray]):
        """`touched`: ascending ids of the chunks whose vectors were written or deleted since the copy;
        `vectors`: the current window vectors of those that have some."""
        self.copy, self.generation, self.touched = copy, generation, touched
        self._touched = set(touched.tolist())
        self._vectors = {chunk_id: _unit_rows(np.atleast_2d(np.asarray(rows, dtype=np.float32)))
                         for chunk_id, rows in vectors.items()}

    def knn(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        older = self.copy.knn(query, k, allowed, without=self.touched)
        query = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        newer_ids = np.fromiter(self._vectors, dtype=np.int64, count=len(self._vectors))
        if allowed is not None:
            newer_ids = newer_ids[np.isin(newer_ids, allowed)]
        newer = [] if norm == 0 else exact_knn(lambda ids: {i: self._vectors[i] for i in ids}, query / norm, k, np.sort(newer_ids))
        return sorted([*older, *newer], key=lambda pair: (-pair[1], pair[0]))[:k]

    def vectors_for(self, chunk_ids: Iterable[int]) -> dict[int, np.ndarray]:
        chunk_ids = list(chunk_ids)
        found = self.copy.vectors_for(chunk_id for chunk_id in chunk_ids if chunk_id not in self._touched)
        found.update((chunk_id, self._vectors[chunk_id]) for chunk_id in chunk_ids if chunk_id in self._vectors)
        return found
