"""Every input a fuzzer ever crashed on, replayed through the same target function.

fuzz/run.py saves a crashing input under tests/fuzz_regressions/<target>/; the fix lands with
it, and this test keeps it fixed. Each target's seed corpus runs too, so the targets themselves
stay importable and green without atheris.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REGRESSIONS = Path(__file__).resolve().parent / "fuzz_regressions"
TARGETS = ("loaders", "query")


def _target(name: str):
    fuzz_dir = str(REPO / "fuzz")
    if fuzz_dir not in sys.path:
        sys.path.insert(0, fuzz_dir)
    return importlib.import_module(f"fuzz_{name}")


def _saved() -> list[tuple[str, Path]]:
    return [(target, path) for target in TARGETS for path in sorted((REGRESSIONS / target).glob("*"))
            if path.is_file() and not path.name.startswith(".")]


@pytest.mark.parametrize(("target", "path"), _saved(), ids=lambda value: getattr(value, "name", value))
def test_saved_input_no_longer_crashes(target, path):
    _target(target).test_one_input(path.read_bytes())


@pytest.mark.parametrize("target", TARGETS)
def test_seed_corpus_passes(target):
    module = _target(target)
    for seed in module.seeds():
        module.test_one_input(seed)


def test_every_saved_input_belongs_to_a_target():
    assert {p.name for p in REGRESSIONS.iterdir() if p.is_dir()} <= set(TARGETS)
