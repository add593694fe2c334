"""benchmarks/bench_blosc_reads.py runs end to end at a tiny size (a smoke test).

The script checks every contender's read against the data before timing; here it
must finish and print, for each chunk size, every contender's rate, zarrext's paired
ratios to tensorstore and zarrs-python, and both decoders' per-chunk times.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_blosc_reads.py"
CONTENDERS = ("zarrext", "tensorstore", "zarrs-python", "zarr-python")


def test_bench_blosc_reads_runs() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mib", "2", "--sides", "64,128", "--repeat", "1"],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT / "benchmarks",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"  \d+x\d+ chunks", line)]
    assert [lines[i].split()[0] for i in starts] == ["64x64", "128x128"], done.stdout
    for i in starts:
        rows = lines[i:i + 8]
        assert [r.split()[0] for r in rows[1:5]] == list(CONTENDERS), done.stdout
        assert re.fullmatch(r"    zarrext, paired median: x tensorstore [\d.]+, "
                            r"x zarrs-python [\d.]+", rows[5]), done.stdout
        assert re.match(r"    one \d+ KiB chunk, numcodecs +: ", rows[6]), done.stdout
        assert re.match(r"    one \d+ KiB chunk, imagecodecs: ", rows[7]), done.stdout
