"""The relevance stage measured the way the product runs it, on held-out training queries: the blend's
weights and the gate's bars chosen there, never on an evaluation set or a collection benchmarks/ measures.

    .venv/bin/python training/calibrate_pipeline.py --model-dir hermes_kb/agent/knowledgebase/models/reranker

export_reranker.calibrate judges BM25's top 20 from one pool of passages; the product judges what
its own hybrid retrieval found, blends that with retrieval's score and gates on both. So here the
pages and articles train_reranker.py held out (same seed, same split), and as many passages again
from the training side that no query asks for, are written as files into three collections: Wikipedia (SQuAD, Natural Questions), documentation (MedQuAD, tldr, Microsoft docs FAQs)
and code (the held-out modules' functions). Each held-out query is asked as a question, as a claim
(where its answer is known) and as keywords, of its own collection (answerable) and of the next one
(off-topic there: its answer is not in it, some of its words are), and half of them also of their own
collection's twin that lacks their page, article or module (a near-miss: the same kind of answer
about another thing, what a site's off-topic messages meet), through KnowledgeBase.search with the
relevance stage off; the model then judges the candidates the stage would judge. Where
training/docs_corpus.py has written its corpus, the three projects docs_pairs holds out are indexed
as documentation sites (their pages as their sdists hold them), asked the questions their headings
name and, as off-topic, other projects' documentation questions (docs_sites).

Reported, and written to --out as JSON: nDCG@10 of retrieval alone, of the shipped blend and of other
blends; for the gate, the share of answerable queries opened, the share of opened blocks whose first
passage is the answer, and the shares of off-topic queries and of near-misses opened, for each pair of
bars, and the same for the documentation sites alone (site_*); the bars chosen by chosen_bars, and the gate
at them by the collection a search was asked of (collection_gate: code, docs, Wikipedia, the sites).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import docs_corpus  # noqa: E402
import docs_pairs  # noqa: E402
import pairs  # noqa: E402

from hermes_kb.agent.knowledgebase import reranker as relevance  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.context import COMPANION_MARGIN, COMPANION_RELEVANCE, confidence  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402

COLLECTIONS = {"squad_v1.1_train": "wikipedia", "nq_qed_train": "wikipedia", "medquad": "docs",
               "tldr_pages": "docs", "msdocs_faq": "docs", "code": "code"}
OFF_TOPIC_OF = {"wikipedia": "docs", "docs": "code", "code": "wikipedia"}
NEAR = "-near"  # a collection's near-miss twin: its look-alikes and half its held-out pages (near_half)
PAGES = "pages"  # held-out projects' documentation sites (docs_sites), a collection each as a user indexes one
SITE_OFF_TOPIC = 400  # other projects' documentation questions asked of each site
MAX_OFF_TOPIC, MIN_PRECISION = 0.02, 0.9  # issue #49's bars for the gate: off-topic opened, blocks holding an answer
BARS = [round(0.05 * i, 2) for i in range(1, 20)]
CHUNKS = parse_knowledgebase({}).max_context_chunks
NOISE = 0.005  # blends whose mean nDCG@10 is this close are equal here (about 1,850 answerable searches, one seed)


@dataclass
class Asked:
    """One query asked of one collection: retrieval's candidates (score, is the answer), the
    model's probability for each, and retrieval's confidence."""
    collection: str
    form: str
    answerable: bool
    retrieval: list[float] = field(default_factory=list)
    right: list[bool] = field(default_factory=list)
    judged: list[float] = field(default_factory=list)
    confidence: float = 0.0
    near: bool = False  # asked of its own kind of collection without its page, article or module
    off_setting: list[bool] = field(default_factory=list)  # per candidate: the question's foreign setting unsaid (subject.py)
    unread: bool = False  # names a field the model never read (reranker.UNREAD_FIELD): no veto, as in the product


def held_out(seed: int, distractors: int) -> tuple[list[dict], list[dict]]:
    """Every held-out pair (text and code), and up to `distractors` passages of each collection from
    the training side (files no query asks for: a collection the size of a small site, so retrieval
    has look-alikes to get wrong)."""
    rows, passages, passage_of, _, train_idx, val_idx = pairs.prepared(pairs.TRAIN_DIR, random.Random(seed), 10 ** 9)
    chosen = [dict(rows[i], passage=passages[passage_of[i]]) for i in val_idx]
    code_train, code_held = pairs.code_rows()
    chosen += [dict(row, passage=row["positive"]) for row in code_held]
    others = [dict(rows[i], passage=passages[passage_of[i]]) for i in train_idx] + \
        [dict(row, passage=row["positive"]) for row in code_train]
    random.Random(seed).shuffle(others)
    taken: dict[str, int] = {}
    extra = []
    for row in others:
        collection = COLLECTIONS[row["source"]]
        if taken.get(collection, 0) < distractors:
            taken[collection] = taken.get(collection, 0) + 1
            extra.append(row)
    return chosen, extra


def write_collections(rows: list[dict], root: Path, twin: str = "", pages: bool = False) -> None:
    """One file per distinct passage, in its collection's folder (its name + `twin`); with `pages`, one
    per page, article or module, its passages one after another, as a site's pages hold several
    answers and many look-alikes. Code as .py, the rest as .txt. Each row learns its file's name."""
    names: dict[tuple[str, str], str] = {}
    bodies: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        collection = COLLECTIONS[row["source"]]
        key = (collection, row["group"] if pages else row["passage"])
        if key not in names:
            names[key] = f"{len(names):05d}{'.py' if collection == 'code' else '.txt'}"
            bodies[key] = []
        body = row["passage"].split("\n", 1)[1] if collection == "code" else row["passage"]
        if body not in bodies[key]:
            bodies[key].append(body)
        row["file"] = names[key]
    for key, name in names.items():
        folder = root / (key[0] + twin)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("\n\n".join(bodies[key]) + "\n", encoding="utf-8")


