"""Parse and validate the `knowledgebase:` section of config.yaml.

Validation happens once, here, so every other module can trust its inputs;
each error names the key and what it accepts, because that sentence is what
the user sees.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection

from .scanner import size_cap as cap_for_kind

BACKENDS = ("local", "multilingual", "openai", "ollama")
FUSIONS = ("weighted", "rrf")
RERANK_MODES = ("auto", "off", "local", "endpoint", "llm")  # reranker.MODES (config imports no engine)
DEFAULT_LOCAL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_REMOTE_MODELS = {"openai": "text-embedding-3-small", "ollama": "nomic-embed-text",
                         "multilingual": "intfloat/multilingual-e5-small"}
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "ollama": "http://127.0.0.1:11434"}


class ConfigError(ValueError):
    """A configuration value the user has to fix; the message is shown as is."""


def expand(value: str) -> str:
    """Expand `~` and `${VAR}` the way a shell user expects."""
    return os.path.expanduser(os.path.expandvars(value))


def resolve_path(value: str, what: str) -> Path:
    """An absolute path from user text; text no file system accepts (a NUL byte, an overlong name)
    is a ConfigError naming `what` rather than a ValueError or OSError from deep in pathlib."""
    try:
        return Path(expand(value)).resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"{what} {show(value)} is not a usable path ({reason}).") from None


def show(value: Any, limit: int = 60) -> str:
    """A value as a message quotes it: repr, cut short so a pasted blob cannot flood the terminal."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def did_you_mean(key: Any, known: Any) -> str | None:
    """The known key closest to a misspelt one, or None when nothing is close."""
    close = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key(key: Any, known: tuple[str, ...], where: str, of: str = "", listing: str | None = None) -> str:
    """The sentence for a key not in `known`: the key, then the closest known key, or else what the
    mapping accepts (`listing`, by default the known keys)."""
    plain = isinstance(key, str) and key.isprintable() and key.strip() == key != ""
    message = f"{where}{key if plain else show(key)} is not a known setting{of}"
    close = did_you_mean(key, known)
    if close:
        return f"{message}; did you mean {close}?"
    return f"{message}{listing if listing is not None else ', which accepts ' + ', '.join(known)}."


def check_keys(mapping: dict, known: tuple[str, ...], where: str, of: str = "", listing: str | None = None) -> None:
    """Reject the first key of `mapping` not in `known` in one sentence (unknown_key)."""
    for key in mapping:
        if key not in known:
            raise ConfigError(unknown_key(key, known, where, of, listing))


@dataclass(frozen=True)
class EmbeddingConfig:
    backend: str = "local"
    model: str = DEFAULT_LOCAL_MODEL
    model_path: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 4
    runtime: str = "auto"  # local backend: auto (OpenVINO for the offline default when installed), openvino, onnxruntime
    # Offline default on OpenVINO: new indexes with int8 activations where the CPU pays for them (auto), always, or never.
    int8_activations: str = "auto"


# Texts per model call. Locally, length-sorted batches of 4 embed as fast as 16 on 2 cores while
# onnxruntime's peak memory drops from ~940 MB to ~450 MB; a remote service wants fewer, larger calls.
DEFAULT_BATCH_SIZES = {"local": 4, "multilingual": 16, "openai": 64, "ollama": 64}


@dataclass(frozen=True)
class ChunkingConfig:
    chunk_size: int = 200
    chunk_overlap: int = 30


@dataclass(frozen=True)
class DirectoryConfig:
    path: Path
    name: str
    index_path: Path | None = None
    exclude: tuple[str, ...] = ()
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    embedding: EmbeddingConfig | None = None  # its own embedding_model; None: the knowledgebase's
    inline_tags: str = "auto"  # whether a note's `#word` is a tag: on, off, auto (in an Obsidian or Logseq vault)

    def resolved_index_path(self, hermes_home: Path) -> Path:
        """Default location keys the file on the absolute path, so two roots with one name never collide."""
        if self.index_path is not None:
            return self.index_path
        digest = hashlib.sha256(str(self.path).encode()).hexdigest()[:10]
        return hermes_home / "knowledgebase" / "indexes" / f"{self.name}-{digest}.sqlite"


STORES = ("sqlite", "postgres")


@dataclass(frozen=True)
class StoreConfig:
    """Where indexes live: one SQLite file per directory (the default), or one schema per directory on
    a PostgreSQL server with pgvector that a team shares."""
    backend: str = "sqlite"
    url: str | None = field(default=None, repr=False)  # postgresql://user:password@host/db, ${VARS} expanded

    def __repr__(self) -> str:  # never the password
        return f"StoreConfig(backend={self.backend!r})"


