"""Write the words the relevance model read in training beside it (`vocabulary.txt.gz`).

    .venv/bin/python training/judge_vocabulary.py --model-dir hermes_kb/agent/knowledgebase/models/reranker

A cross-encoder judges what it learned to read. Asked in a field its training never showed (a claim
about "triacylglycerols" and "rapamycin" against biomedical abstracts), 1.2 judged right abstracts
under its veto as often as wrong ones while retrieval was sure of them (docs/benchmark-log.md): for
such a query the product still judges, but the model's veto does not count (reranker.unread_field).
The words are those of the training pairs a seed draws, without its held-out pages and articles, and
of the functions stage 2 reads, each kept where it occurs at least MIN_COUNT times; run in the
product's venv (the word rule is the product's own, `reranker.field_words`). A
model with a documentation stage (train_reranker.py --docs-queries) also read the sections of the
projects docs_pairs trains on (`--docs-corpus`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_pairs  # noqa: E402
import pairs  # noqa: E402

sys.path.insert(0, str(pairs.REPO))
from hermes_kb.agent.knowledgebase import reranker  # noqa: E402

MIN_COUNT = 3  # a word seen once or twice is a name in passing, not a field the model learned


def read_words(train_dir: Path, seed: int, docs_corpus: Path | None = None) -> Counter:
    rows, held = pairs.split_pairs(train_dir, random.Random(seed))
    code_train, _ = pairs.code_rows()
    texts = [f"{row['query']}\n{row['positive']}" for row in [r for r in rows if r["group"] not in held] + code_train]
    if docs_corpus is not None:
        texts += [one["shown"] for one in docs_pairs.sections(docs_corpus) if one["project"] not in docs_pairs.HELD_OUT]
    counts: Counter = Counter()
    for text in texts:
        counts.update(reranker.field_words(text))
    return counts


def write(model_dir: Path, counts: Counter, min_count: int = MIN_COUNT) -> dict:
    """The vocabulary file, and its facts recorded in the card (how many words, from what count)."""
    words = sorted(word for word, count in counts.items() if count >= min_count)
    # mtime 0: the same words make the same bytes
    (model_dir / reranker.VOCABULARY).write_bytes(gzip.compress(("\n".join(words) + "\n").encode(), mtime=0))
    card_file = model_dir / "card.json"
    card = json.loads(card_file.read_text())
    card["vocabulary"] = {"words": len(words), "min_count": min_count}
    card_file.write_text(json.dumps(card, indent=2) + "\n")
    return card["vocabulary"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--train-dir", type=Path, default=pairs.TRAIN_DIR)
    parser.add_argument("--seed", type=int, default=13, help="the training run's seed (its held-out pages)")
    parser.add_argument("--docs-corpus", type=Path, help="docs_corpus.py's chunks, for a model with a documentation stage")
    args = parser.parse_args()
    print(json.dumps(write(args.model_dir, read_words(args.train_dir, args.seed, args.docs_corpus))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