def near_half(row: dict) -> bool:
    """The half of the held-out pages, articles and modules whose queries are asked of a collection
    holding the other half: stable across runs and seeds' shuffles."""
    return int(hashlib.sha256(row["group"].encode()).hexdigest(), 16) % 2 == 1


def forms(row: dict, how_to: bool = False) -> dict[str, str]:
    """The ways a held-out query is asked; with `how_to`, task-shaped ones (tldr's, code's) also as a
    how-to question (pairs.how_to): the way documentation is asked, and, asked of the next collection,
    a technical off-topic question sharing its words (a command's task against functions that do
    something like it), as a documentation site's off-topic messages do."""
    asked = {"question": row["query"], "keywords": pairs.keywords(row["query"])}
    if isinstance(row.get("answer"), str):
        asked["claim"] = pairs.statement(row["query"], row["answer"])
    if how_to:
        asked["how-to"] = pairs.how_to(row, random.Random(row["query"]))
    return {form: text for form, text in asked.items() if text}


def docs_sites(root: Path, corpus: Path, rng: random.Random) -> list[dict]:
    """Each held-out project's documentation (docs_pairs.HELD_OUT) written out as its sdist holds it, a
    collection of its own (`PAGES`-project), as a user indexes a site. Its askable sections
    (docs_pairs.asked) are its answerable questions, the answer the section's page; SITE_OFF_TOPIC
    documentation questions of the training-side projects are its off-topic ones: programming
    questions about another tool that share a site's words ("How do I install hatch?" meets an
    Installation page), what a documentation site's off-topic messages are, and what the other
    domains' queries are far easier to refuse than. A question whose heading the site also has
    ("Configuration") might be answered there and is not asked of it. None without the corpus."""
    if not corpus.exists():
        print(f"no documentation sites: {corpus} is missing (training/docs_corpus.py writes it)", file=sys.stderr)
        return []
    found = docs_pairs.sections(corpus)
    sources = {source["project"]: source for source in docs_corpus.sources()}
    asked_of = [(section, query) for section in found if (query := docs_pairs.asked(section["title"], section["project"], rng))]
    heading_of = {id(section): docs_pairs.plain(section["title"]).lower() for section in found}
    queries = []
    for project in sorted(docs_pairs.HELD_OUT):
        site = f"{PAGES}-{project}"
        for page, data in docs_corpus.doc_files(docs_corpus.fetched(sources[project], corpus.parent / "sdists")):
            (root / site / page).parent.mkdir(parents=True, exist_ok=True)
            (root / site / page).write_bytes(data)
        headings = {heading_of[id(s)] for s in found if s["project"] == project}
        foreign = [query for section, query in asked_of if section["project"] not in docs_pairs.HELD_OUT
                   and heading_of[id(section)] not in headings]
        queries += [{"query": query, "site": site, "file": section["page"]}
                    for section, query in asked_of if section["project"] == project]
        queries += [{"query": query, "site": site, "file": None}
                    for query in rng.sample(foreign, min(SITE_OFF_TOPIC, len(foreign)))]
    return queries


