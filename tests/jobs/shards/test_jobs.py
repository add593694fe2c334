"""Whole-store jobs (recompress, compact, expand, check --repair) under live writers.

One writer process makes inner-chunk writes into a fixed-slot array while other
processes run a job in a loop. Every write that returned must be in the final
array: the writer's plan is deterministic, so the expected array is the last
write to each chunk. Values identify chunk and version (``chunk * 10000 + step``
for constant chunks; seeded noise otherwise).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import zarrext
from tests.paths import ROOT
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.jobs.shards.inspect import shard_report
from zarrext.sharding.journal import TMP_MARK, journal_pending

GRID = 8  # inner chunks per axis: 4 shards of 4x4 inner chunks of 8x8


def create(path: Path, location: str = "end") -> zarr.Array:
    return zarrext.create_array(
        str(path),
        shape=(GRID * 8, GRID * 8),
        chunks=(32, 32),
        dtype="i4",
        fill_value=-1,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8),
            codecs=[BytesCodec(), ConditionalCodec(codecs=[ZstdCodec(level=1)]), Crc32cCodec()],
            index_location=location,
        ),
        shard_layout="fixed-slot",
        decision="compress_if_smaller",
    )


def plan(writes: int, seed: int = 5) -> list[tuple[int, int]]:
    """The inner chunk each write goes to (a few hot chunks, the rest spread)."""
    rng = np.random.default_rng(seed)
    hot = [(0, 0), (1, 5), (6, 2), (7, 7)]
    out = []
    for step in range(writes):
        if step % 3 == 0:
            out.append(hot[int(rng.integers(len(hot)))])
        else:
            out.append((int(rng.integers(GRID)), int(rng.integers(GRID))))
    return out


def value(chunk: tuple[int, int], step: int) -> np.ndarray:
    """Write ``step`` into ``chunk``: compressible or noise, always telling both apart."""
    ident = (chunk[0] * GRID + chunk[1]) * 10000 + step
    if step % 2:
        noise = np.random.default_rng([chunk[0], chunk[1], step]).integers(0, 1 << 20, (8, 8))
        return (noise.astype("i4") << 10) | (ident % 1024)
    return np.full((8, 8), ident, dtype="i4")


def expected(writes: int, seed: int = 5) -> np.ndarray:
    out = np.full((GRID * 8, GRID * 8), -1, dtype="i4")
    for step, (i, j) in enumerate(plan(writes, seed)):
        out[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8] = value((i, j), step)
    return out


# The writer and the jobs overlap by count, never by time: halfway through its writes
# the writer waits until every job has finished a least number of runs (each job
# keeps its count in a file), so those runs happen between the writer's writes.
WRITER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
import zarrext
from tests.jobs.shards.test_jobs import plan, value
path, writes, least, runs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]


def ran(name):
    try:
        return int(open(name).read() or 0)
    except FileNotFoundError:
        return 0


array = zarrext.open_array(path, shard_layout="fixed-slot", decision="compress_if_smaller")
for step, (i, j) in enumerate(plan(writes)):
    if step == writes // 2:
        while not all(ran(name) >= least for name in runs):
            time.sleep(0.01)  # the jobs run (the test's hang guard bounds this)
    array[i * 8:(i + 1) * 8, j * 8:(j + 1) * 8] = value((i, j), step)
"""

JOB = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import zarr, zarrext
path, job, stop, runs = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
n = 0
while not os.path.exists(stop):
    if job == "recompress":
        decision = ("compress_if_smaller", "never_apply")[n % 2]
        zarrext.recompress(path, decision, workers=2)
    elif job == "compact":
        array = zarr.open_array(path, mode="r+")
        (zarrext.compact if n % 2 == 0 else zarrext.expand)(array)
    else:
        zarrext.check(zarr.open_array(path, mode="r+"), repair=True)
    n += 1
    with open(runs + ".new", "w") as f:
        f.write(str(n))
    os.replace(runs + ".new", runs)
