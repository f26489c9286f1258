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

import re2

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

DETECTORS = (
    AWSKeyDetector, AzureStorageKeyDetector, BasicAuthDetector, DiscordBotTokenDetector, GitHubTokenDetector,
    GitLabTokenDetector, MailchimpDetector, NpmDetector, OpenAIDetector, PypiTokenDetector,
    SendGridDetector, SlackDetector, SquareOAuthDetector, StripeDetector, TelegramBotTokenDetector, TwilioKeyDetector,
)
_LOOKAROUND_OR_LONG_REPEAT = re.compile(r"\(\?[!=<]|\{\d*,?\d{4,}\}")


def _linear(pattern: re.Pattern):
    """The pattern compiled for RE2, which runs in linear time: some detect-secrets patterns
    (`//.+/:_authToken=`, `sk-[...]*...T3BlbkFJ`) backtrack quadratically in Python's engine, so one
    80 KB line of slashes took 22 s. Patterns RE2 cannot express (lookarounds, repeats over 1000)
    are all anchored on a literal prefix with bounded repeats, and stay with `re`."""
    if _LOOKAROUND_OR_LONG_REPEAT.search(pattern.pattern):
        return pattern
    return re2.compile(("(?i)" if pattern.flags & re.IGNORECASE else "") + pattern.pattern)


_PATTERNS = tuple((detector.secret_type, _linear(pattern)) for detector in DETECTORS for pattern in detector.denylist)
# Private keys are whole blocks, not one token: detect-secrets' PrivateKeyDetector knows them by their
# first line only. Its headers (PEM of every kind, PGP, SSH2, PuTTY), plus encrypted PKCS#8, each with
# the line that ends the block; the redaction (and kb_read's line masking) covers header to end.
KEY_BLOCKS: tuple[tuple[re.Pattern, re.Pattern], ...] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"), re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----")),
    (re.compile(r"---- BEGIN SSH2 [A-Z ]*PRIVATE KEY ----"), re.compile(r"---- END SSH2 [A-Z ]*PRIVATE KEY ----")),
    (re.compile(r"PuTTY-User-Key-File-\d+:"), re.compile(r"Private-MAC:[ \t]*[0-9A-Fa-f]*")),
)
PRIVATE_KEY = "Private Key"
# An AWS secret access key beside its name, quoted or not (detect-secrets wants quotes).
_AWS_SECRET = re2.compile(r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})\b")
_PATTERNS += (("AWS Secret Access Key", _AWS_SECRET),)
MIN_SECRET_GROUP = 8  # a capture group this long is the secret itself (not a prefix such as "ghp")


@dataclass(frozen=True)
class Redacted:
    text: str
    found: tuple[str, ...]  # secret types, one per secret removed


def _span(match, groups_in_pattern: int) -> tuple[int, int]:
    groups = [i for i in range(1, groups_in_pattern + 1) if match.group(i)]
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
            start, end = _span(match, pattern.groups)
            if end > start:
                spans.append((start, end, kind))
    for begin, finish in KEY_BLOCKS:
        for match in begin.finditer(text):
            end = finish.search(text, match.end())
            spans.append((match.start(), end.end() if end else len(text), PRIVATE_KEY))
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