def ask_all(rows: list[dict], root: Path, home: Path, judge: relevance.LocalReranker, per_collection: int,
            seed: int, how_to: bool = False, depth: int = relevance.DEPTH, sites: list[dict] = ()) -> list[Asked]:
    names = sorted(set(COLLECTIONS.values()))
    names += [n + NEAR for n in names] + sorted({one["site"] for one in sites})
    kb = KnowledgeBase(parse_knowledgebase({"directories": [{"path": str(root / name), "name": name} for name in names],
                                            "rerank": "off"}), home)
    started = time.time()
    kb.index()
    print(f"indexed {sum(1 for _ in root.rglob('*.*'))} files in {time.time() - started:.0f} s", file=sys.stderr)

    def ask(text: str, target: str, file: str | None, one: Asked) -> Asked:
        result = kb.search(text, k=depth, directory=target)
        hits, setting = result.hits, result.setting
        one.confidence = confidence(hits)
        if setting is not None and setting.foreign:
            one.off_setting = [not setting.held_by(h) for h in hits]
        one.retrieval = [h.score for h in hits]
        one.right = [one.answerable and h.path == file for h in hits]
        one.unread = bool(relevance.unread_field(judge, text))
        one.judged = judge.scores(text, [f"{h.heading}\n{h.text}" if h.heading else h.text for h in hits]) if hits else []
        return one

    rng = random.Random(seed)
    by_collection: dict[str, list[dict]] = {}
    for row in rows:
        by_collection.setdefault(COLLECTIONS[row["source"]], []).append(row)
    asked: list[Asked] = []
    for collection, members in sorted(by_collection.items()):
        rng.shuffle(members)
        for row in members[:per_collection]:
            targets = [(collection, True), (OFF_TOPIC_OF[collection], False)]
            if row["near"]:
                targets.append((collection + NEAR, False))
            for form, text in forms(row, how_to).items():
                for target, answerable in targets:
                    asked.append(ask(text, target, row["file"], Asked(collection, form, answerable, near=target.endswith(NEAR))))
        print(f"{collection}: asked {len(asked)} so far, {time.time() - started:.0f} s", file=sys.stderr)
    for one in sites:
        asked.append(ask(one["query"], one["site"], one["file"], Asked(PAGES, "question", one["file"] is not None)))
    print(f"{PAGES}: asked {len(asked)} in all, {time.time() - started:.0f} s", file=sys.stderr)
    return asked


# ---------------------------------------------------------------- the blend

def ndcg(order: list[bool]) -> float:
    return next((1 / math.log2(rank + 2) for rank, right in enumerate(order[:10]) if right), 0.0)


