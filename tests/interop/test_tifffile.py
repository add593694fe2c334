"""Each stored chunk is a TIFF file that tifffile (with imagecodecs) reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

import zarrext
from tests.test_tiff import DTYPES
from zarrext.formats import tiff


def sample(shape: tuple[int, int], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def write(root: Path, dtype: str, endian: str, compression: str | None) -> np.ndarray:
    # Non-square array and chunks, with partial edge chunks in both dimensions.
    data = sample((70, 45), dtype)
    array = zarrext.create_array(
        root,
        shape=data.shape,
        overwrite=True,
        **tiff.create_kwargs((32, 20), dtype, endian=endian, compression=compression),
    )
    array[:] = data
    return data


def chunk_of(data: np.ndarray, i: int, j: int, shape=(32, 20)) -> np.ndarray:
    out = np.zeros(shape, data.dtype)
    block = data[i * shape[0] : (i + 1) * shape[0], j * shape[1] : (j + 1) * shape[1]]
    out[: block.shape[0], : block.shape[1]] = block
    return out


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_uncompressed_chunks_are_tiffs(tmp_path: Path, dtype: str, endian: str) -> None:
    root = tmp_path / "a.zarr"
    data = write(root, dtype, endian, None)
    meta = json.loads((root / "zarr.json").read_text())
    assert "padding" in meta["codecs"][-1]["configuration"]  # static header, in zarr.json
    for i in range(3):
        for j in range(3):
            with tifffile.TiffFile(root / "c" / str(i) / str(j)) as tf:
                assert tf.byteorder == ("<" if endian == "little" else ">")
                assert tf.pages[0].compression == 1
                image = tf.asarray()
            assert image.dtype.newbyteorder("=") == np.dtype(dtype)
            np.testing.assert_array_equal(image, chunk_of(data, i, j))
    np.testing.assert_array_equal(zarr.open_array(root)[:], data)


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint32", "int64", "float32", "float64"])
@pytest.mark.parametrize(("compression", "tag"), [("zstd", 50000), ("deflate", 8)])
def test_compressed_chunks_are_tiffs(
    tmp_path: Path, dtype: str, endian: str, compression: str, tag: int
) -> None:
    root = tmp_path / "a.zarr"
    data = write(root, dtype, endian, compression)
    meta = json.loads((root / "zarr.json").read_text())
    assert meta["codecs"][-1] == {
        "name": "pad",
        "configuration": {"location": "start", "nbytes": tiff.header_nbytes(dtype)},
    }
    sizes = set()
    for i in range(3):
        for j in range(3):
            path = root / "c" / str(i) / str(j)
            with tifffile.TiffFile(path) as tf:
                page = tf.pages[0]
                assert page.compression == tag
                assert page.databytecounts[0] == path.stat().st_size - tiff.header_nbytes(dtype)
                sizes.add(page.databytecounts[0])
                image = tf.asarray()
            np.testing.assert_array_equal(image, chunk_of(data, i, j))
    assert len(sizes) > 1  # the header really follows each chunk's compressed size
    # A reader that knows nothing of the header function still reads the array.
    np.testing.assert_array_equal(zarr.open_array(root)[:], data)
