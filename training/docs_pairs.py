"""Documentation-shaped training tuples from the chunks training/docs_corpus.py writes (no PyTorch).

A documentation page's section answers the question its heading names: "Cleaning up old externals" is
how one cleans them up, "Can I use third-party Python packages in my app?" is answered beneath it. So
each section whose heading can be asked (`asked`) gives a query, and its first chunk, as the product's
chunker cut it, is the answer. The judge then learns on what it is handed at search time: heading
paths, markdown and reStructuredText markup, code blocks, directives and neighbouring sentences around
the answering one (it reads those worse than retrieval does: docs/benchmark-log.md).

Half the tuples show every passage without its own innermost heading (the heading line and the
heading path's last part): the question is made from the heading, and a judge that only matched the
two would learn nothing about the text beneath it (npm-whoami's chunk is headed "Description").
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from pairs import DOMAINS, bm25_top, query_form, task_verb, words

CORPUS = Path.home() / ".cache" / "hermes-kb-training" / "docs_chunks.jsonl.gz"  # what docs_corpus.py writes

# a reStructuredText title: a line of text under (and perhaps over) a line of one punctuation character
RST_TITLE = re.compile(r"^(?:([=\-~^\"'*+#`:.])\1{2,}\n)?(?P<title>[^\n]*\S[^\n]*)\n([=\-~^\"'*+#`:.])\3{2,}[ \t]*$",
                       re.M)
MD_TITLE = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t#]*$", re.M)
MARKUP = [(re.compile(r"\{#[^}]*\}"), ""), (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),
          (re.compile(r":[\w:.-]+:`([^`<]*?)\s*(?:<[^>]*>)?`"), r"\1"), (re.compile(r"[`*_]{1,3}([^`*_]+)[`*_]{1,3}"), r"\1"),
          (re.compile(r"[^\w\s?.,:;!'\"()/<>=+#@&-]"), ""), (re.compile(r"\s+"), " ")]
# headings that name no question: a page's parts that every project has
UNASKED = frozenset("""overview, introduction, summary, conclusion, examples, example, notes, note, see also, references,
reference, parameters, returns, raises, arguments, attributes, methods, properties, contents, table of contents, api,
changelog, license, credits, acknowledgements, faq, motivation, background, prerequisites, requirements, next steps,
what's next, tutorial, tutorials, guide, guides, usage, how it works, features, description, details, more options""".replace("\n", " ").split(", "))
SETUP = {"installation": "How do I install {project}?", "install": "How do I install {project}?",
         "installing": "How do I install {project}?", "configuration": "How do I configure {project}?",
         "getting started": "How do I get started with {project}?", "quickstart": "How do I get started with {project}?",
         "quick start": "How do I get started with {project}?", "upgrading": "How do I upgrade {project}?",
         "troubleshooting": "How do I troubleshoot problems with {project}?"}
PRONOUN = re.compile(r"\b(i|i'\w+|we|you|my|our|your|me|us)\b")  # a sentence, not a subject: "I think I've got a bug!"
HIDDEN_SHARE = 0.5  # tuples shown without their passages' innermost headings
HELD_OUT = frozenset({"emmett", "jupytext", "inline-snapshot"})  # projects kept for validation alone
MIN_WORDS = 15  # a section's first chunk with fewer words (after its heading) answers nothing


def plain(title: str) -> str:
    for pattern, replacement in MARKUP:
        title = pattern.sub(replacement, title)
    return title.strip(" :.").rstrip("-").strip()


def gerund_base(word: str) -> str | None:
    """"Cleaning" -> "clean", "Adding" -> "add", "Configuring" -> "configure": a task heading's verb."""
    lowered = word.lower()
    if not lowered.endswith("ing") or len(lowered) < 6:
        return None
    stem = lowered[:-3]
    for base in (stem, stem + "e", stem[:-1] if len(stem) > 2 and stem[-1] == stem[-2] else ""):
        if base and task_verb(base) == base:
            return base
    return None


