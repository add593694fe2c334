"""benchmarks/bench_convert.py runs end to end at a tiny size (a smoke test, issue 37).

The script checks its own copies (every value equal to the source's, stored in
16 MiB shards of the inner chunks and codecs each row names) before timing them;
here it must finish, print each row of each place, the goals as paired ratios (of
times, and of CPU seconds) and the load, and find the two copies of one encoding
the same size (zarr.from_array and zarrext.convert), in both cases (``--case v3``,
``--case v2``: issue 46).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_convert.py"
ROWS = ("zarrext.convert, tensorstore's codecs", "zarrext.convert, conditional", "tensorstore",
        "zarr.from_array", "limit: read the source + encode, in memory",
        "the limit storing its shards' bytes")
GOALS = ("zarrext.convert, tensorstore's codecs / tensorstore ",
         "zarrext.convert, conditional / zarrext.convert, tensorstore's codecs ",
         "zarrext.convert, conditional / zarr.from_array ",
         "zarrext.convert, conditional / limit: read the source + encode, in memory ")


def run_bench(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mib", "4", "--repeat", "1", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_place(out: str, place: str, same_size: tuple[str, str]) -> None:
    """Every row, every goal as a paired ratio, and the two copies of one encoding
    (``same_size``) the same size."""
    section = out.split(f"\n{place}, best of 1\n", 1)
    assert len(section) == 2, out
    lines = section[1].splitlines()
    assert [line.split("  ")[1].strip() for line in lines[1:7]] == list(ROWS), out
    for line, goal in zip(lines[7:11], GOALS, strict=True):
        assert line.startswith(f"  goal: {goal}"), out
        assert re.search(r" [\d.]+ paired \(best [\d.]+; ", line), out
    # the conditional and tensorstore goals again, by the CPU seconds each round took
    assert re.fullmatch(
        r"  cpu, paired by round: zarrext.convert, conditional / zarrext.convert, "
        r"tensorstore's codecs [\d.]+ \(median of 1 rounds\); zarrext.convert, "
        r"tensorstore's codecs / tensorstore [\d.]+ \(median of 1 rounds\)", lines[11]), out
    assert lines[12].startswith("  beside it: convert / the limit storing its shards "), out
    assert lines[13].startswith("  stored: "), out
    listed = lines[13].removeprefix("  stored: ").split(" (the limit's")[0].split("; ")
    sizes = dict(each.rsplit(" ", 2)[:2] for each in listed)
    assert set(sizes) >= {"source", *ROWS[:4]}, out
    # the same codecs and level; zarrext's writers and zarr-python's use different
    # builds of zstd (python-zstandard's, numcodecs'), whose outputs differ a little
    one, other = (float(sizes[label]) for label in same_size)
    assert abs(one - other) <= 0.05 * max(one, other), out
    assert lines[14].startswith("  load average after the rounds: "), out


def test_bench_convert_runs_locally():
    # conditional([zstd]) written by convert and by from_array: the same encoding
    check_place(run_bench("--rows", "local"), "local",
                ("zarrext.convert, conditional", "zarr.from_array"))


def test_bench_convert_runs_the_format_2_case_locally():
    # [bytes, zstd 3] written by convert and by from_array
    check_place(run_bench("--case", "v2", "--rows", "local"), "local",
                ("zarrext.convert, tensorstore's codecs", "zarr.from_array"))


@pytest.mark.slow
def test_bench_convert_runs_on_the_s3_server():
    check_place(run_bench("--rows", "s3"), "s3 (moto on loopback)",
                ("zarrext.convert, conditional", "zarr.from_array"))
