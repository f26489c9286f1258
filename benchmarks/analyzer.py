"""What the one analyzer costs: chunks analysed per second at index time and query analysis per query,
against the previous English-only analysis (lower-case, one regex, Porter) in the same run, and the
time to re-analyse an index written by another analyzer (no re-embedding), at N chunks.

    python benchmarks/analyzer.py --chunks 100000        # SciFact abstracts (and XQuAD paragraphs) as chunks
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import report  # noqa: E402
from hermes_kb.agent.knowledgebase import analysis  # noqa: E402
from hermes_kb.agent.knowledgebase.chunker import Chunk  # noqa: E402
from hermes_kb.agent.knowledgebase.index.store import IndexStore  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval"
_OLD_WORD = re.compile(r"[^\W_]+")


def old_words(text: str) -> list[str]:
    """The analysis before this one (keyword_cache.words of schema 1), for the same-run baseline."""
    import unicodedata

    text = text.lower()
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return analysis._stemmer("porter").stemWords(_OLD_WORD.findall(text))


def texts(count: int) -> list[str]:
    pool = [json.loads(line)["text"][:1200] for line in open(SHARED / "scifact" / "corpus.jsonl")]
    for language in ("zh", "de", "ru", "ar"):
        pool += [json.loads(line)["text"] for line in open(SHARED / "xquad" / language / "corpus.jsonl")]
    return [pool[i % len(pool)] for i in range(count)]


def rate(function, items) -> float:
    started = time.perf_counter()
    for item in items:
        function(item)
    return len(items) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    corpus = texts(args.chunks)
    sample = corpus[: min(len(corpus), 20_000)]
    queries = [json.loads(line)["text"] for line in open(SHARED / "scifact" / "queries.jsonl")][:300]
    queries += [json.loads(line)["text"] for line in open(SHARED / "xquad" / "zh" / "queries.jsonl")][:300]
    languages = ("porter", "german", "spanish")
    old_index, new_index = rate(old_words, sample), rate(lambda t: analysis.index_tokens(t), sample)
    old_query = rate(lambda q: [old_words(w) for w in q.split()], queries)
    new_query = rate(lambda q: analysis.query_groups(q, languages), queries)
    with tempfile.TemporaryDirectory() as folder:
        with IndexStore(Path(folder) / "i.sqlite") as store:
            for begin in range(0, len(corpus), 500):
                store.write_file(f"f{begin}.txt", 1, 1, f"h{begin}", "text",
                                 [Chunk(t, 0, len(t), 1, 1, None, "") for t in corpus[begin:begin + 500]], None)
            store.set_meta(analyzer="previous")
            started = time.perf_counter()
            store.reanalyse()
            reanalysed = time.perf_counter() - started
    rows = [["index side: chunks/s", f"{old_index:,.0f}", f"{new_index:,.0f}", f"{new_index / old_index:.2f}x"],
            ["query side: queries/s", f"{old_query:,.0f}", f"{new_query:,.0f}", f"{new_query / old_query:.2f}x"],
            [f"re-analyse {args.chunks:,} chunks (s)", "", f"{reanalysed:.1f}", ""]]
    report(f"Analyzer cost ({args.chunks:,} chunks: SciFact abstracts with XQuAD zh/de/ru/ar paragraphs)",
           ["measure", "English-only analysis (before)", "one analyzer", "ratio"], rows, write=not args.no_write)


if __name__ == "__main__":
    main()
