"""Tests for TIFF chunk headers (zarrext.formats.tiff)."""

from __future__ import annotations

import base64
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrext.codecs.pad import PadCodec
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
        ({"chunk_shape": (2, 2, 2), "dtype": "uint8"}, "must be 2-D"),
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


def test_dynamic_header_fills_in_the_compressed_size() -> None:
    padding = tiff.dynamic_header("int16", compression="zstd", endian="big")
    out = padding(b"x" * 1234, (3, 4), (16, 8))
    tags = read_ifd(out)
    assert tags[279][2] == 1234
    assert (tags[256][2], tags[257][2]) == (8, 16)
    with pytest.raises(tiff.TiffHeaderError, match=r"chunk \(3, 4\)"):
        padding(b"", (3, 4), (16, 8, 2))


def test_compressed_pad_codec_keeps_nbytes_only_in_metadata() -> None:
    codec = tiff.pad_codec("float32", compression="deflate")
    assert codec.padding_func is not None
    assert codec.to_dict() == {"name": "pad", "configuration": {"location": "start", "nbytes": 122}}