print(n)
"""


def _run_with_jobs(path: Path, writes: int, jobs: list[str], least: int) -> list[int]:
    """``writes`` writes, with each of ``jobs`` running over and over meanwhile, at
    least ``least`` times halfway through the writes; how often each job ran."""
    stop = path.parent / "stop"
    runs = [path.parent / f"runs-{k}" for k in range(len(jobs))]
    runners = [
        subprocess.Popen(
            [sys.executable, "-c", JOB, str(ROOT), str(path), job, str(stop), str(count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for job, count in zip(jobs, runs, strict=True)
    ]
    try:
        proc = subprocess.run(
            [sys.executable, "-c", WRITER, str(ROOT), str(path), str(writes), str(least),
             *map(str, runs)],
            timeout=900,  # a hang guard
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
    finally:
        stop.touch()
    counts = []
    for runner in runners:
        out, _ = runner.communicate(timeout=300)
        assert runner.returncode == 0
        counts.append(int(out.strip()))
    return counts


def _lost(path: Path, writes: int) -> int:
    actual = zarr.open_array(str(path), mode="r")[:]
    want = expected(writes)
    lost = 0
    for i in range(GRID):
        for j in range(GRID):
            region = (slice(i * 8, i * 8 + 8), slice(j * 8, j * 8 + 8))
            lost += not np.array_equal(actual[region], want[region])
    return lost


@pytest.mark.parametrize(
    ("jobs", "writes"),
    [(["recompress"], 120), (["compact"], 120), (["recompress", "compact", "check"], 120)],
    ids=["recompress", "compact", "all"],
)
def test_jobs_lose_no_write(tmp_path: Path, jobs: list[str], writes: int) -> None:
    path = tmp_path / "a"
    create(path)
    counts = _run_with_jobs(path, writes, jobs, least=1)
    assert all(n >= 1 for n in counts), counts  # every job ran while the writer wrote
    array = zarr.open_array(str(path), mode="r")
    assert zarrext.check(array, deep=True) == []
    assert _lost(path, writes) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "jobs", [["recompress"], ["compact"], ["recompress", "compact"]], ids=["rc", "compact", "both"]
)
def test_jobs_lose_no_write_500(tmp_path: Path, jobs: list[str]) -> None:
    path = tmp_path / "a"
    create(path)
    counts = _run_with_jobs(path, 500, jobs, least=3)
    assert all(n >= 3 for n in counts), counts
    assert zarrext.check(zarr.open_array(str(path), mode="r"), deep=True) == []
    lost = _lost(path, 500)
    print(f"jobs {jobs}: {counts} runs, {lost} of {GRID * GRID} chunks lost their last write")
    assert lost == 0


def test_recompress_keeps_fixed_slots(tmp_path: Path) -> None:
    path = tmp_path / "a"
    array = create(path)
    array[:] = expected(40)
    array[:8, :8] = 3  # an update: the chunk moves to the spare area
    assert {s.layout for s in shard_report(array)} == {"fixed-slot"}
    zarrext.recompress(str(path), "compress_if_smaller")
    assert {s.layout for s in shard_report(array)} == {"fixed-slot"}
    want = expected(40)
    want[:8, :8] = 3
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], want)
    # still written in place: a new incompressible chunk goes into its empty slot
    i, j = next((i, j) for i in range(4, 8) for j in range(4, 8) if want[i * 8, j * 8] == -1)
    size = (path / "c" / "1" / "1").stat().st_size
    array[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8] = value((i, j), 1)
    assert (path / "c" / "1" / "1").stat().st_size == size


KILLED = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, zarrext
array = zarrext.open_array(sys.argv[2], shard_layout="fixed-slot", decision="compress_if_smaller")
array[8:16, 8:24] = np.full((8, 16), 4242, dtype="i4")
"""


@pytest.mark.parametrize("point", ["journal", "data", "index", "published"])
@pytest.mark.parametrize("location", ["start", "end"])
def test_killed_writer_then_recompress_then_repair(
    tmp_path: Path, point: str, location: str
) -> None:
    path = tmp_path / "a"
    array = create(path, location)
    array[:] = expected(60)
    env = dict(os.environ, ZARREXT_SHARDING_FAULT=f"{point}=1")
    proc = subprocess.run([sys.executable, "-c", KILLED, str(ROOT), str(path)], env=env)
    assert proc.returncode == -signal.SIGKILL
    assert journal_pending(path / "c" / "0" / "0")
    zarrext.recompress(str(path), "compress_if_smaller")
    zarrext.check(zarr.open_array(str(path), mode="r+"), repair=True)
    assert zarrext.check(zarr.open_array(str(path), mode="r"), deep=True) == []
    actual = zarr.open_array(str(path), mode="r")[:]
    want = expected(60)
    got = actual[8:16, 8:24]
    if point == "published" and (got == 4242).all():  # the new index was out: either is whole
        want[8:16, 8:24] = 4242
    np.testing.assert_array_equal(actual, want)
    assert {s.layout for s in shard_report(array)} == {"fixed-slot"}


