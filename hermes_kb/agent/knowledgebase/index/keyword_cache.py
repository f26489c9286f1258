"""BM25 from a memory-mapped inverted index, so keyword search costs about a millisecond at 100k chunks.

FTS5 ranks by computing bm25() for every row that matches any OR-ed query
word, about 1 µs a row: 50 ms for a SciFact claim at 100k chunks, 6 ms even
with the keyword row budget dropping its commonest words. This file holds,
for every term, the rows that contain it with their BM25 weight already
computed (FTS5's own formula and constants, so rankings agree), and a query
adds up a few posting lists with numpy: every query word counts, no budget.

The terms of each chunk are computed once, when the chunk is written, and
kept in the index (`chunk_terms`), so a first build only reads and sorts
them, and later ones merge in only the chunks written since.
FTS5 stays the source of truth: a copy whose generation does not match the
index is never used, and the search falls back to FTS5 until the rebuild. Its checksums (derived_file)
are checked in full whenever it is mapped (at most ~140 MB under
MAX_POSTINGS: ~35 ms), since a damaged row or offset could make a search
allocate gigabytes; a damaged copy is refused like a stale one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from .. import analysis
from . import derived_file
from .bm25 import K1, B, Languages, bm25, idf, query_counts
from .derived_file import replacing, write_header
from .encoding import TERM_RECORD, pack_terms, posting_count, term_hash
from .encoding import keyword_copy_path as cache_path

MAGIC = b"HERMESKBKEY2\n"  # 2: checksums
MAX_POSTINGS = 12_000_000  # ~150k chunks of prose; building holds ~50 bytes a posting, so above this FTS5 serves


def _distinct(values: np.ndarray) -> np.ndarray:
    """np.unique's result without np.unique: it imports numpy.ma (11 ms of a cold search) to ask
    whether a plain array is masked."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _stems(text: str, languages: Languages, query: analysis.AnalysedQuery | None = None) -> np.ndarray:
    """The distinct term hashes of `text` as a query (analysis.query_terms), sorted: how it is looked up."""
    return np.array(sorted({term_hash(t) for t in analysis.terms_of(text, languages, query)}), dtype=np.uint64)


def chunk_terms(text: str, heading: str) -> tuple[int, bytes]:
    return pack_terms(*analysis.index_tokens(text, heading)[:2])


def over_limit(store) -> bool:
    """True when the index has too many postings to sort in memory: FTS5 then serves keyword search."""
    return posting_count(store.term_totals()[1]) > MAX_POSTINGS


def _places(count: int, terms: int, postings: int) -> tuple[derived_file.Places, int]:
    return derived_file.layout({
        "ids": (np.int64, count), "tokens": (np.float64, count), "hashes": (np.uint64, terms),
        "offsets": (np.int64, terms + 1), "rows": (np.int32, postings), "weights": (np.float32, postings),
        "counts": (np.uint16, postings)})


def _places_of(info: dict) -> tuple[derived_file.Places, int]:
    return _places(int(info["count"]), int(info["terms"]), int(info["postings"]))


@dataclass
class _Postings:
    """Every posting sorted by term hash, and the per-chunk arrays its rows point into (ids ascending)."""
    ids: np.ndarray
    tokens: np.ndarray
    hashes: np.ndarray
    rows: np.ndarray
    counts: np.ndarray


def _collect(rows: Iterable[tuple[int, int, bytes]]) -> _Postings:
    """From (chunk id, tokens, packed term records) rows in chunk id order."""
    rows = list(rows)
    count = len(rows)
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=count)
    tokens = np.fromiter((row[1] for row in rows), dtype=np.float64, count=count)
    row_of = np.repeat(np.arange(count, dtype=np.int32), [posting_count(len(row[2])) for row in rows])
    records = np.frombuffer(b"".join(row[2] for row in rows), dtype=TERM_RECORD)
    del rows
    order = np.argsort(records["hash"], kind="stable")  # ~40% faster than the default sort here
    return _Postings(ids, tokens, records["hash"][order], row_of[order], records["count"][order])


