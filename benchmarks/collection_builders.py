"""Evaluation collections built on this machine, without downloads, in BEIR layout.

    python benchmarks/collection_builders.py code OUT_DIR     # code search over installed Python packages
    python benchmarks/collection_builders.py docs OUT_DIR     # npm + Node.js Markdown docs, questions -> sections

Each builder writes `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl`
(`_id`, `text`), `qrels/train.tsv` and `qrels/test.tsv` (`query-id`,
`corpus-id`, `score`, header line), so `hermes kb eval OUT_DIR` and
benchmarks/retrieval.py read the output unchanged. Every query has exactly one
relevant document (score 1). Queries are split into train and test by a hash
of the query id: the same inputs give the same split on every machine, and a
query never moves between splits when others are added or removed. Tune on
train, report test.

code search: for every function or method (not nested) of a fixed list of
installed packages that has a docstring, the docstring's first sentence is the
query and the function's source with the docstring removed is the document.
Docstring sentences that occur more than once (after lower-casing and dropping
punctuation) are ambiguous and dropped everywhere, as are formulaic ones
("Return the ..." in four words or fewer), functions whose remaining body is
trivial (`pass`, `...`, a bare raise) and duplicate function bodies. The
corpus is capped by a hash order with a per-package cap, so no one package
dominates; every corpus document has its query.

docs: every Markdown section (a heading and its text up to the next heading of
any level, so sections never overlap) of npm's docs and of a fixed list of
Node.js API pages is a document, titled by its heading path. A section gets a
question from its heading by fixed templates (see `heading_question`); sections
without one (See Also, very short ones) stay in the corpus as distractors.
Sections with the same text (npm copies each config option into every command
page) are kept once, and questions asked of more than one section are dropped.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# Installed in this project's venv (runtime or eval/test dependencies); a missing one is skipped with a note.
CODE_PACKAGES = ("click", "rich", "httpx", "httpcore", "requests", "pygments", "jsonschema", "networkx",
                 "pandas", "numpy", "dateutil", "markdown_it", "packaging", "anyio", "huggingface_hub", "PIL")
NPM_DOCS = Path("/usr/lib/node_modules/npm/docs/content")
NODE_DOCS = Path("/usr/share/doc/nodejs/api")
NODE_PAGES = ("fs", "path", "events", "child_process", "os", "url", "readline", "timers", "process", "buffer")
SKIP_DIRS = {"tests", "test", "testing", "_vendor", "vendor", "conftest", "benchmarks", "__pycache__"}


class CollectionError(RuntimeError):
    """A source the builder needs is not on this machine; the message says which."""


def _hash(text: str) -> int:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:12], 16)


def is_test(query_id: str, test_fraction: float) -> bool:
    """The split of a query: a stable function of its id alone."""
    return _hash("split|" + query_id) % 10_000 < test_fraction * 10_000


def _normal(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def write_beir(out_dir: Path, corpus: dict[str, tuple[str, str]], queries: dict[str, tuple[str, str]],
               test_fraction: float) -> dict[str, int]:
    """corpus: id -> (title, text); queries: id -> (text, relevant doc id). Returns the sizes."""
    out_dir = Path(out_dir)
    (out_dir / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out_dir / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for doc_id, (title, text) in corpus.items():
            handle.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
    with open(out_dir / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query_id, (text, _) in queries.items():
            handle.write(json.dumps({"_id": query_id, "text": text}, ensure_ascii=False) + "\n")
    sizes = {"documents": len(corpus), "train": 0, "test": 0}
    splits = {name: open(out_dir / "qrels" / f"{name}.tsv", "w", encoding="utf-8") for name in ("train", "test")}
    try:
        for handle in splits.values():
            handle.write("query-id\tcorpus-id\tscore\n")
        for query_id, (_, doc_id) in queries.items():
            assert doc_id in corpus, doc_id
            name = "test" if is_test(query_id, test_fraction) else "train"
            splits[name].write(f"{query_id}\t{doc_id}\t1\n")
            sizes[name] += 1
    finally:
        for handle in splits.values():
            handle.close()
    return sizes


# --- code search -------------------------------------------------------------------------------------------

@dataclass
class CodePair:
    doc_id: str  # package/relative/path.py:Qualified.name
    package: str
    query: str
    code: str


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, on one line; '' when it does not start with prose."""
    paragraph = re.split(r"\n\s*\n", docstring.strip(), maxsplit=1)[0]
    paragraph = " ".join(paragraph.split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    sentence = (match.group(1) if match else paragraph).strip()
    return sentence.rstrip(".").strip()


def _usable_query(sentence: str) -> bool:
    words = sentence.split()
    if not 4 <= len(words) <= 40:
        return False
    if re.search(r">>>|::|^[:@\-=*(]|\bTODO\b|^(see|deprecated|alias|same as|an alias)\b", sentence, re.I):
        return False
    if not re.match(r"[A-Za-z]", sentence):
        return False
    # Formulaic one-liners ("Return the value", "Returns the name.") identify nothing.
    if len(words) <= 4 and re.match(r"(return|returns|get|gets|set|sets)\b", sentence, re.I):
        return False
    return True


def _trivial(body: str) -> bool:
    lines = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]
    statements = lines[1:]  # after the def line(s)
    if not statements:
        return True
    if len(statements) == 1 and re.match(r"(pass|\.\.\.|raise NotImplementedError\b.*|return( None)?)$",
                                         statements[0]):
        return True
    return False


