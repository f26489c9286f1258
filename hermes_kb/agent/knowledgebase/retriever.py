"""Hybrid search over one or more indexes as a single union.

Every candidate gets both scores: a keyword-only hit has its cosine computed
from its stored vector, and a vector-only hit its bm25 from the keyword pass, so fusion
compares like with like instead of treating "not in the other top-k" as zero.

Over 500 lines because it is one pipeline read top to bottom (`search`: gather, fuse, floor,
collapse, judge, budget); its steps are small functions here rather than modules of their own, so
the order of a search is on one page.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from . import analysis, snippets
from . import reranker as relevance
from .chunker import estimate_tokens
from .citations import part_label
from .filters import FileTable, SearchFilter
from .index.bm25 import idf
from .index.contract import KeywordIndex, Store
from .index.keyword_cache import KeywordCache, KeywordDelta
from .index.store_keywords import StoreKeywords
from .index.vector_cache import VectorCache, VectorDelta
from .reranker import Judged, Reranker, RerankError, ScoreCache
from .snippets import Snippet
from .subject import NamedSetting, named_setting

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "keyword")
KEYWORD_SCORE_DEPTH = 300  # bm25 past this rank counts as 0 for a vector hit; 1000 gave the same SciFact nDCG@10 (k=30), 2-3 ms slower at 100k
_TERM = re.compile(r"\w+", re.UNICODE)
# In hybrid fusion, keyword scores divide by the best bm25 found or this share of the query's full
# evidence (`keyword_scale`), whichever is higher. 1.0 (keyword mode's choice: a score is the share
# of the query a chunk matches) cost SciFact test nDCG@10 0.006 in hybrid, as long claims never
# match every word; 0 let any index's noise score 1.0. Chosen on the train splits of SciFact, code
# search and docs (benchmarks/tune_fusion.py --share), confirmed on test (docs/benchmarks.md).
KEYWORD_SCALE_SHARE = 0.5
PROSE_OVER_CODE_ALPHA = 0.9  # the vector weight for a question in prose over program source (`trust`)
PROSE_WORDS = 3  # a query of at least this many words and no identifier is prose
EXACT_FLOOR = 0.9  # a chunk holding a literal of the query letter for letter scores at least this
EXACT_DEPTH = 50  # chunks per literal checked for the exact text
MAX_LITERALS = 4
WHOLE_QUERY_WORDS = 4  # a query this long found letter for letter is a quotation (an error message, a heading)
# Characters around a word of the query that are sentence punctuation, not part of what was typed.
_EDGE = "\"'`()[]{}<>,;!?"


class SearchError(ValueError):
    """A search that cannot run as asked; the message says why."""


# The cosine baseline of all-MiniLM-L6-v2, the default model (embeddings.cosine_baseline; a test checks it):
# the scale every model's vector scores are put on.
REFERENCE_BASELINE = 0.0393


class QueryModel:
    """The query as one embedding model reads it: its vector, and the share of it the model represents
    (fusion's trust in that vector), each computed at most once however many indexes share the model."""

    def __init__(self, vector: Callable[[], np.ndarray], coverage: Callable[[str], float] = lambda language: 1.0):
        self._vector, self._coverage = vector, coverage
        self._coverages: dict[str, float] = {}

    @functools.cached_property
    def vector(self) -> np.ndarray:
        return self._vector()

    def coverage(self, language: str = analysis.ENGLISH) -> float:
        """The share of the query the model represents, the query's Latin-script words read as `language`."""
        if language not in self._coverages:
            self._coverages[language] = float(self._coverage(language))
        return self._coverages[language]


@dataclass(frozen=True)
class SearchSource:
    """One open index, the model its vectors are compared with the query's by, or why they may not be."""
    name: str
    root: str
    store: Store
    vector_refusal: str | None = None
    vectors: VectorCache | VectorDelta | None = None  # the store's vectors, memory-mapped, when the copy (with its delta) is current
    keywords: KeywordCache | KeywordDelta | None = None  # its terms' posting lists, likewise
    files: Callable[[], FileTable] | None = None  # its files' facets, kept across searches while current
    model: QueryModel | None = None  # the model it was embedded with; None: keyword search only

    @functools.cached_property
    def code_share(self) -> float:
        return self.store.code_share()

    @functools.cached_property
    def cosine_baseline(self) -> float:
        return self.store.cosine_baseline()

    @functools.cached_property
    def languages(self) -> tuple[str, ...]:
        """The stemmers its chunks' Latin-script words were stemmed with (analysis): read once a search."""
        return self.store.latin_languages()

    @property
    def key(self) -> Path:
        """What tells indexes apart inside one search: their files, whatever names they go by."""
        return self.store.path

    @property
    def vector_index(self) -> VectorCache | VectorDelta | Store:
        """What its vectors are searched in: the copy when current, else the store's own index."""
        return self.vectors or self.store

    def keyword_index(self, row_budget: int | None = None) -> KeywordIndex:
        """What its keywords are searched in, likewise (the same calls either way)."""
        return self.keywords or StoreKeywords(self.store, row_budget)

    def allowed(self, search_filter: SearchFilter) -> np.ndarray:
        """The ids of the chunks a filter lets this search answer from, ascending."""
        return (self.files() if self.files else self.store.file_facets()).admitted(search_filter)


@dataclass(frozen=True)
class SearchOptions:
    k: int = 10
    mode: str = "hybrid"
    fusion: str = "weighted"
    alpha: float = 0.7
    rrf_k: int = 60
    min_score: float = 0.0
    max_tokens: int | None = None
    filter: SearchFilter = SearchFilter()
    keyword_row_budget: int | None = None  # see affordable_terms
    reranker: Reranker | None = None  # the relevance stage (reranker.py); None: retrieval's order stands
    rerank_cache: ScoreCache | None = None


@dataclass(frozen=True)
class Place:
    """Another place a hit's text is found, word for word (Hit.also_in)."""
    directory: str
    path: str
    kind: str
    start_line: int
    end_line: int
    page: int | None

    def label(self) -> str:
        """`directory:path:start-end`, or `directory:path page 3` for a format cited by parts."""
        where = f" {part_label(self.kind, self.page)}" if self.page else f":{self.start_line}-{self.end_line}"
        return f"{self.directory}:{self.path}{where}"


@dataclass
class Hit:
    directory: str
    path: str
    abs_path: str
    kind: str
    start_line: int
    end_line: int
    page: int | None
    heading: str
    text: str
    score: float
    vector_score: float | None
    keyword_score: float | None
    found_by: list[str]
    chunk_id: int
    content_hash: str
    stale: bool = False  # the file changed on disk after it was indexed
    query_words: tuple[str, ...] = ()  # the query's words (stopwords left out), which the snippet marks
    languages: tuple[str, ...] = ()  # the stemmers its index recorded, which the snippet stems in
    # The same text found in other places, ranked below this one and not listed again: a docs site
    # repeats blocks verbatim (every npm command page its shared options).
    also_in: list[Place] = field(default_factory=list)
    rerank_score: float | None = None  # the relevance model's probability that the text answers the query
    fused_score: float | None = None  # retrieval's own score, where the relevance stage blended `score`

    @property
    def retrieval_score(self) -> float:
        return self.score if self.fused_score is None else self.fused_score

    @functools.cached_property
    def snippet(self) -> Snippet:
        """The part of `text` that matched, the query's words marked: made when shown, not per search
        (the chat hook never shows one)."""
        return snippets.make(self.text, self.kind, self.query_words, self.languages)

    @property
    def part(self) -> str | None:
        """`page 3`, `cell 4` ...: where a hit of a format cited by parts is (None: cited by lines)."""
        return part_label(self.kind, self.page) if self.page else None

    def where(self) -> str:
        """How a cited block labels the passage: its lines, after its page (or slide, cell ...) if it has one."""
        lines = f"lines {self.start_line}-{self.end_line}"
        return f"{self.part} ({lines})" if self.part else lines

    def to_dict(self) -> dict:
        fields = asdict(self)
        del fields["query_words"], fields["languages"]
        return {**fields, "part": self.part, "snippet": asdict(self.snippet)}


@dataclass
class SearchResult:
    hits: list[Hit] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # the query's words, when no indexed chunk holds any
    rerank: Judged | None = None  # what the relevance stage did, when one was asked for
    setting: NamedSetting | None = None  # the tool or system an English question names at its end (subject.py)


_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
MAX_JOINED_WORDS = 12  # longer queries are prose: joining their words finds nothing and costs lookups


def identifier_terms(query: str, terms: Sequence[str]) -> list[str]:
    """Extra keyword terms so that identifiers match by their parts and parts match identifiers.

    FTS5's tokenizer splits `divide_line` into two words but keeps `divideLine` and `DivideLine` as
    the one word "divideline". So a camelCase word of the query also searches its parts (finding
    `divide_line`), and adjacent query words also search their concatenation ("divide line" finds
    `divideLine`). Both are query-side, so every existing index gets them without a rebuild.

    Parts are searched only when the query is that one word: inside a sentence, words such as
    "mTOR" or "IL6" split into noise ("m", "tor", "il") that cost SciFact hybrid nDCG@10 0.007
    and every NL collection some keyword quality; joins gained on SciFact and code search.
    """
    extra = []
    words = re.findall(r"[^\W_]+", query)
    if len(words) == 1:
        parts = _CAMEL_PART.findall(words[0])
        if len(parts) > 1:
            extra += [part.lower() for part in parts]
    plain = [w.lower() for w in words if w.lower() not in analysis.ENGLISH_STOPWORDS]
    if len(plain) <= MAX_JOINED_WORDS:
        extra += ["".join(plain[i:i + n]) for n in (2, 3) for i in range(len(plain) - n + 1)]
    return [t for t in dict.fromkeys(extra) if t not in terms]


def well_formed(text: str) -> str:
    """Lone surrogates (undecodable argv bytes, a JSON `\\udcff`) become U+FFFD: SQLite, the
    tokenizer and the embedder all need text that encodes as UTF-8, and one bad character must
    not cost the rest of the query."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def literals(query: str) -> list[str]:
    """What the user means letter for letter: quoted text, a query that is one identifier, path, flag
    or version (`writer_lock`, `ghcr.io/a/b:1.2`, `--no-deps`, `divideLine`), and a whole query of
    several words (an error message pasted in). A word like `Node.js` or `JavaScript` inside a
    question is not one: the question asks about it, it does not quote it. Nor is a single plain word
    quoted inside a longer message (`... failed for user "app"`): pasted errors quote names, and the
    message, not the name, is what is asked about."""
    words = query.split()
    found = [m.strip() for m in re.findall(r'"([^"\n]{2,200})"', query)]
    found = [quoted for quoted in found if _meant_literally(quoted, len(words))]
    if len(words) == 1:
        word = words[0].strip(_EDGE).rstrip(".:")
        joined = len(re.findall(r"[^\W_]+", word)) >= 2
        if joined or re.search(r"[a-z][A-Z]", word) or (word.startswith("-") and _TERM.search(word)):
            found.append(word)
    if len(words) >= WHOLE_QUERY_WORDS:
        found.append(" ".join(words))
    return list(dict.fromkeys(f for f in found if _TERM.search(f)))[:MAX_LITERALS]


QUOTED_CONTEXT_WORDS = 3  # a quoted plain word is the point of a query with at most this many other words
_LITERAL_SHAPE = re.compile(r"[_\-./:@\\]|\d|[a-z][A-Z]")  # an identifier, flag, path or number


def _meant_literally(quoted: str, query_words: int) -> bool:
    """A quoted phrase, identifier, flag or number is meant letter for letter; a quoted plain word only
    when the query is about little else."""
    return (len(quoted.split()) >= 2 or bool(_LITERAL_SHAPE.search(quoted))
            or query_words - len(quoted.split()) <= QUOTED_CONTEXT_WORDS)


def _holds(text: str, literal: str) -> bool:
    """Spacing aside, letter for letter; case counts only where the user typed a capital (`DivideLine`)."""
    literal, text = " ".join(literal.split()), " ".join(text.split())
    return literal in text if literal != literal.lower() else literal in text.lower()


def keyword_scale(source: SearchSource, terms: Sequence[str], query: analysis.AnalysedQuery | None = None) -> float:
    """The bm25 a chunk of average length holding each query word once would get in this index.

    Dividing by it (or by the best bm25 found, when higher) makes keyword scores mean the same in
    every index: the share of the query's evidence a chunk holds. Dividing by the best hit alone
    gave every index's best hit 1.0, however little of the query it matched, so the noise of one
    index outranked the answers of another and weak keyword matches pulled good vector hits down.
    """
    units = evidence_units(terms, source.languages, query)
    keywords = source.keyword_index()
    count, frequencies = keywords.count, keywords.document_frequencies(units, source.languages, query)
    return float(np.sum(idf(count, frequencies))) if len(frequencies) else 0.0


def evidence_units(terms: Sequence[str], languages: Sequence[str], query: analysis.AnalysedQuery | None = None) -> list[str]:
    """The query's words as bm25 scores them: a word whose script is written without spaces (a run
    of Han or Thai text) is as many pieces of evidence as it has distinct bigrams, each with its own
    IDF. Counting the run as one word with its commonest bigram's IDF made a chunk sharing only "怎么"
    ("how") with a Chinese question a full keyword match, and the chat hook injected it."""
    units: list[str] = []
    for word in terms:
        groups = analysis.groups_of(word, languages, query)
        units.extend(dict.fromkeys(group[0] for group in groups) if len(groups) > 1 else [word])
    return units


@dataclass
class _Candidate:
    source: SearchSource
    chunk_id: int
    cosine: float | None = None
    bm25: float | None = None
    found_by: list[str] = field(default_factory=list)
    vector_rank: int | None = None
    keyword_rank: int | None = None
    exact: bool = False  # holds a literal of the query (see `literals`)
    keyword_scale: float = 0.0  # see `keyword_scale`

    @property
    def similarity(self) -> float | None:
        """Its cosine on the default model's scale: the span from its index model's cosine baseline
        (what that model gives unrelated text, embeddings.cosine_baseline) to 1 mapped onto the span
        from REFERENCE_BASELINE to 1. The default model's scores stay as they were (min_score and the
        injection gate were calibrated on them); every other model's mean the same. 0 to 1."""
        if self.cosine is None:
            return None
        baseline = self.source.cosine_baseline or REFERENCE_BASELINE  # 0: not measured (an older index)
        return max(0.0, REFERENCE_BASELINE + (self.cosine - baseline) * (1.0 - REFERENCE_BASELINE) / (1.0 - baseline))