def _merged(previous: "KeywordCache", ids: np.ndarray, tokens: np.ndarray, fresh: _Postings) -> _Postings:
    """The previous copy's postings for chunks that still exist unchanged, with the fresh chunks' merged in.

    Both inputs are sorted by hash, so this is a linear merge instead of sorting every posting again.
    """
    survives = np.isin(previous.ids, ids) & ~np.isin(previous.ids, fresh.ids)
    keep = survives[previous.rows]
    old_hashes = np.repeat(previous.hashes, np.diff(previous.offsets))[keep]
    old_rows = np.searchsorted(ids, previous.ids)[previous.rows[keep]]
    new_rows = np.searchsorted(ids, fresh.ids)[fresh.rows]
    at = np.searchsorted(old_hashes, fresh.hashes, side="right")
    return _Postings(ids, tokens, np.insert(old_hashes, at, fresh.hashes),
                     np.insert(old_rows, at, new_rows).astype(np.int32), np.insert(previous.counts[keep], at, fresh.counts))


def _write(path: Path, generation: str, postings: _Postings) -> None:
    """BM25 weights for every posting (they depend on every chunk, through IDF and the mean length), then the file."""
    count, total = len(postings.ids), len(postings.hashes)
    starts = np.flatnonzero(postings.hashes[1:] != postings.hashes[:-1]) + 1
    offsets = np.concatenate([[0], starts, [total]]).astype(np.int64) if total else np.zeros(1, np.int64)
    frequency_of_term = np.diff(offsets)
    term_idf = idf(count, frequency_of_term)
    relative_length = postings.tokens[postings.rows] / max(postings.tokens.mean() if count else 1.0, 1e-9)
    frequencies = postings.counts.astype(np.float32)
    weights = (np.repeat(term_idf, frequency_of_term) * frequencies * (K1 + 1)
               / (frequencies + K1 * (1 - B + B * relative_length))).astype(np.float32)
    arrays = {"ids": postings.ids, "tokens": postings.tokens, "hashes": postings.hashes[offsets[:-1]],
              "offsets": offsets, "rows": postings.rows, "weights": weights, "counts": postings.counts}
    places, size = _places(count, len(offsets) - 1, total)
    with replacing(path) as handle:
        handle.truncate(size)
        for name, (offset, dtype, _) in places.items():
            if name == derived_file.CHECKSUMS:
                continue
            handle.seek(offset)
            handle.write(np.ascontiguousarray(arrays[name], dtype=dtype).tobytes())
        write_header(handle, MAGIC, {"generation": generation, "count": count, "terms": len(offsets) - 1,
                                     "postings": total}, places)


def build(path: Path, generation: str, rows: Iterable[tuple[int, int, bytes]]) -> None:
    """Write the inverted index from every chunk's (chunk id, tokens, packed term records), in chunk id order."""
    _write(path, generation, _collect(rows))


def refresh(store) -> bool:
    """Bring the copy of an open store (contract.Store) up to date; True when it was rebuilt.

    When the previous copy is of the same index, only chunks written since it was built are
    read and merged in (chunk_terms.written says which); otherwise every chunk's terms are
    sorted afresh. Chunks written before `chunk_terms` existed get their terms here, once.
    The caller holds the writer lock.
    """
    path = cache_path(store.path)
    derived_file.remove_leftovers(path)  # temporaries of a build that was killed
    if read_generation(path) == store.generation():  # every block checked: a damaged copy is rebuilt
        return False  # built from this very content, so no chunk can lack its terms either
    while missing := store.chunks_without_terms(2000):
        store.save_terms([(chunk_id, *chunk_terms(text, heading)) for chunk_id, text, heading in missing])
    with store.snapshot():
        generation = store.generation()
        if read_generation(path) == generation:
            return False
        if over_limit(store):
            path.unlink(missing_ok=True)
            return False
        previous = _previous_copy(path, generation)
        if previous is not None:
            ids, tokens, written = store.term_lengths()
            changed = ids[(written > derived_file.counter(previous.generation)) | ~np.isin(ids, previous.ids)]
        if previous is None or len(changed) > len(ids) // 2:
            # Closed before the snapshot ends, even when the build fails: on PostgreSQL the rows
            # come through a server-side cursor inside its own transaction block.
            with contextlib.closing(store.iter_terms()) as rows:
                build(path, generation, rows)
        else:
            _write(path, generation, _merged(previous, ids, tokens, _collect(store.terms_of(changed.tolist()))))
    return True


def _previous_copy(path: Path, generation: str) -> "KeywordCache | None":
    """The copy on disk if it was built from an earlier state of this same index."""
    try:
        previous = KeywordCache(path)
    except (OSError, ValueError):
        return None
    return previous if derived_file.earlier_state(previous.generation, generation) else None


def read_generation(path: Path, full: bool = True) -> str | None:
    """The generation of the copy at `path` (a cache_path), or None when it is missing, from another
    version, or fails its checksums (every block is checked: the copy is small enough)."""
    return derived_file.read_generation(path, MAGIC, _places_of, None, full)


