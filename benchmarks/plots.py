"""The documentation's performance tables and plots, from the benchmarks' results.

Reads every ``*.json`` that :func:`timing.save_results` wrote in ``--results`` and
writes, for each, ``<name>.md`` (a table: each row's best and median time, MiB/s, and
the median of its paired ratios to the reference row, with the load) and ``<name>.png``
(each row's rounds as points, the median as a bar, relative to the reference row's
median) into ``--out`` (``docs/assets/performance``, which the Performance page
includes). ``make bench`` runs it after the benchmarks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent


def paired(seconds: dict[str, list[float]], row: str, reference: str) -> float:
    """Median over rounds of ``row``'s time / ``reference``'s time."""
    return statistics.median(a / b for a, b in zip(seconds[row], seconds[reference],
                                                    strict=True))


def table(result: dict[str, Any]) -> str:
    """The markdown table of one result."""
    seconds, reference, mib = result["seconds"], result["reference"], result.get("mib")
    rounds = len(next(iter(seconds.values())))
    lines = [f"**{result['title']}** ({rounds} rounds, interleaved; load average "
             f"{' '.join(f'{x:.1f}' for x in result['load'])})", "",
             f"| row | best | median | MiB/s (best) | time / {reference}'s (paired median) |",
             "|---|---|---|---|---|"]
    for row, times in seconds.items():
        rate = f"{mib / min(times):,.0f}" if mib else ""
        lines.append(f"| {row} | {min(times):.3f} s | {statistics.median(times):.3f} s | "
                     f"{rate} | {paired(seconds, row, reference):.2f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Each row's rounds relative to the reference's median (points), and their median
    (a bar): below 1 is faster than the reference."""
    seconds, reference = result["seconds"], result["reference"]
    base = statistics.median(seconds[reference])
    rows = list(seconds)
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.2))
    for i, row in enumerate(rows):
        relative = [t / base for t in seconds[row]]
        ax.barh(i, statistics.median(relative), color="#9ecae1")
        ax.plot(relative, [i] * len(relative), "o", color="#08519c", markersize=3)
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"time / {reference}'s median (lower is faster)")
    ax.set_title("\n".join(textwrap.wrap(result["title"], 90)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs/assets/performance")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for source in sorted(args.results.glob("*.json")):
        result = json.loads(source.read_text())
        (args.out / f"{source.stem}.md").write_text(table(result))
        plot(result, args.out / f"{source.stem}.png")
        print(f"{source.stem}: {args.out / source.stem}.md, .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
