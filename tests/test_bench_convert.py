"""benchmarks/bench_convert.py runs end to end at a tiny size (a smoke test, issue 37).

The script checks its own copies (every value equal to the source's, stored in
16 MiB shards of 1 MiB conditional([zstd]) inner chunks) before timing them; here it
must finish, print each row of each place and the goal, and find both copies the
same size (zarr.from_array and zarrext.convert write the same encoding).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_convert.py"
ROWS = ("zarrext.convert", "zarr.from_array", "limit: read the source + encode, in memory",
        "the limit storing its shards' bytes")


def run_bench(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mib", "4", "--repeat", "1", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_place(out: str, place: str) -> None:
    section = out.split(f"\n{place}, best of 1\n", 1)
    assert len(section) == 2, out
    lines = section[1].splitlines()
    assert [line.split("  ")[1].strip() for line in lines[1:5]] == list(ROWS), out
    assert lines[5].startswith("  goal: convert / from_array "), out
    assert lines[6].startswith("  beside it: convert / the limit storing its shards "), out
    sizes = re.match(r"  stored: source ([\d.]+) MiB; convert's ([\d.]+) MiB, from_array's "
                     r"([\d.]+) MiB", lines[7])
    assert sizes is not None, out
    assert sizes[2] == sizes[3], out


def test_bench_convert_runs_locally():
    check_place(run_bench("--rows", "local"), "local")


@pytest.mark.slow
def test_bench_convert_runs_on_the_s3_server():
    check_place(run_bench("--rows", "s3"), "s3 (moto on loopback)")
