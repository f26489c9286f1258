import pytest

from hermes_kb.agent.knowledgebase.chunker import MAX_WINDOWS, VECTOR_WINDOW, chunk_document, estimate_tokens
from hermes_kb.agent.knowledgebase.config import ChunkingConfig
from hermes_kb.agent.knowledgebase.kinds.document import Document

PROSE = "\n\n".join(
    " ".join(f"Sentence {p}.{s} talks about topic {p} with several plain words in it." for s in range(8))
    for p in range(12)
)


def lines_of(text, chunk):
    return text.splitlines()[chunk.start_line - 1:chunk.end_line]


@pytest.mark.parametrize("kind", ["text", "markdown", "python"])
def test_offsets_and_lines_point_back_into_the_source(kind):
    text = PROSE if kind != "python" else "\n\n".join(f"def f{i}(x):\n    return x + {i}\n" * 3 for i in range(40))
    chunks = chunk_document(Document(text, kind), "f.py", ChunkingConfig(80, 15))
    assert len(chunks) > 3
    for chunk in chunks:
        assert text[chunk.start_char:chunk.end_char] == chunk.text
        assert text.count("\n", 0, chunk.start_char) + 1 == chunk.start_line
        assert text.count("\n", 0, chunk.end_char - 1) + 1 == chunk.end_line
        body = "\n".join(lines_of(text, chunk))
        assert chunk.text in body


def test_prose_chunks_fit_and_overlap():
    chunks = chunk_document(Document(PROSE, "text"), "a.txt", ChunkingConfig(80, 15))
    assert all(estimate_tokens(c.text) <= 80 for c in chunks)
    overlapping = sum(1 for a, b in zip(chunks, chunks[1:]) if b.start_char < a.end_char)
    assert overlapping >= len(chunks) // 2
    covered = set()
    for c in chunks:
        covered.update(range(c.start_char, c.end_char))
    assert all(i in covered for i, ch in enumerate(PROSE) if not ch.isspace())


