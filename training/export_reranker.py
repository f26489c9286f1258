"""Export a trained cross-encoder (train_reranker.py's model.pt) to the folder the package ships.

    python training/export_reranker.py /tmp/reranker/model.pt --layers 3

The embedding tables are stored int8 with a scale per row and the other matrices fp16 (int8 in groups
where fp16 would not fit), turned back to fp32 in the graph (the shape of the pip-shipped embedder's
export: OpenVINO folds it into its kernels, onnxruntime runs it as it is): 3 layers' 17M parameters in
~22 MB, 6 layers' 22M in ~24 MB, inside the 25 MB the package may carry; the logits move by the figure
`card.json` records (`quantize_weights` says why not all int8).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_reranker as recipe  # noqa: E402

PACKAGE_DIR = recipe.REPO / "hermes_kb" / "agent" / "knowledgebase" / "models" / "reranker"
NAME, VERSION = "hermes-kb-relevance-minilm-l{layers}", "1.2"  # the name says the depth, the version the recipe
STAGE4_VERSION = "1.3"  # with a fourth stage (--trap-queries, --how-to-queries, --headed-queries, --chunked-queries or --docs-queries), none shipped yet
MIN_QUANTIZED = 16384  # initializers with fewer values stay fp32 (biases, norms, the head)
MAX_BYTES = 25 * 1024 * 1024  # what the package may carry for the model (issue #49)
MARGIN_BYTES = 1024 * 1024  # the small initializers and the graph beside the large ones
MATRIX_GROUP = 16  # inputs sharing one int8 scale where fp16 matrices would not fit


def symmetric_int8(values: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Values as int8 and the scale that turns them back, one scale per slice along `axis`."""
    scale = np.maximum(np.abs(values).max(axis=axis, keepdims=True), 1e-8) / 127.0
    return np.clip(np.round(values / scale), -127, 127).astype(np.int8), scale


