"""What every fuzz target shares: running one under atheris, and the repository on sys.path.

A target module defines `test_one_input(data: bytes)` (raises only on a real bug) and `seeds()`
(a starting corpus). It imports without atheris, so tests/test_fuzz_regressions.py can replay
saved inputs through the very same function.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def fuzz_main(test_one_input) -> None:
    """`python fuzz/fuzz_x.py [libFuzzer flags] [corpus dirs]`: coverage-guided, our package instrumented."""
    import atheris

    atheris.instrument_all()  # after the target's imports: hermes_kb and what it calls are all loaded
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
