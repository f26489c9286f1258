"""One text analyzer for every keyword path: the keyword copy, FTS5, PostgreSQL and the query.

Like Lucene's `Analyzer`, a tokenizer and a chain of filters, the same at index
and at query time:

1. **Normalise**: NFKC (full-width letters, ligatures, half-width kana) and
   case folding (`ß` -> `ss`, final sigma).
2. **Segment by script.** Scripts written with spaces give words (letters,
   combining marks and digits together: `हिंदी` is one word, not four
   pieces cut at its vowel signs). Han, Hiragana, Katakana and Hangul, written
   without spaces, give overlapping character bigrams (Lucene's
   `CJKBigramFilter`: `数据库迁移` -> `数据 据库 库迁 迁移`); Thai, Lao,
   Khmer and Myanmar give bigrams of grapheme clusters (a consonant with its
   vowel signs and tone marks), so no mark is ever split from its letter. A
   run of one character or cluster is its own term.
3. **Fold** Latin diacritics (`café` -> `cafe`, as FTS5's unicode61 did) and
   Arabic harakat and tatweel; other scripts keep their marks.
4. **Stem** with Snowball (PyStemmer), by script where the script names the
   language (Cyrillic: Russian; Arabic script: Arabic; Greek; Devanagari:
   Hindi; Tamil; Armenian) and, for Latin script, by the chunk's language
   (`chunk_language`, py3langid restricted to the Latin-script languages
   Snowball stems; English keeps the original Porter stemmer the index
   always used).

Index side and query side agree by construction: each index records the
languages its chunks were stemmed in, and a query word's terms are its stems
in each of them (`query_groups`), so whichever language a chunk was detected
as, its term is among them; every other script is analysed identically on
both sides. (Stemming the query in every language instead cost Spanish
keyword nDCG@10 0.014: other languages' stems collide with the index's words.) Changing anything here changes
`ANALYZER`, which is part of each index's signature: an index written with
another analyzer is re-analysed from its stored chunk text (never re-embedded).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Sequence

import regex

ANALYZER = "kb-analyzer-3"
ENGLISH = "porter"  # what every index used before languages: English scores stay as they were

# Scripts as character classes, shared with the chunker's size estimate: ideographs and kana (with
# their iteration and length marks), written without spaces and read a character at a time; the
# Southeast Asian scripts, without spaces too, read by grapheme cluster.
IDEOGRAPHIC = r"\p{Han}\p{Hiragana}\p{Katakana}\u3005\u30fc\u309d\u309e\u30fd\u30fe"
CLUSTERED = r"\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_SEGMENTED = IDEOGRAPHIC + r"\p{Hangul}"  # Hangul is spaced, but segmented into bigrams like the others
_TOKEN = regex.compile(
    rf"(?P<cjk>[{_SEGMENTED}]+)|(?P<sea>[{CLUSTERED}]+)|(?P<word>[[\p{{L}}\p{{M}}\p{{N}}]--[{_SEGMENTED}{CLUSTERED}]]+)",
    regex.V1)
_ASCII_WORD = regex.compile(r"[a-z0-9]+")
_ARABIC_MARKS = regex.compile(r"[\u0640\u064b-\u065f\u0670\u06d6-\u06ed]")  # tatweel, harakat, Quranic marks
_LATIN_MARKS = regex.compile(r"(?<=\p{Latin})\p{Mn}+")

# The script of a word's first letter -> its Snowball stemmer; Latin is the chunk's language.
_SCRIPT_STEMMERS = (
    (regex.compile(r"\p{Cyrillic}"), "russian"), (regex.compile(r"\p{Arabic}"), "arabic"),
    (regex.compile(r"\p{Greek}"), "greek"), (regex.compile(r"\p{Devanagari}"), "hindi"),
    (regex.compile(r"\p{Tamil}"), "tamil"), (regex.compile(r"\p{Armenian}"), "armenian"),
)
_LATIN = regex.compile(r"[\p{Latin}\p{N}]")
# py3langid's code -> Snowball's name, for the languages written in Latin script that Snowball stems.
LATIN_LANGUAGES = {
    "en": ENGLISH, "de": "german", "es": "spanish", "fr": "french", "it": "italian", "pt": "portuguese",
    "nl": "dutch", "sv": "swedish", "no": "norwegian", "da": "danish", "fi": "finnish", "hu": "hungarian",
    "ro": "romanian", "tr": "turkish", "id": "indonesian", "ca": "catalan", "eu": "basque", "cs": "czech",
    "pl": "polish", "lt": "lithuanian", "et": "estonian", "ga": "irish",
}
MIN_DETECTED_LETTERS = 40  # shorter Latin text is too little evidence for a language: English (Porter)
MIN_CONFIDENCE = 0.9  # py3langid's probability needed to stem a chunk as other than English


@functools.lru_cache(maxsize=None)
def _stemmer(name: str):
    import Stemmer

    return Stemmer.Stemmer(name)


@functools.lru_cache(maxsize=1)
def _identifier():
    """py3langid's model (~1 s to load, 0.5 ms a chunk), restricted to LATIN_LANGUAGES."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(LATIN_LANGUAGES))
    return identifier


