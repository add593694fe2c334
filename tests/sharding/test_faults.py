"""Writers killed with SIGKILL at random points: shards stay valid and consistent.

Each cycle starts two writer processes on the same shards (disjoint inner chunks),
some with kill points inside the write transaction (``ZARREXT_SHARDING_FAULT``,
seeded per writer), and kills whatever is still running once each writer has
completed a random number of writes (counted in its log, never timed). Every writer logs
``B step`` before and ``E step`` after each write call. Afterwards:

- ``check`` without repair reports and changes no byte;
- after repair (``check --repair`` or opening for writing, alternately) every
  shard validates;
- every chunk whose write returned reads back exactly; a chunk of the one call a
  writer was in when killed reads its previous content or the new one, whole;
  every other chunk reads its previous content (or the fill value).
"""

from __future__ import annotations

import hashlib
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

GRID = 8  # inner chunks per axis (4 shards of 4x4 inner chunks)
INNER = 8
WRITERS = 2

CYCLES = 28  # WRITERS killed in each: 56 kills
HANG_GUARD = 300  # seconds a cycle's writers may take to start and write: a hang guard

WORKER = r"""
import os, random, sys
sys.path.insert(0, sys.argv[6])
import zarrext
from tests.sharding.test_faults import value
path, layout, writer, cycle, log = sys.argv[1:6]
writer, cycle = int(writer), int(cycle)
random.seed(f"{cycle}-{writer}")  # the fault points' draws: the same each run
array = zarrext.open_array(path, shard_layout=layout, decision="compress_if_smaller")
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
os.write(fd, b"R\n")
step = 0
while True:
    row = int(value(cycle, writer, step, pick=4)) * 2 + writer  # writer w owns rows w, w+2..
    col = int(value(cycle, writer, step, pick=4, salt=1)) * 2  # two neighbouring chunks
    os.write(fd, f"B {step} {row} {col}\n".encode())
    array[row * 8:(row + 1) * 8, col * 8:(col + 2) * 8] = value(cycle, writer, step)
    os.write(fd, f"E {step}\n".encode())
    step += 1
"""


def value(cycle: int, writer: int, step: int, pick: int = 0, salt: int = 0) -> np.ndarray:
    """What a writer writes at a step (``pick``: a random int below it instead)."""
    rng = np.random.default_rng([cycle, writer, step, 7 + salt])
    if pick:
        return rng.integers(0, pick)
    kind = step % 3
    if kind == 0:
        return rng.integers(-(1 << 31), 1 << 31, (8, 16), dtype="i4")  # incompressible
    if kind == 1:
        return np.full((8, 16), step, dtype="i4")  # compresses well
    return rng.integers(0, 4, (8, 16)).astype("i4")


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _parse(log: Path) -> tuple[list[tuple[int, int, int]], tuple[int, int, int] | None]:
    done: list[tuple[int, int, int]] = []
    begun: dict[int, tuple[int, int]] = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts[0] == "B" and len(parts) == 4:
            begun[int(parts[1])] = (int(parts[2]), int(parts[3]))
        elif parts[0] == "E" and len(parts) == 2:
            step = int(parts[1])
            done.append((step, *begun.pop(step)))
    inflight = None
    if begun:
        ((step, (row, col)),) = begun.items()
        inflight = (step, row, col)
    return done, inflight


def _completed(log: Path) -> int:
    """Writes a writer's log says it completed (whole lines only)."""
    text = log.read_text() if log.exists() else ""
    return sum(line.startswith("E ") for line in text.splitlines(keepends=True)
               if line.endswith("\n"))


def _create(path: Path, location: str) -> None:
    zarrext.create_array(
        str(path),
        shape=(GRID * INNER, GRID * INNER),
        chunks=(32, 32),
        dtype="i4",
        fill_value=-7,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(INNER, INNER),
            codecs=[BytesCodec(), ConditionalCodec(codecs=[ZstdCodec(level=1)]), Crc32cCodec()],
            index_location=location,
        ),
    )


@pytest.mark.slow
def test_sigkill_writers_at_random_points(tmp_path: Path) -> None:
    rnd = random.Random(20261121)
    arrays = {loc: tmp_path / f"index_{loc}" for loc in ("start", "end")}
    expected = {}
    for loc, path in arrays.items():
        _create(path, loc)
        expected[loc] = np.full((GRID * INNER, GRID * INNER), -7, dtype="i4")
    kills = interrupted = completed = 0
    for cycles in range(CYCLES):
        loc = ("start", "end")[cycles % 2]
        path = arrays[loc]
        layout = "fixed-slot" if cycles % 4 < 3 else "append"
        env = dict(os.environ)
        if cycles % 3:
            point = ("journal", "data", "index", "published")[rnd.randrange(4)]
            env["ZARREXT_SHARDING_FAULT"] = f"{point}={rnd.choice([0.05, 0.2, 0.5])}"
        logs = [tmp_path / f"log_{cycles}_{w}" for w in range(WRITERS)]
        procs = [
            subprocess.Popen(
                [
                    sys.executable, "-c", WORKER,
                    str(path), layout, str(w), str(cycles), str(log), str(ROOT),
                ],
                env=env,
            )
            for w, log in enumerate(logs)
        ]
        # Kill the writers once each has completed a random number of writes (or died
        # at a fault point): wherever the next write is then.
        least = rnd.randrange(1, 12)
        guard = time.monotonic() + HANG_GUARD
        while not all(proc.poll() is not None or _completed(log) >= least
                      for proc, log in zip(procs, logs, strict=True)):
            assert time.monotonic() < guard, "writers hung"
            time.sleep(0.002)
        faulted = [proc.poll() is not None for proc in procs]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait()
            assert proc.returncode == -signal.SIGKILL, proc.returncode
            kills += 1

        # check without repair changes nothing
        before = _digest(path)
        if zarrext.check(zarr.open_array(str(path), mode="r")):
            interrupted += 1
        assert _digest(path) == before

        if cycles % 2:
            zarrext.check(zarr.open_array(str(path), mode="r+"), repair=True)
        else:
            zarrext.open_array(str(path), mode="r+")  # repairs on open for writing
        assert zarrext.check(zarr.open_array(str(path), mode="r")) == []

        actual = zarr.open_array(str(path), mode="r")[:]
        exp = expected[loc]
        for w, log in enumerate(logs):
            done, inflight = _parse(log)
            completed += len(done)
            assert faulted[w] or len(done) >= least, (cycles, w, len(done), least)
            for step, row, col in done:
                exp[row * 8 : row * 8 + 8, col * 8 : col * 8 + 16] = value(cycles, w, step)
            if inflight is not None:
                step, row, col = inflight
                new = value(cycles, w, step)
                for k in range(2):
                    region = (slice(row * 8, row * 8 + 8), slice((col + k) * 8, (col + k + 1) * 8))
                    got = actual[region]
                    if np.array_equal(got, new[:, k * 8 : k * 8 + 8]):
                        exp[region] = got
                    else:
                        np.testing.assert_array_equal(got, exp[region])
        np.testing.assert_array_equal(actual, exp)
    assert kills == WRITERS * CYCLES
    # the kills did land inside transactions (the writers got work done in between:
    # each the writes it was let complete, unless a fault point ended it first)
    assert interrupted >= 5, interrupted
    print(f"{kills} kills, {CYCLES} cycles, {interrupted} interrupted writes, {completed} writes")
