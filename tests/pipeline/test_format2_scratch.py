"""Format 2 blosc and zstd chunks decoded into scratch memory (pipeline/format2_scratch.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numcodecs import Blosc, Zlib, Zstd
from zarr.core.buffer import default_buffer_prototype

from zarrext.pipeline.format2_scratch import Format2IntoScratch
from zarrext.pipeline.scratch import blosc_decode_into, zstd_decode_into


def decode(decoder: Format2IntoScratch, frame: bytes) -> np.ndarray:
    return decoder.decode(default_buffer_prototype().buffer.from_bytes(frame))


@given(
    dtype=st.sampled_from(["<f4", ">f8", "<i2", "u1", "<c8", "?"]),
    shape=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    order=st.sampled_from(["C", "F"]),
    cname=st.sampled_from(["lz4", "lz4hc", "blosclz", "zstd", "zlib"]),
    shuffle=st.sampled_from([Blosc.NOSHUFFLE, Blosc.SHUFFLE, Blosc.BITSHUFFLE]),
    blocksize=st.sampled_from([0, 256, 4096]),
    seed=st.integers(0, 2**32 - 1),
)
def test_decodes_what_numcodecs_writes_as_numcodecs_decodes_it(
    dtype: str, shape: tuple[int, int], order: str, cname: str, shuffle: int,
    blocksize: int, seed: int,
) -> None:
    """Every frame numcodecs' Blosc writes (its compressors, shuffles, block sizes),
    of any data type, shape and order: the values zarr's own decoder gives."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 4, shape).astype(dtype) if dtype != "?" else rng.random(shape) < 0.5
    values = np.asarray(values, order=order)  # type: ignore[call-overload]
    compressor = Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize)
    frame = compressor.encode(values.tobytes(order=order))
    decoder = Format2IntoScratch(values.dtype, shape, order, values.nbytes, blosc_decode_into)
    back = decode(decoder, frame)
    expected = np.frombuffer(compressor.decode(frame), values.dtype).reshape(shape, order=order)
    np.testing.assert_array_equal(back, expected)
    np.testing.assert_array_equal(back, values)


@pytest.mark.parametrize(
    "frame",
    [b"", b"not blosc at all, not at all", bytes(16)],
    ids=["empty", "garbage", "zero-header"],
)
def test_a_frame_that_is_not_the_chunks_raises(frame: bytes) -> None:
    decoder = Format2IntoScratch(np.dtype("<f4"), (4, 4), "C", 64, blosc_decode_into)
    with pytest.raises(ValueError, match="not one whole frame"):
        decode(decoder, frame)


def test_a_damaged_frame_of_the_chunks_size_raises() -> None:
    frame = bytearray(Blosc(cname="lz4", clevel=5).encode(np.arange(64, dtype="<f4")))
    frame[20:40] = bytes(20)
    decoder = Format2IntoScratch(np.dtype("<f4"), (8, 8), "C", 256, blosc_decode_into)
    with pytest.raises(ValueError, match="not one whole frame"):
        decode(decoder, bytes(frame))


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_a_frame_cut_short_or_with_bytes_after_it_raises(cut: int) -> None:
    """c-blosc trusts the header's frame size: a frame cut short (or followed by other
    bytes) would be read past its end and decode to other values, without an error
    from blosc. The header's frame size must be the chunk's size."""
    values = np.random.default_rng(0).random(4096).astype("<f4")
    frame = bytes(Blosc(cname="lz4", clevel=5).encode(values))
    decoder = Format2IntoScratch(values.dtype, (64, 64), "C", values.nbytes, blosc_decode_into)
    with pytest.raises(ValueError, match="frame"):
        decode(decoder, frame[:-cut])
    with pytest.raises(ValueError, match="frame"):
        decode(decoder, frame + bytes(cut))
    lying = bytearray(frame)
    lying[12:16] = (len(frame) + cut).to_bytes(4, "little")
    with pytest.raises(ValueError, match="frame"):
        decode(decoder, bytes(lying))
    np.testing.assert_array_equal(decode(decoder, frame).reshape(-1), values)


@given(
    dtype=st.sampled_from(["<f4", ">f8", "<i2", "u1"]),
    shape=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    order=st.sampled_from(["C", "F"]),
    level=st.integers(-3, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_zstd_frames_decode_as_numcodecs_decodes_them(
    dtype: str, shape: tuple[int, int], order: str, level: int, seed: int
) -> None:
    """numcodecs' Zstd frames of any data type, shape and order: zarr's values; one
    cut short or followed by other bytes raises."""
    values = np.random.default_rng(seed).integers(0, 9, shape).astype(dtype)
    values = np.asarray(values, order=order)  # type: ignore[call-overload]
    frame = bytes(Zstd(level=level).encode(values.tobytes(order=order)))
    decoder = Format2IntoScratch(values.dtype, shape, order, values.nbytes, zstd_decode_into)
    np.testing.assert_array_equal(decode(decoder, frame), values)
    for bad in (frame[:-1], frame + bytes(3)):
        with pytest.raises(ValueError, match="not one whole frame"):
            decode(decoder, bad)


@pytest.mark.parametrize(
    ("compressor", "decoder"),
    [(Blosc(cname="lz4"), blosc_decode_into), (Zstd(level=1), zstd_decode_into),
     (Zlib(level=1), None)],
    ids=["blosc", "zstd", "zlib"],
)
def test_each_compressor_gets_its_decoder(compressor: Any, decoder: Any) -> None:
    import zarr
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import default_buffer_prototype

    array = zarr.create_array({}, shape=(8, 8), chunks=(4, 4), dtype="<f4", zarr_format=2,
                              compressors=compressor)
    spec = ArraySpec(shape=(4, 4), dtype=array.metadata.dtype, fill_value=0.0,
                     config=array.async_array.config, prototype=default_buffer_prototype())
    found = Format2IntoScratch.of(array.metadata, spec)
    assert (found.decode_into if found is not None else None) is decoder
