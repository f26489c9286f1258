"""Where Hermes keeps its files, and reading config.yaml and .env.

Everything is resolved at call time so tests (and users) can point
HERMES_HOME elsewhere without restarting anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import yaml

from hermes_kb.agent.knowledgebase.config import (
    ConfigError, KnowledgebaseConfig, did_you_mean, parse_knowledgebase, show,
)

# Top-level keys of config.yaml this program reads.
OUR_KEYS = ("model", "knowledgebase", "plugins")
# Top-level keys Hermes Agent writes into the same $HERMES_HOME/config.yaml: not ours, but not typos either.
HERMES_AGENT_KEYS = (
    "agent", "approvals", "auxiliary", "browser", "checkpoints", "code_execution", "command_allowlist",
    "compression", "context", "custom_providers", "delegation", "display", "fallback_model", "fallback_providers",
    "gateway", "honcho", "mcp_servers", "memory", "personalities", "platform_toolsets", "platforms", "prompt_caching",
    "providers", "providers_order", "quick_commands", "security", "skills", "smart_model_routing", "stt",
    "terminal", "timezone", "toolsets", "tts", "voice", "web", "_config_version",
)
_warned: set[tuple[str, str]] = set()


def read_text(path: Path) -> str:
    """A config file's text; unreadable or non-UTF-8 is a ConfigError sentence. FileNotFoundError passes."""
    try:
        return path.read_text(encoding="utf-8-sig")  # a BOM some editors write is not content
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                          f"save it as UTF-8.") from None


def hermes_home() -> Path:
    return Path(os.path.expanduser(os.environ.get("HERMES_HOME", "~/.hermes")))


def config_path(home: Path | None = None) -> Path:
    return (home or hermes_home()) / "config.yaml"


def load_config(home: Path | None = None) -> dict[str, Any]:
    """The whole config.yaml as a mapping; a missing file is an empty config. `home` defaults to
    HERMES_HOME; the Hermes plugin passes the home Hermes resolved (profiles)."""
    path = config_path(home)
    try:
        text = read_text(path)
    except FileNotFoundError:
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}.") from None
    except (ValueError, TypeError, AttributeError, LookupError, RecursionError) as exc:
        # PyYAML's constructors raise these for a well-formed value they cannot build (`2001-13-45`,
        # `!!int 1.5`, `!!timestamp x`) and for nesting past the recursion limit.
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else " ".join(str(exc).split())[:120]
        raise ConfigError(f"{path} is not valid YAML ({reason}).") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings.")
    return data


def warn_unknown_keys(warn: Callable[[str], None], home: Path | None = None) -> None:
    """Warn, once per key and process, about a top-level key of config.yaml that nothing reads (`modle:`), with
    the closest key we read. A config that does not load is left to the command that needs it to report."""
    try:
        data = load_config(home)
    except ConfigError:
        return
    path = config_path(home)
    for key in data:
        if key in OUR_KEYS or key in HERMES_AGENT_KEYS or (str(path), str(key)) in _warned:
            continue
        _warned.add((str(path), str(key)))
        close = did_you_mean(key, OUR_KEYS)
        hint = f"; did you mean {close}?" if close else f" (hermes reads {', '.join(OUR_KEYS)})."
        warn(f"{path} has a top-level key {show(key)} that nothing reads{hint}")


def load_kb_config(home: Path | None = None) -> KnowledgebaseConfig:
    return parse_knowledgebase(load_config(home).get("knowledgebase"))


def apply_env() -> None:
    """Copy KEY=value lines of $HERMES_HOME/.env into the environment; real variables win."""
    path = hermes_home() / ".env"
    if not path.is_file():
        return
    try:
        text = read_text(path)
    except FileNotFoundError:
        return
    for line in text.splitlines():
        line = line.strip().removeprefix("export ")
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        os.environ.setdefault(key.strip(), value.strip().strip("'\""))