def function_pairs(source: str, module_path: str, package: str) -> list[CodePair]:
    """(first docstring sentence, source without docstring) for each top-level function and method."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    pairs = []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                pair = _pair(child, prefix)
                if pair:
                    pairs.append(pair)

    def _pair(func, prefix: str) -> CodePair | None:
        docstring = ast.get_docstring(func)
        if not docstring or not func.body or func.end_lineno is None:
            return None
        doc_node = func.body[0]
        if doc_node.lineno == func.lineno or doc_node.end_lineno is None:
            return None  # `def f(): """doc"""` on one line
        if len(func.body) > 1 and func.body[1].lineno <= doc_node.end_lineno:
            return None  # a statement on the docstring's last line
        sentence = first_sentence(docstring)
        if not _usable_query(sentence):
            return None
        start = min([func.lineno] + [d.lineno for d in func.decorator_list])
        kept = lines[start - 1:doc_node.lineno - 1] + lines[doc_node.end_lineno:func.end_lineno]
        code = textwrap.dedent("\n".join(kept)).strip("\n")
        if _trivial(code):
            return None
        return CodePair(f"{module_path}:{prefix}{func.name}", package, sentence, code)

    visit(tree, "")
    return pairs


def package_root(name: str) -> Path | None:
    """Where an installed package's sources are, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def package_pairs(root: Path, package: str) -> list[CodePair]:
    pairs = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if any(part in SKIP_DIRS or part.startswith("test_") for part in relative.parts):
            continue
        module_path = f"{package}/{relative.as_posix()}"
        pairs.extend(function_pairs(path.read_text(encoding="utf-8", errors="replace"), module_path, package))
    return pairs


def select_code_pairs(pairs: list[CodePair], max_docs: int, package_share: float = 0.2) -> list[CodePair]:
    """Drop ambiguous queries and duplicate bodies, then take a hash order with a per-package cap."""
    query_counts = Counter(_normal(p.query) for p in pairs)
    seen_code: set[str] = set()
    seen_ids: set[str] = set()
    unique = []
    for pair in sorted(pairs, key=lambda p: p.doc_id):  # stable: a redefinition (property setter) comes second
        code_key = hashlib.sha1(pair.code.encode()).hexdigest()
        if query_counts[_normal(pair.query)] > 1 or code_key in seen_code or pair.doc_id in seen_ids:
            continue
        seen_code.add(code_key)
        seen_ids.add(pair.doc_id)
        unique.append(pair)
    cap = max(1, int(max_docs * package_share))
    taken: Counter[str] = Counter()
    chosen = []
    ordered = sorted(unique, key=lambda p: _hash("pick|" + p.doc_id))
    for pair in ordered:
        if len(chosen) >= max_docs:
            break
        if taken[pair.package] < cap:
            taken[pair.package] += 1
            chosen.append(pair)
    if len(chosen) < max_docs:  # too few packages for the cap: fill up in the same order
        picked = {p.doc_id for p in chosen}
        chosen += [p for p in ordered if p.doc_id not in picked][: max_docs - len(chosen)]
    return sorted(chosen, key=lambda p: p.doc_id)


def build_code_search(out_dir: Path, packages: tuple[str, ...] = CODE_PACKAGES, max_docs: int = 2500,
                      test_fraction: float = 0.2, roots: dict[str, Path] | None = None,
                      log=lambda message: print(message, file=sys.stderr)) -> dict[str, int]:
    """Write the code search collection; `roots` (package -> folder) replaces the installed lookup in tests."""
    pairs = []
    for package in packages:
        root = (roots or {}).get(package) or package_root(package)
        if root is None:
            log(f"code search: package {package} is not installed here; skipped")
            continue
        pairs.extend(package_pairs(root, package))
    if not pairs:
        raise CollectionError(f"code search: none of {', '.join(packages)} is installed with documented functions")
    chosen = select_code_pairs(pairs, max_docs)
    corpus = {p.doc_id: ("", p.code) for p in chosen}
    queries = {f"q-{p.doc_id}": (p.query, p.doc_id) for p in chosen}
    sizes = write_beir(out_dir, corpus, queries, test_fraction)
    per_package = Counter(p.package for p in chosen)
    log(f"code search: {len(pairs)} documented functions, {len(chosen)} kept: "
        + ", ".join(f"{k} {v}" for k, v in sorted(per_package.items())))
    return sizes


