"""E-mail: an `.eml` is its subject and sender as a heading, then its text (or HTML) body; attachments
are named, and those of a kind this package reads are indexed beneath it. An `.mbox` is one part per
message."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the email package loads with the first message: ~20 ms every command would pay
    from email.message import EmailMessage

from . import registry
from .document import Document, LoadError, decode_text, newlines, parts
from .html import html_document

MAX_MESSAGES = 20_000
MAX_ATTACHMENT_BYTES = 5_000_000


def _parse_message(data: bytes) -> EmailMessage:
    import email
    import email.policy

    try:
        return email.message_from_bytes(data, policy=email.policy.default)
    except Exception as exc:  # the parser is lenient; a header it still cannot take is this file's skip reason
        raise LoadError(f"unreadable e-mail ({exc})") from None


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except Exception:  # a header the policy cannot parse at all: left out rather than failing the file
        value = ""
    return " ".join(str(value or "").split())


def _body(message: EmailMessage) -> str:
    try:
        part = message.get_body(preferencelist=("plain", "html"))
        if part is None:
            return ""
        content = part.get_content()
    except Exception:  # an unknown charset or a broken transfer encoding
        payload = message.get_payload(decode=True) if not message.is_multipart() else b""
        return decode_text(payload or b"") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    return html_document(content).text if part.get_content_type() == "text/html" else content


def _attachments(message: EmailMessage) -> list[str]:
    """Each attachment named, with its text beneath when its kind is one this package reads (never
    another e-mail: a message nesting messages costs one level of parsing, not many)."""
    from ..loaders import (
        load,  # an attachment is read as a file of its own kind, through the one door
    )

    sections = []
    for part in message.iter_attachments():
        name = " ".join(str(part.get_filename() or "unnamed").split())[:200]
        try:
            payload = part.get_payload(decode=True) or b""
        except Exception:
            payload = b""
        kind = registry.kind_of(name)
        text = ""
        if kind not in ("email", "mbox") and len(payload) <= MAX_ATTACHMENT_BYTES:
            try:
                text = load(payload, kind).text.strip()
            except LoadError:
                text = ""
        sections.append(f"## Attachment: {name} ({len(payload):,} bytes)\n\n{text}\n" if text
                        else f"Attachment: {name} ({len(payload):,} bytes, not indexed)\n")
    return sections


def _message_markdown(message: EmailMessage) -> str:
    subject = _header(message, "Subject") or "(no subject)"
    sender, to, date = _header(message, "From"), _header(message, "To"), _header(message, "Date")
    # The subject and sender head every passage's citation; recipients and date, which made that label a
    # whole header line in every block, are the message's first line instead (still searched).
    heading = f"# {subject}" + (f" (from {sender})" if sender else "")
    sent = " · ".join(part for part in (f"to {to}" if to else "", date) if part)
    body = _body(message).strip()
    return newlines("\n\n".join([heading, *([sent] if sent else []), body, *_attachments(message)]).strip()) + "\n"


def read_email(data: bytes, kind: str) -> Document:
    return Document(_message_markdown(_parse_message(data)), kind)


# An mbox separates messages with a line starting "From " (mboxo/mboxrd). mailbox.mbox reads from a
# path with locking; the file is already in memory, within max_file_bytes, so it is split here.
_MBOX_SEPARATOR = re.compile(rb"^From [^\r\n]*\r?\n", re.M)


def read_mbox(data: bytes, kind: str) -> Document:
    bounds = [m.start() for m in _MBOX_SEPARATOR.finditer(data)]
    if not bounds:
        raise LoadError("not an mbox: no line starting with 'From ' separates messages")
    if len(bounds) > MAX_MESSAGES:
        raise LoadError(f"holds {len(bounds):,} messages, over the {MAX_MESSAGES:,} an mbox may hold here; split it")
    messages = []
    for begin, end in zip(bounds, [*bounds[1:], len(data)]):
        raw = data[begin:end].split(b"\n", 1)[1] if b"\n" in data[begin:end] else b""
        raw = re.sub(rb"^>(>*From )", rb"\1", raw, flags=re.M)  # mboxrd's quoted From lines
        messages.append(_message_markdown(_parse_message(raw)))
    return parts(messages, kind)