def looks_english(text: str) -> bool:
    """Plain ASCII with English's commonest words in it (no detector needed to say so)."""
    return text.isascii() and _english_looking(text)


def identify(text: str) -> tuple[str, float]:
    """(ISO code, probability) of the Latin-script language the detector hears in `text`, however short."""
    return _identifier().classify(text[:2000])


def chunk_language(text: str) -> str:
    """The Snowball stemmer for this text's Latin-script words: English unless the detector is sure."""
    sample = text[:2000]
    if sum(1 for _ in _LATIN.finditer(sample)) < MIN_DETECTED_LETTERS:
        return ENGLISH
    code, probability = _identifier().classify(sample)
    return LATIN_LANGUAGES.get(code, ENGLISH) if probability >= MIN_CONFIDENCE else ENGLISH


def _bigrams(units: list[str]) -> list[str]:
    return units if len(units) < 2 else [a + b for a, b in zip(units, units[1:])]


def _fold(word: str) -> str:
    if word.isascii():
        return word
    if _ARABIC_MARKS.search(word):
        word = _ARABIC_MARKS.sub("", word)
    decomposed = unicodedata.normalize("NFD", word)
    if _LATIN_MARKS.search(decomposed):
        word = unicodedata.normalize("NFC", _LATIN_MARKS.sub("", decomposed))
    return word


def _script_stemmer(word: str, latin: str) -> str | None:
    for pattern, name in _SCRIPT_STEMMERS:
        if pattern.match(word):
            return name
    return latin if _LATIN.match(word) else None


def _normalised(text: str) -> str:
    return text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()


def tokens(text: str, latin: str = ENGLISH) -> list[str]:
    """The terms of `text` in order (phrases and FTS5 need the order); Latin words stemmed as `latin`."""
    text = _normalised(text)
    if text.isascii():  # most code and English prose: one regex, one C stemming call
        return [term for term in _stemmer(latin).stemWords(_ASCII_WORD.findall(text)) if term]
    out: list[str] = []
    pending: dict[str, list[int]] = {}  # stemmer -> positions in `out` of words it stems
    for match in _TOKEN.finditer(text):
        kind, run = match.lastgroup, match.group()
        if kind == "cjk":
            out.extend(_bigrams(list(run)))
        elif kind == "sea":
            out.extend(_bigrams(regex.findall(r"\X", run)))
        else:
            word = _fold(run)
            stemmer = _script_stemmer(word, latin)
            if stemmer is not None:
                pending.setdefault(stemmer, []).append(len(out))
            out.append(word)
    for stemmer, positions in pending.items():
        for position, stem in zip(positions, _stemmer(stemmer).stemWords([out[p] for p in positions])):
            out[position] = stem
    return [term for term in out if term]  # Porter stems "s" to nothing


def surface_words(text: str) -> list[str]:
    """What a user typed as words, before bigrams and stems: `数据库迁移`, `हिंदी`, `divide_line` -> divide, line."""
    return [match.group() for match in _TOKEN.finditer(_normalised(text))]


def query_groups(text: str, languages: Iterable[str] = (ENGLISH,)) -> list[list[str]]:
    """What a chunk must hold to hold `text`: one group per word, the chunk holding at least one
    term of each. A Latin-script word's group is its stems under each of `languages` (the languages
    an index's chunks were stemmed in: whichever a chunk was detected as, its term is among them);
    a word of any other script has its one term, and each bigram of a CJK or Thai run is a group."""
    latin = tuple(dict.fromkeys(languages)) or (ENGLISH,)
    groups: list[list[str]] = []
    for word in surface_words(text):
        if _LATIN.search(word):
            groups.append(list(dict.fromkeys(term for name in latin for term in tokens(word, name))))
        else:
            groups.extend([term] for term in tokens(word))
    return [group for group in groups if group]


def query_terms(text: str, languages: Iterable[str] = (ENGLISH,)) -> list[str]:
    """Every distinct term of `text`'s groups: what a ranked (OR) search looks up."""
    return list(dict.fromkeys(term for group in query_groups(text, languages) for term in group))


