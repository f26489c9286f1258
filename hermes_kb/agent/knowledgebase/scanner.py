"""Walk a directory and decide which files belong in its index.

The scan only stats files: reading content is the indexer's job and only for
files whose size or mtime moved, which is what keeps a no-change rescan cheap.
"""

from __future__ import annotations

import logging
import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pathspec
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from .file_access import read_inside
from .kinds import registry

log = logging.getLogger(__name__)

BUILTIN_EXCLUDES = (
    ".git/", ".hg/", ".svn/", "node_modules/", ".venv/", "venv/", ".env/", "env/",
    "__pycache__/", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".tox/", ".nox/",
    "build/", "dist/", "target/", ".next/", ".cache/", "*.egg-info/", ".idea/",
    "*.pyc", "*.pyo", ".DS_Store",
    # Pictures and styling, not text: a docs site's .svg and .css read as markup, not prose.
    "*.svg", "*.css", "*.map",
    # An index may live inside the directory it describes; never index ourselves.
    "*.sqlite", "*.sqlite-wal", "*.sqlite-shm", "*.sqlite.lock",
    "*.sqlite.vectors", "*.sqlite.vectors.tmp*", "*.sqlite.terms", "*.sqlite.terms.tmp*",
)

# Files that hold credentials by convention: never indexed (so never embedded, searched or read by a
# model) unless the user opts a file back in with `allow_secrets`.
SECRET_FILES = (
    ".env*", "*.env", ".envrc", ".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials",
    ".htpasswd", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx", "*.kdb", "*.keychain*",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.ppk", ".ssh/", ".gnupg/", ".aws/", ".azure/",
    ".docker/config.json", ".kube/config", "credentials", "credentials.json", "*.tfstate", "*.tfstate.backup",
    "*.ovpn", "secrets.y*ml", ".secrets*",
    # Histories of shells and database clients (what was typed, passwords on command lines included).
    ".*_history", ".*history", ".history", ".lesshst", ".viminfo",
    # Client configurations that hold passwords or tokens.
    ".my.cnf", ".mylogin.cnf", ".s3cfg", ".boto", ".vault-token", ".terraformrc", "terraform.rc", ".dockercfg",
    ".authinfo*", ".cargo/credentials*", ".gem/credentials", ".config/gcloud/", "application_default_credentials.json",
    ".config/gh/hosts.yml", ".kube/", "kubeconfig*", "*.kubeconfig", "*.keytab",
    # Browser and HTTP-client cookie jars.
    "cookies.txt", "*.cookies", "cookies.sqlite", ".curlrc", ".wgetrc",
)

MAX_GITIGNORE_BYTES = 1_000_000

def size_cap(kind: str, max_file_bytes: int, max_document_bytes: int) -> int:
    return max_document_bytes if registry.named(kind).large else max_file_bytes


@dataclass(frozen=True)
class ScannedFile:
    rel_path: str
    path: str  # absolute; a string because building 10k Path objects is a third of a rescan
    size: int
    mtime_ns: int
    kind: str

    @property
    def abs_path(self) -> Path:
        return Path(self.path)


def is_utf8(name: str) -> bool:
    """False for a name holding bytes that are not UTF-8 (Python keeps them as lone surrogates):
    the ignore matcher, SQLite and JSON all refuse such a string."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_path(name: str) -> str:
    """A path fit to report: each undecodable byte shown as U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if not is_utf8(name) else name


def compile_patterns(lines: Sequence[str], problem: Callable[[int, str], tuple[str, str]],
                     problems: list[tuple[str, str]]) -> pathspec.GitIgnoreSpec:
    """A spec from the lines that are valid patterns; each invalid one is reported (as git skips it)."""
    with warnings.catch_warnings():  # re's "possible nested set" FutureWarning is noise for a user
        warnings.simplefilter("ignore")
        try:
            return pathspec.GitIgnoreSpec.from_lines(lines)
        except Exception:  # ValueError, re.error or re2's error: sorted out line by line below
            pass
        patterns = []
        for number, line in enumerate(lines, 1):
            try:
                patterns.append(GitIgnoreSpecPattern(line))
            except Exception:
                problems.append(problem(number, line))
        return spec_of(patterns)