# --- documentation -----------------------------------------------------------------------------------------

@dataclass
class Section:
    page: str  # the page's name for questions: "npm ci", "package.json", "File system"
    path: tuple[str, ...]  # headings from the page title down to this one
    level: int
    heading: str
    body: str
    source: str  # relative file name


FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def parse_markdown(text: str, source: str, default_title: str) -> list[Section]:
    """Leaf sections of a Markdown page: heading + text up to the next heading of any level."""
    title = default_title
    front = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if front:
        found = re.search(r"^title:\s*(.+)$", front.group(1), re.M)
        title = found.group(1).strip().strip("'\"") if found else title
        text = text[front.end():]
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    current: tuple[int, str] | None = None
    body: list[str] = []
    in_fence = False

    def close() -> None:
        if current is not None:
            path = tuple(h for _, h in stack)
            sections.append(Section(title, path, current[0], current[1], "\n".join(body).strip(), source))

    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else HEADING.match(line)
        if match:
            close()
            level, heading = len(match.group(1)), match.group(2).strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading))
            current, body = (level, heading), []
            if level == 1 and not front:
                title = heading
        else:
            body.append(line)
    close()
    return sections


def _plain(heading: str) -> str:
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [npm uninstall](/commands/...) -> npm uninstall
    return re.sub(r"[`*_]", "", heading).strip()


def _base_verb(gerund: str) -> str:
    """installing -> install, running -> run, creating -> create (a heuristic; a few come out wrong)."""
    stem = gerund[:-3]
    if len(stem) >= 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
        return stem[:-1]
    if stem[-1:] in ("v", "c", "g", "z") or stem.endswith(("at", "ur", "iz", "us", "os", "ut", "id", "ir")):
        return stem + "e"
    return stem


GENERIC = {
    "description": "what is {page} for",
    "synopsis": "what is the command line syntax of {page}",
    "configuration": "which settings change how {page} behaves",
    "example": "show me an example of {page} in use",
    "examples": "show me an example of {page} in use",
}
NOT_VERBS = {"This", "Is", "Was", "Has", "Does", "As", "Its", "Unless", "Thus", "Mus", "Options", "Bytes"}
SKIPPED = {"see also", "table of contents", "contents", "flags", "notes", "stability", "history"}


def _first_sentence(body: str) -> str:
    """The first prose sentence of a section (no code, lists, tables, quotes or type lines)."""
    in_fence = False
    paragraph: list[str] = []
    for line in body.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            if paragraph:
                break
            continue
        stripped = line.strip()
        if paragraph and (not stripped or in_fence):
            break
        if in_fence or not stripped or (not paragraph and re.match(r"[*\-+|>]|\d+\.|Stability:|Type:|Added in",
                                                                    stripped)):
            continue
        paragraph.append(stripped)
    text = re.sub(r"`([^`]*)`", r"\1", " ".join(paragraph))
    text = re.sub(r"\[([^\]]*)\](\[[^\]]*\]|\([^)]*\))?", r"\1", text)
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).rstrip(".").strip()


