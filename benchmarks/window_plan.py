"""What the model reads per chunk, against retrieval quality: the window plan.

Each chunk's vectors come from windows of at most VECTOR_WINDOW estimated pieces, overlapping by
WINDOW_OVERLAP, each led by the chunk's heading (chunker.py). Plain fastembed reads each document
once, cut at 256 pieces; the index reads SciFact's 600 first abstracts as 1.9x the word pieces.
This counts the model's word pieces per plan on those abstracts (the first index's model time
follows them) and measures nDCG@10 (vector / hybrid) through the product's evaluation on each
collection given, a scratch HERMES_HOME per plan, the variant a new index gets on this machine.

    python benchmarks/window_plan.py --quality ../shared/eval/scifact,../shared/eval/xquad/en,../shared/eval/xquad/zh,.benchmarks-cache/collections/code
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import tempfile
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase import chunker  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import evaluate  # noqa: E402
from hermes_kb.agent.knowledgebase.service import KnowledgeBase  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.embedding import scifact_chunks  # noqa: E402


def heading_once(self) -> list[str]:
    """The heading before the first window only: later windows are the chunk's text alone."""
    if not self.windows:
        return [self.embed_text]
    prefix = f"{self.heading}\n" if self.heading else ""
    return [(prefix if n == 0 else "") + self.text[start:end] for n, (start, end) in enumerate(self.windows)]


WINDOWS = chunker._windows  # today's, for a plan that patches chunker._windows with its own


def first_window(base, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The first window alone: the model reads a chunk's first 128 pieces, as a truncating peer would."""
    return WINDOWS(base, start, end)[:1]


PLANS = {  # today: 128-piece windows overlapping by 20, the heading before each
    "today": [],
    "overlap 0": [mock.patch.object(chunker, "WINDOW_OVERLAP", 0)],
    "heading once": [mock.patch.object(chunker.Chunk, "embed_texts", property(heading_once))],
    "window 160": [mock.patch.object(chunker, "VECTOR_WINDOW", 160)],
    "one vector": [mock.patch.object(chunker, "_windows", lambda base, start, end: ())],  # cut at 256 pieces
    "first window": [mock.patch.object(chunker, "_windows", first_window)],
}
PLANS["overlap 0 + heading once"] = PLANS["overlap 0"] + PLANS["heading once"]


def pieces(documents: int, tokenizer) -> tuple[int, int]:
    """(windows, word pieces) the model reads for the first `documents` SciFact abstracts."""
    texts = [text for chunks in itertools.islice(scifact_chunks(), documents) for chunk in chunks
             for text in chunk.embed_texts]
    return len(texts), sum(len(encoding.ids) for encoding in tokenizer.encode_batch(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plans", default=",".join(PLANS), help="comma-separated names of PLANS")
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("--quality", default="", help="comma-separated BEIR folders to evaluate per plan")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from tokenizers import Tokenizer

    from hermes_kb.agent.knowledgebase.embeddings import MAX_TOKENS, pip_model_dir

    collections = [Path(p) for p in args.quality.split(",") if p]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = Tokenizer.from_file(str(pip_model_dir(Path(scratch) / "model-home") / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        baseline = None
        for name in args.plans.split(","):
            with contextlib.ExitStack() as patches:
                for patch in PLANS[name]:
                    patches.enter_context(patch)
                windows, count = pieces(args.documents, tokenizer)
                baseline = baseline or count
                row = [name, windows, count, f"{count / baseline:.2f}"]
                for folder in collections:
                    home = Path(scratch) / f"{len(rows)}-{folder.name}"
                    config = parse_knowledgebase({})
                    model = KnowledgeBase(config, home).embedder()
                    result = evaluate(folder, config, home, embedder_factory=lambda: model)
                    scores = {s.name: s.metrics["ndcg@10"] for s in result.systems}
                    row.append(f"{scores['vector']:.4f} / {scores['hybrid (weighted)']:.4f}")
                rows.append(row)
    report(f"Window plans: what the model reads of {args.documents} SciFact abstracts, and nDCG@10",
           ["plan", "windows", "word pieces", "vs today", *(f"{f.name} vector / hybrid" for f in collections)],
           rows, write=not args.no_write)


if __name__ == "__main__":
    main()