def blended(one: Asked, weights: tuple[tuple[int, float], ...] | None) -> list[int]:
    """Candidate indices in the order a blend gives (None: retrieval's order)."""
    return list(range(len(one.retrieval))) if weights is None else ranked(blended_scores(one, weights))


def blended_scores(one: Asked, weights) -> list[float]:
    return [relevance.blend(s, p, rank, weights) for rank, (s, p) in enumerate(zip(one.retrieval, one.judged))]


def ranked(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def by_position(depth: int, top: float, upper: float, rest: float) -> tuple[tuple[int, float], ...]:
    """Retrieval's share at ranks 1-3, 4-10 and below, as far as `depth` candidates reach."""
    steps: list[tuple[int, float]] = []
    for limit, share in ((3, top), (10, upper), (depth, rest)):
        if not steps or steps[-1][0] < depth:
            steps.append((min(limit, depth), share))
    return tuple(steps)


def candidate_blends(depth: int) -> dict:
    """The blends tried for an engine judging `depth` candidates."""
    blends = {"retrieval alone": None, "qmd's": by_position(depth, 0.75, 0.6, 0.4), "judge alone": ((depth, 0.0),)}
    blends |= {f"flat {w:.1f}": ((depth, w),) for w in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)}

    def per_rank(weights) -> tuple[float, ...]:
        return tuple(relevance.retrieval_weight(rank, weights) for rank in range(depth))

    seen = {per_rank(weights) for weights in blends.values() if weights}
    for top, upper, rest in ((0.85, 0.7, 0.5), (0.65, 0.5, 0.3), (0.75, 0.75, 0.6), (0.6, 0.6, 0.4), (0.5, 0.5, 0.5)):
        weights = by_position(depth, top, upper, rest)
        if per_rank(weights) not in seen:  # the same blend as a flat one, or at a shallow depth as another
            seen.add(per_rank(weights))
            blends["by position " + "/".join(f"{w:.2f}" for _, w in weights)] = weights
    return blends


def blend_table(asked: list[Asked], blends: dict) -> dict[str, dict[str, float]]:
    answerable = [a for a in asked if a.answerable and a.retrieval]
    groups = sorted({(a.collection, a.form) for a in answerable})
    table = {}
    for name, weights in blends.items():
        row = {}
        for collection, form in groups:
            members = [a for a in answerable if (a.collection, a.form) == (collection, form)]
            row[f"{collection}/{form}"] = sum(ndcg([a.right[i] for i in blended(a, weights)]) for a in members) / len(members)
        row["mean"] = sum(row.values()) / len(row)
        table[name] = row
    return table


# ---------------------------------------------------------------- the gate

def block_of(one: Asked, weights) -> tuple[float, bool, bool]:
    """The judgement the gate reads (the first passage's), whether the block the hook would send
    holds the answer (the first passage and those within COMPANION_MARGIN of its blended score and
    judged at least COMPANION_RELEVANCE of it, up to max_context_chunks: AutoRetriever.choose), and
    whether the question's named setting keeps the gate shut (AutoRetriever.verdict)."""
    scores = blended_scores(one, weights)
    order = ranked(scores)
    first = order[0]
    block = [i for i in order if scores[i] >= scores[first] - COMPANION_MARGIN
             and one.judged[i] >= COMPANION_RELEVANCE * one.judged[first]][:CHUNKS]
    shut = bool(one.off_setting) and all(one.off_setting[i] for i in order[:CHUNKS])
    return one.judged[first], any(one.right[i] for i in block), shut


SEARCH_KINDS = {"answerable": lambda a: a.answerable, "off_topic": lambda a: not a.answerable and not a.near,
                "near_miss": lambda a: a.near}


def by_kind(searches: list[Asked]) -> dict[str, int]:
    """How many of the searches are answerable, off-topic and near-misses."""
    return {kind: sum(map(test, searches)) for kind, test in SEARCH_KINDS.items()}


