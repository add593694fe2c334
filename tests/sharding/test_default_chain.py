"""``fixed-slot`` on the array users create by default: ``shards=`` with zarr's default
compressors (``zstd`` inside the shard), sized by zstd's worst-case bound."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrext
from tests.paths import ROOT
from zarrext.jobs.shards.inspect import shard_report
from zarrext.sharding.array_shards import ArrayShards
from zarrext.sharding.bounds import SLOT_BLOCK, zstd_bound

SHAPE = (1024, 1024)
CHUNK = (128, 128)  # 64 KiB of float32: 64 inner chunks in the one shard
GRID = SHAPE[0] // CHUNK[0]


def create(path: Path, layout: str = "fixed-slot", chunks: tuple[int, int] = CHUNK) -> zarr.Array:
    return zarrext.create_array(
        str(path), shape=SHAPE, chunks=chunks, shards=SHAPE, dtype="f4", shard_layout=layout
    )


def value(flat: int, round_: int) -> np.ndarray:
    """Inner chunk ``flat``'s values in write round ``round_``: mostly data that
    compresses 2-3x, one chunk that does not compress, one constant chunk."""
    rng = np.random.default_rng([flat, round_])
    if flat == 5:
        return rng.normal(size=CHUNK).astype("f4")
    if flat == 6:
        return np.full(CHUNK, round_ + 0.5, "f4")
    return rng.integers(0, 100 + 300 * round_, CHUNK).astype("f4")


def region(flat: int) -> tuple[slice, slice]:
    i, j = divmod(flat, GRID)
    return slice(i * CHUNK[0], (i + 1) * CHUNK[0]), slice(j * CHUNK[1], (j + 1) * CHUNK[1])


def expected(rounds: int) -> np.ndarray:
    out = np.zeros(SHAPE, "f4")
    for flat in range(GRID * GRID):
        out[region(flat)] = value(flat, rounds - 1)
    return out


def assert_all_in_slots(path: Path, rounds: int) -> None:
    array = zarr.open_array(str(path), mode="r")  # plain zarr reads it
    np.testing.assert_array_equal(array[:], expected(rounds))
    assert zarrext.check(array) == []
    (info,) = shard_report(array)
    assert info.layout == "fixed-slot"
    assert info.empty_chunks == 0


def test_default_chain_takes_fixed_slot(tmp_path: Path) -> None:
    array = create(tmp_path / "a")
    shards = ArrayShards.of(array)
    assert [c.to_dict()["name"] for c in shards.codec.codecs] == ["bytes", "zstd"]
    slot = shards.geometry.slot_size
    assert slot is not None
    assert slot >= zstd_bound(CHUNK[0] * CHUNK[1] * 4)
    assert slot % SLOT_BLOCK == 0
    assert slot - zstd_bound(CHUNK[0] * CHUNK[1] * 4) < SLOT_BLOCK


def test_four_threads_write_the_64_chunks_of_one_shard(tmp_path: Path) -> None:
    array = create(tmp_path / "a")
    errors: list[BaseException] = []

    def write(thread: int) -> None:
        try:
            for round_ in range(2):  # written, then replaced (spare slots)
                for flat in range(thread, GRID * GRID, 4):
                    array[region(flat)] = value(flat, round_)
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert_all_in_slots(tmp_path / "a", rounds=2)


WORKER = r"""
import sys
sys.path.insert(0, sys.argv[3])
import zarrext
from tests.sharding.test_default_chain import GRID, region, value
path, proc = sys.argv[1], int(sys.argv[2])
array = zarrext.open_array(path, shard_layout="fixed-slot")
for round_ in range(2):
    for flat in range(proc, GRID * GRID, 2):
        array[region(flat)] = value(flat, round_)
