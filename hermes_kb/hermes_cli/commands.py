"""Slash commands in the chat: a registry with one dispatch table and tab completion."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from prompt_toolkit.completion import Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

log = logging.getLogger(__name__)

# Which argument of a verb names an indexed directory, and which takes a folder path as well.
NAME_OPTIONS = ("--dir",)
VERBS_TAKING_A_NAME = ("status", "clear", "doctor", "watch", "index")
VERBS_TAKING_A_PATH = ("index", "watch")


@dataclass(frozen=True)
class SlashCommand:
    name: str  # without the slash
    description: str
    handler: Callable[[str], bool]  # gets the rest of the line; returns False to end the chat
    args_hint: str = ""
    subcommands: tuple[str, ...] = ()


class CommandRegistry:
    def __init__(self) -> None:
        self._commands: dict[str, SlashCommand] = {}

    def register(self, command: SlashCommand) -> None:
        self._commands[command.name] = command

    def get(self, name: str) -> SlashCommand | None:
        return self._commands.get(name)

    def names(self) -> list[str]:
        return sorted(self._commands)

    def help_text(self) -> str:
        width = max((len(c.name) + len(c.args_hint) for c in self._commands.values()), default=0) + 3
        lines = ["Commands:"]
        for name in self.names():
            command = self._commands[name]
            lines.append(f"  /{(name + ' ' + command.args_hint).strip():<{width}} {command.description}")
        return "\n".join(lines)

    def is_command(self, line: str) -> bool:
        return line.strip().startswith("/")

    def dispatch(self, line: str, unknown: Callable[[str], None]) -> bool:
        """Run a `/name args` line; returns False when the chat should end."""
        name, _, rest = line.strip()[1:].partition(" ")
        command = self.get(name)
        if command is None:
            unknown(name)
            return True
        return command.handler(rest.strip())

    def completer(self, directory_names: Callable[[], Iterable[str]] = lambda: ()) -> Completer:
        """`directory_names` gives the names of the configured and indexed directories, asked at each
        completion (so a folder indexed a minute ago completes too)."""
        return _SlashCompleter(self, directory_names)


class _SlashCompleter(Completer):
    """`/k` -> `/kb`, `/kb s` -> `search`, `status`.

    prompt_toolkit's NestedCompleter splits words at `/`, so it cannot complete
    a slash command's own name.
    """

    def __init__(self, registry: CommandRegistry, directory_names: Callable[[], Iterable[str]] = lambda: ()):
        self.registry = registry
        self.directory_names = directory_names
        self.paths = PathCompleter(only_directories=True, expanduser=True)

    def get_completions(self, document, complete_event):
        text = document.text_before_cursor
        if not text.startswith("/"):
            return
        name, space, rest = text[1:].partition(" ")
        if not space:
            for candidate in self.registry.names():
                if candidate.startswith(name):
                    yield Completion("/" + candidate, start_position=-len(text))
            return
        command = self.registry.get(name)
        if command is None:
            return
        words = rest.split(" ")
        if len(words) == 1:
            for verb in command.subcommands:
                if verb.startswith(rest):
                    yield Completion(verb, start_position=-len(rest))
            return
        if command.subcommands:
            yield from self._argument(words[0], words[1:-1], words[-1], complete_event)

    def _argument(self, verb: str, before: list[str], word: str, complete_event) -> Iterator[Completion]:
        """`--dir d` -> directory names; a verb's target -> names, and folder paths for index and watch."""
        previous = before[-1] if before else ""
        if previous in NAME_OPTIONS:
            yield from self._names(word)
        elif not previous.startswith("-") and not word.startswith("-") and not any(
                w and not w.startswith("-") for w in before) and verb in VERBS_TAKING_A_NAME:
            yield from self._names(word)
            if verb in VERBS_TAKING_A_PATH and word:
                yield from self.paths.get_completions(Document(word), complete_event)

    def _names(self, word: str) -> Iterator[Completion]:
        try:
            names = sorted(set(self.directory_names()))
        except Exception:  # a broken config must not break typing at the prompt
            log.debug("no directory names to complete", exc_info=True)
            return
        for candidate in names:
            if candidate.startswith(word):
                yield Completion(candidate, start_position=-len(word))
