"""BM25 as FTS5 computes it (its formula and constants), for the keyword copy's weights and for the
chunks a PostgreSQL server's term index finds, so a hit scores the same wherever it was found."""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import numpy as np

from .. import analysis
from .encoding import TERM_RECORD, posting_count, term_hash

Languages = Sequence[str]  # the Latin-script stemmers an index's chunks were stemmed in (analysis.languages_of)


K1, B = 1.2, 0.75  # FTS5's bm25() constants; no other pair won on both SciFact splits (benchmarks/tune_keyword.py)
MIN_IDF = 1e-6  # FTS5 floors the IDF of words in more than half the rows here rather than going negative


def idf(count, frequency):
    """BM25's IDF, floored at MIN_IDF, for a count and document frequencies (scalars or arrays) that
    may come from estimates: a frequency is bounded to [0, count] first, so an estimate past the
    chunk count (sampled id windows over holes), a negative or a NaN one never reaches the log."""
    count = float(count) if math.isfinite(float(count)) and count > 0 else 0.0
    frequency = np.clip(np.nan_to_num(np.asarray(frequency, dtype=np.float64), nan=0.0), 0.0, count)
    return np.maximum(np.log((count - frequency + 0.5) / (frequency + 0.5)), MIN_IDF)


def query_counts(query_words: Sequence[str], languages: Languages, query: analysis.AnalysedQuery | None = None) -> Counter:
    """Term hash -> how many query words have it. Words sharing a stem ("cell", "cells") count once
    each, as FTS5 scores each OR-ed phrase; a word's alternative stems (one per language) once."""
    return Counter(h for word in query_words for h in {term_hash(t) for t in analysis.terms_of(word, languages, query)})


def bm25(query_words: Sequence[str], rows: Sequence[tuple[int, int, bytes]], frequencies: dict[str, float],
         count: int, mean_tokens: float, k: int, languages: Languages = (analysis.ENGLISH,),
         query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
    """(chunk id, bm25), best first, of the given chunks' term rows: the score a copy would give them,
    from document frequencies counted elsewhere (`frequencies`, by query word)."""
    times = query_counts(query_words, languages, query)
    wanted = np.array(sorted(times), dtype=np.uint64)
    if not len(wanted) or not rows:
        return []
    df = {term_hash(t): frequencies.get(word, 0.0) for word in query_words for t in analysis.terms_of(word, languages, query)}
    weight = np.array([idf(count, df[h]) * times[h] for h in wanted.tolist()])
    records = np.frombuffer(b"".join(row[2] for row in rows), dtype=TERM_RECORD)
    row_of = np.repeat(np.arange(len(rows)), [posting_count(len(row[2])) for row in rows])
    held = np.isin(records["hash"], wanted)
    term = np.searchsorted(wanted, records["hash"][held])
    tf = records["count"][held].astype(np.float64)
    relative = np.array([row[1] for row in rows], dtype=np.float64)[row_of[held]] / max(mean_tokens, 1e-9)
    scores = np.bincount(row_of[held], weight[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * relative)), minlength=len(rows))
    ids = np.array([row[0] for row in rows], dtype=np.int64)
    order = np.lexsort((ids, -scores))  # best first, ties by chunk id as FTS5 breaks them
    return [(int(ids[i]), float(scores[i])) for i in order[:k] if scores[i] > 0]
