"""Named hook points in the agent loop (Hermes' `pre_llm_call` and friends).

A hook that raises is logged and skipped: plugins must never break a turn.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Callable

log = logging.getLogger(__name__)

# (user_message, previous_user_message) -> text to add to the user message, or None; or an object with
# that `text` and a `sources()` list of the records it cites (kept with the session).
PRE_LLM_CALL = "pre_llm_call"


class HookRegistry:
    def __init__(self) -> None:
        self._hooks: dict[str, list[Callable[..., Any]]] = defaultdict(list)

    def register(self, event: str, hook: Callable[..., Any]) -> None:
        self._hooks[event].append(hook)

    def run(self, event: str, **kwargs: Any) -> list[Any]:
        """Results of every hook for the event, None results and failures left out."""
        results = []
        for hook in self._hooks.get(event, []):
            try:
                result = hook(**kwargs)
            except Exception:
                log.exception("%s hook %r failed; the turn goes on without it", event, hook)
                continue
            if result is not None:
                results.append(result)
        return results
