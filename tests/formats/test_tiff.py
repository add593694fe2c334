"""Tests for TIFF chunk headers (zarrext.formats.tiff)."""

from __future__ import annotations

import base64
import io
import json
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec
from zarr.codecs.numcodecs import Zlib

import zarrext
from tests.codecs.test_pad import (
    EXAMPLE_1,
    EXAMPLE_CHUNKS,
    EXAMPLE_SHAPE,
    EXAMPLE_SHARDS,
    chunk_samples,
    sample_u16,
    spec_example_1_header,
    stored_chunks,
)
from tests.conftest import Run, Where
from zarrext.codecs.pad import PadCodec, PaddedChunks, PaddingWarning
from zarrext.formats import tiff

# The padding of the pad spec's Example 1 (256x256 uint16, little endian).
SPEC_HEADER = base64.b64decode(
    "SUkqAAgAAAAIAAABAwABAAAAAAEAAAEBAwABAAAAAAEAAAIBAwABAAAAEAAAAAMBAwABAAAAAQAAAAYBAwABAAAA"
    "AQAAABEBBAABAAAAbgAAABYBAwABAAAAAAEAABcBBAABAAAAAAACAAAAAAA="
)
DTYPES = [
    "uint8",
    "int8",
    "uint16",
    "int16",
    "uint32",
    "int32",
    "uint64",
    "int64",
    "float16",
    "float32",
    "float64",
]


def read_ifd(data: bytes) -> dict[int, tuple[int, int, int]]:
    """Parse a classic TIFF header + first IFD: {tag: (type, count, value)}."""
    bo = {b"II": "<", b"MM": ">"}[data[:2]]
    magic, offset = struct.unpack_from(f"{bo}HI", data, 2)
    assert magic == 42
    (n,) = struct.unpack_from(f"{bo}H", data, offset)
    tags = {}
    for k in range(n):
        tag, typ, count = struct.unpack_from(f"{bo}HHI", data, offset + 2 + 12 * k)
        fmt = "H" if typ == 3 else "I"
        (value,) = struct.unpack_from(f"{bo}{fmt}", data, offset + 2 + 12 * k + 8)
        tags[tag] = (typ, count, value)
    (next_ifd,) = struct.unpack_from(f"{bo}I", data, offset + 2 + 12 * n)
    assert next_ifd == 0
    return tags


def test_spec_example_header_is_byte_exact() -> None:
    assert len(SPEC_HEADER) == 110
    assert tiff.header((256, 256), "uint16") == SPEC_HEADER
    assert tiff.header((256, 256), "<u2", endian="little") == SPEC_HEADER


def test_spec_example_pad_codec_is_the_spec_metadata() -> None:
    codec = tiff.pad_codec("uint16", chunk_shape=(256, 256))
    assert codec == PadCodec(location="start", nbytes=110, padding=SPEC_HEADER)
    assert codec.to_dict()["configuration"]["padding"] == base64.b64encode(SPEC_HEADER).decode()


@given(
    rows=st.integers(1, 70000),
    cols=st.integers(1, 70000),
    dtype=st.sampled_from(DTYPES),
    endian=st.sampled_from(["little", "big"]),
    compression=st.sampled_from([None, "zstd", "deflate"]),
    count=st.integers(0, 2**32 - 1),
)
def test_header_fields(rows, cols, dtype, endian, compression, count) -> None:
    data = tiff.header(
        (rows, cols), dtype, endian=endian, compression=compression, strip_byte_count=count
    )
    assert len(data) == tiff.header_nbytes(dtype)
    assert data[:2] == (b"II" if endian == "little" else b"MM")
    tags = read_ifd(data)
    dt = np.dtype(dtype)
    assert tags[256][2] == cols
    assert tags[257][2] == rows
    assert tags[278][2] == rows
    assert tags[258][2] == 8 * dt.itemsize
    assert tags[259][2] == {None: 1, "deflate": 8, "zstd": 50000}[compression]
    assert tags[262][2] == 1
    assert tags[273] == (4, 1, len(data))  # the strip starts right after the header
    assert tags[279] == (4, 1, count)
    assert tags.get(339, (3, 1, 1))[2] == {"u": 1, "i": 2, "f": 3}[dt.kind]
    assert list(tags) == sorted(tags)  # TIFF requires ascending tags