def setting_table(asked: list[Asked], weights) -> dict[str, int]:
    """Searches whose named setting shut the gate (subject.py), of each kind: what the rule costs in
    answers and what it refuses."""
    shut = [(a, right) for a in asked if a.retrieval for _, right, closed in [block_of(a, weights)] if closed]
    return by_kind([a for a, _ in shut]) | {"answerable_right": sum(a.answerable and right for a, right in shut),
                                            "named_foreign": sum(bool(a.off_setting) for a in asked)}


def unread_table(asked: list[Asked]) -> dict[str, int]:
    """Searches naming a field the model never read (its veto waived for them), of each kind."""
    return by_kind([a for a in asked if a.unread])


def opens(one: Asked, judged: float, threshold: float, veto: float, retrieval_bar: float) -> bool:
    """AutoRetriever.verdict: the judgement at `threshold`, or a confident retrieval not vetoed (an
    unread field has no veto)."""
    return judged >= threshold or (one.confidence >= retrieval_bar and (judged >= veto or one.unread))


def asked_of(one: Asked) -> str:
    """The collection a search was asked of: its own (answerable, a site's off-topic questions), its
    twin's kind (a near-miss), or the next one (OFF_TOPIC_OF)."""
    return one.collection if one.answerable or one.near or one.collection == PAGES else OFF_TOPIC_OF[one.collection]


def collection_gate(asked: list[Asked], retrieval_bar: float, weights, threshold: float, veto: float) -> dict[str, dict]:
    """The gate at one pair of bars on each kind of collection: answerable, off-topic and near-miss
    searches opened, and blocks holding the answer. The issue asks code's questions to get a block as
    often as prose's; gate_table's totals mix them."""
    table = {}
    for name in sorted({asked_of(a) for a in asked}):
        mine = [a for a in asked if asked_of(a) == name]
        opened = [(a, right) for a in mine if a.retrieval for p, right, shut in [block_of(a, weights)]
                  if not shut and opens(a, p, threshold, veto, retrieval_bar)]
        answers = [right for a, right in opened if a.answerable]
        counts, opened_counts = by_kind(mine), by_kind([a for a, _ in opened])
        table[name] = {f"{kind}_opened": opened_counts[kind] / max(1, n) for kind, n in counts.items()} | {
            "precision": sum(answers) / len(answers) if answers else 1.0} | {f"{kind}_searches": n for kind, n in counts.items()}
    return table


def gate_table(asked: list[Asked], retrieval_bar: float, weights) -> list[dict]:
    """For each (threshold, veto): answerable opened, blocks holding the answer among them, off-topic
    opened (another domain) and near-misses opened (`opens`); the same for the sites alone. A search
    that found nothing never opens."""
    seen = [(a, p, right) for a in asked if a.retrieval for p, right, shut in [block_of(a, weights)] if not shut]
    kinds = {"answerable_opened": lambda a: a.answerable,
             "off_topic_opened": lambda a: not a.answerable and not a.near and a.collection != PAGES,
             "near_miss_opened": lambda a: a.near,
             "site_answerable_opened": lambda a: a.answerable and a.collection == PAGES,
             "site_off_topic_opened": lambda a: not a.answerable and a.collection == PAGES}
    totals = {name: max(1, sum(map(kind, asked))) for name, kind in kinds.items()}
    rows = []
    for threshold in BARS:
        for veto in [0.0] + [b for b in BARS if b < threshold]:
            opened = [(a, right) for a, p, right in seen if opens(a, p, threshold, veto, retrieval_bar)]
            on = [right for a, right in opened if a.answerable]
            on_sites = [right for a, right in opened if kinds["site_answerable_opened"](a)]
            rows.append({"threshold": threshold, "veto": veto, "precision": sum(on) / len(on) if on else 1.0,
                         "site_precision": sum(on_sites) / len(on_sites) if on_sites else 1.0}
                        | {name: sum(map(kind, (a for a, _ in opened))) / totals[name] for name, kind in kinds.items()})
    return rows


