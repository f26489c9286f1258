"""Embedding throughput: our pipeline versus a plain fastembed `embed()` on the same chunks.

The chunks are real: SciFact abstracts cut by the product's chunker. Both
sides use the same offline model folder; the plain call uses fastembed's
defaults (batch 256, input order), ours sorts by length and batches by
`embedding_model.batch_size`. Vectors must agree to 1e-5.

    python benchmarks/embedding.py --chunks 1000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase.chunker import chunk_document  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.embeddings import FastEmbedEmbedder, pip_model_dir  # noqa: E402
from hermes_kb.agent.knowledgebase.loaders import Document  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402


def sample_chunks(limit: int) -> list[str]:
    config = parse_knowledgebase({})
    texts = []
    with open(DEFAULT_DATASET / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            text = f"{doc['title']}\n\n{doc['text']}\n"
            texts += [c.embed_text for c in chunk_document(Document(text, "text"), "doc.txt", config.chunking)]
            if len(texts) >= limit:
                return texts[:limit]
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, help="default: the configured default for the local backend")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from fastembed import TextEmbedding

    home = Path.home() / ".hermes"
    texts = sample_chunks(args.chunks)
    folder = pip_model_dir(home)
    plain_model = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(folder))
    tokens = sum(len(e.ids) - e.ids.count(0) for e in plain_model.model.tokenizer.encode_batch(texts))
    started = time.perf_counter()
    plain = np.stack(list(plain_model.embed(texts)))
    plain_s = time.perf_counter() - started
    settings = {"embedding_model": {"batch_size": args.batch_size}} if args.batch_size else {}
    ours_model = FastEmbedEmbedder(parse_knowledgebase(settings).embedding, home)
    started = time.perf_counter()
    ours = ours_model.embed_documents(texts)
    ours_s = time.perf_counter() - started
    plain = plain / np.linalg.norm(plain, axis=1, keepdims=True)
    difference = float(np.abs(ours - plain).max())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report(f"Embedding throughput, {len(texts)} SciFact chunks ({tokens} word pieces)",
           ["pipeline", "seconds", "chunks/s", "tokens/s", "speed-up", "max abs diff", "peak RSS (MB, whole run)"],
           [["plain fastembed embed() (batch 256)", f"{plain_s:.1f}", f"{len(texts) / plain_s:.1f}", f"{tokens / plain_s:,.0f}",
             "1.00x", "", ""],
            [f"hermes (sorted, batch {ours_model.batch_size})", f"{ours_s:.1f}", f"{len(texts) / ours_s:.1f}",
             f"{tokens / ours_s:,.0f}", f"{plain_s / ours_s:.2f}x", f"{difference:.2e}", f"{peak_mb:.0f}"]],
           write=not args.no_write)


if __name__ == "__main__":
    main()
