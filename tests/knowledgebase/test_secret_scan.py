"""The secret detector against two corpora (tests/knowledgebase/data/secrets/): real shapes that must
be removed whole (the secret between ⟦ ⟧), and look-alikes that must come back unchanged (code
identifiers, hashes, UUIDs, notebook base64, references, placeholders). benchmarks/secret_scan.py
prints the same figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_kb.agent.knowledgebase.secret_scan import redact

CORPUS = Path(__file__).parent / "data" / "secrets"


def positives() -> list[tuple[str, str]]:
    """(line without markers, the secret) per line; `\\n` in a line is a newline."""
    cases = []
    for line in (CORPUS / "positives.txt").read_text(encoding="utf-8").splitlines():
        line = line.replace("\\n", "\n")
        before, _, rest = line.partition("⟦")
        secret, _, after = rest.partition("⟧")
        cases.append((before + secret + after, secret))
    return cases


def lookalikes() -> list[str]:
    return (CORPUS / "lookalikes.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("text,secret", positives(), ids=lambda value: value[:40])
def test_every_shape_is_removed_whole_and_nothing_else_moves(text, secret):
    redacted = redact(text)
    assert redacted.found, text
    start, end = text.index(secret), text.index(secret) + len(secret)
    assert redacted.text[:start] == text[:start] and redacted.text[end:] == text[end:]  # the secret, all of it, only it
    elsewhere = text[:start] + text[end:]
    leaks = [secret[i:i + 8] for i in range(len(secret) - 7)
             if secret[i:i + 8] in redacted.text and secret[i:i + 8] not in elsewhere]
    assert not leaks, leaks


@pytest.mark.parametrize("text", lookalikes(), ids=lambda value: value[:40])
def test_look_alikes_survive(text):
    assert redact(text).text == text


def test_a_label_never_leaves_half_a_bracket():
    for secret in ("ab", "abcdefgh", "abcdefghijk", "x" * 20 + "1"):
        masked = redact(f"postgres://u:{secret}@db/x").text
        label = masked[len("postgres://u:"):-len("@db/x")]
        assert len(label) == len(secret) and label.count("[") == label.count("]")
