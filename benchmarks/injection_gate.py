"""Calibrate the auto-injection gate (`relevance_threshold`).

For every SciFact query of a split, the top hit the chat hook would see
(default hybrid search, k = max_context_chunks) is relevant or not; for every
off-topic question in benchmarks/data/offtopic_questions.txt (things a coding
agent's user asks that this corpus cannot answer) any injection is a false
one. The gate compares `context.confidence` (best score plus its lead over the
best other file) with the threshold. For each threshold: precision of injected
top hits, injection rate, and false injection rate. The smallest threshold
whose train precision is at least 0.90 (the 0.85 target plus a safety margin)
and whose false injection rate is at most 5% is chosen. The chosen threshold is then confirmed through the real
AutoRetriever on the test split.

    python benchmarks/injection_gate.py                 # choose on train, confirm on test
    python benchmarks/injection_gate.py --set relevance_threshold=0.6
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.context import AutoRetriever, confidence  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import load_dataset, workspace  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402
from hermes_kb.hermes_cli.config import hermes_home  # noqa: E402

OFFTOPIC = Path(__file__).resolve().parent / "data" / "offtopic_questions.txt"
GRID = [round(0.50 + 0.05 * i, 3) for i in range(21)]
TARGET_PRECISION, SAFETY_MARGIN, MAX_FALSE_RATE = 0.85, 0.05, 0.05


def top_scores(kb: KnowledgeBase, questions: list[str], k: int) -> list[tuple[float, str | None]]:
    """The gate's confidence and the top hit's path, searched exactly as AutoRetriever searches."""
    rows = []
    for question in questions:
        hits = kb.search(question, k=k).hits
        rows.append((confidence(hits), hits[0].path) if hits else (0.0, None))
    return rows


def gate_table(on_topic, relevant_paths, off_topic):
    table = []
    for threshold in GRID:
        injected = [(s, p) for (s, p), rel in zip(on_topic, relevant_paths) if s >= threshold]
        correct = sum(1 for (s, p), rel in zip(on_topic, relevant_paths) if s >= threshold and p in rel)
        precision = correct / len(injected) if injected else 1.0
        table.append((threshold, precision, len(injected) / len(on_topic),
                      sum(1 for s, _ in off_topic if s >= threshold) / len(off_topic)))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    overrides = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.set)}
    config = parse_knowledgebase(overrides)
    home = hermes_home()
    offtopic = [line.strip() for line in OFFTOPIC.read_text().splitlines() if line.strip()]
    tables = {}
    kb = None
    for split in ("train", "test"):
        dataset = load_dataset(args.dataset, split)
        names, run_config = workspace(dataset, config, home)  # the index benchmarks/retrieval.py built
        kb = KnowledgeBase(run_config, home, embedder_factory=kb.embedder if kb else None)
        kb.index()
        by_name = {v: k for k, v in names.items()}
        relevant = [{by_name[d] for d in dataset.qrels[q]} for q in dataset.queries]
        on_topic = top_scores(kb, list(dataset.queries.values()), config.max_context_chunks + 1)
        off = top_scores(kb, offtopic, config.max_context_chunks + 1)
        tables[split] = (gate_table(on_topic, relevant, off), kb, dataset, relevant)
    train = tables["train"][0]
    # Train precision must clear the target with a margin, so the choice holds on unseen queries.
    chosen = next((t for t, precision, rate, false in train
                   if precision >= TARGET_PRECISION + SAFETY_MARGIN and false <= MAX_FALSE_RATE),
                  GRID[-1])
    rows = [[t, f"{p_tr:.3f}", f"{r_tr:.3f}", f"{p_te:.3f}", f"{r_te:.3f}", f"{f_te:.3f}", "◀" if t == chosen else ""]
            for (t, p_tr, r_tr, _), (_, p_te, r_te, f_te) in zip(train, tables["test"][0])]
    report(f"Injection gate on {args.dataset.name} ({len(offtopic)} off-topic questions)",
           ["threshold", "precision train", "inject rate train", "precision test", "inject rate test",
            "false injection (off-topic)", "chosen"], rows, write=not args.no_write)
    # Confirm through the real hook code path on test.
    _, kb, dataset, relevant = tables["test"]
    gated = replace(kb.config, relevance_threshold=chosen)
    injected = correct = false = 0
    for question, rel in zip(dataset.queries.values(), relevant):
        block = AutoRetriever(kb, gated).block_for(question)
        if block:
            injected += 1
            correct += block.hits[0].path in rel
    for question in offtopic:
        false += AutoRetriever(kb, gated).block_for(question) is not None
    report(f"Injection gate through AutoRetriever, relevance_threshold={chosen}, {dataset.name} test",
           ["queries", "injected", "precision of injected top hits", "injection rate", "off-topic questions",
            "false injections", "false injection rate"],
           [[len(relevant), injected, f"{correct / max(injected, 1):.3f}", f"{injected / len(relevant):.3f}",
             len(offtopic), false, f"{false / len(offtopic):.3f}"]], write=not args.no_write)


if __name__ == "__main__":
    main()
