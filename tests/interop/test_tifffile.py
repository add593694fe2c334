"""Each stored chunk is a TIFF file that tifffile (with imagecodecs) reads."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

import zarrext
from tests.formats.test_tiff import DTYPES
from zarrext.formats import tiff


def sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
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
    template = tiff.header((32, 20), dtype, endian=endian, compression=compression,
                           strip_byte_count=0)
    assert meta["codecs"][-1] == {
        "name": "pad",
        "configuration": {"location": "start", "nbytes": tiff.header_nbytes(dtype),
                          "padding": base64.b64encode(template).decode()},
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


def _assert_chunks_are_tiffs(root: Path, data: np.ndarray, tag: int) -> None:
    for i in range(3):
        for j in range(3):
            path = root / "c" / str(i) / str(j)
            with tifffile.TiffFile(path) as tf:
                assert tf.pages[0].compression == tag
                assert tf.pages[0].databytecounts[0] == path.stat().st_size - 110
                image = tf.asarray()
            np.testing.assert_array_equal(image, chunk_of(data, i, j))


# Each writer runs in a fresh process with nothing but zarr.json to go on: the pad
# codec comes from zarr's entry points (which load zarrext). Writers given no padding
# function write zarr.json's header as it is (StripByteCounts 0: compressed chunks
# have no one size), and say so; a writer given the header function writes TIFFs.
WRITERS = {
    "zarr": "import zarr; zarr.open_array(path, mode='r+')[:] = data",
    "xarray-region": (
        "import xarray as xr\n"
        "ds = xr.Dataset({'img': (('y', 'x'), data)})\n"
        "ds.to_zarr(root, region='auto', mode='r+', consolidated=False)"
    ),
    "zarrext-with-function": (
        "import zarrext; from zarrext.formats import tiff\n"
        "padding = tiff.dynamic_header('uint16', compression=compression)\n"
        "zarrext.open_array(path, padding=padding)[:] = data"
    ),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize(("compression", "tag"), [("zstd", 50000), ("deflate", 8)])
def test_chunks_written_by_plain_zarr_xarray_and_zarrext(
    tmp_path: Path, writer: str, compression: str, tag: int
) -> None:
    root = tmp_path / "g.zarr"
    data = sample((70, 45), "uint16", seed=3)
    group = zarr.open_group(root, mode="w")
    kwargs = tiff.create_kwargs((32, 20), "uint16", compression=compression)
    group.create_array("img", shape=data.shape, dimension_names=("y", "x"), **kwargs)
    np.save(tmp_path / "data.npy", data)
    code = (
        "import sys, numpy as np\n"
        f"root = {str(root)!r}; path = root + '/img'; compression = {compression!r}\n"
        f"data = np.load({str(tmp_path / 'data.npy')!r})\n"
        + WRITERS[writer] + "\n"
        "assert 'zarrext.formats.tiff' in sys.modules\n"
    )
    said = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stderr
    if writer == "zarrext-with-function":
        _assert_chunks_are_tiffs(root / "img", data, tag)
        assert "TiffHeaderWarning" not in said
    else:
        literal = tiff.header((32, 20), "uint16", compression=compression, strip_byte_count=0)
        for i in range(3):
            for j in range(3):
                assert (root / "img" / "c" / str(i) / str(j)).read_bytes()[:110] == literal
        assert said.count("TiffHeaderWarning") == 1
        assert "StripByteCounts 0" in said
    np.testing.assert_array_equal(zarr.open_array(root / "img")[:], data)


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
def test_xarray_to_zarr_with_tiff_encoding_writes_tiffs(tmp_path: Path, dask: bool) -> None:
    xr = pytest.importorskip("xarray")
    data = sample((70, 45), "uint16", seed=4)
    kwargs = tiff.create_kwargs((32, 20), "uint16", compression="zstd")
    encoding = {"img": {"chunks": kwargs["chunks"], "serializer": kwargs["serializer"],
                        "compressors": kwargs["compressors"]}}
    ds = xr.Dataset({"img": (("y", "x"), data)})
    if dask:  # chunks encoded by dask's threads, one task per zarr chunk
        ds = ds.chunk({"y": 32, "x": 20})
    ds.to_zarr(tmp_path / "g.zarr", encoding=encoding, consolidated=False, zarr_format=3)
    _assert_chunks_are_tiffs(tmp_path / "g.zarr" / "img", data, 50000)


# -- 3-D chunks: multi-page TIFFs (z-stacks) -------------------------------------------

STACK_SHAPE, STACK_CHUNKS = (11, 70, 45), (4, 32, 20)


def stack_chunk_of(data: np.ndarray, index: tuple[int, int, int]) -> np.ndarray:
    out = np.zeros(STACK_CHUNKS, data.dtype)
    block = data[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, STACK_CHUNKS, strict=True))]
    out[tuple(slice(0, s) for s in block.shape)] = block
    return out


def _assert_chunks_are_stacks(root: Path, data: np.ndarray, endian: str = "little") -> None:
    grid = [-(-s // c) for s, c in zip(STACK_SHAPE, STACK_CHUNKS, strict=True)]
    for index in np.ndindex(*grid):
        with tifffile.TiffFile(root.joinpath("c", *map(str, index))) as tf:
            assert tf.byteorder == ("<" if endian == "little" else ">")
            assert len(tf.pages) == STACK_CHUNKS[0]  # one page per z plane
            assert tf.series[0].shape == STACK_CHUNKS
            stack = tf.asarray()
        np.testing.assert_array_equal(stack, stack_chunk_of(data, index))


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint32", "float32", "float64"])
def test_3d_chunks_are_multi_page_tiffs(tmp_path: Path, dtype: str, endian: str) -> None:
    root = tmp_path / "s.zarr"
    data = sample(STACK_SHAPE, dtype)
    kwargs = tiff.create_kwargs(STACK_CHUNKS, dtype, endian=endian)
    zarrext.create_array(root, shape=STACK_SHAPE, **kwargs)[:] = data
    meta = json.loads((root / "zarr.json").read_text())
    assert meta["codecs"][-1]["configuration"]["nbytes"] == tiff.header_nbytes(dtype, STACK_CHUNKS)
    _assert_chunks_are_stacks(root, data, endian)
    np.testing.assert_array_equal(zarr.open_array(root)[:], data)


def test_3d_chunks_written_by_plain_zarr_and_in_shards_are_multi_page_tiffs(
    tmp_path: Path,
) -> None:
    # A fresh process, plain zarr: the multi-page header zarr.json holds, written as it
    # is, is right for these (uncompressed) chunks.
    data = sample(STACK_SHAPE, "uint16", seed=9)
    kwargs = tiff.create_kwargs(STACK_CHUNKS, "uint16")
    zarr.create_array(tmp_path / "s.zarr", shape=STACK_SHAPE, **kwargs)
    zarr.create_array(tmp_path / "sh.zarr", shape=STACK_SHAPE, shards=(8, 64, 40), **kwargs)
    np.save(tmp_path / "data.npy", data)
    code = (
        "import sys, numpy as np, zarr\n"
        f"data = np.load({str(tmp_path / 'data.npy')!r})\n"
        f"zarr.open_array({str(tmp_path / 's.zarr')!r}, mode='r+')[:] = data\n"
        f"zarr.open_array({str(tmp_path / 'sh.zarr')!r}, mode='r+')[:] = data\n"
        "assert 'zarrext.formats.tiff' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    _assert_chunks_are_stacks(tmp_path / "s.zarr", data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr")[:], data)
    # Shard (0, 0, 0): its inner chunks' byte ranges are z-stacks.
    raw = (tmp_path / "sh.zarr" / "c" / "0" / "0" / "0").read_bytes()
    index = np.frombuffer(raw[-(8 * 16 + 4) : -4], dtype="<u8").reshape(8, 2)
    for flat, (start, length) in enumerate(index.tolist()):
        inner = np.unravel_index(flat, (2, 2, 2))
        with tifffile.TiffFile(io.BytesIO(raw[start : start + length])) as tf:
            assert len(tf.pages) == 4
            np.testing.assert_array_equal(tf.asarray(), stack_chunk_of(data, inner))
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "sh.zarr")[:], data)
