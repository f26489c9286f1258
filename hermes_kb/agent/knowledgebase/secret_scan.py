"""Keep secrets (keys, tokens, passwords, credentials in URLs and headers) out of the index.

Three mechanisms, each measured against a corpus of real shapes and one of
look-alikes that must survive (tests/knowledgebase/test_secret_scan.py, figures in
docs/security.md):

- **Shapes**: tokens that announce themselves by a prefix or a structure. The
  catalogue of Yelp's detect-secrets (cloud keys, GitHub, Slack, Stripe...)
  plus the shapes it lacks (JWTs, Google, Anthropic, HuggingFace, OpenAI
  project keys, Vault, DigitalOcean...). Every match is extended to the end of
  its token, so a key longer than a detector's fixed length is removed whole.
- **Places**: a secret is where a credential goes, whatever its characters:
  the password of a URL (`scheme://user:password@host`, any punctuation, no
  user needed), an `Authorization:` header's credentials, and the value of a
  key named like a credential (`password=`, `Pwd=` in connection strings,
  `"refresh_token": "..."`, `token: ...` in a kubeconfig). Values are checked
  before they are taken: references (`$VAR`, `${{ secrets.X }}`, `<token>`),
  placeholders, code (`password=password`, `token = get_token()`) and bare
  numbers (`max_tokens: 512`) are not secrets.
- **Files** that hold credentials by convention (histories, `.my.cnf`,
  `.vault-token`, cookies...) are never read: scanner.SECRET_FILES.

detect-secrets' keyword and entropy detectors are not used: over whole
documents they flag ordinary prose and code far too often.

A secret is overwritten in place with a label of the same length, so every
offset, line number and page boundary of the document stays true, and what is
stored, embedded (perhaps by a remote service) or read back never holds it.
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from typing import Callable

import re2

# detect-secrets' plugins, by module and class. Importing them pulls in `requests` (~110 ms, a quarter
# of a cold keyword search, which never redacts), so they load with the first redaction.
# BasicAuthDetector is replaced by URL_CREDENTIALS below: it missed passwords with punctuation.
PLUGINS = (
    ("aws", "AWSKeyDetector"), ("azure_storage_key", "AzureStorageKeyDetector"), ("discord", "DiscordBotTokenDetector"),
    ("github_token", "GitHubTokenDetector"), ("gitlab_token", "GitLabTokenDetector"), ("mailchimp", "MailchimpDetector"),
    ("npm", "NpmDetector"), ("openai", "OpenAIDetector"), ("pypi_token", "PypiTokenDetector"),
    ("sendgrid", "SendGridDetector"), ("slack", "SlackDetector"), ("square_oauth", "SquareOAuthDetector"),
    ("stripe", "StripeDetector"), ("telegram_token", "TelegramBotTokenDetector"), ("twilio", "TwilioKeyDetector"),
)
_LOOKAROUND_OR_LONG_REPEAT = re.compile(r"\(\?[!=<]|\{\d*,?\d{4,}\}")
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_\-+/=]")  # base64 too: a key data block is one token
MIN_SECRET_GROUP = 8  # a capture group this long is the secret itself (not a prefix such as "ghp")


def _linear(pattern: re.Pattern):
    """The pattern compiled for RE2, which runs in linear time: some detect-secrets patterns
    (`//.+/:_authToken=`, `sk-[...]*...T3BlbkFJ`) backtrack quadratically in Python's engine, so one
    80 KB line of slashes took 22 s. Patterns RE2 cannot express (lookarounds, repeats over 1000)
    are all anchored on a literal prefix with bounded repeats, and stay with `re`."""
    if _LOOKAROUND_OR_LONG_REPEAT.search(pattern.pattern):
        return pattern
    return re2.compile(("(?i)" if pattern.flags & re.IGNORECASE else "") + pattern.pattern)


@dataclass(frozen=True)
class Detector:
    kind: str
    pattern: object  # re2 or re, compiled
    group: int = -1  # the secret's capture group; -1: the last long one (detect-secrets' convention)
    whole_token: bool = True  # extend the match to the end of its token
    accept: Callable[[str, str], bool] | None = None  # (secret, whole match) -> is it one


# --- values: what a credential's place holds when it is a secret ----------------------------------
_REFERENCE = re.compile(r"^(?:\$|%|\{|<|@|#|~|\*+$|\.\.\.|…)")
_PLACEHOLDER_WORDS = frozenset(
    "password passwd pass pwd secret token key apikey api_key none null nil true false changeme example redacted "
    "undefined required optional string str bytes int env self value mypassword yourpassword placeholder hidden "
    "masked xxx".split())
_CODE_WORD = re.compile(r"^[A-Za-z_][A-Za-z_.]*$|^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # an identifier, an attribute chain
_PATH = re.compile(r"^(?:/|~/|\./|[A-Za-z]:\\)[\w.\-]+[/\\]")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # GITHUB_TOKEN: names a variable
_PLACEHOLDER_HINT = re.compile(r"(?i)your|example|placeholder|dummy|fake|sample|here$|^x{3,}|\*{3,}")


def _plausible(value: str, quoted: bool, min_length: int) -> bool:
    if len(value) < min_length or _REFERENCE.match(value) or value.lower() in _PLACEHOLDER_WORDS:
        return False
    if len(set(value)) <= 2 or _PLACEHOLDER_HINT.search(value) or _ENV_NAME.match(value):
        return False
    if _PATH.match(value):
        return False  # PWD: /home/me/project
    if value.isdigit():
        return False  # max_tokens: 512, a vocabulary's "password": 20786
    if not quoted and _CODE_WORD.match(value):
        return False  # password=password, token = self.token, api_key: str
    return True


def _password_value(value: str, match: str) -> bool:
    return _plausible(value.lstrip("\"'"), value[:1] in "\"'", 4)


def _token_value(value: str, match: str) -> bool:
    bare = value.lstrip("\"'")
    if not _plausible(bare, value[:1] in "\"'", 8):
        return False
    return bool(re.search(r"\d", bare)) or len(bare) >= 16  # a word is not a token; a long run of letters may be


def _credential_value(value: str, match: str) -> bool:
    """A key=value whose key names a credential: passwords are short and plain, tokens are not."""
    key = _KEY.match(match).group(1).lower()
    if _ABOUT_A_CREDENTIAL.search(key) or "public" in key:  # publicKeyToken, public_key: published on purpose
        return False
    return (_password_value if re.search(r"pass|pwd", key) else _token_value)(value, match)


def _stated(value: str, match: str) -> bool:
    """Where only a credential can stand (a URL's password, a header's credentials), anything but a
    reference or a placeholder is one, however short or plain."""
    return not (_REFERENCE.match(value) or value.lower() in _PLACEHOLDER_WORDS or _PLACEHOLDER_HINT.search(value))


_KEY_NAME = (r"[A-Za-z0-9_.\-]*(?:passw(?:or)?d|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|"
             r"token|credential|private[_\-]?key|key[_\-]?data|auth[_\-]?key|session[_\-]?key|signing[_\-]?key)")
# A key that names something about a credential, not the credential (password_file, token_count, secret_name).
_NOT_A_VALUE = (r"(?:name|file|path|env|var|id|field|len|length|count|size|type|prompt|url|uri|dir|hash|policy|"
                r"regex|pattern|label|header|limit|max|min|timeout|ttl|expiry|expires|usage|kind|mode|format|"
                r"source|provider|endpoint|scope|style|class|input|ref)s?")
_KEY = re.compile(r"[^A-Za-z0-9_.\-]*([A-Za-z0-9_.\-]+)")
_ABOUT_A_CREDENTIAL = re.compile(r"[_\-.]?" + _NOT_A_VALUE + "$")
_VALUE = r"([\"']?[^\s\"'`,;&(){}\[\]<>|]{1,200})"  # small repeats keep RE2's DFA small; _token_end goes on
_OWN = (
    # Places.
    Detector("URL Credentials", re2.compile(r"(?i)\b[a-z][a-z0-9+.\-]{1,30}://[^\s:@/?#'\"<>]*:([^\s@'\"<>]{1,300})@[\w\[]"),
             group=1, whole_token=False, accept=_stated),
    Detector("Authorization Header", re2.compile(r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
                                                 r"(?:basic|bearer|token|digest|negotiate|apikey|key|sso-key)\s+"
                                                 r"([A-Za-z0-9+/=._~\-:]{1,200})"),
             group=1, accept=_stated),
    Detector("API Key Header", re2.compile(r"(?i)\bx-(?:api-key|auth-token|access-token|api-token|vault-token)[\"']?"
                                           r"\s*[:=]\s*[\"']?([A-Za-z0-9+/=._~\-]{1,200})"),
             group=1, accept=_token_value),
    Detector("Credential", re2.compile(r"(?i)(?:^|[^A-Za-z0-9_.\-])(" + _KEY_NAME + r"s?(?:[_\-][A-Za-z0-9]+)*)[\"']?"
                                       r"[ \t]*(?:=>|:=|=|:)[ \t]*" + _VALUE),
             group=2, accept=_credential_value),
    # Shapes.
    Detector("JSON Web Token", re2.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    Detector("Google API Key", re2.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    Detector("Google OAuth Secret", re2.compile(r"\bGOCSPX-[0-9A-Za-z_\-]{20,}")),
    Detector("Google OAuth Token", re2.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    Detector("Google Refresh Token", re2.compile(r"\b1//0[0-9A-Za-z_\-]{30,}")),
    Detector("Anthropic API Key", re2.compile(r"\bsk-ant-[0-9A-Za-z_\-]{20,}")),
    Detector("OpenAI API Key", re2.compile(r"\bsk-(?:proj|svcacct|admin|None)-[0-9A-Za-z_\-]{20,}")),
    Detector("HuggingFace Token", re2.compile(r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}")),
    Detector("Stripe Key", re2.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}")),
    Detector("GitHub Token", re2.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}")),
    # npm's granular and classic tokens standing alone (detect-secrets' NpmDetector needs an .npmrc line);
    # `npm_config_*` variables and package names hold underscores or are shorter, so they stay.
    Detector("NPM Token", re2.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
    Detector("Vault Token", re2.compile(r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}")),
    Detector("DigitalOcean Token", re2.compile(r"\bdo[opr]_v1_[a-f0-9]{64}")),
    Detector("Shopify Token", re2.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}")),
    Detector("Databricks Token", re2.compile(r"\bdapi[a-f0-9]{32}\b")),
    Detector("Age Secret Key", re2.compile(r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}")),
    Detector("Azure SAS Signature", re2.compile(r"(?i)[?&]sig=([A-Za-z0-9%+/=]{20,300})"), group=1, whole_token=False),
    Detector("AWS Secret Access Key", re2.compile(r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})\b"),
             group=1, whole_token=False),
)


@functools.lru_cache(maxsize=1)
def detector_set() -> tuple[Detector, ...]:
    """detect-secrets' patterns (made linear for RE2), then ours."""
    plugins = [getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name) for module, name in PLUGINS]
    return tuple(Detector(d.secret_type, _linear(p)) for d in plugins for p in d.denylist) + _OWN

