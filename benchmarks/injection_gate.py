"""Calibrate the auto-injection gate (`relevance_threshold`) on two kinds of material.

- SciFact (claims -> abstracts), train and test splits: a claim is answerable
  when the block holds one of its relevant abstracts.
- npm's own docs (/usr/lib/node_modules/npm/docs/content, 91 pages): 60
  questions a user of npm asks, each labelled by hand with the pages that
  answer it (benchmarks/data/npm_docs_questions.tsv).
- The PostgreSQL 15 manual (Debian's postgresql-doc-15, 1,167 HTML pages): 50
  questions labelled the same way (benchmarks/data/pg_manual_questions.tsv).
- click's own source (the installed package's 17 modules): 24 questions a
  developer asks about it, labelled the same way
  (benchmarks/data/click_source_questions.tsv): code gets a block as often as prose?

Off-topic: the 201 coding questions in benchmarks/data/offtopic_questions.txt,
asked of each collection, and for the manual also the 40 everyday messages of
benchmarks/data/offtopic_general.txt (chat, trivia, "quicksort's worst case");
any injection is a false one. A few of them a docs collection does answer
("What is a Bloom filter?" has a page in the PostgreSQL manual): those, listed
with their pages in benchmarks/data/offtopic_answered.tsv, are answerable
questions of that collection instead. Each docs collection is indexed in a home of its
own, so no other index answers its questions.

For every question the hits the chat hook sees (default hybrid search, k =
max_context_chunks + 1) give the gate's `context.confidence` and the block it
would inject (`AutoRetriever.choose`: the best hit and those close to it). An
injection is right when the block holds an answer file ("block"); the stricter
"top" counts the best hit only. For each threshold: injection rate, both
precisions, false injection rate. The smallest threshold whose SciFact-train
block precision is at least 0.85 and whose false injection rate is at most 2%
on both collections is chosen, and confirmed through the real AutoRetriever.

With --languages, each XQuAD language of ../shared/eval/xquad (the same 240
paragraphs and questions in every language) is one more collection, so the
gate's rate and precision can be compared across languages; its questions are
the first --questions of each (the same questions in every language), and its
off-topic messages are the coding questions plus 24 everyday messages in its own
language (benchmarks/data/offtopic_everyday/<language>.txt).

    python benchmarks/injection_gate.py                 # choose, confirm, append to docs/benchmark-log.md
    python benchmarks/injection_gate.py --set relevance_threshold=0.8 --no-write
    python benchmarks/injection_gate.py --languages --questions 300
    python benchmarks/injection_gate.py --languages --only xquad --set embedding_model=multilingual --no-write
    python benchmarks/injection_gate.py --only "npm docs" --set rerank_model_dir=/tmp/candidate --details /tmp/npm.jsonl

With --details, every question and off-topic message at the configured bars goes to a JSON line: why the
gate opened or stayed shut (AutoRetriever.verdict), retrieval's confidence, the hits it decided on with
their judgements and texts, the block's files and whether one answers; and a table per collection counts the
reasons, and how often the first choice among those hits is an answer by the judgement alone, by
retrieval alone and by their blend (where an answer is among them).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.context import AutoRetriever, confidence  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import load_dataset, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from benchmarks._report import report, settings_of  # noqa: E402
from benchmarks.collection_builders import package_root  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
OFFTOPIC = DATA / "offtopic_questions.txt"
OFFTOPIC_GENERAL = DATA / "offtopic_general.txt"
ANSWERED = DATA / "offtopic_answered.tsv"  # off-topic messages a docs collection does answer (read, not guessed)
# name -> (folder, labelled questions, extra off-topic messages)
DOCS = {
    "npm docs": (Path("/usr/lib/node_modules/npm/docs/content"), DATA / "npm_docs_questions.tsv", None),
    "pg manual": (Path("/usr/share/doc/postgresql-doc-15/html"), DATA / "pg_manual_questions.tsv", OFFTOPIC_GENERAL),
    # program source, as a user indexes a package they work with: questions about code get a block as often?
    "click source": (package_root("click") or Path("click"), DATA / "click_source_questions.tsv", None),
}
XQUAD = Path(__file__).resolve().parents[2] / "shared" / "eval" / "xquad"
EVERYDAY = DATA / "offtopic_everyday"  # <language>.txt: the same everyday messages in each XQuAD language
GRID = [round(0.50 + 0.025 * i, 3) for i in range(21)]
MIN_BLOCK_PRECISION, MAX_FALSE_RATE = 0.85, 0.02


@dataclass
class Collection:
    name: str
    kb: KnowledgeBase
    questions: list[str]
    answers: list[set[str]]  # the files that answer each question
    offtopic: list[str]
    own_language: int = 0  # how many of `offtopic` (the last ones) are in the collection's own language


@dataclass
class Seen:
    """What the gate saw for one question: its confidence, and whether the top hit / the block is right."""
    confidence: float
    top_right: bool
    block_right: bool


def seen(hook: AutoRetriever, question: str, answers: set[str], k: int) -> Seen:
    hits = hook.kb.search(question, k=k).hits
    if not hits:
        return Seen(0.0, False, False)
    block = hook.choose(hits)  # what the hook would inject once the gate opens (it never injects here)
    if not block:
        return Seen(0.0, False, False)  # nothing fit to inject (over budget, table debris): the hook stays silent
    return Seen(confidence(hits), hits[0].path in answers, any(h.path in answers for h in block))


def rates(on_topic: list[Seen], off_topic: list[Seen], threshold: float) -> tuple[float, float, float, float]:
    """(injection rate, top precision, block precision, false injection rate)."""
    injected = [s for s in on_topic if s.confidence >= threshold]
    share = len(injected) / len(on_topic)
    top = sum(s.top_right for s in injected) / len(injected) if injected else 1.0
    block = sum(s.block_right for s in injected) / len(injected) if injected else 1.0
    return share, top, block, sum(s.confidence >= threshold for s in off_topic) / len(off_topic)


def lines_of(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def collections(dataset: Path, overrides: dict, home: Path, offtopic: list[str],
                languages: int | None = None, only: str = "") -> dict[str, Collection]:
    """Every collection measured whose name holds `only`; `languages`: how many questions of each
    XQuAD language to add."""
    config = parse_knowledgebase(overrides)
    found: dict[str, Collection] = {}
    embedder = None
    beir = [(dataset, split, f"{dataset.name} {split}", None) for split in ("train", "test")]
    if languages:
        beir += [(folder, "test", f"xquad {folder.name}", languages) for folder in sorted(XQUAD.iterdir())
                 if (folder / "corpus.jsonl").is_file()]
    for root, split, name, first in beir:
        if only not in name:
            continue
        data = load_dataset(root, split)
        names, run_config = workspace(data, config, home)  # the index benchmarks/retrieval.py built
        kb = KnowledgeBase(run_config, home, embedder_factory=embedder)
        kb.index()
        embedder = embedder or kb.embedder
        by_name = {v: k for k, v in names.items()}
        asked = sorted(data.queries)[:first]
        everyday = EVERYDAY / f"{root.name}.txt"
        own = lines_of(everyday) if first and everyday.is_file() else []
        found[name] = Collection(name, kb, [data.queries[q] for q in asked],
                                 [{by_name[d] for d in data.qrels[q]} for q in asked], offtopic + own, len(own))
    for name, (folder, questions, extra) in DOCS.items():
        if only not in name:
            continue
        if not folder.is_dir():
            print(f"{folder} is missing: {name} skipped", file=sys.stderr)
            continue
        answered = {message: pages for collection, message, pages in (line.split("\t") for line in lines_of(ANSWERED))
                    if collection == name}
        messages = offtopic + (lines_of(extra) if extra else [])
        if set(answered) - set(messages):
            raise SystemExit(f"{ANSWERED.name} names messages no off-topic set holds: {sorted(set(answered) - set(messages))}")
        rows = [line.split("\t") for line in lines_of(questions)] + [[m, pages] for m, pages in answered.items()]
        slug = name.replace(" ", "-")
        docs_config = parse_knowledgebase({**overrides, "directories": [{"path": str(folder), "name": slug}]})
        kb = KnowledgeBase(docs_config, home / "gate-homes" / slug, embedder_factory=embedder)
        kb.index()
        found[name] = Collection(name, kb, [q for q, _ in rows], [set(a.strip().split(",")) for _, a in rows],
                                 [m for m in messages if m not in answered])
    return found


def traced(c: Collection, config, out) -> list[object]:
    """Each of the collection's questions and off-topic messages through the hook at `config`, as one
    JSON line in `out`; the row of the reasons table: answerable questions opened by each reason,
    off-topic messages opened by each, and first choices right (the judge's, retrieval's, the blend's)."""
    opened: dict[str, Counter] = {"question": Counter(), "off-topic": Counter()}
    firsts = Counter()
    for kind, messages, answers in (("question", c.questions, c.answers),
                                    ("off-topic", c.offtopic, [set()] * len(c.offtopic))):
        for message, answer in zip(messages, answers):
            hook = AutoRetriever(c.kb, config)
            searched = hook.searched(message)
            verdict, block = hook.decided(searched[2], searched[1] is not None) if searched else ("not searched", [])
            hits = searched[2].hits if searched else []
            files = [h.path for h in block]
            if files:
                opened[kind][verdict] += 1
            judged = [h for h in hits if h.rerank_score is not None]
            if kind == "question" and judged and any(h.path in answer for h in judged):
                firsts["judge"] += max(judged, key=lambda h: h.rerank_score).path in answer
                firsts["retrieval"] += max(hits, key=lambda h: h.retrieval_score).path in answer
                firsts["blend"] += hits[0].path in answer
                firsts["asked"] += 1
            out.write(json.dumps({"collection": c.name, "kind": kind, "message": message, "answers": sorted(answer),
                                  "verdict": verdict, "confidence": round(confidence(hits), 4) if hits else None,
                                  "block": files, "right": any(f in answer for f in files),
                                  "hits": [{"path": h.path, "heading": h.heading, "score": round(h.score, 4),
                                            "judged": h.rerank_score, "text": h.text} for h in hits]}) + "\n")
    reasons = lambda counts: ", ".join(f"{n} {reason}" for reason, n in counts.most_common()) or "-"  # noqa: E731
    return [c.name, reasons(opened["question"]), reasons(opened["off-topic"]),
            f"{firsts['judge']} / {firsts['retrieval']} / {firsts['blend']} of {firsts['asked']}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--languages", action="store_true", help="add every XQuAD language as a collection")
    parser.add_argument("--questions", type=int, default=300, help="questions per XQuAD language")
    parser.add_argument("--details", type=Path, metavar="FILE",
                        help="write each message's verdict, hits and block to FILE (JSON lines) and count the reasons")
    parser.add_argument("--only", default="", help="measure only the collections whose name holds this (e.g. xquad); "
                                                   "without SciFact train the configured threshold is confirmed, none chosen")
    args = parser.parse_args()
    overrides = settings_of(args.set)
    config = parse_knowledgebase(overrides)
    k = config.max_context_chunks + 1
    found = collections(args.dataset, overrides, hermes_home(), lines_of(OFFTOPIC),
                        args.questions if args.languages else None, args.only)
    hooks = {name: AutoRetriever(c.kb, c.kb.config) for name, c in found.items()}
    measured = {name: ([seen(hooks[name], q, a, k) for q, a in zip(c.questions, c.answers)],
                       [seen(hooks[name], q, set(), k) for q in c.offtopic]) for name, c in found.items()}
    train = f"{args.dataset.name} train"
    chosen = next((t for t in GRID if rates(*measured[train], t)[2] >= MIN_BLOCK_PRECISION
                   and all(rates(*m, t)[3] <= MAX_FALSE_RATE for m in measured.values())), GRID[-1]) \
        if train in measured else config.relevance_threshold
    rows = []
    for threshold in GRID:
        row = [threshold]
        for name in measured:
            share, top, block, false = rates(*measured[name], threshold)
            row.append(f"{share:.2f} · {top:.2f} / {block:.2f} · {false:.3f}")
        rows.append(row + ["◀" if threshold == chosen else ""])
    report("Injection gate: injection rate · precision top / block · false injection (off-topic: "
           + ", ".join(f"{name} {len(c.offtopic)}" for name, c in found.items()) + ")",
           ["threshold", *measured, "chosen"], rows, write=not args.no_write)
    # Confirm through the real hook code path at the configured threshold and at the chosen one.
    confirm = []
    for threshold in dict.fromkeys([config.relevance_threshold, chosen]):
        for name, c in found.items():
            if name == train:
                continue
            gated = replace(c.kb.config, relevance_threshold=threshold)
            blocks = [AutoRetriever(c.kb, gated).block_for(q) for q in c.questions]
            injected = [(b, a) for b, a in zip(blocks, c.answers) if b]
            right = sum(any(h.path in a for h in b.hits) for b, a in injected)
            wrong = [AutoRetriever(c.kb, gated).block_for(q) is not None for q in c.offtopic]
            own = wrong[len(wrong) - c.own_language:] if c.own_language else []
            confirm.append([threshold, name, len(c.questions), len(injected), f"{len(injected) / len(c.questions):.3f}",
                            f"{right / max(len(injected), 1):.3f}", f"{sum(wrong)}/{len(wrong)}",
                            f"{sum(own)}/{len(own)}" if own else "-"])
    report("Injection gate through AutoRetriever", ["relevance_threshold", "collection", "questions", "injected",
                                                     "injection rate", "precision (block)", "false injections",
                                                     "of them everyday, in its language"],
           confirm, write=not args.no_write)
    if args.details:
        with args.details.open("w", encoding="utf-8") as out:
            rows = [traced(c, c.kb.config, out) for name, c in found.items() if name != train]
        report("Why the gate opened (answerable questions, off-topic messages), and how often the first choice "
               "among the hits it decided on is an answer: the judge's / retrieval's / the blend's", ["collection", "questions opened by",
               "off-topic opened by", "first choice right"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
