"""Slash commands in the chat: a registry with one dispatch table and tab completion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from prompt_toolkit.completion import Completer, Completion


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

    def completer(self) -> Completer:
        return _SlashCompleter(self)


class _SlashCompleter(Completer):
    """`/k` -> `/kb`, `/kb s` -> `search`, `status`.

    prompt_toolkit's NestedCompleter splits words at `/`, so it cannot complete
    a slash command's own name.
    """

    def __init__(self, registry: CommandRegistry):
        self.registry = registry

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
        if command is None or " " in rest:
            return
        for verb in command.subcommands:
            if verb.startswith(rest):
                yield Completion(verb, start_position=-len(rest))
