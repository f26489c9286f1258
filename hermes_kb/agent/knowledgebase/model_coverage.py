"""How much of a text an embedding model can represent, from its own tokenizer.

A WordPiece or SentencePiece model that never learned a script still embeds
it, into near-random vectors: all-MiniLM-L6-v2 spells Russian and Arabic out
letter by letter and maps most Chinese characters to [UNK]. Measured on
XQuAD's questions, the share of word pieces that are neither [UNK] nor a
lone letter of an alphabetic script: English 0.97, German 0.88, Spanish
0.91, Russian 0.08, Arabic 0.02, Chinese 0.09 (0.68 of its pieces are
[UNK]). Fusion (retriever.trust) weighs the vector side by it. A Han, kana
or Hangul character alone is a meaningful piece (multilingual models split
Chinese into characters on purpose), so only [UNK] counts against those.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import regex

from .analysis import ENGLISH

log = logging.getLogger(__name__)

_ALPHABETIC_LETTER = regex.compile(r"^(?:##|▁)?([\p{L}--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]])$", regex.V1)
_WORDS = regex.compile(r"[\p{L}\p{N}]")
_COMMON_ONE_LETTER = frozenset("aiouy")  # English (and Romance) words of one letter are words, not fallbacks


class TokenizerCoverage:
    """Coverage from a model folder's tokenizer.json (what the model itself tokenizes with)."""

    def __init__(self, tokenizer_file: Path, trained_language: str | None = None):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=512)
        self._unknown = {token for token in ("[UNK]", "<unk>", "<UNK>") if self._tokenizer.token_to_id(token) is not None}
        self._trained_language = trained_language

    def __call__(self, text: str, language: str = ENGLISH) -> float:
        """Share of the text's word pieces the model knows: 1.0 for text with no letters or digits.

        Text in a Latin-script `language` other than the one a model was trained on counts only its
        words the tokenizer has whole: all-MiniLM-L6-v2 knows most pieces of a German question (0.88)
        but learned no German, and keeps 0.38 of its words whole (English 1.00, SciFact's claims 0.77);
        German vector search scores 0.70 against keywords' 0.93 on XQuAD."""
        encoding = self._tokenizer.encode(text[:4000], add_special_tokens=False)
        pieces = [(piece, word) for piece, word in zip(encoding.tokens, encoding.word_ids)
                  if _WORDS.search(piece) or piece in self._unknown]
        if not pieces:
            return 1.0
        unknown = sum(1 for piece, _ in pieces if piece in self._unknown or self._fallback(piece))
        share = 1.0 - unknown / len(pieces)
        if self._trained_language is None or language == self._trained_language:
            return share
        per_word = Counter(word for _, word in pieces)
        whole = sum(1 for piece, word in pieces if per_word[word] == 1 and piece not in self._unknown)
        return share * whole / len(per_word)

    @staticmethod
    def _fallback(piece: str) -> bool:
        match = _ALPHABETIC_LETTER.match(piece)
        return bool(match) and match.group(1).lower() not in _COMMON_ONE_LETTER


def for_model_dir(model_dir: Path | None, trained_language: str | None = None) -> TokenizerCoverage | None:
    """The coverage of a model folder with a tokenizer.json, or None (coverage unknown: full trust);
    `trained_language`: the one language the model learned, where it is known."""
    if model_dir is None or not (model_dir / "tokenizer.json").is_file():
        return None
    try:
        return TokenizerCoverage(model_dir / "tokenizer.json", trained_language)
    except Exception as exc:  # a tokenizer this library cannot read: no evidence, no penalty
        log.info("no coverage estimate for %s: %s", model_dir, exc)
        return None
