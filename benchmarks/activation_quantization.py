"""OpenVINO's dynamic int8 quantization of activations: speed, cosine and retrieval quality beside the plain variant.

The offline model's plain variant (`onnx-int8`) runs bf16 or f32 arithmetic over its int8
weights; its int8-activations variant (`onnx-int8-dq128`, the default for new indexes on CPUs
with VNNI/AMX-INT8 and bf16) has OpenVINO quantize each token's activations in groups of
openvino_runtime.ACTIVATION_GROUP at run time and multiply in int8. This measures that lever per
group size on what `hermes kb index` embeds (the windows of the first 600 SciFact abstracts,
length-sorted batches of embedding_model.batch_size), then, with `--quality`, nDCG@10 through the
product's evaluation on each collection given (each in a scratch HERMES_HOME per setting, so
nothing is reused across them), the index embedded in the variant and its queries in the plain
variant, as `hermes kb search` embeds them (embeddings.query_variant).

    python benchmarks/activation_quantization.py --groups 0,32,64
    python benchmarks/activation_quantization.py --groups 0,32 --quality ../shared/eval/scifact,../shared/eval/xquad/en
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_kb.agent.knowledgebase import openvino_runtime  # noqa: E402
from hermes_kb.agent.knowledgebase.config import parse_knowledgebase  # noqa: E402
from hermes_kb.agent.knowledgebase.embeddings import LocalEmbedder  # noqa: E402
from hermes_kb.agent.knowledgebase.evaluation import evaluate  # noqa: E402
from benchmarks._report import report  # noqa: E402
from benchmarks.embedding import scifact_chunks  # noqa: E402

SHORT_TEXTS = ["a", "retry", "数据库迁移", "Обновление базы данных", "def main():"]  # queries are short


def index_windows(documents: int) -> list[str]:
    """What the indexer embeds for the first `documents` SciFact abstracts: every chunk's windows."""
    return [text for chunks in itertools.islice(scifact_chunks(), documents) for chunk in chunks
            for text in chunk.embed_texts]


def embedder(group: int, home: Path) -> LocalEmbedder:
    """The default model compiled with this group size (0: activation quantization off, the variant
    onnx-int8; the product's int8 activations use openvino_runtime.ACTIVATION_GROUP)."""
    openvino_runtime.ACTIVATION_GROUP = group
    model = LocalEmbedder(parse_knowledgebase({}).embedding, home, int8_activations=group > 0)
    if not model.runtime.startswith("openvino"):
        raise SystemExit(f"the default model runs on {model.runtime} here; this measures OpenVINO only")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", default="0,32", help="comma-separated group sizes, measured after 0 (off: the onnx-int8 variant)")
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("--quality", default="", help="comma-separated BEIR folders to evaluate per group size")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    groups = [0] + [int(g) for g in args.groups.split(",") if int(g)]  # every row is compared with off
    texts = index_windows(args.documents)
    collections = [Path(p) for p in args.quality.split(",") if p]
    rows, off = [], None  # off: (seconds, window vectors, short-text vectors) with quantization off
    with tempfile.TemporaryDirectory() as scratch:
        for group in groups:
            home = Path(scratch) / f"group-{group}"
            model = embedder(group, home)
            model.embed_documents(texts[:8])  # compile the first shapes outside the timing
            started = time.perf_counter()
            vectors = model.embed_documents(texts)
            seconds = time.perf_counter() - started
            short = model.embed_documents(SHORT_TEXTS)
            off = off or (seconds, vectors, short)
            cosine = (vectors * off[1]).sum(axis=1)
            row = [group or "off (onnx-int8)", model.runtime, f"{seconds:.1f}", f"{len(texts) / seconds:.1f}",
                   f"{off[0] / seconds:.2f}x", f"{cosine.min():.5f} / {cosine.mean():.6f}",
                   f"{(short * off[2]).sum(axis=1).min():.5f}"]
            for folder in collections:
                # The product's own models (the variant's for the index, the plain one for queries:
                # embeddings.query_variant), not `model` injected, which would embed queries too.
                setting = {"embedding_model": {"int8_activations": "on" if group else "off"}}
                result = evaluate(folder, parse_knowledgebase(setting), home / folder.name)
                scores = {s.name: s.metrics["ndcg@10"] for s in result.systems}
                row.append(f"{scores['vector']:.4f} / {scores['hybrid (weighted)']:.4f}")
            rows.append(row)
    report(f"OpenVINO dynamic int8 activations, {len(texts)} index windows of {args.documents} SciFact abstracts",
           ["group size", "runtime", "seconds", "windows/s", "vs off", "cosine to off: min / mean (windows)",
            f"min cosine, {len(SHORT_TEXTS)} short texts", *(f"{f.name} vector / hybrid nDCG@10" for f in collections)],
           rows, write=not args.no_write)


if __name__ == "__main__":
    main()
