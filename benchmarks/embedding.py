"""Embedding throughput: our pipeline on each runtime versus a plain fastembed `embed()`, same chunks.

The chunks are real: SciFact abstracts cut by the product's chunker. Every
side uses the same offline model folder; the plain call uses fastembed's
defaults (batch 256, input order), ours sorts by length and batches by
`embedding_model.batch_size`, once on onnxruntime (the path before OpenVINO)
and once on the default runtime. On onnxruntime vectors must agree with the
plain call to 1e-5; on OpenVINO their cosine to them must stay >= 0.999, so
existing indexes need no re-embedding.

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
from hermes_kb.agent.knowledgebase.embeddings import LocalEmbedder, pip_model_dir  # noqa: E402
from hermes_kb.agent.knowledgebase.kinds.document import Document  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.retrieval import DEFAULT_DATASET  # noqa: E402


def scifact_chunks():
    """Each SciFact abstract's chunks, in corpus order, cut as `hermes kb index` cuts a text file."""
    chunking = parse_knowledgebase({}).chunking
    with open(DEFAULT_DATASET / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            yield chunk_document(Document(f"{doc['title']}\n\n{doc['text']}\n", "text"), "doc.txt", chunking)


def sample_chunks(limit: int) -> list[str]:
    texts = []
    for chunks in scifact_chunks():
        texts += [c.embed_text for c in chunks]
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
    ours = {}  # runtime -> (label, seconds, vectors, peak RSS so far); before the plain call, whose batch of 256 peaks at GBs
    for runtime in ("onnxruntime", "auto"):
        settings = {"embedding_model": {"runtime": runtime, **({"batch_size": args.batch_size} if args.batch_size else {})}}
        model = LocalEmbedder(parse_knowledgebase(settings).embedding, home)
        model.embed_documents(texts[:8])  # warm: OpenVINO compiles kernels for its first shapes
        started = time.perf_counter()
        vectors = model.embed_documents(texts)
        ours[runtime] = (f"hermes on {model.runtime} (sorted, batch {model.batch_size})", time.perf_counter() - started,
                         vectors, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        del model
    started = time.perf_counter()
    plain = np.stack(list(plain_model.embed(texts)))
    plain_s = time.perf_counter() - started
    plain = plain / np.linalg.norm(plain, axis=1, keepdims=True)
    rows = [["plain fastembed embed() (batch 256)", f"{plain_s:.1f}", f"{len(texts) / plain_s:.1f}", f"{tokens / plain_s:,.0f}",
             "1.00x", "", "", "", ""]]
    for label, seconds, vectors, peak in ours.values():
        rows.append([label, f"{seconds:.1f}", f"{len(texts) / seconds:.1f}", f"{tokens / seconds:,.0f}",
                     f"{plain_s / seconds:.2f}x", f"{ours['onnxruntime'][1] / seconds:.2f}x",
                     f"{float(np.abs(vectors - plain).max()):.2e}", f"{(vectors * plain).sum(axis=1).min():.5f}",
                     f"{peak:.0f}"])
    report(f"Embedding throughput, {len(texts)} SciFact chunks ({tokens} word pieces)",
           ["pipeline", "seconds", "chunks/s", "tokens/s", "vs plain", "vs onnxruntime path", "max abs diff",
            "min cosine", "peak RSS MB (this process, up to this row)"],
           rows, write=not args.no_write)


if __name__ == "__main__":
    main()