# A query's words that are no evidence of what it asks about (question words, articles, auxiliaries):
# question words are rare in the text that answers them, so their IDF outweighed the words asked about,
# and a Chinese question's answer held 0.6 of its keyword evidence where an English one held 0.9.
# English keeps the list fusion's constants were chosen with; every other language takes stopwords-iso's
# list (58 languages; none for a language it lacks). Dropped on the query side only: the index keeps
# every word, so a quoted phrase still finds "to be or not to be".
ENGLISH_STOPWORDS = frozenset("""
a about above after again all am an and any are as at be because been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers him his
how i if in into is it its itself just me more most my no nor not now of off on once only or other our ours out
over own same she should so some such than that the their theirs them then there these they this those through
to too under until up very was we were what when where which while who whom why will with would you your yours
s t d ll m re ve
""".split())


# Snowball's names -> ISO 639-1, the codes stopwordsiso files its lists under.
_ISO = {name: code for code, name in LATIN_LANGUAGES.items() if name != ENGLISH} | {
    "russian": "ru", "arabic": "ar", "greek": "el", "hindi": "hi", "tamil": "ta", "armenian": "hy"}
IDEOGRAPHIC_STOPWORDS = ("zh", "ja")  # whose words cut a run of Han or kana text (`query_words`)


@functools.lru_cache(maxsize=None)
def stopwords(language: str) -> frozenset[str]:
    """A language's stopwords as `query_words` compares them (normalised and folded like a query word)."""
    if language == ENGLISH:
        return ENGLISH_STOPWORDS
    import stopwordsiso

    code = language if language in IDEOGRAPHIC_STOPWORDS else _ISO.get(language)
    if code is None or not stopwordsiso.has_lang(code):
        return frozenset()
    listed = stopwordsiso.stopwords(code)
    return frozenset(_fold(_normalised(word)) for word in listed)


@functools.lru_cache(maxsize=1)
def _ideographic_stopwords() -> regex.Pattern:
    """The Chinese and Japanese stopwords of two characters or more, longest first, as one pattern (one
    character alone is too often part of a word: 人 in 人口)."""
    words = sorted({w for code in IDEOGRAPHIC_STOPWORDS for w in stopwords(code)
                    if len(w) >= 2 and regex.fullmatch(rf"[{_SEGMENTED}]+", w)}, key=len, reverse=True)
    return regex.compile("|".join(map(regex.escape, words))) if words else regex.compile(r"(?!)")


class AnalysedQuery:
    """One search's query, analysed once by this module's analyzer (the one indexing uses) and handed to
    every keyword path: the keyword copy, FTS5, PostgreSQL's term index, the keyword scale and the
    check of literals all ask it for a word's terms instead of analysing the word again. Indexes may
    have stemmed their chunks in different languages, so terms are kept per set of languages."""

    def __init__(self, text: str, known_languages: Iterable[str] = ()):
        self.text = text
        self.language = query_language(text, known_languages)
        self.words = query_words(text, self.language)
        self._terms: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        self._groups: dict[tuple[str, tuple[str, ...]], list[list[str]]] = {}

    def terms(self, word: str, languages: Iterable[str]) -> list[str]:
        key = (word, tuple(languages))
        if key not in self._terms:
            self._terms[key] = query_terms(word, key[1])
        return self._terms[key]

    def groups(self, text: str, languages: Iterable[str]) -> list[list[str]]:
        key = (text, tuple(languages))
        if key not in self._groups:
            self._groups[key] = query_groups(text, key[1])
        return self._groups[key]


def terms_of(word: str, languages: Iterable[str], query: AnalysedQuery | None = None) -> list[str]:
    """A query word's terms: from the search's analysed query when there is one (a store or copy asked
    directly, as tests and tools do, analyses the word itself)."""
    return query.terms(word, languages) if query is not None else query_terms(word, languages)


def groups_of(text: str, languages: Iterable[str], query: AnalysedQuery | None = None) -> list[list[str]]:
    return query.groups(text, languages) if query is not None else query_groups(text, languages)


def query_words(text: str, latin: str = ENGLISH) -> list[str]:
    """What a query asks about, as distinct surface words: its words less the stopwords of each word's
    language (its script's where the script names one, Cyrillic: Russian; else `latin`, the query's
    Latin-script language), and each run of Han or kana text cut where a Chinese or Japanese stopword
    of two or more characters stands (`数据库是什么` -> `数据库`), pieces of one character dropped.
    Every piece is a substring of the query's run, so its bigrams are among the run's and whatever
    holds the run holds them. All of the words when nothing else is left ("to be or not to be")."""
    words = list(dict.fromkeys(surface_words(text)))
    kept: list[str] = []
    for word in words:
        if _TOKEN.match(word).lastgroup == "cjk":
            pieces = _ideographic_stopwords().split(word)
            kept.extend(pieces if len(pieces) == 1 else [piece for piece in pieces if len(piece) >= 2])
            continue
        language = _script_stemmer(word, latin)
        if language is None or _fold(word) not in stopwords(language):
            kept.append(word)
    return list(dict.fromkeys(kept)) or words


