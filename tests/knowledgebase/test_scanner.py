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


def test_index_file_inside_the_tree_is_ignored(tree):
    root = tree({"a.md": "x", "idx.sqlite": "x", "idx.sqlite-wal": "x", "other.db": "x"})
    assert paths(scan(root, ignore_paths=(root / "other.db",))) == ["a.md"]