def asked(title: str, project: str, rng: random.Random) -> str | None:
    """The question a section's heading names, asked as people ask documentation; the project named
    where the question would be ambiguous without it, and in half the others. None where the heading
    names no question (a bare "Examples", an anchor, a version number)."""
    if title.startswith(".."):  # a reStructuredText anchor or directive
        return None
    title = plain(title)
    lowered = title.lower()
    if lowered in SETUP:
        return SETUP[lowered].format(project=project)
    parts = title.split()
    if not parts or lowered in UNASKED or re.search(r"\d+\.\d+", title):
        return None
    named = f" in {project}" if rng.random() < 0.5 else ""
    if title.endswith("?"):
        return title
    if lowered.startswith("how to "):
        return f"How do I {title[7:].rstrip('.')}{named}?"
    first, rest = parts[0], " ".join(parts[1:])
    if (verb := gerund_base(first) or task_verb(first)) and rest:
        return f"How do I {verb} {rest}{named}?"
    if len(parts) == 1 and re.fullmatch(r"-{0,2}[\w.<>-]+", first) and not first.istitle():
        return f"What does {first} do{named}?"  # an option, a setting, a function
    if len(parts) < 2 or title.endswith("!") or PRONOUN.search(lowered):
        return None
    forms = [f"{lowered}{named}", f"{project} {lowered}"]
    if len(parts) <= 4:
        forms.append(f"How does {lowered} work{named}?")
    return rng.choice(forms)


def sections(path) -> list[dict]:
    """The sections of every page: each chunk that opens with a heading (Markdown's, with the
    product's heading path, or reStructuredText's, whose chunks carry none), with its title, the text
    shown with and without that heading, and the page and project it belongs to."""
    found = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            chunk = json.loads(line)
            opening, heading = chunk["text"].lstrip(), chunk["heading"]
            # a Markdown title is one the chunker saw (not a shell comment opening a code block's tail)
            # reStructuredText is cut by size, not at titles: its section is the first title in the chunk,
            # the text before it a neighbour's tail, as the user's index holds it
            title = MD_TITLE.match(opening) if heading else RST_TITLE.search(opening)
            if not title or (heading and title["title"].strip() not in heading.split(" > ")):
                continue
            after = opening[title.end():].strip()
            if len(after.split()) < MIN_WORDS or ".. auto" in after:  # autodoc directives: text built elsewhere
                continue
            body = f"{opening[:title.start()]}{after}".strip()
            parent = heading.rsplit(" > ", 1)[0] if " > " in heading else ""
            found.append({"project": chunk["project"], "page": chunk["page"], "title": title["title"].strip(),
                          "path": tuple(heading.split(" > ")) if heading else (),
                          "shown": f"{heading}\n{chunk['text']}" if heading else chunk["text"],
                          "hidden": f"{parent}\n{body}" if parent else body})
    return found


