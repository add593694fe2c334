"""Run every ``benchmarks/bench_*.py`` script in turn (pass ``--quick`` for small sizes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failures = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        failures += subprocess.call([sys.executable, str(script), *sys.argv[1:]]) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