def query_language(text: str, languages: Iterable[str]) -> str:
    """The Latin-script language a query is written in, for its stopwords and the model's trust in it:
    English unless an index searched holds another Latin-script language (`languages`, what the indexes
    recorded) and the detector is sure, so a search of English indexes never loads the detector."""
    if all(name == ENGLISH for name in languages) or (text.isascii() and _english_looking(text)):
        return ENGLISH
    return chunk_language(text)


def index_tokens(text: str, heading: str = "") -> tuple[list[str], list[str], str]:
    """(text terms, heading terms, the stemmer of its Latin words) of one chunk: its language's."""
    latin = ENGLISH if text.isascii() and _english_looking(text) else chunk_language(heading + "\n" + text)
    return tokens(text, latin), tokens(heading, latin), latin


def languages_of(value: str | None) -> tuple[str, ...]:
    """An index's recorded languages (meta `languages`: names joined by commas), English if none."""
    names = tuple(name for name in (value or "").split(",") if name in _KNOWN)
    return names or (ENGLISH,)


_KNOWN = frozenset(LATIN_LANGUAGES.values())


_COMMON_ENGLISH = frozenset("the and of to in is that for with as are on be by this it from or".split())


def _english_looking(text: str) -> bool:
    """ASCII text with English's commonest words in it: the detector's 0.5 ms is not needed to say so.
    (German, Spanish or Dutch in plain ASCII lacks them, and goes to the detector.)"""
    words = _ASCII_WORD.findall(text[:2000].lower())
    return not words or sum(w in _COMMON_ENGLISH for w in words) >= max(2, len(words) // 20)


_CODE_LINE = regex.compile(
    r"^\s*(?:(?:def|class|return|import|from|if|elif|else|for|while|try|except|with|raise|yield|async|await|"
    r"function|const|let|var|public|private|protected|static|fn|func|package|using|namespace|switch|case)\b"
    r"|#include|@\w|//|/\*|\*/)|[{};]\s*$|\)\s*(?:->\s*[^:]+)?:\s*$|^\s*[\w.\[\]]+\s*[-+*/]?=\s*\S")
MIN_CODE_LINES = 3


def looks_like_code(text: str) -> bool:
    """Program source by its lines (keywords, braces, assignments, signatures), whatever the file's name:
    a function pasted into notes is code, an essay about Python is not. At least 40% of 3+ lines."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < MIN_CODE_LINES:
        return False
    return sum(1 for line in lines if _CODE_LINE.search(line)) >= 0.4 * len(lines)


def term_spans(text: str, words: Iterable[str], languages: Sequence[str] = ()) -> list[tuple[int, int, str]]:
    """Where `text` holds the query `words`, as the keyword search sees them: (start, end, term) in
    `text`'s own offsets. The same tokenizer runs on each of `text`'s runs, in the text's language
    (as `index_tokens` would stem it), so a highlighted word is one the search matched: `indexes`
    for "index", the bigram `迁移` inside `数据库迁移`, a Thai cluster whole. `languages`: those its
    index recorded (Store.latin_languages); when there is one, every chunk was stemmed in it and the
    detector (0.4 s to load: most of a cold keyword search) is not needed."""
    if len(languages) == 1:
        latin = languages[0]
    else:
        latin = ENGLISH if text.isascii() and _english_looking(text) else chunk_language(text)
    wanted = {term for word in words for term in tokens(word, latin)}
    if not wanted:
        return []
    spans: list[tuple[int, int, str]] = []
    for match in _TOKEN.finditer(text):
        kind, run, start = match.lastgroup, match.group(), match.start()
        if kind == "word":
            terms = tokens(run, latin)
            if terms and terms[0] in wanted:
                spans.append((start, match.end(), terms[0]))
            continue
        units = list(run) if kind == "cjk" else regex.findall(r"\X", run)
        offsets = [start]
        for unit in units:
            offsets.append(offsets[-1] + len(unit))
        pairs = [(i, i + 1) for i in range(len(units))] if len(units) < 2 else \
            [(i, i + 2) for i in range(len(units) - 1)]
        for first, last in pairs:
            term = _normalised("".join(units[first:last]))
            if term in wanted:
                spans.append((offsets[first], offsets[last], term))
    return _merged(spans)


def _merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Overlapping bigram matches (`数据`, `据库`) as one span; the first term names it."""
    out: list[tuple[int, int, str]] = []
    for start, end, term in spans:
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]), out[-1][2])
        else:
            out.append((start, end, term))
    return out