def _nearest(sources: Sequence[SearchSource], pool: int,
             allowed: dict[Path, np.ndarray]) -> dict[Path, list[tuple[int, float]]]:
    """The `pool` nearest chunks of each source to its model's query vector."""
    return {s.key: s.vector_index.knn(s.model.vector, pool, allowed.get(s.key)) for s in sources}


def _gather(sources: Sequence[SearchSource], query: analysis.AnalysedQuery, options: SearchOptions,
            result: SearchResult, allowed: dict[Path, np.ndarray]) -> list[_Candidate]:
    """Each source's keyword and vector candidates for `query` (analysed once: its words asked about
    and their terms are read by every keyword path); with a filter, `allowed` holds the chunk ids each pass is restricted to,
    so a narrow filter fills its pool as an unfiltered search does."""
    pool = max(50, 4 * options.k)
    terms = query.words
    use_keyword = options.mode in ("hybrid", "keyword") and bool(terms)
    vector_sources = []
    if options.mode in ("hybrid", "vector"):
        for source in sources:
            if source.vector_refusal:
                if source.vector_refusal not in result.warnings:  # one model's failure, told once
                    result.warnings.append(source.vector_refusal)
            elif source.model is not None and source.store.has_vector_table():
                vector_sources.append(source)
    by_source: dict[str, dict[int, _Candidate]] = {source.key: {} for source in sources}
    deeper: dict[str, dict[int, float]] = {}
    scales: dict[Path, float] = {}
    # The vector search of each memory-mapped copy (numpy and pread, no database connection) runs on a
    # second thread beside the keyword pass (FTS5 or the keyword copy): both release the GIL for
    # most of their time. The query is embedded before (by the caller), not beside: its two threads
    # waited on each other while a core ran FTS5 (5.5 -> 12 ms at 1M chunks; docs/benchmarks.md).
    mapped = [source for source in vector_sources if source.vectors is not None] if use_keyword else []
    with ThreadPoolExecutor(max_workers=1) as beside:
        try:
            ahead = beside.submit(_nearest, mapped, pool, allowed) if mapped else None
        except RuntimeError:  # the interpreter is shutting down and starts no thread: all on this one
            ahead = None
        if use_keyword:
            _keyword_pass(sources, query, options, pool, allowed, by_source, deeper, scales)
        nearest = ahead.result() if ahead else {}
    nearest.update(_nearest([source for source in vector_sources if source.key not in nearest], pool, allowed))
    for source in vector_sources:
        by_id, vector = by_source[source.key], source.model.vector
        for rank, (chunk_id, cosine) in enumerate(nearest[source.key]):
            candidate = by_id.setdefault(chunk_id, _Candidate(source, chunk_id))
            candidate.cosine, candidate.vector_rank = cosine, rank
            candidate.found_by.insert(0, "vector")
        if options.mode == "hybrid":
            _complete_cosines(source, list(by_id.values()), vector)
            keyword_scores = deeper.get(source.key, {})
            for candidate in by_id.values():
                if candidate.bm25 is None and use_keyword:
                    candidate.bm25 = keyword_scores.get(candidate.chunk_id, 0.0)
    candidates = [candidate for by_id in by_source.values() for candidate in by_id.values()]
    for candidate in candidates:
        candidate.keyword_scale = scales.get(candidate.source.key, 0.0)
    if options.mode == "hybrid" and use_keyword and not any(deeper.values()):
        result.unmatched = terms
    return candidates