def test_uncompressed_default_strip_byte_count() -> None:
    tags = read_ifd(tiff.header((3, 5), "float64", endian="big"))
    assert tags[279][2] == 3 * 5 * 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chunk_shape": (2,), "dtype": "uint8"}, r"must be 2-D \(rows, columns\) or 3-D"),
        ({"chunk_shape": (2, 1, 2, 2), "dtype": "uint8"}, "no stack of 2-D pages"),
        (
            {"chunk_shape": (2, 2, 2), "dtype": "uint8", "compression": "zstd",
             "strip_byte_count": 0},
            "cannot be multi-page TIFFs: zarr compresses a chunk as one stream",
        ),
        ({"chunk_shape": (4, 40000, 40000), "dtype": "uint8"}, "past what a classic"),
        ({"chunk_shape": (0, 2), "dtype": "uint8"}, "does not fit"),
        ({"chunk_shape": (2, 2), "dtype": "complex64"}, "not an integer or float"),
        ({"chunk_shape": (2, 2), "dtype": "bool"}, "not an integer or float"),
        ({"chunk_shape": (2, 2), "dtype": "uint8", "compression": "lzw"}, "compression must be"),
        ({"chunk_shape": (2, 2), "dtype": "uint8", "compression": "zstd"}, "strip_byte_count"),
        ({"chunk_shape": (2, 2), "dtype": "uint8", "endian": "middle"}, "endian"),
        ({"chunk_shape": (2, 2), "dtype": "uint8", "strip_byte_count": 2**32}, "32-bit"),
    ],
)
def test_header_rejects_what_tiff_cannot_describe(kwargs: dict, message: str) -> None:
    with pytest.raises(tiff.TiffHeaderError, match=message):
        tiff.header(**kwargs)


def read_ifds(data: bytes) -> list[dict[int, tuple[int, int, int]]]:
    """Every IFD of a classic TIFF header, following the chain: [{tag: (type, count, value)}]."""
    bo = {b"II": "<", b"MM": ">"}[data[:2]]
    (offset,) = struct.unpack_from(f"{bo}I", data, 4)
    ifds = []
    while offset:
        (n,) = struct.unpack_from(f"{bo}H", data, offset)
        tags = {}
        for k in range(n):
            tag, typ, count = struct.unpack_from(f"{bo}HHI", data, offset + 2 + 12 * k)
            (value,) = struct.unpack_from(
                f"{bo}{'H' if typ == 3 else 'I'}", data, offset + 2 + 12 * k + 8
            )
            tags[tag] = (typ, count, value)
        ifds.append(tags)
        (following,) = struct.unpack_from(f"{bo}I", data, offset + 2 + 12 * n)
        assert following == 0 or following > offset  # no loops
        offset = following
    return ifds


@given(
    pages=st.integers(1, 40),
    rows=st.integers(1, 300),
    cols=st.integers(1, 300),
    dtype=st.sampled_from(DTYPES),
    endian=st.sampled_from(["little", "big"]),
    ones=st.integers(0, 2),
)
def test_stack_header_has_one_ifd_per_page_over_consecutive_planes(
    pages, rows, cols, dtype, endian, ones
) -> None:
    shape = (1,) * ones + (pages, rows, cols)
    data = tiff.header(shape, dtype, endian=endian)
    assert len(data) == tiff.header_nbytes(dtype, shape)
    plane = rows * cols * np.dtype(dtype).itemsize
    ifds = read_ifds(data)
    assert len(ifds) == pages
    for k, tags in enumerate(ifds):
        assert (tags[256][2], tags[257][2], tags[278][2]) == (cols, rows, rows)
        assert tags[259][2] == 1
        assert tags[273] == (4, 1, len(data) + k * plane)  # plane k of the C-order chunk
        assert tags[279] == (4, 1, plane)
        assert tags.get(339, (3, 1, 1))[2] == {"u": 1, "i": 2, "f": 3}[np.dtype(dtype).kind]
    if pages == 1:  # one page is the 2-D header, byte for byte
        assert data == tiff.header((rows, cols), dtype, endian=endian)


def test_dynamic_header_fills_in_the_compressed_size() -> None:
    padding = tiff.dynamic_header("int16", compression="zstd", endian="big")
    out = padding(b"x" * 1234, (3, 4), (16, 8))
    tags = read_ifd(out)
    assert tags[279][2] == 1234
    assert (tags[256][2], tags[257][2]) == (8, 16)
    with pytest.raises(tiff.TiffHeaderError, match=r"chunk \(3, 4\)"):
        padding(b"", (3, 4), (16, 8, 2))


def test_dynamic_header_refuses_multi_page_chunks() -> None:
    padding = tiff.dynamic_header("uint8")  # no chunk shape: a one-page header size
    assert len(padding(bytes(12), (0, 0), (1, 3, 4))) == tiff.header_nbytes("uint8")
    with pytest.raises(tiff.TiffHeaderError, match=r"are 2 pages.*chunk_shape=.*chunk \(1, 0\)"):
        padding(bytes(24), (1, 0), (2, 3, 4))