# Private keys are whole blocks, not one token: detect-secrets' PrivateKeyDetector knows them by their
# first line only. Its headers (PEM of every kind, PGP, SSH2, PuTTY), plus encrypted PKCS#8, each with
# the line that ends the block; the redaction (and kb_read's line masking) covers header to end.
KEY_BLOCKS: tuple[tuple[re.Pattern, re.Pattern], ...] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"), re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----")),
    (re.compile(r"---- BEGIN SSH2 [A-Z ]*PRIVATE KEY ----"), re.compile(r"---- END SSH2 [A-Z ]*PRIVATE KEY ----")),
    (re.compile(r"PuTTY-User-Key-File-\d+:"), re.compile(r"Private-MAC:[ \t]*[0-9A-Fa-f]*")),
)
PRIVATE_KEY = "Private Key"


@dataclass(frozen=True)
class Redacted:
    text: str
    found: tuple[str, ...]  # secret types, one per secret removed


def _span(match, detector: Detector) -> tuple[int, int]:
    if detector.group >= 0:
        return match.span(detector.group)
    groups = [i for i in range(1, detector.pattern.groups + 1) if match.group(i)]
    if groups and len(match.group(groups[-1])) >= MIN_SECRET_GROUP:
        return match.span(groups[-1])
    return match.span(0)


