"""The setting a question names ("How do I make a column unique in MySQL?", "... with Node.js?") and how
much of the searched collection is about it: the injection gate's test for a question about another tool.

A documentation collection meets questions about its neighbours: asked of the PostgreSQL manual, "make a
column unique in MySQL" finds the manual's own page on unique indexes, and the relevance model, which
reads the task far more than the setting ("in MySQL" moved its judgement from 0.57 to 0.63), calls it an
answer. What the model does not weigh the collection itself knows: a name it rarely mentions is not its
subject, and a block none of whose passages says it answers the task for something else. The
collection's own subject is exempt however seldom a page repeats it (the manual's pages rarely say
"PostgreSQL", but hundreds do), and so is anything a passage the block could carry mentions in its
text, heading path or file name.

Only a name-shaped setting counts (a capital, a digit, `.`, `+` or `#`: MySQL, Go, C++, Node.js,
Python 3): a plain word there ("in a list", "from my machine") is often said in other words by the page
that answers it, and nothing here tells a lower-case tool's name from an English word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from . import analysis

if TYPE_CHECKING:
    from .retriever import Hit, SearchSource

# The setting of a how-to question: its last words, after a preposition that names the tool, language or
# system a task is done in ("in", "with", "from", "using", "via"), an article allowed, a version number
# after it. Not "on": that names where it runs ("replication on Ubuntu?", "the locale on macOS?"), which
# the page answering the task seldom names. Read in the question's last TAIL characters only: a setting
# ends it, and a pasted page must cost nothing.
_SETTING = re.compile(r"\b(?:in|with|from|using|via)\s+(?:(?:a|an|the|my|your|our|this|that)\s+)?"
                      r"(?P<name>[\w.+#-]+?)(?:\s+v?\d[\w.]*)?[\s.!]*\?\s*$", re.IGNORECASE)
TAIL = 160
# Under this share of the searched passages, a name is not what the collection is about: each of the
# manual's own subjects (PostgreSQL, SQL, psql) is in far more; a neighbour named in passing, far fewer.
FOREIGN_SHARE = 0.02


@dataclass(frozen=True)
class NamedSetting:
    """A question's named setting: the name as typed, its rarest word in the searched indexes, and the
    share of their passages that hold that word."""
    name: str
    word: str
    share: float

    @property
    def foreign(self) -> bool:
        return self.share < FOREIGN_SHARE

    def held_by(self, hit: Hit) -> bool:
        """Whether the passage (its text, heading or file name) says the name's rarest word, as keyword
        search reads words (stemmed in the passage's language)."""
        text = f"{hit.path}\n{hit.heading or ''}\n{hit.text}"
        return bool(analysis.term_spans(text, [self.word], hit.languages))

    def shuts(self, hits: Sequence[Hit], block_size: int) -> bool:
        """The gate's test: the name is foreign to the collection and none of the passages a block could
        carry (the first `block_size`) says it."""
        return self.foreign and not any(self.held_by(hit) for hit in hits[:block_size])

    def to_dict(self) -> dict:
        return {"name": self.name, "word": self.word, "share": round(self.share, 5), "foreign": self.foreign}


def setting_name(question: str) -> str | None:
    """The name a question ends on as its setting, when it is shaped like a name."""
    found = _SETTING.search(question.strip()[-TAIL:])
    if found is None:
        return None
    name = found.group("name").strip(".-")
    if not any(c.isalpha() for c in name):
        return None  # a year or a version is not a name
    shaped = any(c.isupper() or c.isdigit() for c in name) or bool(set(name) & set(".+#"))
    return name if shaped else None


def named_setting(query: analysis.AnalysedQuery, sources: Sequence[SearchSource]) -> NamedSetting | None:
    """The setting an English question names and how common its rarest word is across `sources`; None
    for any other query, and where no index has passages."""
    if query.language != analysis.ENGLISH:
        return None
    name = setting_name(query.text)
    words = analysis.surface_words(name) if name else []
    if not words:
        return None  # most searches: no index is asked anything
    total, held = 0, [0] * len(words)
    for source in sources:
        keywords = source.keyword_index()
        total += keywords.count
        for i, frequency in enumerate(keywords.document_frequencies(words, source.languages, query)):
            held[i] += frequency
    if not total:
        return None
    rarest = min(range(len(words)), key=held.__getitem__)
    return NamedSetting(name, words[rarest], held[rarest] / total)
