#!/usr/bin/env python3
"""Run each fuzz target for a bounded time; keep what crashes it as a regression input.

    fuzz/run.py --seconds 60                 # every target, 60 s each
    fuzz/run.py --seconds 300 --target query

Each target runs under atheris (libFuzzer) in its own process, seeded with its seeds() and every
input already saved under tests/fuzz_regressions/<target>/. A crash, timeout or out-of-memory
input is copied there (tests/test_fuzz_regressions.py replays them all) and the exit status is 1.
One line of figures per target: executions, seconds, new inputs saved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGETS = {"loaders": HERE / "fuzz_loaders.py", "query": HERE / "fuzz_query.py"}
REGRESSIONS = REPO / "tests" / "fuzz_regressions"


def seed_corpus(target: str, corpus: Path) -> None:
    """The target's seeds() plus every saved regression input, written as a libFuzzer corpus."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import fuzz_{target} as t, pathlib\n"
            f"for n, s in enumerate(t.seeds()): pathlib.Path({str(corpus)!r}, f'seed-{{n}}').write_bytes(s)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    saved = REGRESSIONS / target
    if saved.is_dir():
        for path in saved.iterdir():
            if path.is_file() and not path.name.startswith("."):
                shutil.copy(path, corpus / f"saved-{path.name}")


def run_target(target: str, seconds: int, max_len: int, rss_mb: int, timeout: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"kb-fuzz-{target}-"))
    corpus, artifacts = work / "corpus", work / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    seed_corpus(target, corpus)
    command = [sys.executable, str(TARGETS[target]), f"-max_total_time={seconds}", f"-timeout={timeout}",
               f"-rss_limit_mb={rss_mb}", f"-max_len={max_len}", f"-artifact_prefix={artifacts}/",
               "-print_final_stats=1", str(corpus)]
    started = time.monotonic()
    # A hard stop well past max_total_time: a hang inside native code must not hold CI forever.
    try:
        proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, errors="replace",
                              timeout=seconds + timeout + 300)
        output, returncode = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        returncode = -1
    elapsed = time.monotonic() - started
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output) or re.findall(r"Done (\d+) runs", output)
    saved = []
    for artifact in sorted(artifacts.iterdir()):
        data = artifact.read_bytes()
        kind = artifact.name.split("-")[0]  # crash, timeout, oom, leak, slow-unit
        destination = REGRESSIONS / target / f"{kind}-{hashlib.sha1(data).hexdigest()[:16]}"
        destination.parent.mkdir(parents=True, exist_ok=True)
        if not destination.exists():
            destination.write_bytes(data)
        saved.append(str(destination.relative_to(REPO)))
    log = work / "fuzz.log"
    log.write_text(output)
    if returncode != 0 or saved:
        sys.stderr.write(output[-6000:])
    shutil.rmtree(corpus, ignore_errors=True)
    return {"target": target, "executions": int(runs[-1]) if runs else None, "seconds": round(elapsed, 1),
            "exit_code": returncode, "crashes_saved": saved, "log": str(log)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time per target (default 60)")
    parser.add_argument("--target", choices=sorted(TARGETS), action="append",
                        help="only this target (repeatable; default: all)")
    parser.add_argument("--max-len", type=int, default=65536, help="largest generated input in bytes")
    parser.add_argument("--rss-mb", type=int, default=3072, help="libFuzzer memory limit per process")
    parser.add_argument("--timeout", type=int, default=30, help="seconds one input may take")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    results = [run_target(t, args.seconds, args.max_len, args.rss_mb, args.timeout) for t in args.target or sorted(TARGETS)]
    failed = [r for r in results if r["exit_code"] != 0 or r["crashes_saved"]]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(f"{r['target']}: {r['executions']} executions in {r['seconds']} s, exit {r['exit_code']}, "
                  f"{len(r['crashes_saved'])} crashing input(s) saved {r['crashes_saved'] or ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