RECOMPRESS = r"""
import sys
sys.path.insert(0, sys.argv[1])
import zarrext
while True:
    for decision in ("compress_if_smaller", "never_apply"):
        zarrext.recompress(sys.argv[2], decision, workers=1)
"""


@pytest.mark.slow
def test_sigkill_writers_and_recompress(tmp_path: Path) -> None:
    """kill -9 writers (with fault points) and recompress at random moments."""
    from tests.sharding.test_faults import WORKER, _create, _parse
    from tests.sharding.test_faults import value as fvalue

    rnd = random.Random(7)
    path = tmp_path / "a"
    _create(path, "end")
    exp = np.full((64, 64), -7, dtype="i4")
    kills = 0
    for cycle in range(30):
        env = dict(os.environ)
        if cycle % 3:
            point = ("journal", "data", "index", "published")[rnd.randrange(4)]
            env["ZARREXT_SHARDING_FAULT"] = f"{point}={rnd.choice([0.05, 0.2, 0.5])}"
        log = tmp_path / f"log_{cycle}"
        writer_proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), "fixed-slot", "0", str(cycle), str(log),
             str(ROOT)],
            env=env,
        )
        job = subprocess.Popen([sys.executable, "-c", RECOMPRESS, str(ROOT), str(path)])
        deadline = time.monotonic() + 20
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rnd.uniform(0.0, 0.5))
        for proc in (writer_proc, job):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += proc.returncode == -signal.SIGKILL
        # the documented repair after a killed writer: recompress, then check --repair
        zarrext.recompress(str(path), "compress_if_smaller")
        zarrext.check(zarr.open_array(str(path), mode="r+"), repair=True)
        assert zarrext.check(zarr.open_array(str(path), mode="r"), deep=True) == []
        assert not list(path.rglob("*zarrext-tmp*"))
        actual = zarr.open_array(str(path), mode="r")[:]
        done, inflight = _parse(log)
        for step, row, col in done:
            exp[row * 8 : row * 8 + 8, col * 8 : col * 8 + 16] = fvalue(cycle, 0, step)
        if inflight is not None:
            step, row, col = inflight
            new = fvalue(cycle, 0, step)
            for k in range(2):
                region = (slice(row * 8, row * 8 + 8), slice((col + k) * 8, (col + k + 1) * 8))
                if np.array_equal(actual[region], new[:, k * 8 : k * 8 + 8]):
                    exp[region] = actual[region]
        np.testing.assert_array_equal(actual, exp)
    assert kills >= 30
    print(f"{kills} kills in 30 cycles, 0 lost or corrupt chunks")


@pytest.mark.parametrize("location", ["start", "end"])
def test_no_journal_after_commit_and_fill_deletes_shard(tmp_path: Path, location: str) -> None:
    path = tmp_path / "a"
    array = create(path, location)
    array[:16, :16] = 5
    array[:8, :8] = 6  # an update (the chunk moves)
    assert sorted(p.name for p in (path / "c" / "0").iterdir()) == ["0"]  # no journal
    array[:8, :8] = -1  # the fill value: that inner chunk is removed, the shard stays
    assert (path / "c" / "0" / "0").exists()
    array[:32, :32] = -1  # fill over the whole shard: no shard file, as zarr does
    assert not (path / "c" / "0" / "0").exists()
    assert not list(path.rglob("*zarrext*"))
    array[8:16, 8:16] = 7  # and it comes back on the next write
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[8:16, 8:16], 7)
    array[8:16, 8:16] = -1  # removing the last chunk in a transaction deletes it too
    assert not (path / "c" / "0" / "0").exists()
    assert zarrext.check(zarr.open_array(str(path), mode="r")) == []