def _token_end(text: str, end: int) -> int:
    """Past the rest of the token: a key longer than its detector's fixed length is removed whole."""
    limit = min(len(text), end + 4096)
    while end < limit and _TOKEN_CHAR.match(text, end):
        end += 1
    return end


def _label(kind: str, original: str) -> str:
    """Same length as the secret, newlines kept, so offsets and line numbers do not move. The tag is
    whole or absent (a bracket cut in half reads as text): `[REDACTED kind]`, `[REDACTED]` or stars."""
    tag = next((t for t in (f"[REDACTED {kind}]", "[REDACTED]") if len(t) <= len(original)), "")
    filler = tag + "*" * (len(original) - len(tag))
    return "".join("\n" if c == "\n" else f for c, f in zip(original, filler))


def secret_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every secret found, unsorted, possibly overlapping."""
    spans: list[tuple[int, int, str]] = []
    for detector in detector_set():
        for match in detector.pattern.finditer(text):
            start, end = _span(match, detector)
            if end <= start:
                continue
            if detector.accept is not None and not detector.accept(text[start:end], match.group(0)):
                continue
            if detector.group >= 0 and text[start:start + 1] in "\"'":
                if text[end:end + 1] != text[start] and end - start <= 200:
                    continue  # an opening quote not closed after one word: prose ("must be 8 characters")
                start += 1  # a quoted value: the quotes stay
            spans.append((start, _token_end(text, end) if detector.whole_token else end, detector.kind))
    for begin, finish in KEY_BLOCKS:
        for match in begin.finditer(text):
            end = finish.search(text, match.end())
            spans.append((match.start(), end.end() if end else len(text), PRIVATE_KEY))
    return spans


def redact(text: str) -> Redacted:
    spans = secret_spans(text)
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