def test_compressed_pad_codec_keeps_nbytes_only_in_metadata() -> None:
    codec = tiff.pad_codec("float32", compression="deflate")
    assert codec.padding_func is not None
    assert codec.to_dict() == {"name": "pad", "configuration": {"location": "start", "nbytes": 122}}


# -- writers given no padding function write zarr.json's header literally -----------
# Each writer runs in a fresh process with nothing but zarr.json to go on: the pad
# codec comes from zarr's entry points (which load zarrext), and without a padding
# function it writes the header zarr.json holds (StripByteCounts 0 here, compressed),
# byte for byte, with one TiffHeaderWarning naming that field.
# (tests/interop/test_tifffile.py covers whole writes by zarr and xarray.)

SHAPE, CHUNKS = (70, 45), (32, 20)
PATH_WRITERS = {
    "zarr-partial": (
        "import zarr; z = zarr.open_array(path, mode='r+'); z[:] = data\n"
        "z[5:40, 3:30] = data[5:40, 3:30] + 1; data[5:40, 3:30] += 1"  # read-modify-write
    ),
    "zarr-block": (
        "import zarr; z = zarr.open_array(path, mode='r+'); z[:] = data\n"
        "z.set_block_selection((1, 1), data[32:64, 20:40] + 2); data[32:64, 20:40] += 2"
    ),
    "xarray-dask-threads": (
        "import xarray as xr\n"
        "xr.Dataset({'img': (('y', 'x'), data)}).chunk({'y': 32, 'x': 20}).to_zarr(\n"
        "    root, region='auto', mode='r+', consolidated=False)"
    ),
    "xarray-dask-processes": (
        "import dask, xarray as xr\n"
        "with dask.config.set(scheduler='processes', num_workers=2):\n"
        "    xr.Dataset({'img': (('y', 'x'), data)}).chunk({'y': 32, 'x': 20}).to_zarr(\n"
        "        root, region='auto', mode='r+', consolidated=False)"
    ),
}


def _sample(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 60000, SHAPE).astype("uint16")


def _run_writer(
    tmp_path: Path, root: str, code: str, data: np.ndarray
) -> tuple[np.ndarray, str]:
    """Run ``code`` (names: root, path, data) in a fresh process; the data it wrote,
    and what it said on stderr."""
    np.save(tmp_path / "data.npy", data)
    script = tmp_path / "writer.py"  # a file, so that spawned dask workers can import it
    body = code + "\n" + (
        f"np.save({str(tmp_path / 'written.npy')!r}, data)\n"
        "assert 'zarrext.formats.tiff' in sys.modules  # loaded by the pad entry point\n"
    )
    script.write_text(
        "import sys, numpy as np\n"
        f"root = {str(root)!r}; path = root + '/img'\n"
        f"data = np.load({str(tmp_path / 'data.npy')!r})\n"
        "def main():\n" + "".join(f"    {line}\n" for line in body.splitlines())
        + "if __name__ == '__main__':\n    main()\n"
    )
    done = subprocess.run([sys.executable, str(script)], check=True, capture_output=True,
                          cwd=tmp_path, text=True)
    return np.asarray(np.load(tmp_path / "written.npy")), done.stderr


def _expected_chunk(data: np.ndarray, i: int, j: int) -> np.ndarray:
    out = np.zeros(CHUNKS, data.dtype)
    block = data[i * 32 : (i + 1) * 32, j * 20 : (j + 1) * 20]
    out[: block.shape[0], : block.shape[1]] = block
    return out


@pytest.mark.parametrize("writer", sorted(PATH_WRITERS))
def test_writers_given_no_function_write_the_header_in_zarr_json_literally(
    tmp_path: Path, writer: str
) -> None:
    pytest.importorskip("xarray")
    root = tmp_path / "g.zarr"
    group = zarr.open_group(root, mode="w")
    kwargs = tiff.create_kwargs(CHUNKS, "uint16", compression="zstd")
    group.create_array("img", shape=SHAPE, dimension_names=("y", "x"), **kwargs)
    literal = tiff.header(CHUNKS, "uint16", compression="zstd", strip_byte_count=0)
    data, said = _run_writer(tmp_path, str(root), PATH_WRITERS[writer], _sample(5))
    for i in range(3):
        for j in range(3):
            stored = (root / "img" / "c" / str(i) / str(j)).read_bytes()
            assert stored[:110] == literal
    np.testing.assert_array_equal(zarr.open_array(root / "img")[:], data)
    # Said once per process that opened the array (dask's worker processes each).
    warned = said.count("TiffHeaderWarning")
    assert warned == 1 if writer != "xarray-dask-processes" else warned >= 1, said
    assert "StripByteCounts 0" in said
    assert "dynamic_header('uint16', compression='zstd')" in said