def test_check_unsharded_leftovers_and_deep(tmp_path: Path) -> None:
    path = tmp_path / "u"
    array = zarrext.create_array(
        str(path), shape=(32,), chunks=(8,), dtype="i4", fill_value=0,
        serializer=BytesCodec(), compressors=[ConditionalCodec([ZstdCodec()]), Crc32cCodec()],
        decision="compress_if_smaller",
    )
    array[:] = np.arange(32, dtype="i4")
    chunk = path / "c" / "1"
    partial = path / "c" / ("1." + "ab" * 16 + ".partial")  # zarr-python's temp name
    partial.write_bytes(b"x")
    old = time.time() - 3600
    os.utime(partial, (old, old))
    fresh = path / "c" / ("2." + "cd" * 16 + ".partial")
    fresh.write_bytes(b"x")
    ours = path / "c" / ("3" + TMP_MARK + "999999999-abcd")
    ours.write_bytes(b"x")
    data = bytearray(chunk.read_bytes())
    data[-6] ^= 0xFF  # a flipped bit in the payload: only a deep check sees it
    chunk.write_bytes(bytes(data))
    found = {f.key: f for f in zarrext.check(array)}
    assert set(found) == {"c/1", "c/3"}
    assert "stale temporary file" in found["c/1"].problems[0]
    found = {f.key: f for f in zarrext.check(array, deep=True)}
    assert set(found) == {"c/1", "c/3"}
    assert any("chunk (1,) does not decode" in p for p in found["c/1"].problems)
    assert any("checksum" in p for p in found["c/1"].problems)
    result = {f.key: f for f in zarrext.check(array, repair=True, deep=True)}
    assert not partial.exists()
    assert not ours.exists()
    assert fresh.exists()
    assert result["c/3"].ok
    assert not result["c/1"].ok  # the chunk's bytes are gone: said, not hidden
    assert result["c/1"].remaining[0].startswith("chunk (1,) does not decode")
    left = [p for p in result["c/1"].to_json()["problems"] if not p["repaired"]]
    assert [(p["kind"], p["repairable"]) for p in left] == [("undecodable_chunk", False)]


def test_deep_check_names_bad_inner_chunk(tmp_path: Path) -> None:
    path = tmp_path / "a"
    array = create(path, "start")
    array[:] = expected(40)
    shard = path / "c" / "0" / "1"
    index = np.frombuffer(shard.read_bytes()[: 16 * 16], dtype="<u8").reshape(-1, 2)
    flat = int(np.flatnonzero(index[:, 0] != np.uint64(2**64 - 1))[0])
    data = bytearray(shard.read_bytes())
    data[int(index[flat, 0]) + 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert zarrext.check(array) == []  # the index is fine
    (finding,) = zarrext.check(array, deep=True)
    assert finding.key == "c/0/1"
    (problem,) = finding.problems
    i, j = divmod(flat, 4)
    assert f"inner chunk {flat} (chunk {(i, 4 + j)} of the array) does not decode" in problem


RECOMPRESS_UNSHARDED = r"""
import sys
sys.path.insert(0, sys.argv[1])
import zarrext
print("R", flush=True)
while True:
    for decision in ("compress_if_smaller", "never_apply"):
        zarrext.recompress(sys.argv[2], decision, workers=2)
"""


def test_killed_unsharded_recompress_leaves_nothing_after_repair(tmp_path: Path) -> None:
    path = tmp_path / "u"
    array = zarrext.create_array(
        str(path), shape=(128, 128), chunks=(16, 16), dtype="i4", fill_value=0,
        serializer=BytesCodec(), compressors=[ConditionalCodec([ZstdCodec()]), Crc32cCodec()],
        decision="never_apply",
    )
    data = np.random.default_rng(3).integers(0, 50, (128, 128)).astype("i4")
    array[:] = data
    rnd = random.Random(11)
    leftovers = 0
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", RECOMPRESS_UNSHARDED, str(ROOT), str(path)],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # running
        time.sleep(rnd.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        leftovers += len(list(path.rglob(f"*{TMP_MARK}*")))
        zarrext.check(zarr.open_array(str(path), mode="r+"), repair=True)
        assert not list(path.rglob(f"*{TMP_MARK}*"))
        assert not list(path.rglob("*.partial"))
        assert zarrext.check(zarr.open_array(str(path), mode="r"), deep=True) == []
        np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], data)
    print(f"{leftovers} temporary files left by 6 kills, all removed by check --repair")