@dataclass(frozen=True)
class KnowledgebaseConfig:
    enabled: bool = True
    store: StoreConfig = field(default_factory=StoreConfig)
    directories: tuple[DirectoryConfig, ...] = ()
    exclude: tuple[str, ...] = ()
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    inline_tags: str = "auto"  # each directory's default (DirectoryConfig.inline_tags)
    alpha: float = 0.7
    fusion: str = "weighted"
    rrf_k: int = 60
    min_score: float = 0.05
    keyword_row_budget: int | None = 5000  # rows FTS5 may score per query; None never drops query words
    relevance_threshold: float = 0.75  # on context.confidence; calibrated by benchmarks/injection_gate.py
    # The relevance stage after retrieval (reranker.py): auto = the shipped model where it reads the query.
    rerank: str = "auto"
    rerank_url: str | None = None  # a /v1/rerank server, for rerank: endpoint
    rerank_model: str = ""
    rerank_api_key_env: str | None = None
    rerank_timeout_s: float = 5.0
    rerank_threshold: float | None = None  # the gate's bar on a judged probability; None: the engine's own
    # A relevance model folder (model.onnx, card.json, tokenizer.json: training/train_reranker.py's export)
    # that auto and local use instead of the shipped one; its card brings its own blend and bars.
    rerank_model_dir: Path | None = None
    max_context_chunks: int = 4
    max_context_tokens: int = 1200
    auto_retrieve: bool = True
    reindex_on_change: bool = True
    watch_for_changes: bool = False
    watch_debounce_s: float = 2.0
    max_file_bytes: int = 5_000_000  # text, code, data, HTML
    max_document_bytes: int = 100_000_000  # PDFs, office files, e-books, notebooks, mailboxes (kinds/registry.py: `large`)
    # What a model's tool call may do without the user's yes where nobody can be asked (see tools/permissions.py).
    allow_model_index_new_folders: bool = False
    allow_model_clear: bool = False
    # /kb in a shared Hermes gateway: chat members may do what the owner may (see hermes_cli/chat_member.py).
    gateway_full_access: bool = False
    allow_secrets: tuple[str, ...] = ()  # globs of files indexed whole, secrets and all (opt-in, per file)
    # Settings that were misspelt or out of range and so ignored (parse_knowledgebase), one sentence each.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def directory(self, name_or_path: str) -> DirectoryConfig | None:
        """Find a configured directory by name or by path."""
        for directory in self.directories:
            if directory.name == name_or_path:
                return directory
        try:
            candidate = resolve_path(name_or_path, "a folder path")
        except ConfigError:
            return None  # not a path at all, so not a configured one; ad_hoc says why
        for directory in self.directories:
            if directory.path == candidate:
                return directory
        return None

    def embedding_for(self, directory: DirectoryConfig) -> EmbeddingConfig:
        """The model a directory is embedded with: its own embedding_model, else the knowledgebase's."""
        return directory.embedding or self.embedding

    def scan_rules(self, directory: DirectoryConfig) -> dict:
        """What decides a file's place in an index: the scanner's keyword arguments, in one place."""
        exclude, allow_secrets = self.ignore_args(directory)
        return {"exclude": exclude, "max_file_bytes": self.max_file_bytes, "max_document_bytes": self.max_document_bytes,
                "allow_secrets": allow_secrets}

    def size_cap(self, kind: str) -> int:
        """The largest file of this kind that is read: max_document_bytes or max_file_bytes."""
        return cap_for_kind(kind, self.max_file_bytes, self.max_document_bytes)

    def ignore_args(self, directory: DirectoryConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(exclude, allow_secrets) for judging one path by the scan's rules (kb_read, the watcher)."""
        return (*self.exclude, *directory.exclude), self.allow_secrets

    def ad_hoc(self, path: str, taken: Collection[str] = ()) -> DirectoryConfig:
        """A directory the config does not list, indexed with the global settings, named apart from `taken`."""
        if not path.strip():
            raise ConfigError("A folder path is needed, not an empty string.")
        root = resolve_path(path, "a folder path")
        if not root.is_dir():
            close = did_you_mean(path, taken)
            hint = f"; did you mean {close}?" if close else (f" (the directories: {', '.join(sorted(taken))})." if taken else ".")
            raise ConfigError(f"{path} is neither the name of a knowledgebase directory nor an existing folder{hint}")
        return DirectoryConfig(path=root, name=unique_name(root, taken), chunking=self.chunking,
                               inline_tags=self.inline_tags)


def _default_name(root: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", root.name) or "root"


def unique_name(root: Path, taken: Collection[str]) -> str:
    """The folder's own name, else its parent's and its own ("b-docs"), else numbered ("docs-2").

    A name is how a user (and a model) picks an index for --dir, status and clear, and how a union
    search tells indexes apart, so two folders never share one.
    """
    base = _default_name(root)
    parented = f"{_default_name(root.parent)}-{base}"
    numbered = (f"{base}-{n}" for n in range(2, len(taken) + 3))
    return next(name for name in (base, parented, *numbered) if name not in taken)


# --- value checkers: each returns the clean value or raises ConfigError -------------
# Every message is one sentence: the full key, what it accepts, and (cut short) what it got.

def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"knowledgebase.{key} must be true or false, not {show(value)}.")


def _number(kind: type, low: float | None = None, high: float | None = None) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok and kind is int:
            ok = float(value).is_integer()
        if ok and ((low is not None and value < low) or (high is not None and value > high)):
            ok = False
        if not ok:
            bounds = f" between {low} and {high}" if high is not None else f" of at least {low}" if low is not None else ""
            noun = "a whole number" if kind is int else "a number"
            raise ConfigError(f"knowledgebase.{key} must be {noun}{bounds}, not {show(value)}.")
        return kind(value)
    return check


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda key, value: None if value is None else check(key, value)


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def check(key: str, value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise ConfigError(f"knowledgebase.{key} must be one of {', '.join(options)}, not {show(value)}.")
        return value
    return check


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"knowledgebase.{key} must be a non-empty string, not {show(value)}.")
    return value


def _path(key: str, value: Any) -> Path:
    """A path setting: a non-empty string, expanded and made absolute."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"knowledgebase.{key} must be a non-empty path string, not {show(value)}.")
    return resolve_path(value, f"knowledgebase.{key}")


def _globs(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"knowledgebase.{key} must be a list of glob patterns, not {show(value)}.")
    return tuple(value)


_SCALARS: dict[str, Callable[[str, Any], Any]] = {
    "enabled": _bool,
    "alpha": _number(float, 0.0, 1.0),
    "fusion": _choice(FUSIONS),
    "rrf_k": _number(int, 1),
    "min_score": _number(float, 0.0, 1.0),
    "keyword_row_budget": _optional(_number(int, 100)),
    "relevance_threshold": _number(float, 0.0, 2.0),
    "rerank": lambda key, value: _choice(RERANK_MODES)(key, {False: "off", True: "auto"}[value] if isinstance(value, bool) else value),  # YAML reads `off` as false
    "rerank_url": _text,
    "rerank_model": _text,
    "rerank_api_key_env": _text,
    "rerank_timeout_s": _number(float, 0.1, 120.0),
    "rerank_threshold": _optional(_number(float, 0.0, 1.0)),
    "rerank_model_dir": _optional(_path),
    "max_context_chunks": _number(int, 0),
    "max_context_tokens": _number(int, 0),
    "auto_retrieve": _bool,
    "reindex_on_change": _bool,
    "watch_for_changes": _bool,
    "watch_debounce_s": _number(float, 0.05, 600.0),
    "max_file_bytes": _number(int, 1),
    "max_document_bytes": _number(int, 1),
    "exclude": _globs,
    "allow_model_index_new_folders": _bool,
    "allow_model_clear": _bool,
    "gateway_full_access": _bool,
    "allow_secrets": _globs,
    "inline_tags": lambda key, value: _choice(SWITCHES)(key, _switch(value)),
}
_CHUNKING_KEYS = {"chunk_size": _number(int, 32, 2000), "chunk_overlap": _number(int, 0, 1000)}
# `embedding` is an older spelling of `embedding_model`, still read.
_KNOWN_TOP = (*_SCALARS, *_CHUNKING_KEYS, "directories", "embedding_model", "embedding", "store")
# Settings whose bad value is refused rather than ignored: ignoring `exclude` would index what the user
# meant to keep out. A bad tuning number or switch costs only itself: warned about, its default used.
_STRICT = ("exclude",)
_KNOWN_DIRECTORY = ("path", "name", "index_path", "exclude", "embedding_model", "inline_tags", *_CHUNKING_KEYS)
_KNOWN_EMBEDDING = ("backend", "model", "model_path", "base_url", "api_key_env", "batch_size", "runtime",
                    "int8_activations")
RUNTIMES = ("auto", "openvino", "onnxruntime")
SWITCHES = ("auto", "on", "off")


def _chunking(section: dict, prefix: str, base: ChunkingConfig) -> ChunkingConfig:
    values = {k: check(f"{prefix}{k}", section[k]) for k, check in _CHUNKING_KEYS.items() if k in section}
    chunking = replace(base, **values)
    if chunking.chunk_overlap >= chunking.chunk_size:
        raise ConfigError(f"knowledgebase.{prefix}chunk_overlap must be smaller than chunk_size ({chunking.chunk_size}).")
    return chunking


def _embedding(section: dict, prefix: str = "") -> EmbeddingConfig:
    """`embedding_model` is either a backend name or a mapping with the details; null means the default.
    `prefix` places a directory's own setting (`directories[2].`) in what the messages name."""
    if "embedding_model" in section and "embedding" in section:
        raise ConfigError("knowledgebase.embedding is an older name for embedding_model; keep only embedding_model.")
    raw = section.get("embedding_model", section.get("embedding"))
    key = f"{prefix}embedding_model"
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        raw = {"backend": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"knowledgebase.{key} must be local, multilingual, openai, ollama, or a mapping with a backend "
                          f"key, not {show(raw)}.")
    check_keys(raw, _KNOWN_EMBEDDING, f"knowledgebase.{key}.", " of embedding_model")
    backend = _choice(BACKENDS)(f"{key}.backend", raw.get("backend", "local"))
    default_model = DEFAULT_LOCAL_MODEL if backend == "local" else DEFAULT_REMOTE_MODELS[backend]
    model = _text(f"{key}.model", raw.get("model", default_model))
    model_path = raw.get("model_path")
    if model_path is not None:
        model_path = str(_path(f"{key}.model_path", model_path))
    base_url = raw.get("base_url")
    if base_url is not None and not (isinstance(base_url, str) and base_url.startswith(("http://", "https://"))):
        raise ConfigError(f"knowledgebase.{key}.base_url must be an http:// or https:// URL, not {show(base_url)}.")
    return EmbeddingConfig(
        backend=backend,
        model=model,
        model_path=model_path,
        base_url=expand(base_url) if base_url else DEFAULT_BASE_URLS.get(backend),
        api_key_env=_text(f"{key}.api_key_env", raw.get("api_key_env", "OPENAI_API_KEY")),
        batch_size=_number(int, 1, 1024)(f"{key}.batch_size", raw.get("batch_size", DEFAULT_BATCH_SIZES[backend])),
        runtime=_choice(RUNTIMES)(f"{key}.runtime", raw.get("runtime", "auto")),
        int8_activations=_choice(SWITCHES)(f"{key}.int8_activations", _switch(raw.get("int8_activations", "auto"))),
    )


def _switch(value):
    """YAML reads a bare on/off as a boolean: both spellings mean the same here."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


def _store(section: dict) -> StoreConfig:
    """`store` is `sqlite`, `postgres` with a url, or a mapping; the url's ${VARS} come from the
    environment (keep the password there, not in config.yaml)."""
    raw = section.get("store") or {}
    if isinstance(raw, str):
        raw = {"backend": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"knowledgebase.store must be sqlite, postgres, or a mapping with a backend key, not {show(raw)}.")
    check_keys(raw, ("backend", "url"), "knowledgebase.store.", " of store")
    backend = _choice(STORES)("store.backend", raw.get("backend", "sqlite"))
    url = raw.get("url")
    if backend == "sqlite":
        if url is not None:
            raise ConfigError("knowledgebase.store.url is for the postgres backend; set store.backend: postgres or remove it.")
        return StoreConfig()
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("knowledgebase.store.url is needed for the postgres backend, e.g. "
                          "postgresql://kb:${KB_PASSWORD}@db.example.com/knowledgebase.")
    return StoreConfig(backend, _postgres_url(url))


_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _postgres_url(url: str) -> str:
    """The url with its ${VARS} from the environment: a url that is one variable is taken as it is; a
    variable inside one (a password) is percent-encoded, so `@`, `/`, `#` or `%` in it cannot change
    what the url means or be echoed back by libpq as a host name. Checked without ever quoting it."""
    named = [braced or bare for braced, bare in _VARIABLE.findall(url)]
    unset = [name for name in named if name not in os.environ]
    if unset:
        raise ConfigError(f"knowledgebase.store.url uses the environment variable {unset[0]}, which is not set.")
    whole = _VARIABLE.fullmatch(url.strip())
    if whole:
        url = os.environ[whole.group(1) or whole.group(2)]
    else:
        url = _VARIABLE.sub(lambda m: urllib.parse.quote(os.environ[m.group(1) or m.group(2)], safe=""), url)
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("knowledgebase.store.url must start with postgresql:// (a libpq connection URL).")
    try:
        netloc = urllib.parse.urlsplit(url).netloc
    except ValueError as exc:  # urlsplit's messages are fixed sentences ("Invalid IPv6 URL"), never the URL
        raise ConfigError(f"knowledgebase.store.url is not a valid URL ({exc}); the form is "
                          "postgresql://user:password@host:5432/database.") from None
    if netloc.count("@") > 1:
        raise ConfigError("knowledgebase.store.url has an @ in its user or password; write it as %40 (or put the "
                          "password in an environment variable the url names).")
    if re.search(r"%(?![0-9A-Fa-f]{2})", url):
        raise ConfigError("knowledgebase.store.url has a % that is not followed by two hex digits; write a literal % as %25.")
    for host in netloc.rpartition("@")[2].split(","):
        port = host.rpartition("]")[2].rpartition(":")[2] if ":" in host.rpartition("]")[2] else ""
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError("knowledgebase.store.url has a port that is not a number from 1 to 65535 (a / # ? in a "
                              "password must be percent-encoded).")
    return url


def _directory(entry: Any, position: int, base: KnowledgebaseConfig) -> DirectoryConfig:
    where = f"directories[{position}]"
    if isinstance(entry, str):
        if not entry.strip():
            raise ConfigError(f"knowledgebase.{where} must be a non-empty path, not {show(entry)}.")
        entry = {"path": entry}
    if not isinstance(entry, dict) or "path" not in entry:
        raise ConfigError(f"knowledgebase.{where} must be a path or a mapping with a path key, not {show(entry)}.")
    check_keys(entry, _KNOWN_DIRECTORY, f"knowledgebase.{where}.", " of a directory entry")
    root = _path(f"{where}.path", entry["path"])
    name = entry.get("name", _default_name(root))
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"knowledgebase.{where}.name must use letters, digits, '-', '_' or '.', not {show(name)}.")
    index_path = entry.get("index_path")
    return DirectoryConfig(
        path=root,
        name=name,
        index_path=None if index_path is None else _path(f"{where}.index_path", index_path),
        exclude=_globs(f"{where}.exclude", entry.get("exclude")),
        chunking=_chunking(entry, f"{where}.", base.chunking),
        embedding=_embedding(entry, f"{where}.") if entry.get("embedding_model") is not None else None,
        inline_tags=(_choice(SWITCHES)(f"{where}.inline_tags", _switch(entry["inline_tags"]))
                     if "inline_tags" in entry else base.inline_tags),
    )


def parse_knowledgebase(section: Any) -> KnowledgebaseConfig:
    """Turn the raw yaml mapping into a validated config; None means all defaults."""
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError(f"knowledgebase must be a mapping of settings, not {show(section)}.")
    warnings = [unknown_key(key, _KNOWN_TOP, "knowledgebase.", listing=" (see config.example.yaml)") + " It is ignored."
                for key in section if key not in _KNOWN_TOP]
    values = {}
    for key, check in _SCALARS.items():
        if key not in section:
            continue
        try:
            values[key] = check(key, section[key])
        except ConfigError as exc:
            if key in _STRICT:
                raise
            warnings.append(f"{exc} It is ignored: the default, {show(getattr(KnowledgebaseConfig, key))}, applies.")
    config = KnowledgebaseConfig(**values, embedding=_embedding(section), store=_store(section),
                                 chunking=_chunking(section, "", ChunkingConfig()), warnings=tuple(warnings))
    raw_dirs = section.get("directories")
    if raw_dirs is None:
        raw_dirs = []
    if not isinstance(raw_dirs, list):
        raise ConfigError(f"knowledgebase.directories must be a list of paths or mappings, not {show(raw_dirs)}.")
    directories = tuple(_directory(entry, i, config) for i, entry in enumerate(raw_dirs))
    names = [d.name for d in directories]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise ConfigError(f"knowledgebase.directories has two entries named {duplicate!r}; give one a different name.")
    return replace(config, directories=directories)
