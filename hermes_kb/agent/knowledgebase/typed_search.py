"""Queries the agent writes: several typed searches fused into one ranked list.

The calling agent is itself a strong language model, so rather than expand a query with a model of
our own (which costs every search), it may send its own variants: `lex` (keywords, as keyword mode
searches them), `vec` (a question for the meaning, as vector mode does) and `hyde` (a passage that
would answer: documents look more like answers than like questions). Each runs as the search of
its mode; the lists are fused by reciprocal rank (ranks, not scores: the modes' scores are on
different scales), and the relevance stage then judges the fused list once, against the `intent`
(or the first question-like variant), as it judges a plain search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .retriever import Hit, SearchResult, reciprocal_rank

MODE_OF_TYPE = {"lex": "keyword", "vec": "vector", "hyde": "vector"}
MAX_SEARCHES = 8
RRF_K = 60  # Cormack et al.'s constant: damps the top ranks' lead, so agreement across variants counts
CANDIDATES = 30  # per variant: deep enough that a passage second-best everywhere is still seen


class TypedSearchError(ValueError):
    """One sentence on what is wrong with the list of searches."""


@dataclass(frozen=True)
class TypedQuery:
    type: str
    query: str

    @property
    def mode(self) -> str:
        return MODE_OF_TYPE[self.type]


def parse(searches: object, max_chars: int) -> list[TypedQuery]:
    """The list as sent by a tool call, a CLI or Python: [{type, query}, ...]."""
    if not isinstance(searches, (list, tuple)) or not searches:
        raise TypedSearchError("searches must be a non-empty list of {type, query} objects.")
    if len(searches) > MAX_SEARCHES:
        raise TypedSearchError(f"At most {MAX_SEARCHES} searches at once; keep the variants that differ most.")
    parsed = []
    for item in searches:
        if not isinstance(item, Mapping) or set(item) - {"type", "query"}:
            raise TypedSearchError("Each search is an object with exactly a type and a query.")
        kind, query = item.get("type"), item.get("query")
        if kind not in MODE_OF_TYPE:
            raise TypedSearchError(f"A search's type is one of {', '.join(MODE_OF_TYPE)}, not {str(kind)[:20]!r}.")
        if not isinstance(query, str) or not query.strip():
            raise TypedSearchError(f"The {kind} search needs a query: some text.")
        if len(query) > max_chars:
            raise TypedSearchError(f"The {kind} search's query is {len(query):,} characters; at most {max_chars:,}.")
        parsed.append(TypedQuery(kind, query))
    return parsed


def judged_query(searches: Sequence[TypedQuery], intent: str | None) -> str:
    """What the relevance stage judges passages against: the intent, else a question, else keywords."""
    if intent and intent.strip():
        return intent
    for kind in ("vec", "lex", "hyde"):
        for search in searches:
            if search.type == kind:
                return search.query
    return searches[0].query


def fuse(results: Sequence[SearchResult], k: int) -> SearchResult:
    """One list by reciprocal rank fusion; each passage once (the first variant's hit), found_by the
    union; scores scaled so a passage first in every list scores 1 (the relevance stage blends on that
    scale, as with a single search)."""
    fused: dict[tuple[str, int], Hit] = {}
    ranks: dict[tuple[str, int], list[int]] = {}
    for result in results:
        for rank, hit in enumerate(result.hits):
            key = (hit.directory, hit.chunk_id)
            ranks.setdefault(key, []).append(rank)
            if key not in fused:
                fused[key] = hit
            else:
                fused[key].found_by = sorted(set(fused[key].found_by) | set(hit.found_by))
    for key, hit in fused.items():
        hit.score = round(reciprocal_rank(ranks[key], RRF_K, len(results)), 4)
    order = sorted(fused.values(), key=lambda hit: hit.score, reverse=True)
    warnings = list(dict.fromkeys(w for result in results for w in result.warnings))
    unmatched = [word for result in results for word in result.unmatched] if not order else []
    return SearchResult(hits=order[:max(k, CANDIDATES)], warnings=warnings, unmatched=list(dict.fromkeys(unmatched)))


def search_all(searches: Sequence[TypedQuery], k: int, run: Callable[[TypedQuery, int], SearchResult]) -> SearchResult:
    """Each variant through `run(variant, candidates)`, fused. One variant is simply its own search."""
    if len(searches) == 1:
        return run(searches[0], k)
    return fuse([run(search, max(k, CANDIDATES)) for search in searches], k)