def spec_of(patterns: Sequence[GitIgnoreSpecPattern]) -> pathspec.GitIgnoreSpec:
    try:
        return pathspec.GitIgnoreSpec(patterns)
    except Exception:
        # Every pattern compiles alone, but re2 refuses them as one set (a few thousand lines
        # already): Python's re, one pattern at a time, is slower and has no such limit.
        return pathspec.GitIgnoreSpec(patterns, backend="simple")


def _invalid(line: str) -> str:
    shown = line if len(line) <= 80 else line[:77] + "..."
    return f"not a valid pattern ({shown!r})"


class IgnoreRules:
    """Built-in excludes, configured globs and every .gitignore met on the way down.

    A path's fate is decided by the deepest rule that matches it, which is how
    git resolves a nested .gitignore that re-includes (`!pattern`) what a
    parent excluded.

    A pattern that does not compile (`foo\\`, `!`, `[z-a]`) is left out, as git
    leaves it out, and listed once in `problems` as (where, why).
    A name that is not valid UTF-8 is always ignored.
    """

    def __init__(self, root: Path, exclude: tuple[str, ...] = (), allow_secrets: tuple[str, ...] = ()):
        self.root = root
        self.problems: list[tuple[str, str]] = []
        exclude, allow_secrets = tuple(exclude), tuple(allow_secrets)
        self._fixed = compile_patterns(
            [*BUILTIN_EXCLUDES, *exclude],
            lambda n, line: ("config: exclude", f"pattern {n - len(BUILTIN_EXCLUDES)} ignored: {_invalid(line)}"),
            self.problems)
        self._secret = pathspec.GitIgnoreSpec.from_lines(SECRET_FILES)
        self._allowed_secrets = compile_patterns(
            allow_secrets, lambda n, line: ("config: allow_secrets", f"pattern {n} ignored: {_invalid(line)}"),
            self.problems)
        # One match for the common case: a path neither rule set names. The secret patterns are all
        # positive and come last, so a path this spec passes is passed by both (half the matching of a
        # no-change rescan, where almost every path passes).
        self._refused = spec_of([*self._fixed.patterns, *self._secret.patterns])
        self._gitignores: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._chains: dict[str, list[tuple[int, pathspec.GitIgnoreSpec]]] = {}

    def _gitignore(self, rel_dir: str) -> pathspec.GitIgnoreSpec | None:
        if rel_dir not in self._gitignores:
            spec = None
            try:
                # Through the link-safe open, bounded: a repository can ship `.gitignore -> /dev/zero`.
                where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
                data = read_inside(str(self.root), where, MAX_GITIGNORE_BYTES)
            except OSError:
                pass
            else:
                spec = compile_patterns(data.decode("utf-8", errors="replace").splitlines(),
                                        lambda n, line: (where, f"line {n} ignored: {_invalid(line)}"),
                                        self.problems)
            self._gitignores[rel_dir] = spec
        return self._gitignores[rel_dir]

    def _specs_above(self, rel_dir: str) -> list[tuple[int, pathspec.GitIgnoreSpec]]:
        """(prefix length, spec) of every .gitignore from the root down to rel_dir, shallowest first."""
        if rel_dir not in self._chains:
            parts = rel_dir.split("/") if rel_dir else []
            chain = []
            for depth in range(len(parts) + 1):
                prefix = "/".join(parts[:depth])
                spec = self._gitignore(prefix)
                if spec is not None:
                    chain.append((len(prefix) + 1 if prefix else 0, spec))
            self._chains[rel_dir] = chain
        return self._chains[rel_dir]

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        return self._judged(rel_path, is_dir, self._specs_above(rel_path.rpartition("/")[0]))

    def _judged(self, rel_path: str, is_dir: bool, chain: list[tuple[int, pathspec.GitIgnoreSpec]]) -> bool:
        """`rel_path` under the fixed rules and the .gitignore files of `chain` (those above it)."""
        if not is_utf8(rel_path):
            return True
        probe = rel_path + "/" if is_dir else rel_path
        if self._refused.match_file(probe):
            if self._fixed.match_file(probe):
                return True
            if self._secret.match_file(probe) and not self._allowed_secrets.match_file(probe):
                return True
        verdict = None
        for offset, spec in chain:
            result = spec.check_file(probe[offset:])
            if result.include is not None:
                verdict = result.include
        return bool(verdict)

    def allows_secrets(self, rel_path: str) -> bool:
        return is_utf8(rel_path) and self._allowed_secrets.match_file(rel_path)

    def excluded(self, rel_path: str) -> bool:
        """Whether a scan would leave this file out by rule: the file or any folder above it is ignored.

        One walk down the path, the .gitignore chain grown as it goes and read only from folders that
        exist: judging each prefix afresh read every folder's chain again (cubic: a 4 KB kb_read path
        took 14 s, a 6 KB resource URI 48 s)."""
        parts = rel_path.split("/")
        chain: list[tuple[int, pathspec.GitIgnoreSpec]] = []
        prefix, exists = "", True
        for depth, part in enumerate(parts):
            parent, prefix = prefix, f"{prefix}/{part}" if prefix else part
            if exists:
                spec = self._gitignore(parent)
                if spec is not None:
                    chain.append((len(parent) + 1 if parent else 0, spec))
            is_dir = depth < len(parts) - 1
            if self._judged(prefix, is_dir, chain):
                return True
            exists = exists and is_dir and (self.root / prefix).is_dir()
        return False


