"""Bearer tokens for the HTTP MCP server: who may search, who may index, who may clear.

A token is shown once, when it is made, and kept only as its SHA-256 (a token is 256 random bits,
so a plain hash is as good as a slow one and costs a search nothing). The file lives under
HERMES_HOME, resolved at each call, and is refused while anyone but its owner may read it: a
readable hash list would let a colleague check guesses offline, and a writable one would let them
add a token of their own. Every token is compared, each in constant time, so neither timing nor an
early exit says which stored hash came close.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

SCOPES = ("read", "write", "admin")  # each includes the ones before it
PREFIX = "hkb_"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}"


class TokenError(Exception):
    """One sentence a user can act on (a bad name, a file others can read, ...)."""


@dataclass(frozen=True)
class Grant:
    """What a presented token turned out to be: its name (for logs) and the scopes it holds."""

    name: str
    scope: str

    @property
    def scopes(self) -> list[str]:
        return list(SCOPES[:SCOPES.index(self.scope) + 1])


def token_file(hermes_home: Path) -> Path:
    return hermes_home / "knowledgebase" / "mcp-tokens.json"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenFile:
    """The token file of one HERMES_HOME: read again whenever it changes on disk (a token removed
    while the server runs stops working at its next request)."""

    def __init__(self, path: Path):
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._entries: list[dict] = []

    def _check_private(self, info: os.stat_result) -> None:
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenError(f"{self.path} can be read or written by other users; run `chmod 600 {self.path}` "
                             f"(the MCP server refuses tokens it cannot keep secret).")

    def entries(self) -> list[dict]:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            self._seen, self._entries = None, []
            return []
        self._check_private(info)
        if self._seen != (info.st_mtime_ns, info.st_size):
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                entries = [dict(e) for e in data["tokens"]]
                if not all(isinstance(e.get("name"), str) and e.get("scope") in SCOPES
                           and isinstance(e.get("sha256"), str) for e in entries):
                    raise ValueError("an entry lacks its name, scope or hash")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise TokenError(f"{self.path} is not a token file this version wrote ({exc}); remove it and "
                                 f"add the tokens again.") from None
            self._seen, self._entries = (info.st_mtime_ns, info.st_size), entries
        return self._entries

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

    def add(self, name: str, scope: str) -> str:
        """A new token named `name` with `scope`; returned once, never stored."""
        if not re.fullmatch(NAME_PATTERN, name or ""):
            raise TokenError(f"{name!r} is not a token name: use letters, digits, '.', '_', '@' or '-' "
                             f"(at most 64, starting with a letter or digit).")
        if scope not in SCOPES:
            raise TokenError(f"{scope!r} is not a scope; choose one of {', '.join(SCOPES)}.")
        entries = self.entries()
        if any(e["name"] == name for e in entries):
            raise TokenError(f"A token named {name} exists; remove it first (`hermes kb token remove {name}`).")
        token = PREFIX + secrets.token_urlsafe(32)
        self._write([*entries, {"name": name, "scope": scope, "sha256": _digest(token),
                                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}])
        return token

    def remove(self, name: str) -> None:
        entries = self.entries()
        kept = [e for e in entries if e["name"] != name]
        if len(kept) == len(entries):
            raise TokenError(f"No token is named {name}; `hermes kb token list` shows them.")
        self._write(kept)

    def _write(self, entries: list[dict]) -> None:
        """Written whole to a private temporary file, then renamed over the old one: a reader never
        sees half a file, and the file is never readable by others, not even for a moment."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"tokens": entries}, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        self._seen = None