def heading_question(section: Section) -> str | None:
    """A question the section answers, from its heading by fixed templates; None when there is none."""
    heading = _plain(section.heading)
    lower = heading.lower()
    page = section.page
    if page.startswith("npm-"):
        page = page.replace("-", " ")
    if lower in SKIPPED or len(section.body.split()) < 12:
        return None
    if lower in GENERIC:
        return GENERIC[lower].format(page=page)
    if heading.endswith("?"):
        return lower
    parents = [_plain(h) for h in section.path[:-1]]
    owner = next((re.sub(r"^Class:\s*", "", p) for p in reversed(parents) if p.startswith("Class:")), page)
    event = re.match(r"Event:\s*'?([^']+)'?$", heading)
    if event:
        return f"when does {owner} emit the '{event.group(1)}' event"
    klass = re.match(r"Class:\s*(\S+)", heading)
    if klass:
        return f"what is the {klass.group(1)} class in {page} used for"
    api = re.match(r"(?:Static method:\s*)?(?:new\s+)?([\w$.\[\]]+?)(?:\(.*\))?$", heading)
    if section.heading.strip().startswith("`") or (api and "(" in heading):
        name = (api.group(1) if api else heading).strip()
        sentence = _first_sentence(section.body)
        first = sentence.split(" ", 1)[0] if sentence else ""
        # "Tests whether ..." -> "in File system, which API tests whether ..."; the name itself is left out.
        if first and first[0].isupper() and first.endswith("s") and first not in NOT_VERBS and name.split(".")[-1] not in sentence \
                and 5 <= len(sentence.split()) <= 30:
            kind = "setting" if section.source.startswith("npm/") else "API"
            return f"in {page}, which {kind} {first.lower()} {sentence.split(' ', 1)[1] if ' ' in sentence else ''}".strip()
        if section.source.startswith("npm/") and "(" not in heading:
            return f"what does the {name} setting do"
        return f"what does {name} do"
    words = heading.split()
    if words[0].lower().endswith("ing") and len(words[0]) > 5:
        return f"how do I {_base_verb(words[0].lower())} {' '.join(words[1:]).lower()}".strip()
    return f"what should I know about {lower} in {page}" if lower not in page.lower() else f"what is {lower}"


def docs_sections(npm_docs: Path | None = NPM_DOCS, node_docs: Path | None = NODE_DOCS,
                  node_pages: tuple[str, ...] = NODE_PAGES,
                  log=lambda message: print(message, file=sys.stderr)) -> list[Section]:
    sections: list[Section] = []
    found = False
    if npm_docs is not None:
        if npm_docs.is_dir():
            found = True
            for path in sorted(npm_docs.rglob("*.md")):
                relative = path.relative_to(npm_docs).as_posix()
                sections += parse_markdown(path.read_text(encoding="utf-8"), f"npm/{relative}", path.stem)
        else:
            log(f"docs: npm's documentation folder {npm_docs} is not on this machine (it comes with a global "
                "npm install, not with pip); skipped")
    if node_docs is not None:
        if node_docs.is_dir():
            found = True
            for page in node_pages:
                path = node_docs / f"{page}.md"
                if path.is_file():
                    sections += parse_markdown(path.read_text(encoding="utf-8"), f"node/{page}.md", page)
                else:
                    log(f"docs: {path} is missing; skipped")
        else:
            log(f"docs: Node.js API docs folder {node_docs} is not on this machine (Debian's nodejs-doc / nodejs "
                "package ships it); skipped")
    if not found:
        raise CollectionError(f"docs: neither {npm_docs} nor {node_docs} exists here; the docs collection needs "
                              "npm's or Node.js's Markdown documentation on this machine (apt install nodejs npm)")
    return sections


def build_docs(out_dir: Path, npm_docs: Path | None = NPM_DOCS, node_docs: Path | None = NODE_DOCS,
               node_pages: tuple[str, ...] = NODE_PAGES, test_fraction: float = 0.3,
               log=lambda message: print(message, file=sys.stderr)) -> dict[str, int]:
    sections = docs_sections(npm_docs, node_docs, node_pages, log)
    corpus: dict[str, tuple[str, str]] = {}
    asked: dict[str, str] = {}
    seen_text: set[str] = set()
    used_ids: Counter[str] = Counter()
    for section in sections:
        key = _normal(section.heading + " " + section.body)
        if not section.body.strip() or key in seen_text:
            continue
        seen_text.add(key)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", _plain(section.heading)).strip("-").lower()[:60] or "section"
        doc_id = f"{section.source}#{slug}"
        used_ids[doc_id] += 1
        if used_ids[doc_id] > 1:
            doc_id += f"-{used_ids[doc_id]}"
        path = section.path[1:] if section.path and section.path[0] == section.page else section.path
        corpus[doc_id] = (" > ".join(_plain(h) for h in (section.page, *path)), section.body)
        question = heading_question(section)
        if question:
            asked[doc_id] = question
    counts = Counter(_normal(q) for q in asked.values())
    queries = {f"q-{doc_id}": (q, doc_id) for doc_id, q in asked.items() if counts[_normal(q)] == 1}
    log(f"docs: {len(sections)} sections, {len(corpus)} distinct, {len(asked)} with a question, "
        f"{len(queries)} unambiguous")
    return write_beir(out_dir, corpus, queries, test_fraction)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("code", "docs"))
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--max-docs", type=int, default=2500, help="code search corpus cap")
    args = parser.parse_args()
    try:
        sizes = (build_code_search(args.out_dir, max_docs=args.max_docs) if args.kind == "code"
                 else build_docs(args.out_dir))
    except CollectionError as exc:
        sys.exit(f"error: {exc}")
    print(json.dumps(sizes))


if __name__ == "__main__":
    main()