def chosen_bars(gate: list[dict], veto: float) -> dict | None:
    """The gate's bar, at export_reranker's veto: of the rows meeting the issue's limits, the one
    opening the most answerable queries. Blocks must hold an answer MIN_PRECISION of the time;
    off-topic queries of another domain may open it at half MAX_OFF_TOPIC (they are easier to refuse
    than a collection's own look-alikes), a documentation site's off-topic questions (docs_sites: what
    a user's off-topic messages are like) at MAX_OFF_TOPIC itself. Near-misses are reported beside
    them, not chosen on: some are answered by another page all the same.

    The veto is not chosen here: a higher one refuses sites' off-topic questions that a confident
    retrieval would open, but on a field the judge never read it refuses right answers retrieval was
    sure of (1.2's veto 0.05 -> 0.1 on SciFact: 169 -> 154 claims opened, 127 -> 115 with the answer
    first, the same one off-topic; docs/benchmark-log.md), and nothing here has such a field. The
    unread-field rule (no veto where a query names two words the model never read) spares the claims
    it flags, not the others (with it, veto 0.05 -> 0.1: 181 -> 169 opened)."""
    fits = [r for r in gate if r["veto"] == veto and r["precision"] >= MIN_PRECISION
            and r["off_topic_opened"] <= MAX_OFF_TOPIC / 2 and r["site_off_topic_opened"] <= MAX_OFF_TOPIC]
    return max(fits, key=lambda r: r["answerable_opened"], default=None)


def retrieval_share(weights) -> float:
    depth = relevance.depth(weights)
    return sum(relevance.retrieval_weight(rank, weights) for rank in range(depth)) / depth