"""


@pytest.mark.slow  # two interpreters importing zarr: over 10 s on a loaded machine
def test_two_processes_write_the_64_chunks_of_one_shard(tmp_path: Path) -> None:
    create(tmp_path / "a")
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path / "a"), str(p), str(ROOT)])
        for p in range(2)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    assert_all_in_slots(tmp_path / "a", rounds=2)


def _holes_supported(directory: Path) -> bool:
    probe = directory / "probe"
    with open(probe, "wb") as f:
        f.truncate(1 << 20)
        f.write(b"x")
    sparse = probe.stat().st_blocks * 512 < 1 << 20
    probe.unlink()
    return sparse


def _allocated(path: Path) -> int:
    return sum(
        (Path(d) / f).stat().st_blocks * 512
        for d, _, files in os.walk(path / "c")
        for f in files
    )


def test_fixed_slot_allocates_about_what_append_does(tmp_path: Path) -> None:
    if not _holes_supported(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not keep holes in sparse files")
    chunks = (256, 256)  # 256 KiB inner chunks, 16 in the shard
    rng = np.random.default_rng(0)
    data = np.concatenate(
        [rng.integers(0, hi, (256, 1024)) for hi in (100, 300, 1000, 200)]
    ).astype("f4")
    arrays = {layout: create(tmp_path / layout, layout, chunks) for layout in ("fixed-slot",
                                                                              "append")}
    for layout, array in arrays.items():
        for row in range(0, SHAPE[0], chunks[0]):  # streaming ingest, a row of chunks a write
            array[row : row + chunks[0]] = data[row : row + chunks[0]]
        np.testing.assert_array_equal(zarr.open_array(str(tmp_path / layout))[:], data)
    (info,) = shard_report(arrays["fixed-slot"])
    assert info.layout == "fixed-slot"
    ratio = data.nbytes / info.stored_bytes
    assert 2 <= ratio <= 4  # the data compresses 2-4x
    slots, appended = _allocated(tmp_path / "fixed-slot"), _allocated(tmp_path / "append")
    assert info.file_size > 2 * slots  # the slots' unused parts are holes
    assert slots <= 1.5 * appended, (slots, appended)
    print(f"ratio {ratio:.2f}, apparent {info.file_size}, allocated {slots} vs {appended}")


@pytest.mark.parametrize("compressors", ["default", "conditional"])
def test_inspect_shows_allocated_bytes_and_compact_reclaims_them(
    tmp_path: Path, compressors: str
) -> None:
    from io import StringIO

    from rich.console import Console
    from zarr.codecs import ZstdCodec

    from zarrext import ConditionalCodec
    from zarrext.cli.render import render_shard_table

    if not _holes_supported(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not keep holes in sparse files")
    kwargs = {} if compressors == "default" else {
        "compressors": [ConditionalCodec([ZstdCodec()])], "decision": "compress_if_smaller"
    }
    array = zarrext.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=CHUNK, shards=SHAPE,
                                 dtype="f4", shard_layout="fixed-slot", **kwargs)
    for flat in range(0, GRID * GRID, 3):
        array[region(flat)] = value(flat, 0)
    shard = tmp_path / "a" / "c" / "0" / "0"
    (info,) = shard_report(array)
    assert info.layout == "fixed-slot"
    assert info.file_size == shard.stat().st_size
    assert info.allocated == shard.stat().st_blocks * 512
    assert info.allocated < info.file_size / 2  # unused parts of slots are holes
    out = StringIO()
    render_shard_table([info], Console(file=out, width=200))
    assert "on disk" in out.getvalue()
    from zarrext.jobs.shards.inspect import format_bytes

    assert format_bytes(info.allocated) in out.getvalue()

    zarrext.compact(array)
    (after,) = shard_report(array)
    assert after.file_size == after.stored_bytes + after.index_bytes
    assert after.stored_bytes == info.stored_bytes  # compact moves chunks, changes none
    assert after.allocated is not None
    assert after.allocated < info.allocated
    assert after.allocated <= -(-after.file_size // 4096) * 4096
    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path / "a"))[region(3)], value(3, 0)
    )


def test_info_shows_apparent_and_allocated_bytes(run, tmp_path: Path) -> None:
    import json

    if not _holes_supported(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not keep holes in sparse files")
    array = create(tmp_path / "a")
    for flat in range(0, GRID * GRID, 3):
        array[region(flat)] = value(flat, 0)
    shard = tmp_path / "a" / "c" / "0" / "0"
    code, out, _ = run("info", tmp_path / "a", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["object_bytes"] == shard.stat().st_size
    assert info["allocated_bytes"] == shard.stat().st_blocks * 512 < info["object_bytes"]
    code, out, _ = run("info", tmp_path / "a")
    assert f"{info['allocated_bytes']:,} on disk" in out
    zarrext.compact(array)
    code, out, _ = run("info", tmp_path / "a", "--json")
    after = json.loads(out)
    assert after["allocated_bytes"] < info["allocated_bytes"]  # compact reclaimed it
    code, out, _ = run("info", tmp_path / "a")
    assert "on disk" not in out  # dense: nothing allocated beyond what is stored