def _keyword_pass(sources: Sequence[SearchSource], query: analysis.AnalysedQuery, options: SearchOptions, pool: int,
                  allowed: dict[Path, np.ndarray], by_source: dict[str, dict[int, _Candidate]],
                  deeper: dict[str, dict[int, float]], scales: dict[Path, float]) -> None:
    """Each source's keyword candidates into `by_source`, its scores to `depth` into `deeper`."""
    terms = query.words
    searched = terms + identifier_terms(query.text, terms)  # the scale (keyword_scale) counts the query's own words only
    for source in sources:
        # One keyword pass ranks deeper than the pool: the rows past the pool are not candidates,
        # but they give vector candidates their bm25 without a second search.
        depth = max(pool, KEYWORD_SCORE_DEPTH) if options.mode == "hybrid" else pool
        only = allowed.get(source.key)
        keyword_scores = source.keyword_index(options.keyword_row_budget).search(searched, depth, source.languages, only,
                                                                                 query)
        for rank, (chunk_id, score) in enumerate(keyword_scores[:pool]):
            by_source[source.key][chunk_id] = _Candidate(source, chunk_id, bm25=score, found_by=["keyword"],
                                                          keyword_rank=rank)
        deeper[source.key] = dict(keyword_scores)
        scales[source.key] = keyword_scale(source, terms, query)
        _mark_exact(source, query, by_source[source.key], deeper[source.key], only)


