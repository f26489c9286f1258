import os

from hermes_kb.agent.knowledgebase.scanner import scan


def paths(result):
    return [f.rel_path for f in result.files]


def test_builtin_excludes_and_configured_globs(tree):
    root = tree({"a.md": "x", ".git/config": "x", "node_modules/m/index.js": "x", ".venv/lib.py": "x",
                 "__pycache__/a.pyc": "x", "build/out.txt": "x", "notes/draft.tmp": "x", "notes/keep.md": "x"})
    assert paths(scan(root, exclude=("*.tmp",))) == ["a.md", "notes/keep.md"]


def test_nested_gitignore_with_negation(tree):
    root = tree({
        ".gitignore": "*.log\nsecret/\n",
        "app.log": "x",
        "sub/.gitignore": "!important.log\n",
        "sub/important.log": "x",
        "sub/other.log": "x",
        "secret/key.md": "x",
        "readme.md": "x",
    })
    assert paths(scan(root)) == [".gitignore", "readme.md", "sub/.gitignore", "sub/important.log"]


def test_symlink_loop_and_escape_are_not_followed(tree, tmp_path):
    root = tree({"a.md": "x", "sub/b.md": "y"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("z")
    os.symlink(root, root / "sub" / "loop")
    os.symlink(outside, root / "escape")
    os.symlink(outside / "secret.md", root / "secret-link.md")
    result = scan(root)
    assert paths(result) == ["a.md", "sub/b.md"]
    reasons = dict(result.skipped)
    assert "outside" in reasons["escape"] and "outside" in reasons["secret-link.md"]
    assert "sub/loop" in reasons


def test_oversized_file_is_skipped_with_reason(tree):
    root = tree({"small.md": "x", "big.txt": "y" * 2000})
    result = scan(root, max_file_bytes=1000)
    assert paths(result) == ["small.md"]
    assert dict(result.skipped)["big.txt"].startswith("larger than max_file_bytes")


def test_documents_get_their_own_larger_cap(tree, make_kb):
    import pymupdf

    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "The warranty of the pump in Rotterdam runs until March.")
    page.insert_image(page.rect, stream=_noise_png(1200))  # a scan-sized picture makes the file large
    data = pdf.tobytes()
    root = tree({"manual.pdf": data, "notes.md": "z" * len(data)})
    result = scan(root, max_file_bytes=len(data) - 1)  # documents keep their own cap (100 MB by default)
    assert paths(result) == ["manual.pdf"]
    assert dict(result.skipped)["notes.md"].startswith("larger than max_file_bytes")
    result = scan(root, max_file_bytes=len(data) - 1, max_document_bytes=1000)
    assert dict(result.skipped)["manual.pdf"] == f"larger than max_document_bytes ({len(data)} > 1000)"
    kb = make_kb(root, max_file_bytes=len(data) - 1)
    kb.index()
    assert kb.search("pump warranty Rotterdam", mode="keyword").hits[0].path == "manual.pdf"
    assert "Rotterdam" in kb.read("docs/manual.pdf").text  # kb_read applies the same cap


def _noise_png(size: int) -> bytes:
    import numpy as np
    import pymupdf

    pixels = np.random.default_rng(0).integers(0, 255, (size, size, 3), dtype=np.uint8)
    return pymupdf.Pixmap(pymupdf.csRGB, size, size, pixels.tobytes(), False).tobytes("png")


def test_index_file_inside_the_tree_is_ignored(tree):
    root = tree({"a.md": "x", "idx.sqlite": "x", "idx.sqlite-wal": "x", "other.db": "x"})
    assert paths(scan(root, ignore_paths=(root / "other.db",))) == ["a.md"]


# --- issue 14: a bad name or pattern affects only itself ------------------------------------------

from hermes_kb.agent.knowledgebase.scanner import IgnoreRules  # noqa: E402


def test_non_utf8_file_and_directory_names_are_skipped_with_a_reason(tree):
    root = tree({"good.md": "x", "sub/ok.md": "y"})
    raw = os.fsencode(root)
    with open(raw + b"/bad-\xff.md", "wb") as handle:
        handle.write(b"text")
    os.mkdir(raw + b"/dir-\xfe")
    with open(raw + b"/dir-\xfe/inner.md", "wb") as handle:
        handle.write(b"text")
    with open(raw + b"/sub/also-\xc3.md", "wb") as handle:
        handle.write(b"text")
    os.mkdir(raw + b"/node_modules")
    with open(raw + b"/node_modules/x-\xff.js", "wb") as handle:  # ignored anyway: not reported
        handle.write(b"text")
    result = scan(root)
    assert paths(result) == ["good.md", "sub/ok.md"]
    reasons = dict(result.skipped)
    assert reasons == {"bad-\ufffd.md": "file name is not valid UTF-8",
                       "dir-\ufffd": "directory name is not valid UTF-8",
                       "sub/also-\ufffd.md": "file name is not valid UTF-8"}


def test_ignore_rules_treat_undecodable_names_as_ignored(tree):
    rules = IgnoreRules(tree({"a.md": "x"}), allow_secrets=(".env",))
    name = os.fsdecode(b"bad-\xff.md")
    assert rules.ignored(name, False) and rules.excluded(f"sub/{name}") and not rules.allows_secrets(name)


def test_invalid_gitignore_lines_are_dropped_and_reported_once(tree):
    root = tree({
        ".gitignore": "*.log\nfoo\\\n\\\n!\n[z-a]\n",
        "a.md": "x", "app.log": "x",
        "sub/.gitignore": "# fine\n[b-a]*\n!keep.log\n", "sub/keep.log": "x", "sub/b.md": "x",
    })
    result = scan(root)
    assert paths(result) == [".gitignore", "a.md", "sub/.gitignore", "sub/b.md", "sub/keep.log"]
    assert result.skipped == [
        (".gitignore", "line 2 ignored: not a valid pattern ('foo\\\\')"),
        (".gitignore", "line 3 ignored: not a valid pattern ('\\\\')"),
        (".gitignore", "line 4 ignored: not a valid pattern ('!')"),
        (".gitignore", "line 5 ignored: not a valid pattern ('[z-a]')"),
        ("sub/.gitignore", "line 2 ignored: not a valid pattern ('[b-a]*')"),
    ]


def test_invalid_configured_patterns_are_reported_not_fatal(tree):
    root = tree({"a.md": "x", "b.tmp": "x", ".env": "S=1"})
    result = scan(root, exclude=("*.tmp", "[z-a]", "!"), allow_secrets=(".env", "x\\"))
    assert paths(result) == [".env", "a.md"]
    assert result.skipped == [
        ("config: exclude", "pattern 2 ignored: not a valid pattern ('[z-a]')"),
        ("config: exclude", "pattern 3 ignored: not a valid pattern ('!')"),
        ("config: allow_secrets", "pattern 2 ignored: not a valid pattern ('x\\\\')"),
    ]


def test_ignore_rules_keep_their_interface_with_bad_patterns(tree):
    root = tree({".gitignore": "[z-a]\n*.log\n", "a.log": "x"})
    rules = IgnoreRules(root, exclude=("!",), allow_secrets=())
    assert rules.ignored("a.log", False) and rules.excluded("a.log") and not rules.ignored("a.md", False)
    assert [where for where, _ in rules.problems] == ["config: exclude", ".gitignore"]


def test_a_gitignore_too_large_for_one_regex_set_still_applies(tree):
    import random
    import string

    rng = random.Random(1)
    lines = ["".join(rng.choice(string.ascii_letters) for _ in range(15)) + "*" for _ in range(4000)]
    root = tree({".gitignore": "\n".join([*lines, "*.log"]) + "\n", "a.log": "x", "a.md": "x"})
    result = scan(root)
    assert paths(result) == [".gitignore", "a.md"] and result.skipped == []


from hypothesis import given, strategies as st  # noqa: E402

from hermes_kb.agent.knowledgebase.kinds.registry import EXTENSIONS, kind_of  # noqa: E402
from hermes_kb.agent.knowledgebase.scanner import SECRET_FILES  # noqa: E402


@given(st.text(alphabet=".aMdpPyx_", max_size=8))
def test_a_files_kind_follows_its_extension_as_splitext_reads_it(name):
    assert kind_of(name) == EXTENSIONS.get(os.path.splitext(name)[1].lower(), "text")


def test_the_one_match_fast_path_holds_because_every_secret_pattern_is_positive():
    # IgnoreRules matches built-ins, excludes and secrets as one spec first; a negated secret
    # pattern would let that spec pass a path the secret rules alone refuse.
    assert not [pattern for pattern in SECRET_FILES if pattern.startswith("!")]


def test_an_exclude_that_re_includes_a_name_does_not_let_a_secret_through(tmp_path):
    (tmp_path / ".env").write_text("TOKEN=x\n")
    (tmp_path / "keep.md").write_text("kept\n")
    (tmp_path / "drop.log").write_text("dropped\n")
    result = scan(tmp_path, exclude=("*.log", "!.env"))
    assert [f.rel_path for f in result.files] == ["keep.md"]
