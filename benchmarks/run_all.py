"""Run every ``benchmarks/bench_*.py`` script in turn (pass ``--quick`` for small sizes),
keeping their results in ``benchmarks/results/``, then make the documentation's
performance tables and plots from them (``plots.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from timing import RESULTS_FOLDER

HERE = Path(__file__).resolve().parent


def main() -> int:
    failures = 0
    env = {**os.environ, RESULTS_FOLDER: str(HERE / "results")}
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        failures += subprocess.call([sys.executable, str(script), *sys.argv[1:]], env=env) != 0
    failures += subprocess.call([sys.executable, str(HERE / "plots.py")]) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