def _mark_exact(source: SearchSource, query: analysis.AnalysedQuery, by_id: dict[int, _Candidate], bm25: dict[int, float],
                allowed: np.ndarray | None) -> None:
    """Chunks holding a literal of the query letter for letter (FTS5 finds the phrase, the text confirms
    the punctuation) become candidates marked exact, found or not by the ranked keyword pass.

    When the keyword copy shows that at most EXACT_DEPTH chunks hold all of the literal's terms, their
    text is checked directly: the same chunks FTS5 would return, without its phrase query, which walks
    the posting lists of every word of a long query (1.1 ms of 2.8 at 100k chunks). Otherwise a whole
    query taken literally (a pasted message) is looked for in the text of the chunks the keyword pass
    ranked first, which hold its words: FTS5's phrase query over it took 80-160 ms at 1M chunks
    (docs/benchmarks.md), most of a search, to find a pasted message that is rarely there."""
    for literal in literals(query.text):
        ids = source.keyword_index().holders_of_all_terms(literal, EXACT_DEPTH, source.languages, query=query)
        if ids is None and len(literal.split()) >= WHOLE_QUERY_WORDS:
            ids = list(bm25)[:EXACT_DEPTH]  # ranked best first
        elif ids is None:
            ids = [chunk_id for chunk_id, _ in source.store.keyword_phrase(literal, EXACT_DEPTH, query)]
        if allowed is not None:
            ids = [chunk_id for chunk_id, kept in zip(ids, np.isin(ids, allowed)) if kept]
        for chunk_id, row in source.store.chunks(ids).items():
            if _holds(row.text, literal):
                candidate = by_id.setdefault(chunk_id, _Candidate(source, chunk_id, bm25=bm25.get(chunk_id, 0.0)))
                candidate.exact = True
                if "exact" not in candidate.found_by:
                    candidate.found_by.append("exact")