def nested(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether one heading path lies inside the other (or is it): such sections may answer together.
    reStructuredText chunks carry no path, so none of them is known to nest."""
    shorter = min(len(one), len(other))
    return shorter > 0 and one[:shorter] == other[:shorter]


def docs_tuples(found: list[dict], rng: random.Random, foreign_share: float = 0.0) -> list[tuple[str, ...]]:
    """(query, answer, three negatives) for each askable section of the projects not held out: a
    section of the same page, the best BM25 section elsewhere in the same project, and — where the
    question names its project — the best BM25 section of another project (the right kind of answer
    about another thing), else the project's second best. Sections nested in the answer's (or it in
    theirs) are never negatives: they may answer too.

    With `foreign_share`, that share of the unnamed questions meet instead the best BM25 section of
    another project whose heading shares no word with the answer's: a section that mentions what is
    asked and is about something else, what a question about one tool meets in another's
    documentation (a manual's EXPLAIN ANALYZE section printing `Sort Method: quicksort` for "the time
    complexity of quicksort"). A heading sharing a word might answer the question there, so none does."""
    kept = [s for s in found if s["project"] not in HELD_OUT]
    questions = [(i, q) for i, s in enumerate(kept) if (q := asked(s["title"], s["project"], rng))]
    if not questions:
        return []
    texts = [s["hidden"] for s in kept]
    top = bm25_top([q for _, q in questions], texts, k=12)
    on_page = defaultdict(list)
    for i, s in enumerate(kept):
        on_page[(s["project"], s["page"])].append(i)
    out = []
    for (i, query), hits in zip(questions, top):
        answer = kept[i]

        def unrelated(j: int) -> bool:
            other = kept[j]
            return j != i and other["hidden"] != answer["hidden"] and not (
                other["page"] == answer["page"] and nested(other["path"], answer["path"]))

        mine = [int(j) for j in hits if unrelated(j) and kept[j]["project"] == answer["project"]]
        theirs = [int(j) for j in hits if kept[j]["project"] != answer["project"]]
        if not mine:
            continue
        page = [j for j in on_page[(answer["project"], answer["page"])] if unrelated(j) and j != mine[0]]
        sibling = rng.choice(page) if page else mine[1] if len(mine) > 1 else None
        named = answer["project"] in query
        third = theirs[:1] if named else [j for j in mine[1:] if j != sibling][:1]
        if foreign_share and not named and rng.random() < foreign_share:
            about = set(words(answer["title"]))
            third = [j for j in theirs if about and not about & set(words(kept[j]["title"]))][:1] or third
        if sibling is None or not third:
            continue
        negatives = [sibling, mine[0], third[0]]
        form = "hidden" if rng.random() < HIDDEN_SHARE else "shown"
        out.append((query, answer[form], *(kept[j][form] for j in negatives)))
    return out


def held_out_ranking(found: list[dict], rng: random.Random) -> tuple[list[dict], list[str], list[int], np.ndarray]:
    """The held-out projects' questions as `train_reranker.evaluate` ranks them: each among BM25's top 20
    of those projects' sections, shown as the product shows them."""
    kept = [s for s in found if s["project"] in HELD_OUT]
    passages = [s["shown"] for s in kept]
    rows, passage_of = [], []
    for i, s in enumerate(kept):
        if query := asked(s["title"], s["project"], rng):
            rows.append({"query": query})
            passage_of.append(i)
    return rows, passages, passage_of, bm25_top([r["query"] for r in rows], passages, k=20)


TRAP_DEPTH = 3  # a general question's traps are drawn from its first few BM25 sections
TRAP_WORDS = 2  # ... each sharing at least this many of its content words
TRAP_DRAWN = 6  # questions drawn for each trap kept: most share a word or none with any section


def general_traps(rows: list[dict], found: list[dict], pool: list[str], rng: random.Random,
                  count: int) -> list[tuple[str, ...]]:
    """(query, answer, two documentation sections, a random passage) for `count` encyclopaedia and
    medicine questions (never answered by a tool's documentation): the sections BM25 ranks first
    for them share their rarest words and answer nothing ("What is eventual consistency?" against a
    manual's section on application-level consistency). Documentation questions teach that a section
    about a thing answers a question about it; these teach that a section mentioning it need not."""
    general = [row for row in rows if DOMAINS[row["source"]] in ("wikipedia", "medicine")]
    drawn = rng.sample(general, min(TRAP_DRAWN * count, len(general)))
    kept = [s for s in found if s["project"] not in HELD_OUT]
    queries = [query_form(row, rng) for row in drawn]
    top = bm25_top(queries, [s["hidden"] for s in kept], k=TRAP_DEPTH)
    out = []
    for query, row, hits in zip(queries, drawn, top):
        if len(out) == count:
            break
        asked_words = set(words(query))
        traps = [int(j) for j in hits if len(asked_words & set(words(kept[int(j)]["hidden"]))) >= TRAP_WORDS]
        if len(traps) < 2:  # a trap shares words, or it teaches nothing
            continue
        first, second = rng.sample(traps, 2)
        form = "hidden" if rng.random() < HIDDEN_SHARE else "shown"
        other = rng.choice(pool)
        while other == row["positive"]:
            other = rng.choice(pool)
        out.append((query, row["positive"], kept[first][form], kept[second][form], other))
    return out
