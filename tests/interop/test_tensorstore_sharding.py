"""Every shard layout reads identically with tensorstore and zarr-python, index at start and end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

import zarrext
from zarrext.jobs.shards.inspect import shard_report

ts = pytest.importorskip("tensorstore")


def _tensorstore_read(path: Path) -> np.ndarray:
    store = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, open=True
    ).result()
    return np.asarray(store.read().result())


def _build(path: Path, layout: str, location: str) -> np.ndarray:
    array = zarrext.create_array(
        str(path),
        shape=(60, 70),  # partial edge shards too
        chunks=(32, 32),
        dtype="u2",
        fill_value=9,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8), codecs=[BytesCodec(), Crc32cCodec()], index_location=location
        ),
        shard_layout=None if layout == "dense" else layout,
    )
    rng = np.random.default_rng(3)
    expected = np.full((60, 70), 9, dtype="u2")
    for _ in range(25):  # scattered writes, updates of live chunks, some chunks emptied
        x, y = rng.integers(0, 56), rng.integers(0, 66)
        h, w = rng.integers(1, 17, 2)
        value = rng.integers(0, 500, (min(h, 60 - x), min(w, 70 - y))).astype("u2")
        if rng.random() < 0.15:
            value[:] = 9
        array[x : x + value.shape[0], y : y + value.shape[1]] = value
        expected[x : x + value.shape[0], y : y + value.shape[1]] = value
    if layout == "dense":
        zarrext.compact(array)
    return expected


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("layout", ["fixed-slot", "append", "dense"])
def test_layouts_read_with_tensorstore_and_zarr(tmp_path: Path, layout: str, location: str) -> None:
    path = tmp_path / "a"
    expected = _build(path, layout, location)
    report = shard_report(zarr.open_array(str(path), mode="r"))
    guessed = {info.layout for info in report}
    allowed = {"append", "dense"} if layout == "append" else {layout}  # appended once = dense
    assert guessed <= allowed, guessed
    assert len(report) == 6
    np.testing.assert_array_equal(_tensorstore_read(path), expected)
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], expected)


def test_fresh_process_zarr_reads_fixed_slot(tmp_path: Path) -> None:
    path = tmp_path / "a"
    expected = _build(path, "fixed-slot", "start")
    np.save(tmp_path / "expected.npy", expected)
    code = (
        "import numpy as np, zarr, sys; "
        f"a = zarr.open_array({str(path)!r}, mode='r'); "
        f"assert (a[:] == np.load({str(tmp_path / 'expected.npy')!r})).all()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tensorstore_written_shards_take_in_place_writes(tmp_path: Path) -> None:
    """A shard written by tensorstore gets zarrext in-place updates, still readable by both."""
    path = tmp_path / "a"
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": [32, 32],
            "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32]}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [8, 8],
                        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                        "index_location": "end",
                    },
                }
            ],
            "fill_value": 0,
        },
        "create": True,
    }
    store = ts.open(spec).result()
    base = np.arange(32 * 32, dtype="i4").reshape(32, 32)
    store.write(base).result()
    array = zarrext.open_array(str(path), shard_layout="fixed-slot")
    array[8:16, 0:8] = -5
    expected = base.copy()
    expected[8:16, 0:8] = -5
    np.testing.assert_array_equal(_tensorstore_read(path), expected)
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], expected)