def _complete_cosines(source: SearchSource, candidates: list[_Candidate], vector: np.ndarray) -> None:
    missing = [c.chunk_id for c in candidates if c.cosine is None]
    stored = source.vector_index.vectors_for(missing) if missing else {}
    for candidate in candidates:
        if candidate.chunk_id in stored:
            # Elementwise product, not a BLAS call: BLAS threads would fight onnxruntime's.
            candidate.cosine = float((stored[candidate.chunk_id] * vector).sum(axis=1).max())


_IDENTIFIER = re.compile(r"\w[_.:/]\w|[a-z][A-Z]|\w\(|[=<>{}\[\]$@#]")


def is_prose(query: str) -> bool:
    """A question or statement in words, with nothing that names code (`snake_case`, `a.b`, `f(`, `camelCase`)."""
    return len(query.split()) >= PROSE_WORDS and not _IDENTIFIER.search(query)


def trust(alpha: float, coverage: float, prose_over_code: float) -> float:
    """The vector weight of weighted fusion for one query over one index, from evidence the search has.

    - `coverage`: the share of the query the embedding model can represent (model_coverage: its
      word pieces neither [UNK] nor spelled letter by letter). A model that never learned a script
      gives near-random vectors, so the vector side's odds are scaled by coverage squared: English
      0.98 keeps alpha; Russian (0.05), Arabic (0.02) and, for all-MiniLM-L6-v2, Chinese (0.28) lean
      on keywords. Squared because half-represented text is closer to noise than halfway.
    - `prose_over_code`: the share of the index that is program source (analysis.looks_like_code
      over a sample of its chunks, recorded by index runs) when the query is prose (is_prose),
      else 0: a question in words shares few words with the code that answers it, so its keyword
      matches are mostly incidental; alpha moves that share of the way to PROSE_OVER_CODE_ALPHA.

    The odds form keeps the result in [0, 1] and alpha exactly when nothing argues against vectors.
    """
    alpha = alpha + (max(alpha, PROSE_OVER_CODE_ALPHA) - alpha) * prose_over_code
    evidence = alpha * coverage ** 2
    return evidence / (evidence + (1.0 - alpha)) if evidence + (1.0 - alpha) > 0 else alpha


