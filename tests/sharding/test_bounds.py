"""Worst-case encoded sizes (``zarrext.sharding.bounds``) against the real codecs.

For every codec a ``fixed-slot`` shard takes, random inputs of every size up to a
256 KiB chunk, incompressible ones (random bytes) included, never encode to more
than the bound zarrext sizes slots with.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.codecs import numcodecs as zarr_numcodecs
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import Float32

from zarrext import ConditionalCodec, ShuffleCodec
from zarrext.codecs.blosc_frames import checked_codec
from zarrext.sharding.bounds import KNOWN_BOUNDS, encoded_size_bound

CHUNK = 256 * 1024
SPEC = ArraySpec(
    shape=(CHUNK // 4,),
    dtype=Float32(),
    fill_value=np.float32(0),
    config=ArrayConfig.from_dict({}),
    prototype=default_buffer_prototype(),
)

# Each codec family with the settings that change its output the most: levels
# (0 = stored blocks for deflate), checksums, blosc's inner compressors and shuffles.
CODECS: dict[str, list[Callable[[], BytesBytesCodec]]] = {
    "zstd": [
        lambda: ZstdCodec(level=0),
        lambda: ZstdCodec(level=-5),
        lambda: ZstdCodec(level=19, checksum=True),
        lambda: zarr_numcodecs.Zstd(level=1, checksum=True),
    ],
    "gzip": [
        lambda: GzipCodec(level=0),
        lambda: GzipCodec(level=1),
        lambda: GzipCodec(level=9),
        lambda: zarr_numcodecs.GZip(level=5),
    ],
    "zlib": [lambda: zarr_numcodecs.Zlib(level=0), lambda: zarr_numcodecs.Zlib(level=9)],
    "blosc": [
        lambda: BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4),
        lambda: BloscCodec(cname="zstd", clevel=9, shuffle="bitshuffle", typesize=4),
        lambda: BloscCodec(cname="blosclz", clevel=1, shuffle="noshuffle", typesize=1),
        lambda: BloscCodec(cname="zlib", clevel=0, shuffle="noshuffle", typesize=1),
        lambda: zarr_numcodecs.Blosc(cname="lz4hc", clevel=9, shuffle=1),
        # zarrext's pipelines hold these forms (they check the frames they decode)
        lambda: checked_codec(BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)),
        lambda: checked_codec(zarr_numcodecs.Blosc(cname="zstd", clevel=9, shuffle=2)),
    ],
    "lz4": [lambda: zarr_numcodecs.LZ4(acceleration=1), lambda: zarr_numcodecs.LZ4()],
    "crc32c": [Crc32cCodec, zarr_numcodecs.CRC32C],
    "shuffle": [
        lambda: ShuffleCodec(element_size=4), lambda: zarr_numcodecs.Shuffle(elementsize=4)
    ],
    "conditional": [
        lambda: ConditionalCodec([ZstdCodec(level=1)], decision="always_apply"),
        lambda: ConditionalCodec(
            [ShuffleCodec(element_size=4), GzipCodec(level=1), Crc32cCodec()],
            decision="always_apply",
        ),
        lambda: ConditionalCodec([zarr_numcodecs.LZ4(), BloscCodec(cname="lz4", typesize=4)],
                                 decision="always_apply", header_bits=16),
        # any mask: the bound holds for every subset of the nested codecs
        lambda: ConditionalCodec([GzipCodec(level=0), ZstdCodec(level=1)], decision=0b10),
        lambda: ConditionalCodec([GzipCodec(level=0), ZstdCodec(level=1)], decision="smallest"),
    ],
}

# Around the sizes where the formulas change: zstd's 128 KiB margin, lz4's /255,
# blosc's and deflate's block sizes.
EDGES = [0, 1, 255, 256, 4095, 4096, 65535, 65536, 131071, 131072, 131073, CHUNK]


@st.composite
def inputs(draw: st.DrawFn) -> bytes:
    """Bytes of any size up to the chunk: incompressible, constant, repeating, or
    smooth floats (what compresses 2-4x), and mixes of them."""
    size = draw(st.one_of(st.integers(0, CHUNK), st.sampled_from(EDGES)))
    kind = draw(st.sampled_from(["random", "random", "zeros", "repeat", "smooth", "mixed"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "random":
        return rng.bytes(size)
    if kind == "zeros":
        return bytes(size)
    if kind == "repeat":
        period = rng.bytes(int(rng.integers(1, 300)))
        return (period * (size // len(period) + 1))[:size]
    smooth = np.cumsum(rng.normal(size=size // 4 + 1)).astype("<f4").tobytes()[:size]
    if kind == "smooth":
        return smooth
    cut = int(rng.integers(0, size + 1))
    return smooth[:cut] + rng.bytes(size - cut)


def _encode(codec: BytesBytesCodec, data: bytes) -> int:
    buffer = default_buffer_prototype().buffer.from_bytes(data)
    encoded = codec._encode_sync(buffer, SPEC)  # type: ignore[attr-defined]
    assert encoded is not None
    return len(encoded)


@pytest.mark.parametrize("family", sorted(CODECS))
@settings(max_examples=50, deadline=None)
@given(data=inputs(), which=st.integers(0, 99))
def test_encoded_size_never_exceeds_the_bound(family: str, data: bytes, which: int) -> None:
    codecs = CODECS[family]
    codec = codecs[which % len(codecs)]().evolve_from_array_spec(SPEC)
    if isinstance(codec, zarr_numcodecs.Shuffle):  # it takes whole elements only
        data = data[: len(data) // 4 * 4]
    bound = encoded_size_bound(codec, len(data))
    assert bound is not None, codec
    assert _encode(codec, data) <= bound
    assert bound >= len(data)  # a bound also covers data that does not compress


def test_every_known_bound_is_tested() -> None:
    tested = {type(make()) for family in CODECS.values() for make in family}
    assert set(KNOWN_BOUNDS) <= tested


def test_codecs_without_a_bound_have_none() -> None:
    assert encoded_size_bound(zarr_numcodecs.BZ2(level=1), 100) is None
    assert encoded_size_bound(zarr_numcodecs.LZMA(), 100) is None
    # a subclass may encode otherwise: only the exact classes are in the table
    class MyZstd(ZstdCodec):
        pass

    assert encoded_size_bound(MyZstd(), 100) is None
    # conditional: bounded by its nested codecs, or by a decision that never inflates
    bz2 = zarr_numcodecs.BZ2(level=1)
    assert encoded_size_bound(ConditionalCodec([bz2], decision="always_apply"), 100) is None
    assert encoded_size_bound(ConditionalCodec([bz2], decision="compress_if_smaller"), 100) == 101
