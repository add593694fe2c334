"""N5 written by tensorstore (and by hand, as the Java library does) reads in place
with zarr-python and equals tensorstore's own read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

from tests.formats.test_n5 import sample, write_n5
from zarrext.codecs.n5_default import N5DefaultCodec
from zarrext.formats import n5

TS_COMPRESSIONS = {
    "raw": {"type": "raw"},
    "gzip": {"type": "gzip"},
    "gzip-zlib": {"type": "gzip", "useZlib": True},
    "zstd": {"type": "zstd", "level": 3},
    "blosc-lz4": {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    "blosc-zstd-bitshuffle": {"type": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2},
    "bzip2": {"type": "bzip2"},
    "xz": {"type": "xz"},
}
SHAPES = [
    ((37, 23), (8, 5), "uint16"),  # 2-D, non-square, edge blocks in both dimensions
    ((12, 9, 7), (5, 4, 3), "float32"),  # 3-D, every extent different
    ((16, 10), (8, 5), "int64"),  # 2-D, no edge blocks
]


def ts_spec(path: Path) -> dict:
    return {"driver": "n5", "kvstore": {"driver": "file", "path": str(path)}}


def ts_write(path: Path, data: np.ndarray, block: tuple[int, ...], compression: dict):
    store = ts.open(
        {
            **ts_spec(path),
            "metadata": {
                "dimensions": list(data.shape),
                "blockSize": list(block),
                "dataType": str(data.dtype),
                "compression": compression,
            },
        },
        create=True,
    ).result()
    store[...] = data
    return store


@pytest.mark.parametrize("codec", ["auto", "pad", "n5_default"])
@pytest.mark.parametrize("compression", sorted(TS_COMPRESSIONS))
@pytest.mark.parametrize(("shape", "block", "dtype"), SHAPES)
def test_tensorstore_n5_reads_in_place(
    tmp_path: Path, shape, block, dtype: str, compression: str, codec: str
) -> None:
    data = sample(shape, dtype, seed=len(compression))
    root = tmp_path / "d.n5"
    ts_write(root, data, block, TS_COMPRESSIONS[compression])
    files_before = sorted(p.relative_to(root) for p in root.rglob("*"))
    (result,) = n5.write_zarr_metadata(root, codec=codec)  # type: ignore[arg-type]
    if codec == "auto":
        # tensorstore writes full-size edge blocks, so skipping the header suffices.
        assert result.codec == "pad"
    got = zarr.open_array(root, mode="r")[:]
    expected = ts.open(ts_spec(root)).result().read().result()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, data)
    files_after = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert files_after == sorted([*files_before, Path("zarr.json")])  # no copy, no rewrite


@pytest.mark.parametrize("compression", ["raw", "gzip", "zstd", "bzip2", "xz"])
@pytest.mark.parametrize(("shape", "block", "dtype"), SHAPES[:2])
def test_truncated_edge_blocks_equal_tensorstore_read(
    tmp_path: Path, shape, block, dtype: str, compression: str
) -> None:
    data = sample(shape, dtype, seed=3)
    root = write_n5(tmp_path / "d.n5", data, block, compression, truncate=True)
    (result,) = n5.write_zarr_metadata(root)
    assert result.codec == "n5_default"
    expected = ts.open(ts_spec(root)).result().read().result()
    np.testing.assert_array_equal(expected, data)  # tensorstore agrees the blocks are valid
    np.testing.assert_array_equal(zarr.open_array(root, mode="r")[:], expected)


def test_mixed_padded_and_truncated_blocks(tmp_path: Path) -> None:
    data = sample((13, 11), "int16", seed=4)
    root = tmp_path / "d.n5"
    ts_write(root, data, (5, 4), {"type": "gzip"})
    # Overwrite one edge block with its truncated form, as a Java writer would.
    truncated = tmp_path / "t.n5"
    write_n5(truncated, data, (5, 4), "gzip", truncate=True)
    (root / "2" / "1").write_bytes((truncated / "2" / "1").read_bytes())
    (result,) = n5.write_zarr_metadata(root)
    assert result.codec == "n5_default"
    assert result.scan is not None
    assert [k for k, _ in result.scan.truncated] == ["2/1"]
    expected = ts.open(ts_spec(root)).result().read().result()
    np.testing.assert_array_equal(zarr.open_array(root)[:], expected)


def test_zarr_written_n5_default_blocks_read_by_tensorstore(tmp_path: Path) -> None:
    root = tmp_path / "w.n5"
    data = sample((9, 14, 5), "uint32", seed=5)
    (root).mkdir()
    (root / "attributes.json").write_text(
        json.dumps(
            {
                "dimensions": list(data.shape),
                "blockSize": [4, 6, 5],
                "dataType": "uint32",
                "compression": {"type": "gzip", "level": 6, "useZlib": False},
            }
        )
    )
    n5.write_zarr_metadata(root)
    array = zarr.open_array(root, mode="r+")
    assert isinstance(array.metadata.codecs[0], N5DefaultCodec)  # no block yet: n5_default
    array[:] = data
    np.testing.assert_array_equal(ts.open(ts_spec(root)).result().read().result(), data)


def test_fresh_process_reads_converted_n5(tmp_path: Path) -> None:
    data = sample((6, 10), "uint8", seed=6)
    root = write_n5(tmp_path / "d.n5", data, (4, 4), "zstd")
    n5.write_zarr_metadata(root)
    code = "import sys, zarr; print(zarr.open_array(sys.argv[1])[:].tolist())"
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == data.tolist()