def keyword_share(alpha: float, configured: float) -> float:
    """The share of the query's full keyword evidence that scores 1.0 in weighted fusion, when `trust`
    gave the vector side `alpha` of the configured weight.

    KEYWORD_SCALE_SHARE was chosen where vectors carry their full weight beside keywords. Where the
    model cannot read the query (Arabic, Russian for all-MiniLM-L6-v2), keywords stand alone and a
    score should mean what keyword mode's means, the share of the query a chunk holds: with half the
    evidence scoring 1.0, an Arabic chunk matching one rare word of "how many cups are in a litre?"
    (كوب, Cobb Hall) scored 1.0 and was injected. Rankings within an index do not change.
    """
    if configured <= 0:
        return 1.0
    return 1.0 - (1.0 - KEYWORD_SCALE_SHARE) * min(1.0, alpha / configured)


def reciprocal_rank(ranks: Sequence[int], k: int, lists: int) -> float:
    """Reciprocal rank fusion of one item's 0-based ranks in the lists that hold it, scaled so an item
    first in all `lists` lists scores 1.0 (the scale weighted fusion and the relevance blend expect)."""
    return sum(1.0 / (k + 1 + rank) for rank in ranks) * (k + 1) / lists


def _fuse(candidates: list[_Candidate], options: SearchOptions, query: str = "",
          language: str = analysis.ENGLISH) -> list[tuple[float, _Candidate]]:
    # bm25 is normalised per index: IDF statistics differ between indexes (a tiny one
    # has near-zero IDF everywhere), so raw scores only compare within one index (see keyword_scale).
    top_bm25: dict[str, float] = {}
    for candidate in candidates:
        top_bm25[candidate.source.key] = max(top_bm25.get(candidate.source.key, 0.0), candidate.bm25 or 0.0)
    plain_share = 1.0 if options.mode == "keyword" else KEYWORD_SCALE_SHARE  # keyword mode: the plain evidence share
    alphas: dict[Path, float] = {}
    if options.mode == "hybrid" and options.fusion == "weighted" and candidates:
        prose = is_prose(query)
        for source in {candidate.source.key: candidate.source for candidate in candidates}.values():
            # An index whose vectors are refused (another model, or its model failing now) answers by
            # its keywords alone, scored as a keyword search would score them.
            covered = source.model.coverage(language) if source.model is not None and not source.vector_refusal else 0.0
            alphas[source.key] = trust(options.alpha, covered, source.code_share if prose else 0.0)
    fixed = {"vector": 1.0, "keyword": 0.0}.get(options.mode, options.alpha)
    scored = []
    for candidate in candidates:
        alpha = alphas.get(candidate.source.key, fixed)
        if options.fusion == "rrf" and options.mode == "hybrid":
            ranks = [r for r in (candidate.vector_rank, candidate.keyword_rank) if r is not None]
            score = reciprocal_rank(ranks, options.rrf_k, lists=2)
        else:
            cosine = candidate.similarity or 0.0
            share = keyword_share(alpha, fixed) if candidate.source.key in alphas else plain_share
            scale = max(top_bm25[candidate.source.key], share * candidate.keyword_scale) or 1.0
            score = alpha * cosine + (1.0 - alpha) * (candidate.bm25 or 0.0) / scale
        if candidate.exact:
            score = EXACT_FLOOR + (1.0 - EXACT_FLOOR) * score
        scored.append((score, candidate))
    scored.sort(key=lambda pair: (pair[1].exact, pair[0]), reverse=True)  # exact occurrences first
    return scored