@pytest.mark.parametrize("function", ["dynamic_header", "template_function"])
def test_writers_given_the_function_write_tiffs(tmp_path: Path, function: str) -> None:
    tifffile = pytest.importorskip("tifffile")
    path = tmp_path / "a.zarr"
    kwargs = tiff.create_kwargs(CHUNKS, "uint16", compression="zstd")
    zarr.create_array(path, shape=SHAPE, **kwargs)
    static = zarr.open_array(path).metadata.codecs[-1].padding
    padding = (tiff.dynamic_header("uint16", compression="zstd")
               if function == "dynamic_header" else tiff.template_function(static))
    data = _sample(5)
    z = zarrext.open_array(path, padding=padding)
    z[:] = data
    z[5:40, 3:30] = data[5:40, 3:30] + 1  # read-modify-write
    data[5:40, 3:30] += 1
    z.set_block_selection((1, 1), data[32:64, 20:40] + 2)
    data[32:64, 20:40] += 2
    for i in range(3):
        for j in range(3):
            chunk = path / "c" / str(i) / str(j)
            with tifffile.TiffFile(chunk) as tf:
                assert tf.pages[0].compression == 50000
                assert tf.pages[0].databytecounts[0] == chunk.stat().st_size - 110
                np.testing.assert_array_equal(tf.asarray(), _expected_chunk(data, i, j))
    np.testing.assert_array_equal(zarr.open_array(path)[:], data)


