"""Bearer tokens for the HTTP MCP server: who may search, who may index, who may clear.

A token is shown once, when it is made, and kept only as its SHA-256 (a token is 256 random bits,
so a plain hash is as good as a slow one and costs a search nothing). The file lives under
HERMES_HOME, resolved at each call, and is refused while anyone but its owner may read it: a
readable hash list would let a colleague check guesses offline, and a writable one would let them
add a token of their own. Every token is compared, each in constant time, so neither timing nor an
early exit says which stored hash came close.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SCOPES = ("read", "write", "admin")  # each includes the ones before it
PREFIX = "hkb_"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}"
MAX_FILE_BYTES = 1 << 20  # thousands of tokens; a bigger file is not one this code wrote


class TokenError(Exception):
    """One sentence a user can act on (a bad name, a file others can read, ...)."""


@dataclass(frozen=True)
class Grant:
    """What a presented token turned out to be: its name (for logs) and the scopes it holds."""

    name: str
    scope: str

    @property
    def scopes(self) -> list[str]:
        return list(SCOPES[:SCOPES.index(self.scope) + 1]) if self.scope in SCOPES else []


NO_ACCESS = Grant("unauthenticated", "none")  # offered nothing, allowed nothing


def token_file(hermes_home: Path) -> Path:
    return hermes_home / "knowledgebase" / "mcp-tokens.json"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenFile:
    """The token file of one HERMES_HOME: read again whenever it changes on disk (a token removed
    while the server runs stops working at its next request)."""

    def __init__(self, path: Path):
        self.path = path
        self._seen: tuple[int, ...] | None = None
        self._entries: list[dict] = []

    def _check_private(self, info: os.stat_result) -> None:
        """Only a regular file of this user that nobody else may read or write, in a folder nobody else
        may write (where others could swap the file): otherwise its hashes could be read and checked
        offline, or tokens of someone else's added."""
        if not stat.S_ISREG(info.st_mode):
            raise TokenError(f"{self.path} is not a regular file (a link?); the MCP server reads tokens only from one.")
        if info.st_uid != os.geteuid():
            raise TokenError(f"{self.path} belongs to another user; the MCP server reads tokens only from your own file.")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenError(f"{self.path} can be read or written by other users; run `chmod 600 {self.path}` "
                             f"(the MCP server refuses tokens it cannot keep secret).")
        folder = self.path.parent.stat()
        if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise TokenError(f"{self.path.parent} can be written by other users, who could replace the token file; "
                             f"run `chmod go-w {self.path.parent}`.")

    def entries(self) -> list[dict]:
        try:  # no link followed; checked and read through one descriptor (nothing swapped in between)
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            self._seen, self._entries = None, []
            return []
        except OSError as exc:
            raise TokenError(f"Cannot read {self.path}: {exc.strerror or exc} (a link is not followed).") from None
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            self._check_private(info)
            seen = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size)
            if self._seen == seen:
                return self._entries
            try:
                data = json.loads(handle.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES].decode("utf-8"))
                entries = [dict(e) for e in data["tokens"]]
                if not all(isinstance(e.get("name"), str) and e.get("scope") in SCOPES
                           and isinstance(e.get("sha256"), str) for e in entries):
                    raise ValueError("an entry lacks its name, scope or hash")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise TokenError(f"{self.path} is not a token file this version wrote ({exc}); remove it and "
                                 f"add the tokens again.") from None
        self._seen, self._entries = seen, entries
        return entries

    def configured(self) -> bool:
        return bool(self.entries())

    def verify(self, token: str) -> Grant | None:
        """The grant of a presented token, or None. Every entry is compared, in constant time."""
        presented = _digest(token)
        found = None
        for entry in self.entries():
            if hmac.compare_digest(presented, entry["sha256"]):
                found = Grant(entry["name"], entry["scope"])
        return found

    def listed(self) -> list[dict]:
        """Names, scopes and dates; never a token or its hash."""
        return [{"name": e["name"], "scope": e["scope"], "created": e.get("created")} for e in self.entries()]

    @contextlib.contextmanager
    def _changing(self):
        """One change at a time: two `token` commands at once each read, change and write the file, and
        the second would put back a token the first had removed."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._seen = None
            yield self.entries()

    def add(self, name: str, scope: str) -> str:
        """A new token named `name` with `scope`; returned once, never stored."""
        if not re.fullmatch(NAME_PATTERN, name or ""):
            raise TokenError(f"{name!r} is not a token name: use letters, digits, '.', '_', '@' or '-' "
                             f"(at most 64, starting with a letter or digit).")
        if scope not in SCOPES:
            raise TokenError(f"{scope!r} is not a scope; choose one of {', '.join(SCOPES)}.")
        with self._changing() as entries:
            if any(e["name"] == name for e in entries):
                raise TokenError(f"A token named {name} exists; remove it first (`hermes kb token remove {name}`).")
            token = PREFIX + secrets.token_urlsafe(32)
            self._write([*entries, {"name": name, "scope": scope, "sha256": _digest(token),
                                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}])
        return token

    def remove(self, name: str) -> None:
        with self._changing() as entries:
            kept = [e for e in entries if e["name"] != name]
            if len(kept) == len(entries):
                raise TokenError(f"No token is named {name}; `hermes kb token list` shows them.")
            self._write(kept)

    def _write(self, entries: list[dict]) -> None:
        """Written whole to a private temporary file, then renamed over the old one: a reader never
        sees half a file, and the file is never readable by others, not even for a moment."""
        descriptor, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)  # 0600, O_EXCL
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"tokens": entries}, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        self._seen = None