def quantize_weights(path: Path, budget: int = MAX_BYTES) -> str:
    """Embedding tables -> int8 with a scale per row; the other large matrices -> fp16 where the file
    then fits `budget`, else int8 with a scale per MATRIX_GROUP inputs of each output; each turned back
    to fp32 in the graph (Cast, Mul by the scale, Reshape), folded into constants when a runtime loads
    it. Answers the matrices' storage ("fp16" or "int8/16").

    Why fp16 first: per-channel int8 matrices (one scale per output) moved 3 layers' logits by up to
    0.3, which shifts the calibrated probability the gate reads; a table looked up row by row loses
    nothing measurable at int8, and 3 layers' 5.3M matrix values fit in fp16 beside it (~22 MB). 6
    layers' 10.6M do not (33.5 MB): an fp16 scale per 16 inputs keeps each group's rounding to its own range
    (export() records the logit shift it leaves in the card)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    gathered = {node.input[0] for node in graph.node if node.op_type == "Gather"}
    large = [init for init in graph.initializer if init.data_type == onnx.TensorProto.FLOAT
             and len(init.dims) == 2 and int(np.prod(init.dims)) >= MIN_QUANTIZED]
    table_values = sum(int(np.prod(init.dims)) for init in large if init.name in gathered)
    matrix_values = sum(int(np.prod(init.dims)) for init in large if init.name not in gathered)
    storage = "fp16" if table_values + 2 * matrix_values + MARGIN_BYTES <= budget else f"int8/{MATRIX_GROUP}"
    large_names = {init.name for init in large}
    kept, nodes = [], []
    for init in graph.initializer:
        if init.name not in large_names:
            kept.append(init)
            continue
        values = numpy_helper.to_array(init)
        if init.name in gathered:
            quantized, scale = symmetric_int8(values, axis=1)
            kept += [numpy_helper.from_array(quantized, init.name + "_q"),
                     numpy_helper.from_array(scale.astype(np.float32), init.name + "_scale")]
            nodes += [helper.make_node("Cast", [init.name + "_q"], [init.name + "_f"], to=onnx.TensorProto.FLOAT),
                      helper.make_node("Mul", [init.name + "_f", init.name + "_scale"], [init.name])]
        elif storage == "fp16":
            kept.append(numpy_helper.from_array(values.astype(np.float16), init.name + "_q"))
            nodes.append(helper.make_node("Cast", [init.name + "_q"], [init.name], to=onnx.TensorProto.FLOAT))
        else:
            rows, cols = values.shape
            quantized, scale = symmetric_int8(values.reshape(rows // MATRIX_GROUP, MATRIX_GROUP, cols), axis=1)
            kept += [numpy_helper.from_array(quantized, init.name + "_q"),
                     numpy_helper.from_array(scale.astype(np.float16), init.name + "_scale"),
                     numpy_helper.from_array(np.array([rows, cols], dtype=np.int64), init.name + "_shape")]
            nodes += [helper.make_node("Cast", [init.name + "_q"], [init.name + "_f"], to=onnx.TensorProto.FLOAT),
                      helper.make_node("Cast", [init.name + "_scale"], [init.name + "_s"], to=onnx.TensorProto.FLOAT),
                      helper.make_node("Mul", [init.name + "_f", init.name + "_s"], [init.name + "_g"]),
                      helper.make_node("Reshape", [init.name + "_g", init.name + "_shape"], [init.name])]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    existing = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + existing)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return storage


def export(checkpoint: Path, layers: int, max_pieces: int, out_dir: Path, figures: dict, version: str = VERSION) -> dict:
    state = torch.load(checkpoint, map_location="cpu")
    model = recipe.CrossEncoder(layers, attentive="pool" in state)
    model.load_state_dict(state)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / "model.onnx"
    tok = recipe.PairTokenizer(recipe.installed_file(recipe.TOKENIZER), max_pieces)
    probe = tok.batch(["how do I create a gzipped archive", "what year was it founded"],
                      ["tar -czf archive.tar.gz folder: create a gzipped archive of a folder", "The town was founded in 1203."])
    torch.onnx.export(model, probe, str(onnx_path), input_names=["input_ids", "token_type_ids", "attention_mask"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={name: {0: "batch", 1: "pieces"} for name in ("input_ids", "token_type_ids", "attention_mask")}
                      | {"logits": {0: "batch"}})
    storage = quantize_weights(onnx_path)
    import onnxruntime

    with torch.no_grad():
        reference = model(*probe).numpy()
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    exported = session.run(None, {"input_ids": probe[0].numpy(), "token_type_ids": probe[1].numpy(),
                                  "attention_mask": probe[2].numpy()})[0]
    shutil.copyfile(recipe.installed_file(recipe.TOKENIZER), out_dir / "tokenizer.json")
    card = {"name": NAME.format(layers=layers), "version": version, "sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
            "layers": layers, "max_pieces": max_pieces, "bytes": onnx_path.stat().st_size, "matrices": storage,
            "stored_logit_shift": float(np.abs(reference - exported).max()),
            "reads_code": "code" in figures.get("forms", {}),  # trained on functions: judged, not left to retrieval
            "validation": figures}
    (out_dir / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


MAX_OFF_TOPIC = 0.02  # the share of off-topic messages the gate may open on (issue #49's bar)
VETO_KEEPS = 0.98  # the share of held-out answers the veto must let through


def bars(table: list[dict]) -> dict:
    """The gate's two bars from the calibration table: `threshold`, the smallest probability at which
    at most MAX_OFF_TOPIC of off-topic questions open the gate by the judgement alone, and `veto`, the
    largest under which at most 1 - VETO_KEEPS of held-out answers fall (context.AutoRetriever.verdict)."""
    threshold = next((row["threshold"] for row in table if row["off_topic_opened"] <= MAX_OFF_TOPIC), table[-1]["threshold"])
    veto = max((row["threshold"] for row in table if row["answerable_opened"] >= VETO_KEEPS), default=0.0)
    return {"threshold": threshold, "veto": veto}


def calibrate(model_dir: Path, train_dir: Path, seed: int, validation: int) -> dict:
    """The gate's bar on the shipped model's probability, chosen on held-out training queries alone
    (never on an evaluation set or a collection benchmarks/ measures).

    Each held-out query is asked three times: of its BM25 top 20 with its answer among them
    (answerable: the gate is right when it opens on the answer), of the same without the answer (a
    look-alike: often another paragraph of the same article that answers too, so shown, not used),
    and of the BM25 top 20 among the other domains' passages (off-topic for that collection, yet
    sharing its words: "the time complexity of quicksort" asked of a database manual). The bar is the
    smallest probability at which at most MAX_OFF_TOPIC of the off-topic questions open the gate, the
    veto the largest that keeps VETO_KEEPS of the answers (`bars`); the card keeps the whole table."""
    import onnxruntime
    import random

    rows, passages, passage_of, top, _, val_idx = recipe.prepared(train_dir, random.Random(seed), validation)
    card = json.loads((model_dir / "card.json").read_text())
    tok = recipe.PairTokenizer(model_dir / "tokenizer.json", card["max_pieces"])
    session = onnxruntime.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])

    def probabilities(query: str, texts: list[str]) -> np.ndarray:
        ids, seg, mask = tok.batch([query] * len(texts), texts)
        logits = session.run(None, {"input_ids": ids.numpy(), "token_type_ids": seg.numpy(), "attention_mask": mask.numpy()})[0]
        return 1 / (1 + np.exp(-logits))

    off_topic_pool = dict(zip(val_idx, recipe.foreign_top([rows[i] for i in val_idx], rows, passages, k=20)))
    answerable, lookalike, off_topic = [], [], []  # (best probability, best is the answer)
    for i in val_idx:
        pos = passage_of[i]
        pool = [int(p) for p in top[i] if passages[p] != passages[pos]][:19]
        probability = probabilities(rows[i]["query"], [passages[pos]] + [passages[p] for p in pool])
        answerable.append((float(probability.max()), int(probability.argmax()) == 0))
        lookalike.append(float(probability[1:].max()))
        off_topic.append(float(probabilities(rows[i]["query"], [passages[p] for p in off_topic_pool[i]]).max()))
    table = []
    for bar in [round(0.05 * i, 2) for i in range(1, 20)]:
        opened = [right for p, right in answerable if p >= bar]
        table.append({"threshold": bar, "answerable_opened": sum(p >= bar for p, _ in answerable) / len(answerable),
                      "answerable_right_first": sum(opened) / len(answerable),
                      "precision": sum(opened) / len(opened) if opened else 1.0,
                      "lookalike_opened": sum(p >= bar for p in lookalike) / len(lookalike),
                      "off_topic_opened": sum(p >= bar for p in off_topic) / len(off_topic)})
    card.update(bars(table))
    card["calibration"] = {"queries": len(val_idx), "max_off_topic": MAX_OFF_TOPIC, "veto_keeps": VETO_KEEPS,
                           "table": table}
    (model_dir / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--max-pieces", type=int, default=192)
    parser.add_argument("--out", type=Path, default=PACKAGE_DIR)
    parser.add_argument("--figures", type=Path, help="the training run's figures.json, recorded in the card")
    parser.add_argument("--train-dir", type=Path, default=recipe.TRAIN_DIR)
    parser.add_argument("--seed", type=int, default=13, help="the training run's seed (its held-out queries)")
    parser.add_argument("--validation", type=int, default=600)
    args = parser.parse_args()
    figures = json.loads(args.figures.read_text()) if args.figures else {}
    export(args.checkpoint, args.layers, args.max_pieces, args.out, figures)
    print(json.dumps(calibrate(args.out, args.train_dir, args.seed, args.validation), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
