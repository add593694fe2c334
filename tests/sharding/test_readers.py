"""Readers racing writers and compact/expand never get another chunk's data.

Every inner chunk's values say which chunk and which version they are:
``value // 10**6`` is the chunk's number, ``value // 1000 % 1000`` the version
(the low digits are noise on odd versions, so encoded sizes change and chunks
move between their slot and their spare slot). Every chunk is stored before the
readers start, so the fill value (-1) is never a right answer either.

A reader process counts, per inner chunk read: another chunk's number or a mix
of versions (``wrong``), the fill value (``fill``), and reads that raised
(``errors``, e.g. a checksum); ``wrong`` and ``fill`` must be 0.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import zarrext
from tests.paths import ROOT
from zarrext.codecs.conditional import ConditionalCodec

GRID = 8  # 8x8 inner chunks of 8x8 in 4 shards


def chunk_value(chunk: int, version: int) -> np.ndarray:
    base = (chunk * 1000 + version % 1000) * 1000
    if version % 2:
        noise = np.random.default_rng([chunk, version]).integers(0, 1000, (8, 8))
        return (base + noise).astype("i4")
    return np.full((8, 8), base, dtype="i4")


CODECS = {
    # fixed-size chunks, no checksum: a misdirected read returns whole values
    "raw": lambda: [BytesCodec()],
    "crc": lambda: [BytesCodec(), ConditionalCodec(codecs=[ZstdCodec(level=1)]), Crc32cCodec()],
}


def create(path: Path, location: str, codecs: str = "raw", absent: tuple[int, ...] = ()) -> None:
    (path.parent / "codecs").write_text(codecs)
    array = zarrext.create_array(
        str(path),
        shape=(GRID * 8, GRID * 8),
        chunks=(32, 32),
        dtype="i4",
        fill_value=-1,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8),
            codecs=CODECS[codecs](), index_location=location
        ),
        shard_layout="fixed-slot",
        decision="compress_if_smaller" if codecs == "crc" else None,
    )
    full = np.empty((GRID * 8, GRID * 8), dtype="i4")
    for c in range(GRID * GRID):
        i, j = divmod(c, GRID)
        full[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8] = -1 if c in absent else chunk_value(c, 0)
    array[:] = full


# -- torn whole-file reads, replayed deterministically ---------------------------------
# zarr-python reads a whole shard with one read() of the file, which the kernel
# copies page by page without a lock against pwrite (ext4, tmpfs): a reader
# preempted mid-copy gets the bytes before some offset from before a write and the
# rest from after it. ``torn_reads`` replays every such cut.

SHARD = "c/0/0"  # inner chunks (0..3, 0..3), i.e. numbers 8 * i + j
INDEX_SIZE = 16 * 16 + 4  # 16 (offset, length) pairs and a crc32c


def torn_reads(before: bytes, after: bytes, step: int = 64) -> Iterator[tuple[int, bytes]]:
    """(cut, bytes) a one-pass reader gets when a write lands while it is at ``cut``
    (the last: a reader done before the write)."""
    for cut in [*range(0, len(before), step), len(before)]:
        yield cut, before[:cut] + after[cut:]
    yield len(before), before


def shard_chunks(path: Path, scratch: Path, data: bytes) -> dict[int, np.ndarray]:
    """zarr-python's decoding of ``data`` as shard ``SHARD`` of the array at ``path``."""
    if not scratch.exists():
        shutil.copytree(path, scratch)
    (scratch / SHARD).write_bytes(data)
    got = zarr.open_array(str(scratch), mode="r")[:32, :32]
    return {
        8 * i + j: got[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8] for i in range(4) for j in range(4)
    }


