"""`hermes kb doctor`: check every index thoroughly, and repair what can be rebuilt.

Search and status trust an index until it fails them; the doctor does not
wait. It reads each whole file (SQLite's quick check, or the full integrity
check), the FTS index against its table, the journal of an unfinished
re-embed, both derived caches (stale or failing their checksums), leftover
temporary files, and the indexes under HERMES_HOME that no folder owns.

Repairs never touch the user's files; everything an index holds can be
rebuilt from them. A corrupt index is moved aside (`<index>.corrupt`, kept
for a post-mortem, replaced by the next one) and rebuilt from its folder; an
unfinished re-embed is finished; caches are rebuilt; leftovers are removed.
An orphaned index is only reported: its folder may be on a drive that is
not mounted now, and `hermes kb clear NAME` removes it on purpose.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import DirectoryConfig
from .index import keyword_cache, vector_cache
from .index.contract import IndexCorrupt, Store, StoreError
from .index.local_files import companion_paths
from .service import KnowledgeBase, KnowledgebaseError

CACHES = {"vector cache": vector_cache, "keyword cache": keyword_cache}


@dataclass
class Finding:
    index: str
    problem: str  # one sentence
    repair: str  # what --repair does, or the command that does it
    repaired: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def examine(kb: KnowledgeBase, target: str | None = None, repair: bool = False, full: bool = False) -> list[Finding]:
    """Every problem found in the target's indexes (all of them, orphans included, without a target)."""
    findings: list[Finding] = []
    for directory in kb.targets(target):
        findings.extend(_examine_directory(kb, directory, repair, full))
    if target is None:
        findings.extend(Finding(o.name, f"The index {o.name} belongs to no folder: {o.reason}.",
                                f"`hermes kb clear {o.name}` removes it (not done by --repair)") for o in kb.orphans())
    return findings


def _examine_directory(kb: KnowledgeBase, directory: DirectoryConfig, repair: bool, full: bool) -> list[Finding]:
    path = kb.index_path(directory)
    name = directory.name
    findings = [Finding(name, f"Leftover file {leftover.name} from an interrupted cache build.", "removed")
                for leftover in _leftovers(path)]
    try:
        with kb.backend.guarded(path, name):
            if not kb.backend.exists(path):
                return findings
            with kb.backend.open(path, create=False, name=name) as store:
                problems = store.integrity_problems(full=full)
                if not problems:
                    findings.extend(_examine_contents(name, path, store, kb.backend.shared))
    except IndexCorrupt as exc:
        problems = [str(exc)]
    except StoreError as exc:  # unreachable server, no permission: nothing a rebuild would mend
        return [*findings, Finding(name, str(exc), "fix what the sentence says, then run `hermes kb doctor` again")]
    if problems:
        findings.append(Finding(name, f"The index of {name} is corrupt ({problems[0]}).",
                                f"moved aside to {path.name}.corrupt and rebuilt from {directory.path}"))
    if repair:
        _repair(kb, directory, path, findings, corrupt=bool(problems))
    return findings


def _examine_contents(name: str, path: Path, store: Store, shared: bool = False) -> list[Finding]:
    """`shared`: other machines write this index, so copies behind it are normal here (a search
    catches the keyword copy up, the next index run the vector copy); only damaged ones are findings."""
    findings = []
    missing = store.chunks_without_vectors()  # counts every vector once: at most once per index
    if missing or store.reembed_pending():
        findings.append(Finding(name, f"{missing} chunks of {name} have no vector (an index run is embedding them or was cut short).",
                                f"`hermes kb index {name}` embeds them"))
    has_chunks = store.counts()["chunks"] > 0
    for label, module in CACHES.items():
        cache = module.cache_path(path)
        if not cache.exists() and not has_chunks:
            continue
        state = module.serving_state(store)[0]
        if state == "current" or (label == "keyword cache" and keyword_cache.over_limit(store)) or \
                (shared and state == "stale"):
            continue
        problem = (module.verify(cache) or "it fails its checksums") if state == "corrupt" else "it is behind its index"
        findings.append(Finding(name, f"The {label} of {name} is unusable: {problem}.", "rebuilt"))
    return findings


def _repair(kb: KnowledgeBase, directory: DirectoryConfig, path: Path, findings: list[Finding], corrupt: bool) -> None:
    if not findings:
        return
    try:
        with kb.backend.guarded(path, directory.name), kb.backend.writer_lock(path, directory.name):
            for leftover in _leftovers(path):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(leftover)
            if corrupt:
                _move_aside(kb, path)
        if directory.path.is_dir():
            kb.index_one(directory)  # finishes a re-embed, rebuilds caches and a moved-aside index
        elif corrupt:
            raise KnowledgebaseError(f"The folder {directory.path} is gone, so {directory.name} cannot be rebuilt.")
    except (StoreError, KnowledgebaseError) as exc:
        findings.append(Finding(directory.name, f"Repair failed: {exc}", "see the sentence before"))
        return
    for finding in findings:
        finding.repaired = True


def _move_aside(kb: KnowledgeBase, path: Path) -> None:
    kb.indexes.forget(path)
    os.replace(path, f"{path}.corrupt")
    for companion in companion_paths(path)[1:]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(companion)


def _leftovers(path: Path) -> list[Path]:
    return [leftover for module in CACHES.values() for leftover in module.leftovers(path)]
