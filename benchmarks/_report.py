"""Shared by the benchmarks: a synthetic notes tree, the machine line, tables appended to docs/benchmark-log.md,
--set KEY=VALUE settings."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmark-log.md"  # every run; benchmarks.md keeps the current figures
FIGURES = DOCS.parent / "figures"  # the latest figures of some benchmarks as JSON, drawn by benchmarks/chart.py


def write_notes(root: Path, count: int, folders: int = 100) -> Path:
    """`count` small Markdown notes spread over `folders` sub-folders, as a rescan or watch target."""
    for i in range(count):
        folder = root / f"d{i % folders:03}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i:06}.md").write_text(f"# Note {i}\n\nFile {i} talks about subject {i % 97}.\n")
    return root


def peak_rss_mb(pid: int | str = "self") -> float:
    """VmHWM: this address space's own high-water mark. ru_maxrss would be wrong for a child
    started by fork+exec, since Linux carries the parent's peak across the exec."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_name() -> str:
    """The CPU's model name (speed figures mean nothing without it: AMX or not changed them 3.5x)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# The vector units the model's kernels pick by: without AVX512-BF16 or AMX OpenVINO runs fp32.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """Which of SPEED_FLAGS this CPU has, e.g. `avx2` or `avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        flags = []
    return " ".join(flag for flag in SPEED_FLAGS if flag in flags) or "none of " + "/".join(SPEED_FLAGS)


def machine() -> str:
    return (f"{cpu_name()} ({cpu_flags()}), {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, {platform.system()}")


def report(title: str, columns: list[str], rows: list[list[object]], command: str | None = None,
           write: bool = True) -> None:
    """Print a table and append it, with the machine and the command, to docs/benchmark-log.md."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    Console().print(table)
    if not write:
        return
    command = command or "python " + " ".join(sys.argv)
    lines = [f"\n### {title}\n", f"{time.strftime('%Y-%m-%d')} · {machine()} · `{command}`\n",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    with open(DOCS, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def save_figures(name: str, figures: list[dict]) -> Path:
    """docs/figures/<name>.json: the machine, the command and the figures of the latest run."""
    import json

    FIGURES.mkdir(exist_ok=True)
    path = FIGURES / f"{name}.json"
    path.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": machine(),
                                "command": "python " + " ".join(sys.argv), "figures": figures}, indent=1) + "\n")
    return path


def settings_of(pairs: list[str]) -> dict:
    """A benchmark's `--set KEY=VALUE` options as knowledgebase settings, each value read as YAML."""
    return {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in pairs)}