def version_of(block: np.ndarray, chunk: int) -> int | str:
    """Which version of ``chunk`` a decoded block is, else what it is instead."""
    versions = np.unique(block // 1000 % 1000)
    if (block // 1000000 == chunk).all():
        # chunk 0's version 0 is zeros; a cut inside the chunk's bytes mixes two
        return int(versions[0]) if len(versions) == 1 else "mix"
    if (block == -1).all():
        return "fill"
    # zeros in place of (part of) the chunk: a hole, read before the chunk landed
    return "zeros" if ((block == 0) | (block // 1000000 == chunk)).all() else "wrong"


def write_chunk(array: zarr.Array, chunk: int, version: int | None) -> None:
    """Store ``version`` of ``chunk`` (None: remove it, i.e. write the fill value)."""
    i, j = divmod(chunk, GRID)
    value = np.full((8, 8), -1, "i4") if version is None else chunk_value(chunk, version)
    array[i * 8 : (i + 1) * 8, j * 8 : (j + 1) * 8] = value


def seen(
    path: Path, scratch: Path, before: bytes, after: bytes, location: str = "end"
) -> dict[int, set[int | str]]:
    """What each chunk of the shard decodes as over every torn read of before/after.

    A cut inside the index fails the index's checksum (zarr-python raises): such
    reads are left out, and must be the only ones that raise.
    """
    out: dict[int, set[int | str]] = {c: set() for c in shard_chunks(path, scratch, before)}
    index_at = len(after) - INDEX_SIZE if location == "end" else 0
    for cut, data in torn_reads(before, after):
        try:
            chunks = shard_chunks(path, scratch, data)
        except ValueError as error:
            failure = str(error)
        else:
            failure = ""
        if failure:
            assert "checksum" in failure, failure
            assert index_at < cut < index_at + INDEX_SIZE, cut
            continue
        for chunk, block in chunks.items():
            out[chunk].add(version_of(block, chunk))
    return out


def assert_versions(got: dict[int, set[int | str]], written: dict[int, set[int | str]]) -> None:
    """Every chunk decoded as one of its expected versions (version 0 unless in
    ``written``); a written chunk also as a mix of two (a cut inside its bytes)."""
    for chunk, versions in got.items():
        expected = written.get(chunk, {0})
        allowed = expected | {"mix"} if chunk in written else expected
        assert expected <= versions <= allowed, (chunk, versions, expected)


@pytest.mark.parametrize("location", ["start", "end"])
def test_torn_read_of_an_update_gets_a_version(tmp_path: Path, location: str) -> None:
    # The reported window: chunk 9, stored long before, is updated into its spare
    # slot. A reader that copied that slot before the write and the index at the
    # end after it used to decode the spare slot's hole: zeros.
    path = tmp_path / "a"
    create(path, location)
    array = zarrext.open_array(str(path), mode="r+", shard_layout="fixed-slot")
    write_chunk(array, 1, 1)  # the first update brings the spare area into the file
    before = (path / SHARD).read_bytes()
    write_chunk(array, 9, 1)
    after = (path / SHARD).read_bytes()
    got = seen(path, tmp_path / "scratch", before, after, location)
    assert_versions(got, {1: {1}, 9: {0, 1}})


@pytest.mark.parametrize("location", ["start", "end"])
def test_torn_read_while_the_spare_area_appears(tmp_path: Path, location: str) -> None:
    path = tmp_path / "a"
    create(path, location)
    array = zarrext.open_array(str(path), mode="r+", shard_layout="fixed-slot")
    before = (path / SHARD).read_bytes()
    write_chunk(array, 9, 1)  # the file grows by the spare area
    write_chunk(array, 10, 1)
    after = (path / SHARD).read_bytes()
    assert len(after) > len(before)
    assert_versions(
        seen(path, tmp_path / "scratch", before, after, location), {9: {0, 1}, 10: {0, 1}}
    )
    # chunk 3's spare slot was filled when the spare area appeared: its first
    # update there pairs with version 0, never with a hole
    before = after
    write_chunk(array, 3, 1)
    after = (path / SHARD).read_bytes()
    got = seen(path, tmp_path / "scratch2", before, after, location)
    assert_versions(got, {3: {0, 1}, 9: {1}, 10: {1}})


def test_torn_read_of_a_chunk_stored_after_the_spare_area(tmp_path: Path) -> None:
    # Chunk 2 was absent when the spare area appeared: its first store goes to its
    # slot and its spare slot, so its first update never leaves a hole to pair with.
    path = tmp_path / "a"
    create(path, "end")
    array = zarrext.open_array(str(path), mode="r+", shard_layout="fixed-slot")
    write_chunk(array, 2, None)
    write_chunk(array, 1, 1)
    write_chunk(array, 2, 1)
    before = (path / SHARD).read_bytes()
    write_chunk(array, 2, 2)
    after = (path / SHARD).read_bytes()
    got = seen(path, tmp_path / "scratch", before, after)
    assert_versions(got, {1: {1}, 2: {1, 2}})


@pytest.mark.parametrize(
    ("before_read", "expected"),
    [("never-stored", {"fill", "zeros", 1}), ("removed", {"fill", "mix", 0, 1})],
)
def test_torn_read_of_a_first_store(
    tmp_path: Path, before_read: str, expected: set[int | str]
) -> None:
    # The window left open (README, writer.py): a chunk with no stored version when
    # the read began goes to its slot, a hole or its bytes from before its removal;
    # a reader that copied the slot before the write and the index after it
    # decodes those bytes: zeros (not the fill value), or an old version.
    path = tmp_path / "a"
    create(path, "end", absent=(2,) if before_read == "never-stored" else ())
    array = zarrext.open_array(str(path), mode="r+", shard_layout="fixed-slot")
    write_chunk(array, 2, None)
    before = (path / SHARD).read_bytes()
    write_chunk(array, 2, 1)
    after = (path / SHARD).read_bytes()
    got = seen(path, tmp_path / "scratch", before, after)
    assert got[2] == expected, got[2]
    assert_versions({c: v for c, v in got.items() if c != 2}, {})


# The race is counted, never timed: the writer and the job start, each says so with a
# file in the race's folder, the readers wait for that and then make their reads, and
# the writer and the job go on (past a least count of their own) until every reader
# is done (the folder's "stop" file).
WRITER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, zarrext
from tests.sharding.test_readers import GRID, chunk_value
path, race, least = sys.argv[2], sys.argv[3], int(sys.argv[4])
crc = open(path + "/../codecs").read() == "crc"
array = zarrext.open_array(
    path, shard_layout="fixed-slot", decision="compress_if_smaller" if crc else None
)
rng = np.random.default_rng(1)
version = [0] * (GRID * GRID)
hot = [0, 9, 27, 63]
n = 0
while n < least or not os.path.exists(os.path.join(race, "stop")):
    c = hot[n % 4] if n % 2 else int(rng.integers(GRID * GRID))
    version[c] += 1
    i, j = divmod(c, GRID)
    array[i * 8:(i + 1) * 8, j * 8:(j + 1) * 8] = chunk_value(c, version[c])
    n += 1
    if n == 1:
        open(os.path.join(race, "writer.started"), "w").close()
print(n)
"""

JOB = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import zarr, zarrext
path, race, least = sys.argv[2], sys.argv[3], int(sys.argv[4])
n = 0
while n < least or not os.path.exists(os.path.join(race, "stop")):
    array = zarr.open_array(path, mode="r+")
    (zarrext.compact if n % 2 == 0 else zarrext.expand)(array)
    n += 1
    if n == 1:
        open(os.path.join(race, "job.started"), "w").close()
print(n)
"""

READER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, zarr, zarrext
from tests.sharding.test_readers import GRID
path, race, reads, how = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
started = [os.path.join(race, name) for name in sys.argv[6:]]
while not all(os.path.exists(name) for name in started):
    time.sleep(0.01)  # the others are starting (the test's hang guard bounds this)
opener = (lambda: zarrext.open_array(path, mode="r")) if how == "zarrext" else (
    lambda: zarr.open_array(path, mode="r"))
array = opener()
rng = np.random.default_rng(2)
counts = {"reads": 0, "chunks": 0, "wrong": 0, "fill": 0, "errors": 0}
n = 0
while n < reads:
    kind = n % 3
    if kind == 0:  # one inner chunk
        i, j = (int(v) for v in rng.integers(GRID, size=2))
        sel = (slice(i * 8, i * 8 + 8), slice(j * 8, j * 8 + 8))
    elif kind == 1:  # a whole shard
        i, j = (int(v) for v in rng.integers(2, size=2))
        sel = (slice(i * 32, i * 32 + 32), slice(j * 32, j * 32 + 32))
    else:  # a few chunks across shards
        sel = (slice(24, 40), slice(16, 48))
    n += 1
    counts["reads"] += 1
    try:
        got = array[sel]
    except Exception:
        counts["errors"] += 1
        continue
    r0, c0 = sel[0].start // 8, sel[1].start // 8
    for a in range(got.shape[0] // 8):
        for b in range(got.shape[1] // 8):
            block = got[a * 8:(a + 1) * 8, b * 8:(b + 1) * 8]
            chunk = (r0 + a) * GRID + (c0 + b)
            counts["chunks"] += 1
            if (block == -1).any():
                counts["fill"] += 1
            elif (block // 1000000 != chunk).any() or len(np.unique(block // 1000 % 1000)) != 1:
                counts["wrong"] += 1
print(json.dumps(counts))
"""


HANG_GUARD = 900  # seconds: a guard against a hung process, not a bound on the race
LEAST = 6  # writes the writer makes, compactions the job makes, at least


def _race(path: Path, reads: int, readers: list[str], compact: bool) -> list[dict[str, int]]:
    """Each of ``readers`` makes ``reads`` reads while the writer writes (and the job
    compacts and expands); their counts."""
    race = path.parent / f"race-{path.name}"
    race.mkdir()
    others = [("writer", WRITER), *([("job", JOB)] if compact else [])]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(ROOT), str(path), str(race), str(LEAST)],
            stdout=subprocess.PIPE, text=True,
        )
        for _, script in others
    ]
    reader_procs = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(ROOT), str(path), str(race), str(reads), how,
             *(f"{name}.started" for name, _ in others)],
            stdout=subprocess.PIPE, text=True,
        )
        for how in readers
    ]
    try:
        results = []
        for proc in reader_procs:
            out, _ = proc.communicate(timeout=HANG_GUARD)
            assert proc.returncode == 0
            results.append(json.loads(out))
    finally:
        (race / "stop").touch()
    for proc in procs:
        out, _ = proc.communicate(timeout=HANG_GUARD)
        assert proc.returncode == 0
        assert int(out) >= LEAST  # the writer wrote, the job ran, while readers read
    return results


@pytest.mark.parametrize("location", ["start", "end"])
def test_plain_readers_against_writer(tmp_path: Path, location: str) -> None:
    path = tmp_path / "a"
    create(path, location)
    (counts,) = _race(path, 60, ["zarr"], compact=False)
    assert counts["reads"] == 60, counts
    assert counts["wrong"] == 0, counts
    assert counts["fill"] == 0, counts


def test_zarrext_readers_against_writer_and_compact(tmp_path: Path) -> None:
    path = tmp_path / "a"
    create(path, "end")
    (counts,) = _race(path, 60, ["zarrext"], compact=True)
    assert counts["reads"] == 60, counts
    assert counts == {**counts, "wrong": 0, "fill": 0, "errors": 0}, counts
    assert zarrext.check(zarr.open_array(str(path), mode="r"), deep=True) == []


@pytest.mark.slow
@pytest.mark.parametrize("location", ["start", "end"])
def test_readers_600_reads_each(tmp_path: Path, location: str) -> None:
    path = tmp_path / "a"
    create(path, location)
    plain, ours = _race(path, 600, ["zarr", "zarrext"], compact=False)
    print(f"\nindex at {location}, writer only: zarr-python {plain}, zarrext {ours}")
    assert plain["wrong"] == plain["fill"] == 0, plain
    assert ours["wrong"] == ours["fill"] == ours["errors"] == 0, ours
    path2 = tmp_path / "b"
    create(path2, location)
    plain, ours = _race(path2, 600, ["zarr", "zarrext"], compact=True)
    print(f"index at {location}, writer + compact/expand loop: zarr-python {plain}, "
          f"zarrext {ours}")
    assert ours["wrong"] == ours["fill"] == ours["errors"] == 0, ours