@dataclass
class ScanResult:
    rules: IgnoreRules
    files: list[ScannedFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def scan(root: Path, exclude: tuple[str, ...] = (), max_file_bytes: int = 5_000_000,
         max_document_bytes: int = 100_000_000, ignore_paths: tuple[Path, ...] = (), allow_secrets: tuple[str, ...] = ()) -> ScanResult:
    """Collect indexable files under root with their stat, and say why others were left out."""
    rules = IgnoreRules(root, exclude, allow_secrets)
    result = ScanResult(rules)
    root_real = os.path.realpath(root)
    ignore_real = {os.path.realpath(p) for p in ignore_paths}
    ignore_names = {os.path.basename(p) for p in ignore_real}  # realpath() only for names that could match
    stack = [("", str(root))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        try:
            entries = sorted(os.scandir(abs_dir), key=lambda e: e.name)
        except OSError as exc:
            result.skipped.append((rel_dir or ".", f"unreadable directory ({exc.strerror})"))
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_link = entry.is_symlink()
                st = entry.stat(follow_symlinks=True)
            except OSError:
                result.skipped.append((rel, "broken symlink or unreadable"))
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_utf8(entry.name):
                # Paths are text everywhere downstream (the ignore matcher, SQLite, JSON): skip, and say so
                # unless the rules would have left it out anyway.
                shown = printable_path(rel)
                if not rules.ignored(shown, is_dir):
                    result.skipped.append((shown, f"{'directory' if is_dir else 'file'} name is not valid UTF-8"))
                continue
            if rules.ignored(rel, is_dir):
                continue
            if is_link:
                target = os.path.realpath(entry.path)
                if target != root_real and not target.startswith(root_real + os.sep):
                    result.skipped.append((rel, "symlink points outside the directory"))
                    continue
                if is_dir:
                    # Inside the root, the target is scanned under its own path; following
                    # the link would only index it twice, or loop forever.
                    result.skipped.append((rel, "directory symlink (its target is scanned directly)"))
                    continue
                # notes.md -> .env: the rules judge what the link leads to, not only its name.
                if target != root_real and rules.excluded(os.path.relpath(target, root_real).replace(os.sep, "/")):
                    result.skipped.append((rel, "symlink to an excluded file"))
                    continue
            if is_dir:
                stack.append((rel, entry.path))
                continue
            if not stat.S_ISREG(st.st_mode) or (entry.name in ignore_names and os.path.realpath(entry.path) in ignore_real):
                continue
            kind = registry.kind_of(entry.name)
            cap = size_cap(kind, max_file_bytes, max_document_bytes)
            if st.st_size > cap:
                result.skipped.append((rel, f"larger than {registry.named(kind).cap_setting} ({st.st_size} > {cap})"))
                continue
            result.files.append(ScannedFile(rel, entry.path, st.st_size, st.st_mtime_ns, kind))
    result.files.sort(key=lambda f: f.rel_path)
    result.skipped[:0] = rules.problems  # first: a dropped rule may explain what else was (not) indexed
    return result