def search(sources: Sequence[SearchSource], query: str, options: SearchOptions) -> SearchResult:
    """Search every source, fuse over the union, then floor, collapse, filter and budget."""
    if not query.strip():
        raise SearchError("The search query is empty.")
    if options.mode not in MODES:
        raise SearchError(f"Search mode must be one of {', '.join(MODES)}, not {options.mode!r}.")
    if options.k < 1:
        raise SearchError("The number of results (k) must be at least 1.")
    result = SearchResult()
    if options.mode == "vector" and all(s.vector_refusal for s in sources) and sources:
        raise SearchError(" ".join(s.vector_refusal for s in sources if s.vector_refusal))
    allowed: dict[Path, np.ndarray] = {}
    if options.filter:
        allowed = {source.key: source.allowed(options.filter) for source in sources}
        sources = [source for source in sources if len(allowed[source.key])]
        if not sources:
            result.warnings.append("No indexed file matches the filters; nothing was searched.")
            return result
    analysed = analysis.AnalysedQuery(query, {name for source in sources for name in source.languages})
    language, terms = analysed.language, analysed.words
    result.setting = named_setting(analysed, sources)
    scored = _fuse(_gather(sources, analysed, options, result, allowed), options, query, language)
    rows: dict[tuple[str, int], object] = {}
    kept: list[Hit] = []
    spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
    by_text: dict[str, Hit] = {}  # each text shown once, see Hit.also_in
    shown_terms = tuple(terms)
    # With a relevance stage, the candidates it judges are gathered first; k and the token budget apply
    # to its order, not retrieval's.
    judging = options.reranker is not None and options.mode != "keyword"
    wanted = max(options.k, relevance.depth(options.reranker.weights)) if judging else options.k
    step = max(16, 2 * wanted)  # rows fetched at a time: most searches need only the first window
    for begin in range(0, len(scored), step):
        window = scored[begin:begin + step]
        for source in {c.source.key: c.source for _, c in window}.values():
            ids = [c.chunk_id for _, c in window if c.source is source]
            rows.update({(source.key, i): row for i, row in source.store.chunks(ids).items()})
        for score, candidate in window:
            if score < options.min_score or len(kept) >= wanted:
                break
            row = rows.get((candidate.source.key, candidate.chunk_id))
            if row is None:
                continue
            freshness = _freshness(f"{candidate.source.root}/{row.path}", row)
            if freshness == "gone":
                continue  # deleted since it was indexed: never a ghost result
            taken = spans.setdefault((candidate.source.key, row.path), [])
            if any(s <= row.end_line and row.start_line <= e for s, e in taken):
                continue  # an overlapping chunk of this file already ranks higher
            text_key = " ".join(row.text.split())
            same = by_text.get(text_key)
            if same is not None:
                same.also_in.append(Place(candidate.source.name, row.path, row.kind, row.start_line, row.end_line, row.page))
                continue
            taken.append((row.start_line, row.end_line))
            kept.append(Hit(
                directory=candidate.source.name, path=row.path, abs_path=f"{candidate.source.root}/{row.path}",
                kind=row.kind, start_line=row.start_line, end_line=row.end_line, page=row.page,
                heading=row.heading, text=row.text, score=round(score, 4),
                vector_score=None if candidate.similarity is None else round(candidate.similarity, 4),
                keyword_score=None if candidate.bm25 is None else round(candidate.bm25, 4),
                found_by=candidate.found_by + ["ocr"] * row.recognised, chunk_id=candidate.chunk_id, content_hash=row.content_hash,
                stale=freshness == "stale", query_words=shown_terms, languages=candidate.source.languages,
            ))
            by_text[text_key] = kept[-1]
        if len(kept) >= wanted or (window and window[-1][0] < options.min_score):
            break
    return conclude(result, kept, query, options, judging)