def test_inner_chunks_of_shards_are_tiffs(tmp_path: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    root = tmp_path / "g.zarr"
    group = zarr.open_group(root, mode="w")
    kwargs = tiff.create_kwargs(CHUNKS, "uint16", compression="deflate")
    group.create_array("img", shape=SHAPE, shards=(64, 40), **kwargs)
    code = (
        "import zarrext; from zarrext.formats import tiff\n"
        "zarrext.open_array(path, padding=tiff.dynamic_header('uint16', compression='deflate'))"
        "[:] = data"
    )
    data, _ = _run_writer(tmp_path, str(root), code, _sample(6))
    # The shard file is no TIFF; each inner chunk's byte range in it is one.
    for si, sj in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        raw = (root / "img" / "c" / str(si) / str(sj)).read_bytes()
        index = np.frombuffer(raw[-(4 * 16 + 4) : -4], dtype="<u8").reshape(4, 2)
        for flat, (start, length) in enumerate(index.tolist()):
            i, j = 2 * si + flat // 2, 2 * sj + flat % 2
            if i > 2 or j > 2:
                continue  # past the array's edge: never written
            with tifffile.TiffFile(io.BytesIO(raw[start : start + length])) as tf:
                assert tf.pages[0].compression == 8
                assert tf.pages[0].databytecounts[0] == length - 110
                np.testing.assert_array_equal(tf.asarray(), _expected_chunk(data, i, j))


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
def test_to_zarr_with_other_chunks_writes_their_own_header(tmp_path: Path, dask: bool) -> None:
    # create_kwargs' codecs (their pad carries the header function) handed to to_zarr
    # without its chunks: the array gets xarray's chunks (the whole array, or dask's),
    # and the function writes each chunk's header for them.
    tifffile = pytest.importorskip("tifffile")
    xr = pytest.importorskip("xarray")
    data = _sample(7)
    kwargs = tiff.create_kwargs(CHUNKS, "uint16", compression="zstd")
    ds = xr.Dataset({"img": (("y", "x"), data)})
    if dask:
        ds = ds.chunk({"y": 35, "x": 45})
    encoding = {"img": {"serializer": kwargs["serializer"], "compressors": kwargs["compressors"]}}
    ds.to_zarr(tmp_path / "g.zarr", encoding=encoding, consolidated=False, zarr_format=3)
    chunks = (35, 45) if dask else SHAPE
    assert zarr.open_array(tmp_path / "g.zarr" / "img").chunks == chunks
    np.testing.assert_array_equal(
        tifffile.imread(tmp_path / "g.zarr" / "img" / "c" / "0" / "0"),
        data[: chunks[0], : chunks[1]],
    )


def test_template_keeps_its_bytes_for_its_own_shape_and_grows_to_long() -> None:
    static = tiff.header((32, 20), "uint16", compression="zstd", strip_byte_count=0)
    function = tiff.template_function(static)
    assert function is not None
    out = function(b"x" * 77, None, (32, 20))
    assert out == tiff.header((32, 20), "uint16", compression="zstd", strip_byte_count=77)
    tall = function(b"x" * 5, None, (70000, 3))
    assert tall == tiff.header((70000, 3), "uint16", compression="zstd", strip_byte_count=5)
    tags = read_ifd(tall)
    assert (tags[257][0], tags[257][2], tags[278][2]) == (4, 70000, 70000)  # LONG now


def test_template_warns_for_chunks_no_tiff_can_be(tmp_path: Path) -> None:
    static = tiff.header((32, 20), "uint16")  # uncompressed: the strip size is known
    function = tiff.template_function(static)
    assert function is not None
    with pytest.warns(tiff.TiffHeaderWarning, match=r"chunks of shape \(2, 32, 20\) are not 2-D"):
        function(bytes(2 * 32 * 20 * 2), None, (2, 32, 20))
    with pytest.warns(tiff.TiffHeaderWarning, match="describes 16-bit samples"):
        function(bytes(32 * 20 * 4), None, (32, 20))  # float32 bytes under a uint16 header
    assert len(function(bytes(32 * 20 * 2), None, (1, 32, 20))) == 110  # a 2-D image: fine
    # Through zarr: a 3-D array whose chunks cannot be images warns at write time.
    pad = tiff.pad_codec("uint16", chunk_shape=(32, 20))
    array = zarr.create_array(tmp_path / "a.zarr", shape=(4, 32, 20), chunks=(2, 32, 20),
                              dtype="uint16", serializer=BytesCodec(), compressors=[pad])
    with pytest.warns(tiff.TiffHeaderWarning, match="are no TIFF files"):
        array[:] = 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr")[:], 1)  # data intact


def test_stack_template_is_recognised_and_follows_the_chunk_shape() -> None:
    static = tiff.header((3, 32, 20), "int16", endian="big")
    function = tiff.template_function(static)
    assert function is not None
    assert function(bytes(3 * 32 * 20 * 2), None, (3, 32, 20)) == static
    # Same pages, other rows and columns (to_zarr with other chunks): its own header.
    other = function(bytes(3 * 7 * 9 * 2), None, (1, 3, 7, 9))
    assert other == tiff.header((3, 7, 9), "int16", endian="big")
    assert len(other) == len(static)
    with pytest.warns(tiff.TiffHeaderWarning, match=r"not stacks of 3 pages"):
        assert function(bytes(2 * 32 * 20 * 2), None, (2, 32, 20)) == static
    with pytest.warns(tiff.TiffHeaderWarning, match="describes int16 samples"):
        function(bytes(3 * 32 * 20 * 4), None, (3, 32, 20))


def test_multi_ifd_padding_not_written_by_header_is_no_template() -> None:
    static = bytearray(tiff.header((3, 32, 20), "uint16"))
    static[-20] ^= 1  # a changed value in the last IFD
    assert tiff.template_function(bytes(static)) is None
    codec = PadCodec(location="start", nbytes=len(static), padding=bytes(static))
    assert codec.padding_func is None  # written as it is stored
    assert tiff.template_function(b"II*\0\x08\0\0\0\x05") is None  # cut short


def test_stack_chunks_through_zarr_are_multi_page_tiffs(tmp_path: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    data = np.random.default_rng(8).integers(0, 60000, (11, 70, 45)).astype("uint16")
    kwargs = tiff.create_kwargs((4, 32, 20), "uint16")
    array = zarr.create_array(tmp_path / "s.zarr", shape=data.shape, **kwargs)
    array[:] = data
    with tifffile.TiffFile(tmp_path / "s.zarr" / "c" / "2" / "1" / "0") as tf:
        assert len(tf.pages) == 4
        stack = tf.asarray()
    expected = np.zeros((4, 32, 20), "uint16")  # the edge chunk: 3 planes, 32 rows of data
    expected[:3, :32, :20] = data[8:, 32:64, :20]
    np.testing.assert_array_equal(stack, expected)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr")[:], data)


# -- spec 004 Example 1's header on 128x128 chunks: literal, or computed when asked ------

EXAMPLE_FUNCTIONS = {  # chain before pad -> (codecs, padding function, TIFF compression tag)
    "bytes": ([], lambda: tiff.dynamic_header("uint16"), 1),
    "bytes-zstd": ([ZstdCodec()], lambda: tiff.dynamic_header("uint16", compression="zstd"),
                   50000),
    "bytes-zlib": ([Zlib()], lambda: tiff.dynamic_header("uint16", compression="deflate"), 8),
    "bytes-template": ([], lambda: tiff.template_function(EXAMPLE_1), 1),
}


def _example_1_kwargs(where: Where, codecs: list, sharded: bool, header: bytes = EXAMPLE_1
                      ) -> dict:
    return {
        "storage_options": where.options, "shape": EXAMPLE_SHAPE, "chunks": EXAMPLE_CHUNKS,
        "shards": EXAMPLE_SHARDS if sharded else None, "dtype": "uint16",
        "serializer": BytesCodec(endian="little"),
        "compressors": [*codecs, PadCodec(location="start", nbytes=110, padding=header)],
    }


def _tiff_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, tiff.TiffHeaderWarning)]


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("route", ["create_array", "with_padding"])
@pytest.mark.parametrize("chain", sorted(EXAMPLE_FUNCTIONS))
def test_spec_example_1_with_the_padding_function_makes_every_chunk_a_tiff(
    where: Where, chain: str, route: str, sharded: bool
) -> None:
    tifffile = pytest.importorskip("tifffile")
    codecs, function, tag = EXAMPLE_FUNCTIONS[chain]
    kwargs = _example_1_kwargs(where, codecs, sharded)
    data = sample_u16(EXAMPLE_SHAPE, seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if route == "create_array":  # the runtime API: zarrext's padding=
            array = zarrext.create_array(where.location("a.zarr"), padding=function(), **kwargs)
        else:  # the codec object, given its function, to plain zarr
            pad = kwargs["compressors"][-1].with_padding(function())
            kwargs["compressors"] = [*codecs, pad]
            array = zarr.create_array(where.location("a.zarr"), **kwargs)
        array[:] = data
        reopened = zarrext.open_array(where.location("a.zarr"), storage_options=where.options,
                                      padding=function())
        reopened[100:200, 50:60] = 3
        data[100:200, 50:60] = 3
    assert _tiff_warnings(caught) == []  # every header is computed: nothing to say
    objects = where.stored("a.zarr")
    meta = json.loads(objects["zarr.json"])
    codecs_json = meta["codecs"][0]["configuration"]["codecs"] if sharded else meta["codecs"]
    # zarr.json still holds Example 1 as it is; only the chunks' headers are computed
    assert codecs_json[-1]["configuration"]["padding"] == base64.b64encode(EXAMPLE_1).decode()
    chunks = stored_chunks(objects, EXAMPLE_CHUNKS, EXAMPLE_SHARDS if sharded else None)
    assert sorted(chunks) == sorted(np.ndindex(3, 2))
    for index, stored in chunks.items():
        with tifffile.TiffFile(io.BytesIO(stored)) as tf:
            page = tf.pages[0]
            assert (page.imagewidth, page.imagelength) == EXAMPLE_CHUNKS[::-1]
            assert page.compression == tag
            assert page.databytecounts[0] == len(stored) - 110
            image = tf.asarray()
        expected = np.frombuffer(chunk_samples(data, index, EXAMPLE_CHUNKS), "<u2")
        np.testing.assert_array_equal(image, expected.reshape(EXAMPLE_CHUNKS))


EXAMPLE_MISFITS = {  # chain before pad -> fields the warning names
    "bytes": ([], ["ImageWidth 256, but chunks have 128 columns",
                   "ImageLength 256, but chunks have 128 rows",
                   "StripByteCounts 131072, but chunks encode to 32768 bytes"]),
    "bytes-gzip": ([GzipCodec()], ["ImageWidth 256, but chunks have 128 columns",
                                   "ImageLength 256, but chunks have 128 rows",
                                   "Compression 1 (none), but chunks are compressed by gzip",
                                   "StripByteCounts 131072, but compressed chunks differ"]),
}


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("chain", sorted(EXAMPLE_MISFITS))
def test_spec_example_1_on_other_chunks_warns_once_naming_the_fields(
    where: Where, chain: str, sharded: bool
) -> None:
    codecs, fields = EXAMPLE_MISFITS[chain]
    location = where.location("a.zarr")
    data = sample_u16(EXAMPLE_SHAPE, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        array = zarrext.create_array(location, **_example_1_kwargs(where, codecs, sharded))
        array[:] = data
        array[:10] = 5
    [created] = _tiff_warnings(caught)  # once, at create; the writes add none
    where_said, _ = created.split(": the TIFF header in pad's padding does not describe")
    assert where_said.startswith("array ")
    assert "a.zarr" in where_said  # the array, named as the store has it
    for phrase in fields:
        assert phrase in created
    assert "RowsPerStrip" not in created  # 256 rows per strip: one strip of 128 rows, valid
    fix = ("dynamic_header('uint16')" if chain == "bytes"
           else "TIFF has no Compression value for gzip")
    assert fix in created

    # Read only: nothing to say. For writing: once at open, the writes add none.
    for mode, expected in (("r", 0), ("r+", 1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            array = zarrext.open_array(location, storage_options=where.options, mode=mode)
            if mode == "r+":
                array[:] = data
        assert len(_tiff_warnings(caught)) == expected, mode

    # Plain zarr (zarrext installed): the codec itself says it, at the first chunk.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = zarr.open_array(location, storage_options=where.options, mode="r+")
        assert _tiff_warnings(caught) == []  # opening says nothing: zarr's own route
        plain[:] = data + 1
        plain[:] = data + 2
    [written] = _tiff_warnings(caught)
    assert written.startswith("pad codec")
    assert "ImageWidth 256, but chunks have 128 columns" in written
    assert "StripByteCounts 131072, but the chunk written encodes to" in written
    for stored in stored_chunks(where.stored("a.zarr"), EXAMPLE_CHUNKS,
                                EXAMPLE_SHARDS if sharded else None).values():
        assert stored[:110] == EXAMPLE_1  # and the header is written as it is


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_a_literal_header_made_for_the_chunks_gives_no_warning(
    where: Where, sharded: bool
) -> None:
    tifffile = pytest.importorskip("tifffile")
    # Example 1's fields, made for 128x128 chunks: the literal header is right.
    header = spec_example_1_header(128, 128, 128, 128 * 128 * 2)
    location = where.location("a.zarr")
    data = sample_u16(EXAMPLE_SHAPE, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PaddingWarning)
        zarrext.create_array(location, **_example_1_kwargs(where, [], sharded, header))[:] = data
        zarrext.open_array(location, storage_options=where.options)[:10] = 1
        zarr.open_array(location, storage_options=where.options, mode="r+")[-10:] = 2
    data[:10], data[-10:] = 1, 2
    chunks = stored_chunks(where.stored("a.zarr"), EXAMPLE_CHUNKS,
                           EXAMPLE_SHARDS if sharded else None)
    for index, stored in chunks.items():
        assert stored[:110] == header
        with tifffile.TiffFile(io.BytesIO(stored)) as tf:  # a literal header, a TIFF
            expected = np.frombuffer(chunk_samples(data, index, EXAMPLE_CHUNKS), "<u2")
            np.testing.assert_array_equal(tf.asarray(), expected.reshape(EXAMPLE_CHUNKS))


def test_inspect_notes_a_literal_header_that_does_not_fit(tmp_path: Path, run: Run) -> None:
    where = Where("local", str(tmp_path))
    zarr.open_group(tmp_path / "g.zarr", mode="w")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PaddingWarning)
        zarr.create_array(tmp_path / "g.zarr" / "misfit", **_example_1_kwargs(
            where, [GzipCodec()], True))[:] = 1
        zarr.create_array(tmp_path / "g.zarr" / "fits", **_example_1_kwargs(
            where, [], False, spec_example_1_header(128, 128, 128, 128 * 128 * 2)))[:] = 1
    code, out, _ = run("inspect", tmp_path / "g.zarr")
    assert code == 0
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1  # the misfit only
    for phrase in ("ImageWidth 256", "Compression 1 (none), but chunks are compressed by gzip",
                   "StripByteCounts 131072"):
        assert phrase in notes[0]
    code, out, _ = run("inspect", tmp_path / "g.zarr", "--json")
    arrays = {a["path"]: a for a in json.loads(out)["arrays"]}
    assert arrays["fits"]["notes"] == []
    [note] = arrays["misfit"]["notes"]
    assert "ImageLength 256, but chunks have 128 rows" in note


@given(
    made_for=st.tuples(st.integers(1, 300), st.integers(1, 300)),
    chunks=st.tuples(st.integers(1, 300), st.integers(1, 300)),
    dtype=st.sampled_from(DTYPES),
    chunk_dtype=st.sampled_from(DTYPES),
    endian=st.sampled_from(["little", "big"]),
)
def test_literal_check_names_exactly_the_fields_that_differ(
    made_for: tuple[int, int], chunks: tuple[int, int], dtype: str, chunk_dtype: str,
    endian: str,
) -> None:
    # A header made for (rows, columns) of dtype, on uncompressed chunks of another
    # shape and data type: which fields disagree follows from the two alone.
    header = tiff.header(made_for, dtype, endian=endian)
    dt, chunk_dt = np.dtype(dtype), np.dtype(chunk_dtype)
    nbytes = chunks[0] * chunks[1] * chunk_dt.itemsize
    mismatch = tiff.literal_header_mismatch(
        header, PaddedChunks(chunks, chunk_dt, "start", nbytes, endian, ()))
    expected = set()
    if chunks[1] != made_for[1]:
        expected.add("ImageWidth")
    if chunks[0] != made_for[0]:
        expected.add("ImageLength")
    if chunks[0] > made_for[0]:  # rows per strip = made_for rows: more strips needed
        expected.add("RowsPerStrip")
    if chunk_dt.itemsize != dt.itemsize:
        expected.add("BitsPerSample")
    if chunk_dt.kind != dt.kind:
        expected.add("SampleFormat")
    if nbytes != made_for[0] * made_for[1] * dt.itemsize:
        expected.add("StripByteCounts")
    named = set() if mismatch is None else {f.split(" ")[0] for f in mismatch.fields}
    assert named == expected
    if mismatch is not None:
        assert mismatch.category is tiff.TiffHeaderWarning


@given(
    tail=st.binary(max_size=200),
    shape=st.lists(st.integers(1, 50), min_size=1, max_size=4).map(tuple),
    dtype=st.sampled_from([*DTYPES, "bool", "complex64"]),
    nbytes=st.one_of(st.none(), st.integers(0, 10**6)),
    compressors=st.one_of(st.none(), st.lists(
        st.sampled_from(["gzip", "zstd", "numcodecs.zlib", "blosc"]), max_size=2).map(tuple)),
    endian=st.sampled_from([None, "little", "big"]),
)
def test_literal_check_of_any_bytes_never_fails_a_write(
    tail: bytes, shape: tuple[int, ...], dtype: str, nbytes: int | None,
    compressors: tuple[str, ...] | None, endian: str | None,
) -> None:
    # Padding that starts as a TIFF file and then holds anything: the check, which
    # runs while chunks are written, answers (a mismatch or None) and never raises.
    chunks = PaddedChunks(shape, np.dtype(dtype), "start", nbytes, endian, compressors)
    for padding in (b"II*\x00\x08\x00\x00\x00" + tail, b"MM\x00*\x00\x00\x00\x08" + tail):
        mismatch = tiff.literal_header_mismatch(padding, chunks)
        assert mismatch is None or mismatch.fields


# -- reading a stored header's IFDs (formats/tiff/headers.py: read_ifds) -------------------


@given(
    shape=st.one_of(st.tuples(st.integers(1, 9), st.integers(1, 9)),
                    st.tuples(st.integers(2, 5), st.integers(1, 9), st.integers(1, 9))),
    dtype=st.sampled_from(["u1", "<i2", ">u2", "<f4", ">f8"]),
    compression=st.sampled_from([None, "zstd", "deflate"]),
)
def test_read_ifds_finds_what_tifffile_finds(
    shape: tuple[int, ...], dtype: str, compression: str | None
) -> None:
    """Every header zarrext writes, read back: as many IFDs as tifffile finds pages,
    each with the tags and field types tifffile reads, in the header's byte order."""
    from zarrext.formats.tiff.headers import read_ifds

    tifffile = pytest.importorskip("tifffile")
    if compression is not None and len(shape) == 3:
        compression = None  # multi-page headers are uncompressed
    endian = "big" if dtype.startswith(">") else "little"
    data = bytes(int(np.prod(shape)) * np.dtype(dtype).itemsize)
    padding = tiff.header(shape, np.dtype(dtype), compression=compression, endian=endian,
                          strip_byte_count=len(data) if compression else None)
    found = read_ifds(padding)
    assert found is not None
    assert found.byte_order == (">" if endian == "big" else "<")
    with tifffile.TiffFile(io.BytesIO(padding + data)) as tf:
        assert len(found.ifds) == len(tf.pages)
        for ifd, page in zip(found.ifds, tf.pages, strict=True):
            assert ifd.offset == page.offset
            assert {e.tag: e.kind for e in ifd.entries} == {
                t.code: int(t.dtype) for t in page.tags.values()}


def test_read_ifds_ends_at_what_the_padding_does_not_hold() -> None:
    """A chain that loops back is followed once; an IFD cut off by the padding's end
    is not read (nor any after it); no TIFF signature, no IFDs."""
    from zarrext.formats.tiff.headers import read_ifds

    padding = tiff.header((3, 4, 4), np.dtype("u1"))
    whole = read_ifds(padding)
    assert whole is not None
    assert len(whole.ifds) == 3
    last = whole.ifds[-1]
    looped = bytearray(padding)
    looped[last.end - 4:last.end] = struct.pack("<I", whole.ifds[0].offset)
    again = read_ifds(bytes(looped))
    assert again is not None
    assert [i.offset for i in again.ifds] == [i.offset for i in whole.ifds]
    cut = read_ifds(padding[: last.end - 1])
    assert cut is not None
    assert [i.offset for i in cut.ifds] == [i.offset for i in whole.ifds[:-1]]
    assert read_ifds(b"PK" + padding[2:]) is None
    assert read_ifds(padding[:2] + b"\x2b\x00" + padding[4:]) is None  # BigTIFF's 43
