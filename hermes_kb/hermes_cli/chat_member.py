"""What `/kb` may do for a chat member of a shared Hermes gateway.

At the terminal the person typing `/kb` owns the machine. In Hermes's
messaging gateway it is any member the operator let talk to the bot, and
what they index becomes readable by the model in every session. So a member
may search, see status, check indexes and refresh what the owner already
indexed; nothing that widens what the model can read (a new folder), deletes
an index, or rebuilds one. `knowledgebase.gateway_full_access: true` lifts
this; Hermes's own `allow_admin_from` / `user_allowed_commands` decide which
members may run `/kb` at all, so the two together give "admins only, fully".
"""

from __future__ import annotations

import argparse
from typing import Callable

from hermes_kb.agent.knowledgebase.service import KnowledgeBase

HOW_TO_ALLOW = ("The machine's owner can run it at the terminal (`hermes kb ...`), or allow it in gateway chats "
                "with knowledgebase.gateway_full_access: true (best with Hermes's allow_admin_from, so only "
                "admins can run /kb).")


def _only_indexed(verb: str, what: str, field: str) -> Callable[[object, KnowledgeBase], str | None]:
    """A target must be a folder the owner already indexed: a path to any other folder of the host is
    neither read (status would scan it) nor made searchable (index would add it)."""
    def rule(args, kb: KnowledgeBase) -> str | None:
        target = getattr(args, field)
        if target is None:
            return None
        directory = kb.indexed_target(target)
        if directory is not None:
            # Resolved once: the run gets the name this check found (names win over paths), never the
            # member's string to resolve again, where a link swapped in between would name another folder.
            setattr(args, field, directory.name)
            return None
        return (f"In a gateway chat, /kb {verb} {what} folders already indexed, and {target!r} is not one of "
                f"them (/kb status lists them).")
    return rule


def _doctor(args, kb: KnowledgeBase) -> str | None:
    if args.repair:
        return "In a gateway chat, /kb doctor checks but does not --repair."
    return _only_indexed("doctor", "checks only", "target")(args, kb)


def _refused(what: str) -> Callable[[object, KnowledgeBase], str]:
    return lambda args, kb: f"In a gateway chat, {what}."


# verb -> None when a member may run it as given, else the sentence saying why not
MEMBER_RULES: dict[str, Callable[[object, KnowledgeBase], str | None]] = {
    "search": _only_indexed("search", "--dir names only", "directory"),
    "status": _only_indexed("status", "shows only", "target"),
    "index": _only_indexed("index", "only refreshes", "target"),
    "doctor": _doctor,
    "clear": _refused("/kb clear is not available: it deletes an index"),
    "eval": _refused("/kb eval is not available: it reads a dataset folder of the host"),
    "watch": _refused("/kb watch is not available"),
    "mcp": _refused("/kb mcp is not available"),
}


def member_refusal(args: argparse.Namespace | None, kb_factory: Callable[[], KnowledgeBase]) -> str | None:
    """None if a gateway chat member may run this parsed `/kb` line (kb_command.parse_slash); else one
    sentence saying why not and how the owner allows it. A line that does not parse (None) runs only
    to print its usage error."""
    if args is None or args.verb is None:
        return None
    rule = MEMBER_RULES.get(args.verb, _refused(f"/kb {args.verb} is not available"))
    refusal = rule(args, kb_factory())
    return f"{refusal} {HOW_TO_ALLOW}" if refusal else None
