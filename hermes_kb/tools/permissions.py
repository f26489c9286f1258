"""What a model's tool call may do beyond reading what the user indexed.

The trust boundary: the model (and every document it has read) is untrusted.
Reading and searching stay inside the folders the user configured or indexed
by hand. Anything that widens that set (indexing a new folder) or destroys
something (clearing an index) needs the user's yes: asked at the terminal when
a person is there, otherwise allowed only by an explicit config switch, off by
default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hermes_kb.agent.knowledgebase.config import KnowledgebaseConfig

INDEX_NEW_FOLDER = "index_new_folder"
CLEAR = "clear"

# action -> (config switch that allows it without asking, the switch's name for the refusal sentence)
SWITCHES: dict[str, tuple[Callable[[KnowledgebaseConfig], bool], str]] = {
    INDEX_NEW_FOLDER: (lambda c: c.allow_model_index_new_folders, "allow_model_index_new_folders"),
    CLEAR: (lambda c: c.allow_model_clear, "allow_model_clear"),
}


class PermissionRefused(Exception):
    """The user (or the absence of one) said no; the message is the tool error."""


@dataclass(frozen=True)
class Permissions:
    """`ask` puts a yes/no question to the person at the terminal; None where nobody can answer
    (`chat -q`, the MCP server, the Hermes plugin)."""

    config: KnowledgebaseConfig
    ask: Callable[[str], bool] | None = None
    # Whether the caller may see where files live on this machine: not a gateway chat's members nor a
    # remote MCP client, who get DIRECTORY/PATH (the form citations use) and cannot open host paths anyway.
    host_paths: bool = True

    def may(self, action: str) -> bool:
        """Whether `action` could be allowed here at all: by config, or by asking someone."""
        return SWITCHES[action][0](self.config) or self.ask is not None

    def require(self, action: str, question: str, refusal: str) -> None:
        allowed_by_config, switch = SWITCHES[action]
        if allowed_by_config(self.config):
            return
        if self.ask is not None:
            if self.ask(question):
                return
            raise PermissionRefused(f"The user declined: {refusal}")
        raise PermissionRefused(f"{refusal} Only the user can allow this (or set knowledgebase.{switch}: true).")
