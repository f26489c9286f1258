"""What every fuzz target shares: running one under atheris, and the repository on sys.path.

A target module defines `test_one_input(data: bytes)` (raises only on a real bug) and `seeds()`
(a starting corpus). It imports without atheris, so tests/test_fuzz_regressions.py can replay
saved inputs through the very same function.
"""

from __future__ import annotations

import contextlib
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


# Coverage is collected from these only: instrumenting everything loaded (numpy, sqlite wrappers,
# ~11k functions) cost a minute and a half of every run before the first input.
INSTRUMENTED = ["hermes_kb", "pathspec", "docx", "html", "_markupbase"]


def fuzzing() -> bool:
    main = getattr(sys.modules.get("__main__"), "__file__", "") or ""
    return os.path.basename(main).startswith("fuzz_")


def instrumented():
    """Wrap a target's imports: under the fuzzer they are instrumented; replayed by pytest, not."""
    if not fuzzing():
        return contextlib.nullcontext()
    import atheris

    return atheris.instrument_imports(include=INSTRUMENTED)


def fuzz_main(test_one_input) -> None:
    """`python fuzz/fuzz_x.py [libFuzzer flags] [corpus dirs]`: coverage-guided."""
    import atheris

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
