"""Keep high-confidence secrets (keys, tokens, credentials in URLs) out of the index.

The patterns come from Yelp's detect-secrets, a maintained catalogue. Only its
detectors that match a secret's own shape are used (cloud access keys,
private key blocks, tokens with known prefixes, user:password@ URLs); its
keyword and entropy detectors flag ordinary prose and code far too often to
run over whole documents.

A secret is overwritten in place with a label of the same length, so every
offset, line number and page boundary of the document stays true, and what
is stored, embedded (perhaps by a remote service) or read back never holds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

DETECTORS = (
    AWSKeyDetector, AzureStorageKeyDetector, BasicAuthDetector, DiscordBotTokenDetector, GitHubTokenDetector,
    GitLabTokenDetector, MailchimpDetector, NpmDetector, OpenAIDetector, PrivateKeyDetector, PypiTokenDetector,
    SendGridDetector, SlackDetector, SquareOAuthDetector, StripeDetector, TelegramBotTokenDetector, TwilioKeyDetector,
)
_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (detector.secret_type, pattern) for detector in DETECTORS for pattern in detector.denylist)
# detect-secrets finds a private key by its header; the secret is the whole block after it.
_KEY_BLOCK_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----")
MIN_SECRET_GROUP = 8  # a capture group this long is the secret itself (not a prefix such as "ghp")


@dataclass(frozen=True)
class Redacted:
    text: str
    found: tuple[str, ...]  # secret types, one per secret removed


def _span(match: re.Match, kind: str, text: str) -> tuple[int, int]:
    if kind == PrivateKeyDetector.secret_type:
        end = _KEY_BLOCK_END.search(text, match.end())
        return match.start(), end.end() if end else len(text)
    groups = [i for i in range(1, (match.re.groups or 0) + 1) if match.group(i)]
    if groups and len(match.group(groups[-1])) >= MIN_SECRET_GROUP:
        return match.span(groups[-1])
    return match.span(0)


def _label(kind: str, original: str) -> str:
    """Same length as the secret, newlines kept, so offsets and line numbers do not move."""
    tag = f"[REDACTED {kind}]"
    filler = (tag + "*" * len(original))[:len(original)] if len(original) >= 10 else "*" * len(original)
    return "".join("\n" if c == "\n" else f for c, f in zip(original, filler))


def redact(text: str) -> Redacted:
    spans: list[tuple[int, int, str]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            start, end = _span(match, kind, text)
            if end > start:
                spans.append((start, end, kind))
    if not spans:
        return Redacted(text, ())
    spans.sort()
    parts, found, cursor = [], [], 0
    for start, end, kind in spans:
        if end <= cursor:
            continue  # inside a secret already removed
        start = max(start, cursor)
        parts.append(text[cursor:start])
        parts.append(_label(kind, text[start:end]))
        found.append(kind)
        cursor = end
    parts.append(text[cursor:])
    return Redacted("".join(parts), tuple(found))