def chosen_blend(candidates: dict, table: dict) -> str:
    """Of the blends within NOISE of the best mean, the one that leaves retrieval the most say: these
    queries come from the sources the model learned, so the judge's worth here is its best case; on
    a collection it never saw (a field's own words, long abstracts) it is worth less, and retrieval
    is not. Among equals, then, the judge is trusted least."""
    best = max(table[name]["mean"] for name in candidates)
    near = [name for name in candidates if table[name]["mean"] >= best - NOISE]
    return max(near, key=lambda name: (retrieval_share(candidates[name]), table[name]["mean"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=relevance.MODEL_DIR)
    parser.add_argument("--out", type=Path, default=Path("/tmp/pipeline.json"))
    parser.add_argument("--per-collection", type=int, default=300, help="held-out queries asked of each collection")
    parser.add_argument("--distractors", type=int, default=2000, help="training-side passages added to each collection")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--how-to", action="store_true",
                        help="also ask task-shaped queries as how-to questions (a model trained with --how-to-queries)")
    parser.add_argument("--pages", action="store_true",
                        help="one file per page, article or module rather than per passage")
    parser.add_argument("--docs-corpus", type=Path, default=docs_pairs.CORPUS, help="training/docs_corpus.py's chunks")
    parser.add_argument("--no-sites", dest="sites", action="store_false",
                        help="leave out the held-out projects' documentation sites (docs_sites)")
    parser.add_argument("--depth", type=int, help="candidates judged (default: as far as the card's blend reaches)")
    parser.add_argument("--asked", type=Path, help="the .asked.json of an earlier run of the same model: choose again, ask nothing")
    parser.add_argument("--keep-blend", action="store_true",
                        help="keep the card's blend and choose the gate's bars for it (the model's ranking unchanged)")
    parser.add_argument("--write-card", action="store_true",
                        help="keep the best blend and the gate's bars in the model's card.json")
    args = parser.parse_args()
    judge = relevance.LocalReranker(args.model_dir)
    depth = args.depth or relevance.depth(judge.weights)
    to_try = candidate_blends(depth)
    if args.asked:
        asked = [Asked(**one) for one in json.loads(args.asked.read_text())]
    else:
        rows, extra = held_out(args.seed, args.distractors)
        with tempfile.TemporaryDirectory() as work:
            twins = [dict(row) for row in extra] + [dict(row) for row in rows if not near_half(row)]
            write_collections(twins, Path(work) / "collections", NEAR, args.pages)
            held = {twin["passage"] for twin in twins}
            for row in rows:  # a passage that another page holds word for word would answer it there
                row["near"] = near_half(row) and row["passage"] not in held
            write_collections(rows + extra, Path(work) / "collections", pages=args.pages)
            sites = docs_sites(Path(work) / "collections", args.docs_corpus, random.Random(args.seed)) if args.sites else []
            asked = ask_all(rows, Path(work) / "collections", Path(work) / "home", judge, args.per_collection, args.seed,
                             args.how_to, depth, sites)
        args.out.with_suffix(".asked.json").write_text(json.dumps([one.__dict__ for one in asked]))
    if relevance.depth(judge.weights) == depth:
        to_try["the card's"] = judge.weights
    blends = blend_table(asked, to_try)
    for name, row in blends.items():
        print(f"{name:32s} " + " ".join(f"{k}={v:.3f}" for k, v in row.items()))
    judged_blends = {name: to_try[name] for name in blends if name not in ("retrieval alone", "judge alone")}
    if args.keep_blend and "the card's" not in judged_blends:
        parser.error("--keep-blend: the card's blend judges another depth than --depth")
    best_blend = "the card's" if args.keep_blend else chosen_blend(judged_blends, blends)
    weights = judged_blends[best_blend]
    if args.keep_blend:  # named as it was chosen
        best_blend = judge.card.get("pipeline", {}).get("blend_name", best_blend)
    retrieval_bar = parse_knowledgebase({}).relevance_threshold
    gate = gate_table(asked, retrieval_bar, weights)
    now = next((r for r in gate if r["threshold"] == judge.threshold and r["veto"] == judge.veto), None)
    best = chosen_bars(gate, judge.veto)
    print(f"best blend: {best_blend} {weights}")
    print(f"shut by a named setting (subject.py): {json.dumps(setting_table(asked, weights))}")
    print(f"in a field the model never read (no veto): {json.dumps(unread_table(asked))}")
    print(f"gate at the card's bars {judge.threshold}/{judge.veto}: {json.dumps(now)}")
    print(f"the gate's bar (off-topic <= {MAX_OFF_TOPIC / 2}, a site's <= {MAX_OFF_TOPIC}, precision >= {MIN_PRECISION}): "
          f"{json.dumps(best)}")
    bars = best or {"threshold": judge.threshold, "veto": judge.veto}  # those the card keeps
    per_collection = collection_gate(asked, retrieval_bar, weights, bars["threshold"], bars["veto"])
    print(f"by the collection asked, at {bars['threshold']}/{bars['veto']}:")
    for name, row in per_collection.items():
        print(f"  {name:10s} " + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    chosen = {"blend": [list(pair) for pair in weights], "blend_name": best_blend, "gate": best,
              "queries": len(asked), "near_misses": sum(a.near for a in asked), "retrieval_bar": retrieval_bar,
              "unread_fields": unread_table(asked), "per_collection": per_collection}
    args.out.write_text(json.dumps({"model": judge.identity, **chosen, "blends": blends, "gate_table": gate}, indent=1))
    if args.write_card and best:
        card_file = args.model_dir / "card.json"
        card = json.loads(card_file.read_text())
        card.update({"blend": chosen["blend"], "threshold": best["threshold"], "veto": best["veto"],
                     "pipeline": {k: v for k, v in chosen.items() if k != "blend"} | {"blends": blends}})
        card_file.write_text(json.dumps(card, indent=2) + "\n")
        print(f"written to {card_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
