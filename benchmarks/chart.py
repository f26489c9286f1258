"""Draw docs/figures/indexing.png and docs/figures/latency.png from the benchmarks' latest figures.

first_index.py and query_latency.py write docs/figures/<name>.json after each
run; this draws them, so the images always show one run's measurements side by
side (before and after, us and the exact-search baseline). Needs matplotlib
(`pip install -e '.[bench]'`).

    python benchmarks/chart.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import FIGURES  # noqa: E402


def load(name: str) -> dict | None:
    path = FIGURES / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def caption(run: dict) -> str:
    return f"{run['date']} · {run['machine']}\n{run['command']}"


def draw_indexing(run: dict, plt) -> Path:
    """Per corpus: chunks/s and seconds until every file is keyword-searchable, one bar per system."""
    corpora = list(dict.fromkeys(f["corpus"] for f in run["figures"]))
    systems = list(dict.fromkeys(f["system"] for f in run["figures"]))
    by_key = {(f["corpus"], f["system"]): f for f in run["figures"]}
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (("chunks embedded per second (higher is better)", lambda f: f["chunks"] / f["seconds"]),
              ("seconds until every file is keyword-searchable (lower is better)",
               lambda f: f["all_files_s"] if f["all_files_s"] is not None else f["seconds"]))
    width = 0.8 / len(systems)
    for axis, (title, value) in zip(axes, panels):
        for i, system in enumerate(systems):
            values = [value(by_key[c, system]) if (c, system) in by_key else 0 for c in corpora]
            bars = axis.bar([x + i * width for x in range(len(corpora))], values, width, label=system)
            axis.bar_label(bars, fmt="%.1f", fontsize=8)
        axis.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(corpora))], corpora)
        axis.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    figure.suptitle("First index from scratch", fontsize=12)
    figure.text(0.01, 0.01, caption(run), fontsize=7, color="grey")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return save(figure, "indexing.png", plt)


def draw_latency(run: dict, plt) -> Path:
    """p50 of each search mode against the number of chunks, log-log, with the exact numpy scan."""
    figure, axis = plt.subplots(figsize=(7.5, 4.6))
    for search in dict.fromkeys(f["search"] for f in run["figures"]):
        points = sorted((f["chunks"], f["p50_ms"]) for f in run["figures"] if f["search"] == search)
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                  linestyle="--" if "exact" in search or "sqlite-vec" in search else "-", label=search)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("chunks in the index")
    axis.set_ylabel("p50 ms per query, embedding included")
    axis.set_title("Warm query latency against corpus size (k=10)", fontsize=11)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.text(0.01, 0.01, caption(run), fontsize=7, color="grey")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return save(figure, "latency.png", plt)


def save(figure, name: str, plt) -> Path:
    path = FIGURES / name
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main() -> None:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("benchmarks/chart.py needs matplotlib: pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawers = {"first_index": draw_indexing, "query_latency": draw_latency}
    drawn = [drawer(run, plt) for name, drawer in drawers.items() if (run := load(name))]
    if not drawn:
        raise SystemExit(f"No figures under {FIGURES}: run benchmarks/first_index.py or query_latency.py first.")
    for path in drawn:
        print(path)


if __name__ == "__main__":
    main()