def test_markdown_headings_paths_and_fences():
    fence = "```python\n" + "\n".join(f"value_{i} = compute({i})  # step" for i in range(40)) + "\n```\n"
    text = ("# Guide\n\nIntro paragraph about the guide.\n\n## Install\n\n" + "Install words here. " * 40 +
            "\n\n### Linux\n\n" + fence + "\nAfter the fence.\n\n## Usage\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    chunks = chunk_document(Document(text, "markdown"), "g.md", ChunkingConfig(60, 10))
    headings = [c.heading for c in chunks]
    assert "Guide > Install > Linux" in headings and "Guide > Usage" in headings
    fence_start, fence_end = text.index("```python"), text.index("```\n", text.index("```python") + 3) + 3
    holders = [c for c in chunks if c.start_char <= fence_start < c.end_char]
    assert len(holders) == 1 and holders[0].end_char >= fence_end  # never split inside the fence
    for chunk in chunks:
        assert not (fence_start < chunk.start_char < fence_end)
    table = [c for c in chunks if "| 1 | 2 |" in c.text]
    assert table and table[0].heading == "Guide > Usage" and "## Usage" in table[0].text


def test_code_chunks_carry_context_line():
    body = "\n".join(f"        total += {i}" for i in range(60))
    text = f"import os\n\n\nclass Ledger:\n    def add(self):\n        total = 0\n{body}\n        return total\n\n\ndef helper():\n    return 1\n"
    chunks = chunk_document(Document(text, "python"), "ledger.py", ChunkingConfig(80, 10))
    assert any(c.heading == "# file: ledger.py | class: Ledger | def: add" for c in chunks)
    assert chunks[-1].heading == "# file: ledger.py | def: helper"
    assert chunks[-1].text.startswith("def helper")
    assert chunks[0].embed_text.startswith("# file: ledger.py")


def test_pages_are_recorded():
    pages = ["Page one text. " * 30, "Page two text. " * 30]
    text = "".join(p + "\n\n" for p in pages)
    document = Document(text, "pdf", (0, len(pages[0]) + 2))
    chunks = chunk_document(document, "a.pdf", ChunkingConfig(40, 5))
    assert chunks[0].page == 1 and chunks[-1].page == 2


def test_empty_document_has_no_chunks():
    assert chunk_document(Document("  \n\n", "text"), "e.txt", ChunkingConfig()) == []


def test_plain_text_title_heads_every_chunk():
    text = "Ribosome assembly in yeast\n\n" + " ".join(f"Finding {i} about ribosomes and yeast cells." for i in range(80))
    chunks = chunk_document(Document(text, "text"), "paper.txt", ChunkingConfig(60, 10))
    assert len(chunks) > 3 and all(c.heading == "Ribosome assembly in yeast" for c in chunks)
    assert chunks[-1].embed_text.startswith("Ribosome assembly in yeast\n")
    untitled = chunk_document(Document("no title here, just a long first line that keeps going. " * 10, "text"), "x.txt",
                              ChunkingConfig(60, 10))
    assert all(c.heading == "" for c in untitled)


@pytest.mark.parametrize("size", [200, 2000])
def test_long_chunks_are_embedded_as_windows_of_the_models_training_length(size):
    text = "Notes on topics\n\n" + " ".join(PROSE.split())  # one long paragraph under a title line
    chunks = chunk_document(Document(text, "text"), "a.txt", ChunkingConfig(size, 30))
    assert all(chunk.windows for chunk in chunks if estimate_tokens(chunk.text) > 1.5 * VECTOR_WINDOW)
    for chunk in chunks:
        texts = chunk.embed_texts
        if not chunk.windows:
            assert texts == [chunk.embed_text]
            continue
        assert 2 <= len(texts) == len(chunk.windows) <= MAX_WINDOWS
        assert all(text.startswith("Notes on topics\n") for text in texts)  # the title stays with every window
        if size == 200:
            assert all(estimate_tokens(chunk.text[s:e]) <= VECTOR_WINDOW for s, e in chunk.windows)
        covered = set()
        for start, end in chunk.windows:
            covered.update(range(start, end))
        assert all(i in covered for i, ch in enumerate(chunk.text) if not ch.isspace())


def test_pieces_are_counted_per_script_so_the_same_text_gets_the_same_chunks():
    """A word with its combining marks is one piece (Hindi, Thai), a Han or kana character is one
    (as the model reads it): the same sentence in three scripts is cut into about as many chunks."""
    assert estimate_tokens("हिंदी भाषा में लिखा गया") == 5  # five words, marks inside them
    assert estimate_tokens("数据库迁移") == 5 and estimate_tokens("データベース") == 6 and estimate_tokens("v2数据库") == 4
    assert estimate_tokens("the database migration") == 3 and estimate_tokens("Größe, café.") == 4
    assert 3 <= estimate_tokens("ภาษาไทยเป็นภาษา") <= 6  # no spaces: about a syllable a piece
    config = ChunkingConfig(chunk_size=120, chunk_overlap=0)
    sentences = {"en": "The migration moves every table to the new database server tonight. ",
                 "hi": "माइग्रेशन आज रात हर तालिका को नए डेटाबेस सर्वर पर ले जाता है। ",
                 "zh": "迁移今晚将每张表移到新的数据库服务器。"}
    counts = {lang: len(chunk_document(Document(text * 60, "text"), "n.txt", config)) for lang, text in sentences.items()}
    assert max(counts.values()) <= 2 * min(counts.values()), counts


def test_text_without_spaces_or_line_breaks_is_cut_between_characters_never_before_a_mark():
    import unicodedata

    thai = "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ" * 30
    for text in (thai, "迁移今晚将每张表移到新的数据库服务器" * 40):
        chunks = chunk_document(Document(text, "text"), "n.txt", ChunkingConfig(60, 0))
        assert len(chunks) > 3 and "".join(c.text for c in chunks) == text
        assert all(not unicodedata.category(c.text[0]).startswith("M") for c in chunks)
