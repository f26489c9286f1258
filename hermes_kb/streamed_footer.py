"""The `Sources:` footer under an answer Hermes's REPL streamed.

Hermes 0.19's REPL prints a streamed answer token by token and then skips the final response
(cli.py, `already_streamed`), so text a `transform_llm_output` hook appended never reaches the
screen there, while its gateway and ACP adapter send a transformed response again. The plugin holds
the footer it appended for the session, and the REPL's end-of-stream flush (`HermesCLI._flush_stream`,
wrapped once per process) prints it under the closed answer box. An answer that was not streamed
(`display.streaming: false`, `-q`) is printed whole by Hermes, footer included, so nothing is held
for it twice. Every step is best effort: a Hermes that renamed what this wraps keeps working, without
the footer on screen.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading

log = logging.getLogger(__name__)

_MARK = "_hermes_kb_streamed_footers"  # on the wrapped method: the holder it prints from


class StreamedFooters:
    def __init__(self):
        self._pending: dict[str, str] = {}
        self._lock = threading.Lock()

    def hold(self, session_id: str, footer: str) -> None:
        """Keep the footer appended to this session's answer until the REPL has flushed the stream."""
        if self.install():
            with self._lock:
                self._pending[str(session_id)] = footer

    def take(self, session_id: str) -> str | None:
        with self._lock:
            return self._pending.pop(str(session_id), None)

    def install(self) -> bool:
        """Wrap the REPL's flush once; False outside the REPL (no `cli` module loaded: a gateway, -q)."""
        cli = sys.modules.get("cli")
        owner = getattr(cli, "HermesCLI", None)
        flush = getattr(owner, "_flush_stream", None)
        printer = getattr(cli, "_cprint", None)
        if flush is None or printer is None:
            return False
        if hasattr(flush, _MARK):
            setattr(flush, _MARK, self)  # this plugin instance's footers from now on
            return True

        @functools.wraps(flush)
        def flushed(repl, *args, **kwargs):
            result = flush(repl, *args, **kwargs)
            try:
                holder = getattr(flushed, _MARK)
                agent = getattr(repl, "agent", None)
                session = getattr(agent, "session_id", None) or getattr(repl, "session_id", "")
                footer = holder.take(session)
                if footer and getattr(repl, "_stream_box_opened", False):
                    printer("\n" + footer)
            except Exception:  # never let the footer break the REPL
                log.debug("the sources footer could not be printed under a streamed answer", exc_info=True)
            return result

        setattr(flushed, _MARK, self)
        owner._flush_stream = flushed
        return True
