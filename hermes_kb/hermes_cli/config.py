"""Where Hermes keeps its files, and reading config.yaml and .env.

Everything is resolved at call time so tests (and users) can point
HERMES_HOME elsewhere without restarting anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from hermes_kb.agent.knowledgebase.config import ConfigError, KnowledgebaseConfig, parse_knowledgebase


def hermes_home() -> Path:
    return Path(os.path.expanduser(os.environ.get("HERMES_HOME", "~/.hermes")))


def config_path(home: Path | None = None) -> Path:
    return (home or hermes_home()) / "config.yaml"


def load_config(home: Path | None = None) -> dict[str, Any]:
    """The whole config.yaml as a mapping; a missing file is an empty config. `home` defaults to
    HERMES_HOME; the Hermes plugin passes the home Hermes resolved (profiles)."""
    path = config_path(home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror}.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings.")
    return data


def load_kb_config(home: Path | None = None) -> KnowledgebaseConfig:
    return parse_knowledgebase(load_config(home).get("knowledgebase"))


def apply_env() -> None:
    """Copy KEY=value lines of $HERMES_HOME/.env into the environment; real variables win."""
    path = hermes_home() / ".env"
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip().removeprefix("export ")
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        os.environ.setdefault(key.strip(), value.strip().strip("'\""))
