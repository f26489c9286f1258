"""`hermes` console script: `hermes kb ...` and `hermes chat`."""

from __future__ import annotations

import logging
import os
import sys

from rich.console import Console

from hermes_kb.agent.knowledgebase.config import ConfigError
from hermes_kb.agent.knowledgebase.service import KnowledgeBase

from . import config as hermes_config
from .kb_command import run_kb
from .terminal import printable

USAGE = """usage: hermes <command> [...]

commands:
  kb     index, search, inspect and clear knowledgebase directories (hermes kb --help)
  chat   talk to the agent, with knowledgebase tools and auto-retrieval (hermes chat --help)
"""


def make_kb() -> KnowledgeBase:
    """Read config at call time: HERMES_HOME may have changed since start-up. Settings it had to
    ignore are said on stderr (a process here is one command: said once)."""
    config = hermes_config.load_kb_config()
    for warning in config.warnings:
        print(f"warning: {printable(warning)}", file=sys.stderr)
    return KnowledgeBase(config, hermes_config.hermes_home())


def _chat(argv: list[str], out: Console, err: Console) -> int:
    from .chat import run_chat

    return run_chat(argv, out, err)


COMMANDS = {
    "kb": lambda argv, out, err: run_kb(argv, make_kb, out, err),
    "chat": _chat,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=os.environ.get("HERMES_LOG_LEVEL", "WARNING"), format="%(levelname)s %(name)s: %(message)s")
    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    if not argv or argv[0] in ("-h", "--help", "help"):
        out.print(USAGE, markup=False)
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        err.print(f"hermes: unknown command {printable(repr(argv[0]))}\n{USAGE}", markup=False)
        return 2
    try:
        hermes_config.apply_env()
        hermes_config.warn_unknown_keys(lambda message: err.print(f"warning: {printable(message)}", markup=False))
        return command(argv[1:], out, err)
    except ConfigError as exc:
        err.print(f"error: {printable(str(exc))}", markup=False)
        return 1
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        return 130


if __name__ == "__main__":
    sys.exit(main())