def verify(path: Path, full: bool = True) -> str | None:
    """One sentence saying what is wrong with the copy at `path` (a cache_path), or None when it passes
    or does not exist."""
    return derived_file.check(path, MAGIC, "keyword cache", _places_of, full, None)


def state(path: Path, generation: str, full: bool = True) -> str:
    """"current", "stale" (missing, older, or from another version) or "corrupt" (fails its checks):
    what status shows for the copy at `path` (a cache_path) against the index's generation."""
    return derived_file.state(path, generation, MAGIC, "keyword cache", _places_of, full, None)


def serving_state(store) -> tuple[str, None]:
    """state() of this store's copy (as vector_cache.serving_state; a keyword copy is never kept behind
    by an index run)."""
    return state(cache_path(store.path), store.generation()), None


def leftovers(index_path: Path) -> list[Path]:
    """Temporary files of this index's keyword cache left by a killed build."""
    return derived_file.leftovers(cache_path(index_path))


def remove_leftovers(index_path: Path) -> list[Path]:
    """Delete them; the paths removed."""
    return derived_file.remove_leftovers(cache_path(index_path))


class KeywordCache:
    """An open inverted index; a query reads only its own terms' posting lists."""

    def __init__(self, path: Path):
        mapped = derived_file.open_mapped(path, MAGIC, "keyword cache", _places_of)
        mapped.file.close()  # the mapping keeps its own reference; searches never pread
        self.generation: str = mapped.info["generation"]
        self.count = int(mapped.info["count"])
        arrays = mapped.arrays
        self.ids, self.hashes, self.offsets, self.tokens = arrays["ids"], arrays["hashes"], arrays["offsets"], arrays["tokens"]
        self.rows, self.weights, self.counts = arrays["rows"], arrays["weights"], arrays["counts"]

    def _locate(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in `hashes`, whether it is there) for sorted term hashes; `hashes` must not be empty."""
        positions = np.minimum(np.searchsorted(self.hashes, wanted), len(self.hashes) - 1)
        return positions, self.hashes[positions] == wanted

    def document_frequencies(self, query_words: Sequence[str], languages: Languages = (analysis.ENGLISH,),
                             query: analysis.AnalysedQuery | None = None) -> list[float]:
        """Chunks holding each word (its stems' posting lists), exact; 0 for a word the index lacks."""
        frequencies = []
        for word in query_words:
            stems = _stems(word, languages, query)
            if not len(stems) or not len(self.hashes):
                frequencies.append(0.0)
                continue
            positions, present = self._locate(stems)
            found = positions[present]
            frequencies.append(float(max((self.offsets[p + 1] - self.offsets[p] for p in found), default=0)))
        return frequencies

    def holders_of_all_terms(self, text: str, limit: int, languages: Languages = (analysis.ENGLISH,),
                             longest: int = 20_000, query: analysis.AnalysedQuery | None = None) -> list[int] | None:
        """Ids of the chunks holding every word of `text` (a term of each analysis.query_groups group),
        which include every chunk holding `text`.

        Posting lists are intersected from the rarest word up, skipping lists longer than `longest` (a
        superset is still right). [] when a word occurs nowhere; None when `text` has no terms or more
        than `limit` chunks remain (the caller asks FTS5 for the phrase instead)."""
        groups = analysis.groups_of(text, languages, query)
        if not groups:
            return None
        if not len(self.hashes):
            return []
        lists = []
        for group in groups:
            positions, present = self._locate(np.array(sorted({term_hash(t) for t in group}), dtype=np.uint64))
            if not present.any():
                return []
            spans = [(int(self.offsets[p]), int(self.offsets[p + 1])) for p in positions[present]]
            lists.append((sum(end - begin for begin, end in spans), spans))
        held = None
        for size, spans in sorted(lists, key=lambda item: item[0]):
            if size > longest or (held is not None and len(held) <= limit):
                break
            rows = _distinct(np.concatenate([self.rows[begin:end] for begin, end in spans]))
            held = rows if held is None else np.intersect1d(held, rows, assume_unique=True)
        if held is None or len(held) > limit:
            return None
        return self.ids[held].tolist()

    def search(self, query_words: Sequence[str], k: int, languages: Languages = (analysis.ENGLISH,),
               allowed: np.ndarray | None = None, query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        """(chunk id, bm25), best first: the ranking FTS5 gives an OR of the same words; only among the
        chunk ids `allowed` (ascending) when a filter gives them."""
        times = query_counts(query_words, languages, query)
        wanted = np.array(sorted(times), dtype=np.uint64)
        if not len(wanted) or not len(self.hashes) or k < 1:
            return []
        positions, found = self._locate(wanted)
        spans = [(int(self.offsets[p]), int(self.offsets[p + 1]), times[int(h)])
                 for p, h in zip(positions[found], wanted[found])]
        if not spans:
            return []
        rows = np.concatenate([self.rows[a:b] for a, b, _ in spans])
        weights = np.concatenate([self.weights[a:b] * n if n > 1 else self.weights[a:b] for a, b, n in spans])
        scores = np.bincount(rows, weights, minlength=self.count)
        if allowed is not None:
            scores = _only(scores, self.ids, allowed)
        matched = np.flatnonzero(scores)  # rows are in chunk id order, which breaks ties as FTS5 does
        if len(matched) > k:
            kth_best = np.partition(scores[matched], len(matched) - k)[len(matched) - k]
            matched = matched[scores[matched] >= kth_best]
        matched = matched[np.argsort(-scores[matched], kind="stable")][:k]
        return list(zip(self.ids[matched].tolist(), scores[matched].tolist()))


def _only(scores: np.ndarray, ids: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """`scores` (one per row of the ascending `ids`) kept for the allowed ids, zero elsewhere."""
    kept = np.zeros_like(scores)
    if len(ids) and len(allowed):
        positions = np.minimum(np.searchsorted(ids, allowed), len(ids) - 1)
        positions = positions[ids[positions] == allowed]
        kept[positions] = scores[positions]
    return kept


class KeywordDelta:
    """A copy a few changes behind its index, and the term rows of the chunks written since, searched
    as one: a machine sharing an index on a server need not rewrite its copy (~0.9 s at 100k chunks)
    after every change another machine makes. The new chunks are scored with the copy's statistics
    (document frequencies, mean length), so BM25 is a few changes approximate until the next merge;
    chunks deleted since are still in the copy, and are left out by asking the index which ids live."""

    def __init__(self, copy: KeywordCache, rows: Sequence[tuple[int, int, bytes]], gone: int,
                 live: Callable[[list[int]], set[int]]):
        """`gone`: how many chunks of the copy were deleted since (replaced or removed); `live(ids)`:
        which of these chunk ids the index still holds, so deleted ones never take a caller's places."""
        self.copy, self.rows, self.gone, self._live = copy, list(rows), max(0, gone), live
        self.generation, self.count = copy.generation, copy.count
        self._mean_tokens = float(copy.tokens.mean()) if copy.count else 1.0

    def document_frequencies(self, query_words: Sequence[str], languages: Languages = (analysis.ENGLISH,),
                             query: analysis.AnalysedQuery | None = None) -> list[float]:
        return self.copy.document_frequencies(query_words, languages, query)

    def search(self, query_words: Sequence[str], k: int, languages: Languages = (analysis.ENGLISH,),
               allowed: np.ndarray | None = None, query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        # The copy is asked for more: chunks deleted since it was built still hold places in its ranking.
        older = self._alive(self.copy.search(query_words, k + self.gone, languages, allowed, query))
        rows = self.rows
        if allowed is not None:
            wanted = set(allowed.tolist())
            rows = [row for row in rows if row[0] in wanted]
        newer = bm25(query_words, rows, dict(zip(query_words, self.document_frequencies(query_words, languages, query))),
                     self.count, self._mean_tokens, k, languages, query)
        return sorted([*older, *newer], key=lambda pair: (-pair[1], pair[0]))[:k]

    def holders_of_all_terms(self, text: str, limit: int, languages: Languages = (analysis.ENGLISH,),
                             query: analysis.AnalysedQuery | None = None) -> list[int] | None:
        held = self.copy.holders_of_all_terms(text, limit + self.gone, languages, query=query)
        if held is None:
            return None
        held = [chunk_id for chunk_id, _ in self._alive([(chunk_id, 0.0) for chunk_id in held])]
        groups = [{term_hash(t) for t in group} for group in analysis.groups_of(text, languages, query)]
        held = held + [chunk_id for chunk_id, _, packed in self.rows
                       if all(group & terms for terms in [set(np.frombuffer(packed, dtype=TERM_RECORD)["hash"].tolist())]
                              for group in groups)]
        return held if len(held) <= limit else None

    def _alive(self, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
        if not self.gone or not ranked:
            return ranked
        live = self._live([chunk_id for chunk_id, _ in ranked])
        return [pair for pair in ranked if pair[0] in live]
