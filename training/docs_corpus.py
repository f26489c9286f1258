"""Documentation as the product reads it, for the relevance model's documentation-shaped pairs.

    .venv/bin/python training/docs_corpus.py    # ~500 MB to download the first time (12 s here), then 5 s

Every training pair in ../shared/train is a clean paragraph; the product hands its judge a chunk of a
documentation page: a heading path, markup, code blocks, directives, a neighbour's sentence. The judge
never saw one and reads them worse than retrieval does (docs/benchmark-log.md, "what the judge reads in
a chunk"). This fetches the pinned sdists of training/docs_sources.tsv from PyPI (sha256 checked),
reads the Markdown and reStructuredText under their docs/ folder through the product's own loaders and
chunker (the same text, heading paths and cuts a user's index holds), and writes one JSON line per
chunk: project, page, heading path, text. Runs in the product's venv (no PyTorch); pairs.docs_tuples
turns the lines into training tuples.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_pairs import CORPUS  # noqa: E402

from hermes_kb.agent.knowledgebase.chunker import chunk_document  # noqa: E402
from hermes_kb.agent.knowledgebase.config import ChunkingConfig  # noqa: E402
from hermes_kb.agent.knowledgebase.kinds.document import LoadError  # noqa: E402
from hermes_kb.agent.knowledgebase.kinds.registry import kind_of  # noqa: E402
from hermes_kb.agent.knowledgebase.loaders import load  # noqa: E402

SOURCES = Path(__file__).with_name("docs_sources.tsv")
INDEX = "https://pypi.org/pypi/{name}/json"  # every release's files (mirrors may lack the per-version page)
DOC_FOLDERS = {"docs", "doc", "documentation"}
SUFFIXES = {".md", ".rst"}
# release notes, licences and contributor guides: not what a user asks a project's documentation
SKIPPED_STEMS = ("changelog", "changes", "history", "release", "news", "license", "licence", "contributing",
                 "code_of_conduct", "authors", "migration")


def sources(path: Path = SOURCES) -> list[dict]:
    fields = ("project", "version", "sdist", "sha256", "licence")
    return [dict(zip(fields, line.rstrip("\n").split("\t"))) for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def fetched(source: dict, cache: Path) -> bytes:
    """The pinned sdist, from the cache or PyPI; a file whose sha256 differs is refused, never used."""
    path = cache / source["sdist"]
    if not path.exists():
        index_url = INDEX.format(name=source["project"])
        try:
            meta = json.load(urllib.request.urlopen(index_url, timeout=60))
            url = next((u["url"] for u in meta["releases"].get(source["version"], []) if u["filename"] == source["sdist"]),
                       None)
            if url is None:
                raise SystemExit(f"{source['sdist']} is not among {source['project']} {source['version']}'s files on PyPI")
            data = urllib.request.urlopen(urllib.parse.urljoin(index_url, url), timeout=300).read()
        except OSError as exc:  # urllib's errors: offline, a proxy, a registry's 404
            raise SystemExit(f"could not fetch {source['sdist']} from PyPI ({exc}); put it in {cache} by hand") from exc
        cache.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != source["sha256"]:
        raise SystemExit(f"{path}: sha256 differs from docs_sources.tsv; delete it to fetch it again")
    return data


def doc_files(data: bytes) -> list[tuple[str, bytes]]:
    """(path inside the docs folder, bytes) of the pages a user reads, in a stable order."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            inside = next((i for i, part in enumerate(parts) if part.lower() in DOC_FOLDERS), None)
            if (not member.isfile() or inside is None or PurePosixPath(parts[-1]).suffix.lower() not in SUFFIXES
                    or any(part.lower().startswith(SKIPPED_STEMS) for part in parts[inside + 1:])):
                continue
            out.append(("/".join(parts[inside + 1:]), archive.extractfile(member).read()))
    return sorted(out)


def chunks_of(project: str, page: str, data: bytes, config: ChunkingConfig) -> list[dict]:
    try:
        document = load(data, kind_of(page))
    except LoadError:
        return []
    return [{"project": project, "page": page, "heading": chunk.heading, "text": chunk.text}
            for chunk in chunk_document(document, PurePosixPath(page).name, config)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CORPUS, help="the chunks, gzip JSON lines")
    parser.add_argument("--cache", type=Path, default=CORPUS.parent / "sdists")
    args = parser.parse_args()
    config = ChunkingConfig()
    rows = []
    for source in sources():
        pages = doc_files(fetched(source, args.cache))
        found = [row for page, data in pages for row in chunks_of(source["project"], page, data, config)]
        print(f"{source['project']} {source['version']} ({source['licence']}): {len(pages)} pages, "
              f"{len(found)} chunks", file=sys.stderr)
        rows += found
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} chunks -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
