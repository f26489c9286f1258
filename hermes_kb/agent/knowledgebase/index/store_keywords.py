"""A store's own term index with the keyword copy's interface, so a search reads keywords one way
whether this index has a current copy (keyword_cache) or not: the retriever never asks which."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import analysis
from .contract import Store


def affordable_terms(store: Store, terms: list[str], budget: int | None,
                     query: analysis.AnalysedQuery | None = None) -> list[str]:
    """The rarest terms whose posting lists together stay within `budget` rows, the rarest always kept.

    FTS5 scores every row that matches any OR-ed term (about 1 µs a row), so one common word
    ("patients", "function") in a long query costs more than the rest of the search at 100k chunks.
    Such words carry little BM25 weight (low IDF), so dropping them first changes rankings least.
    """
    if budget is None or len(terms) < 2:
        return terms
    cost = dict(zip(terms, store.document_frequencies(terms, query)))
    if sum(cost.values()) <= budget:
        return terms
    kept, spent = [], 0
    for term in sorted(terms, key=cost.__getitem__):
        if kept and spent + cost[term] > budget:
            break
        kept.append(term)
        spent += cost[term]
    return [t for t in terms if t in kept]


class StoreKeywords:
    """Keyword search in the store itself (FTS5 on SQLite, the term index on PostgreSQL), what a search
    reads while no keyword copy is current. `row_budget` bounds the rows FTS5 scores (affordable_terms)."""

    def __init__(self, store: Store, row_budget: int | None = None):
        self.store, self.row_budget = store, row_budget

    @property
    def count(self) -> int:
        return self.store.chunk_total()

    def document_frequencies(self, query_words: Sequence[str], languages: Sequence[str],
                             query: analysis.AnalysedQuery | None = None) -> list[float]:
        return self.store.document_frequencies(query_words, query)

    def search(self, query_words: Sequence[str], k: int, languages: Sequence[str],
               allowed: np.ndarray | None = None, query: analysis.AnalysedQuery | None = None) -> list[tuple[int, float]]:
        kept = affordable_terms(self.store, list(query_words), self.row_budget, query)
        return self.store.keyword(kept, k, allowed, query)

    def holders_of_all_terms(self, text: str, limit: int, languages: Sequence[str],
                             query: analysis.AnalysedQuery | None = None) -> list[int] | None:
        """None: the store cannot tell cheaply (the caller asks it for the phrase instead)."""
        return None
