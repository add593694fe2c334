"""Tests for the ``shuffle`` bytes->bytes codec (zarrext.codecs.shuffle)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import UInt8
from zarr.registry import get_codec_class

from zarrext import ShuffleCodec

SPEC = ArraySpec(
    shape=(1,),
    dtype=UInt8(),
    fill_value=0,
    config=ArrayConfig.from_dict({}),
    prototype=default_buffer_prototype(),
)


def encode(codec: ShuffleCodec, data: bytes) -> bytes:
    buf = default_buffer_prototype().buffer.from_bytes(data)
    return codec._encode_sync(buf, SPEC).to_bytes()


def decode(codec: ShuffleCodec, data: bytes) -> bytes:
    buf = default_buffer_prototype().buffer.from_bytes(data)
    return codec._decode_sync(buf, SPEC).to_bytes()


def strided_shuffle(data: bytes, element_size: int) -> bytes:
    """Blosc/HDF5 shuffle written as strided slices: plane j = byte j of every element.

    Bytes past the last whole element are copied unchanged to the end, as blosc does.
    """
    a = np.frombuffer(data, dtype=np.uint8)
    whole = len(a) // element_size * element_size
    planes = [a[j:whole:element_size] for j in range(element_size)]
    return b"".join(p.tobytes() for p in planes) + a[whole:].tobytes()


@given(
    element_size=st.integers(1, 16),
    data=st.binary(min_size=0, max_size=300),
)
def test_round_trip(element_size: int, data: bytes) -> None:
    codec = ShuffleCodec(element_size=element_size)
    encoded = encode(codec, data)
    assert len(encoded) == len(data)
    assert decode(codec, encoded) == data


@given(
    element_size=st.integers(1, 16), n_elements=st.integers(0, 40), seed=st.integers(0, 2**32 - 1)
)
def test_equals_numcodecs_shuffle_on_whole_elements(
    element_size: int, n_elements: int, seed: int
) -> None:
    data = np.random.default_rng(seed).integers(0, 256, element_size * n_elements, np.uint8)
    expected = bytes(numcodecs.Shuffle(elementsize=element_size).encode(data))
    assert encode(ShuffleCodec(element_size=element_size), data.tobytes()) == expected


@given(element_size=st.integers(2, 16), data=st.binary(min_size=0, max_size=200))
def test_equals_strided_shuffle_with_partial_element(element_size: int, data: bytes) -> None:
    codec = ShuffleCodec(element_size=element_size)
    assert encode(codec, data) == strided_shuffle(data, element_size)


def test_trailing_bytes_stay_in_place() -> None:
    data = bytes(range(11))  # two 4-byte elements + 3 trailing bytes
    out = encode(ShuffleCodec(element_size=4), data)
    assert out == bytes([0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10])


def test_float32_planes() -> None:
    """The first plane of shuffled little-endian float32 holds every element's low byte."""
    values = np.array([1.0, 2.0, 3.0, -0.5], dtype="<f4")
    out = np.frombuffer(encode(ShuffleCodec(element_size=4), values.tobytes()), np.uint8)
    raw = values.view(np.uint8).reshape(-1, 4)
    for j in range(4):
        assert out[j * 4 : (j + 1) * 4].tolist() == raw[:, j].tolist()


def test_async_matches_sync() -> None:
    codec = ShuffleCodec(element_size=8)
    data = bytes(range(100))
    buf = default_buffer_prototype().buffer.from_bytes(data)
    enc = asyncio.run(codec._encode_single(buf, SPEC))
    assert enc is not None
    assert enc.to_bytes() == encode(codec, data)
    dec = asyncio.run(codec._decode_single(enc, SPEC))
    assert dec is not None
    assert dec.to_bytes() == data


def test_metadata_round_trip_and_registration() -> None:
    codec = ShuffleCodec(element_size=4)
    d = codec.to_dict()
    assert d == {"name": "shuffle", "configuration": {"element_size": 4}}
    assert ShuffleCodec.from_dict(d) == codec
    assert get_codec_class("shuffle") is ShuffleCodec
    assert codec.is_fixed_size
    assert codec.compute_encoded_size(1234, SPEC) == 1234


@pytest.mark.parametrize(
    ("configuration", "match"),
    [
        ({}, "element_size"),
        ({"element_size": 4, "extra": 1}, "element_size"),
        ({"elementsize": 4}, "element_size"),
        ({"element_size": 0}, ">= 1"),
        ({"element_size": -4}, ">= 1"),
        ({"element_size": "4"}, "integer"),
        ({"element_size": 4.0}, "integer"),
        ({"element_size": True}, "integer"),
        ({"element_size": None}, "integer"),
    ],
)
def test_bad_configuration(configuration: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ShuffleCodec.from_dict({"name": "shuffle", "configuration": configuration})


def test_missing_configuration() -> None:
    with pytest.raises(ValueError, match="configuration"):
        ShuffleCodec.from_dict({"name": "shuffle"})


def test_top_level_in_array(tmp_path: Path) -> None:
    """Used directly as an array compressor: stored chunk = numcodecs shuffle of raw bytes."""
    data = np.arange(24, dtype="<i4").reshape(4, 6)
    z = zarr.create_array(
        tmp_path,
        shape=data.shape,
        chunks=(2, 6),
        dtype="<i4",
        compressors=[ShuffleCodec(element_size=4)],
    )
    z[:] = data
    stored = (tmp_path / "c" / "1" / "0").read_bytes()
    expected = bytes(numcodecs.Shuffle(elementsize=4).encode(data[2:4].tobytes()))
    assert stored == expected
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)
