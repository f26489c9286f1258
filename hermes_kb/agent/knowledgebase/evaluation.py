"""Retrieval quality on a BEIR-layout dataset, through the same path as a user's files.

Each document becomes a file (`title`, blank line, `text`), indexed by the
real scanner/chunker/embedder/store; every query runs through
KnowledgeBase.search. A document is retrieved when any of its chunks is, at
the rank of its best chunk. Metrics come from ranx.

The corpus folder and its index live under $HERMES_HOME/knowledgebase/eval/
keyed by the dataset path, so a tuning loop re-embeds only chunks it has
never seen.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import re
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from .config import DirectoryConfig, KnowledgebaseConfig
from .embeddings import Embedder
from .service import KnowledgeBase

log = logging.getLogger(__name__)

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
# name -> (search mode, fusion, relevance stage)
SYSTEMS: dict[str, tuple[str, str, str]] = {
    "keyword": ("keyword", "weighted", "off"),
    "vector": ("vector", "weighted", "off"),
    "hybrid (weighted)": ("hybrid", "weighted", "off"),
    "hybrid (rrf)": ("hybrid", "rrf", "off"),
    "hybrid + rerank": ("hybrid", "weighted", "local"),
}
DOC_DEPTH = 100  # documents ranked per query
CHUNK_DEPTH = 300  # chunks asked for to fill DOC_DEPTH documents


class EvaluationError(ValueError):
    """The dataset folder is not in BEIR layout; the message says what is missing."""


@dataclass
class Dataset:
    name: str
    root: Path
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_dataset(root: Path, split: str) -> Dataset:
    files = {"corpus": root / "corpus.jsonl", "queries": root / "queries.jsonl", "qrels": root / "qrels" / f"{split}.tsv"}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise EvaluationError(f"{root} is not a BEIR dataset folder: {', '.join(missing)} missing.")
    corpus = {str(d["_id"]): (d.get("title") or "", d.get("text") or "") for d in _jsonl(files["corpus"])}
    qrels: dict[str, dict[str, int]] = {}
    with open(files["qrels"], encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    queries = {str(q["_id"]): q["text"] for q in _jsonl(files["queries"]) if str(q["_id"]) in qrels}
    return Dataset(root.name, root, corpus, queries, qrels)


def _file_name(doc_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", doc_id)
    return f"{safe}-{hashlib.sha1(doc_id.encode()).hexdigest()[:6]}.txt" if safe != doc_id else f"{doc_id}.txt"


def materialise(dataset: Dataset, folder: Path) -> dict[str, str]:
    """Write each document as a file (only when its content differs); returns file name -> doc id."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {}
    for doc_id, (title, text) in dataset.corpus.items():
        name = _file_name(doc_id)
        names[name] = doc_id
        content = f"{title}\n\n{text}\n" if title else f"{text}\n"
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
    return names


def workspace(dataset: Dataset, config: KnowledgebaseConfig, hermes_home: Path,
              limit: int | None = None) -> tuple[dict[str, str], KnowledgebaseConfig]:
    """The cached corpus folder of a dataset, and a config whose only directory is it."""
    key = hashlib.sha256(f"{dataset.root.resolve()}|{limit}".encode()).hexdigest()[:10]
    work = hermes_home / "knowledgebase" / "eval" / f"{dataset.name}-{key}"
    names = materialise(dataset, work / "corpus")
    directory = DirectoryConfig(path=(work / "corpus").resolve(), name=f"eval-{dataset.name}",
                                index_path=work / "index.sqlite", chunking=config.chunking)
    return names, replace(config, directories=(directory,))


@dataclass
class SystemResult:
    name: str
    metrics: dict[str, float]
    p50_ms: float
    p95_ms: float
    runs: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)


@dataclass
class EvaluationReport:
    dataset: str
    split: str
    queries: int
    documents: int
    chunks: int
    index_seconds: float
    chunks_embedded: int
    systems: list[SystemResult]

    def to_dict(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "systems"}
        data["systems"] = [{"name": s.name, **{m: round(v, 4) for m, v in s.metrics.items()},
                            "p50_ms": round(s.p50_ms, 1), "p95_ms": round(s.p95_ms, 1)} for s in self.systems]
        return data


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0.95 for p95)."""
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def doc_ranking(hits, names: dict[str, str]) -> dict[str, float]:
    """Best-chunk rank per document, as descending pseudo-scores ranx can sort. The places a hit's
    text is also found (a duplicate document) rank right after it: the user is shown them there."""
    ranking: dict[str, float] = {}
    for path in (place for hit in hits for place in (hit.path, *(p.path for p in hit.also_in))):
        doc_id = names.get(path)
        if doc_id is not None and doc_id not in ranking:
            ranking[doc_id] = float(DOC_DEPTH * 10 - len(ranking))
            if len(ranking) >= DOC_DEPTH:
                break
    return ranking


def evaluate(dataset_dir: Path, config: KnowledgebaseConfig, hermes_home: Path, split: str = "test",
             limit: int | None = None, systems: tuple[str, ...] = tuple(SYSTEMS),
             embedder_factory: Callable[[], Embedder] | None = None,
             on_progress: Callable[[str], None] = lambda message: None) -> EvaluationReport:
    from ranx import Qrels, Run  # heavy (numba); only for evaluation
    from ranx import evaluate as ranx_evaluate

    dataset = load_dataset(dataset_dir, split)
    if limit:
        # A limited run keeps the first `limit` queries and a corpus of their relevant documents plus
        # distractors, so a smoke run exercises everything in seconds.
        keep = dict(list(dataset.queries.items())[:limit])
        relevant = {d for q in keep for d in dataset.qrels[q]}
        distractors = [d for d in dataset.corpus if d not in relevant][: max(0, 20 * limit - len(relevant))]
        dataset = replace(dataset, queries=keep, qrels={q: dataset.qrels[q] for q in keep},
                          corpus={d: dataset.corpus[d] for d in [*relevant, *distractors]})
    names, config = workspace(dataset, config, hermes_home, limit)
    config = replace(config, min_score=0.0)
    on_progress(f"indexing {len(dataset.corpus)} documents")
    # The models the index is embedded with serve every system compared (each search still embeds its
    # query, in the variant the product queries that index with: embeddings.query_variant).
    kb = KnowledgeBase(config, hermes_home, embedder_factory=embedder_factory)
    corpus = config.directories[0].name  # only it: folders indexed by path in this home must not join the runs
    summary = kb.index(corpus)[0]
    chunks = kb.status(corpus)[0]["chunks"]
    qrels = Qrels(dataset.qrels)
    results = []
    for name in systems:
        mode, fusion, rerank = SYSTEMS[name]
        system_kb = kb.reconfigured(replace(config, fusion=fusion))
        on_progress(f"querying: {name}")
        run, timings = {}, []
        for query_id, text in dataset.queries.items():
            started = time.perf_counter()
            hits = system_kb.search(text, k=CHUNK_DEPTH, directory=corpus, mode=mode, rerank=rerank).hits
            timings.append((time.perf_counter() - started) * 1000)
            run[query_id] = doc_ranking(hits, names) or {"__none__": 0.0}
        scores = ranx_evaluate(qrels, Run(run), list(METRICS))
        results.append(SystemResult(name, {m: float(scores[m]) for m in METRICS}, statistics.median(timings),
                                    percentile(timings, 0.95), run))
    return EvaluationReport(dataset.name, split, len(dataset.queries), len(dataset.corpus), chunks,
                            summary.seconds, summary.chunks_embedded, results)