def conclude(result: SearchResult, hits: list[Hit], query: str, options: SearchOptions, judge: bool = True) -> SearchResult:
    """The end of every search: the relevance stage (when asked and options name an engine), `k`,
    then the token budget. The fused list of an agent's typed searches ends here too (typed_search)."""
    if judge and options.reranker is not None:
        hits = _rerank(result, hits, query, options)
    return _finish(result, _budgeted(hits[:options.k], options.max_tokens))


def _rerank(result: SearchResult, hits: list[Hit], query: str, options: SearchOptions) -> list[Hit]:
    """The relevance stage: each candidate judged, its score blended with retrieval's by position
    (reranker.blend), exact occurrences of the query kept first. Fail-open: an engine that cannot
    judge leaves retrieval's order, and says why in `result.rerank`."""
    engine = options.reranker
    result.rerank = Judged(engine.identity, 0, engine.threshold, engine.veto)
    if not hits:
        return hits
    if not engine.reads(query):
        result.rerank.skipped = "the relevance model does not read this query's language"
        return hits
    candidates = hits[:relevance.depth(engine.weights)]
    if not engine.reads_code and not _at_least_half(candidates, lambda hit: not analysis.looks_like_code(hit.text)):
        result.rerank.skipped = "the candidates are mostly program source, which the relevance model never learned to read"
        return hits
    if not _at_least_half(candidates, lambda hit: engine.reads_passage(hit.text)):
        result.rerank.skipped = "the candidates are mostly in a script the relevance model does not read"
        return hits
    unread = relevance.unread_field(engine, query)
    if unread:  # a field it never read: its "surely not" is not evidence
        result.rerank.unread, result.rerank.veto = unread, 0.0
    files = [(hit.directory, hit.path) for hit in hits]
    judged = hits[:1] if relevance.decisive([hit.score for hit in hits], files) else candidates
    passages = [f"{hit.heading}\n{hit.text}" if hit.heading else hit.text for hit in judged]
    started = time.perf_counter()
    try:
        scores = relevance.judge(engine, options.rerank_cache or ScoreCache(), query, passages,
                                 [hit.content_hash for hit in judged])
    except RerankError as exc:
        log.info("relevance stage skipped: %s", exc)
        result.rerank.skipped = str(exc)
        return hits
    result.rerank.judged, result.rerank.seconds = len(judged), time.perf_counter() - started
    if len(judged) == 1 and len(hits) > 1:
        result.rerank.skipped = "retrieval was decisive: only its best hit was judged"
    for rank, (hit, score) in enumerate(zip(judged, scores)):
        hit.rerank_score, hit.fused_score = round(score, 4), hit.score
        hit.score = round(relevance.blend(hit.score, score, rank, engine.weights), 4)
    order = sorted(judged, key=lambda hit: ("exact" in hit.found_by, hit.score), reverse=True)
    return order + hits[len(judged):]


def _at_least_half(hits: list[Hit], fits: Callable[[Hit], bool]) -> bool:
    """Whether at least half the candidates fit (the engine reads their script, they are not code);
    counting stops once that is decided, since a check may tokenize a passage."""
    needed, fitting = (len(hits) + 1) // 2, 0
    for checked, hit in enumerate(hits, 1):
        fitting += fits(hit)
        if fitting >= needed:
            return True
        if fitting + len(hits) - checked < needed:
            return False
    return False


def _budgeted(hits: list[Hit], max_tokens: int | None) -> list[Hit]:
    """Hits in order while they fit `max_tokens` (the first always): the budget applied to the final
    order, whether retrieval's or the relevance stage's."""
    if max_tokens is None:
        return hits
    kept, tokens = [], 0
    for hit in hits:
        size = estimate_tokens(hit.text)
        if kept and tokens + size > max_tokens:
            break
        kept.append(hit)
        tokens += size
    return kept


def _freshness(path: str, row) -> str:
    """One stat per returned hit: "fresh", "stale" (size or mtime moved) or "gone"."""
    try:
        st = os.stat(path)
    except OSError:
        return "gone"
    return "fresh" if (st.st_size, st.st_mtime_ns) == (row.file_size, row.file_mtime_ns) else "stale"


def _finish(result: SearchResult, hits: list[Hit]) -> SearchResult:
    result.hits = hits
    if hits and result.unmatched:
        result.warnings.append(f"No indexed text contains {', '.join(result.unmatched)}: "
                               f"these hits are only close in meaning.")
    return result
