"""Blosc frames checked against the chunk that holds them (zarrext/codecs/blosc_frames.py).

The frames here are built by hand from blosc 1's layout (c-blosc's README_HEADER.rst):
a 16-byte header (version, versionlz, flags, typesize, then little-endian uint32
nbytes, blocksize and cbytes, the frame's own size), and, for a frame whose flags say
"memcpyed" (bit 1), the bytes themselves.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, ShardingCodec
from zarr.codecs.numcodecs import Blosc as NumcodecsBlosc

import zarrext
from tests.conftest import Where
from tests.shard_bytes import dense_shard
from zarrext._zarr_compat import V2Codec
from zarrext.codecs import ConditionalCodec
from zarrext.codecs.blosc_frames import (
    BloscFrameError,
    CheckedBlosc,
    CheckedBloscCodec,
    CheckedNumcodecsBlosc,
    check_blosc_frame,
    checked_codec,
)
from zarrext.errors import ChunkDecodeError

MEMCPYED = 0x02


def memcpyed_frame(payload: bytes, typesize: int = 1) -> bytes:
    """A blosc 1 frame holding ``payload`` as it is (no compression, no shuffle)."""
    n = len(payload)
    header = bytes([2, 1, MEMCPYED, typesize]) + b"".join(
        v.to_bytes(4, "little") for v in (n, max(n, 1), n + 16)
    )
    return header + payload


def frame_array(frame: bytes) -> np.ndarray:
    return np.frombuffer(frame, dtype=np.uint8)


# -- the check ------------------------------------------------------------------------


@given(payload=st.binary(min_size=1, max_size=300))
def test_a_whole_frame_passes_and_decodes_to_its_bytes(payload: bytes) -> None:
    frame = memcpyed_frame(payload)
    check_blosc_frame(frame_array(frame), decoded_nbytes=len(payload))
    assert bytes(CheckedBlosc().decode(frame)) == payload


@given(payload=st.binary(min_size=1, max_size=300), data=st.data())
def test_a_frame_cut_short_is_refused(payload: bytes, data: st.DataObject) -> None:
    frame = memcpyed_frame(payload)
    cut = frame[: data.draw(st.integers(0, len(frame) - 1), label="kept")]
    with pytest.raises(BloscFrameError):
        check_blosc_frame(frame_array(cut))
    with pytest.raises(BloscFrameError):
        CheckedBlosc().decode(cut)


@given(payload=st.binary(min_size=1, max_size=300), after=st.binary(min_size=1, max_size=40))
def test_bytes_after_the_frame_are_refused(payload: bytes, after: bytes) -> None:
    with pytest.raises(BloscFrameError, match="other bytes after the frame"):
        CheckedBlosc().decode(memcpyed_frame(payload) + after)


def test_a_header_that_gives_another_decoded_size_is_refused() -> None:
    frame = frame_array(memcpyed_frame(bytes(64)))
    check_blosc_frame(frame, decoded_nbytes=64)
    with pytest.raises(BloscFrameError, match="gives 64 decoded bytes, the chunk has 128"):
        check_blosc_frame(frame, decoded_nbytes=128)


@pytest.mark.parametrize("n", [0, 1, 15])
def test_fewer_bytes_than_a_header_are_refused(n: int) -> None:
    with pytest.raises(BloscFrameError, match="shorter than a frame's header"):
        check_blosc_frame(np.zeros(n, dtype=np.uint8))


# -- the checked codecs -----------------------------------------------------------------


def test_the_checked_codecs_are_the_codecs_they_check() -> None:
    """Same metadata, equal both ways, same settings, same encoded bytes; pickled whole."""
    stock = BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", typesize=4)
    checked = checked_codec(stock)
    assert type(checked) is CheckedBloscCodec
    assert checked == stock
    assert stock == checked
    assert vars(checked) == vars(stock)  # what it may still tune to the data type too
    assert checked.to_dict() == stock.to_dict()
    assert pickle.loads(pickle.dumps(checked)) == checked
    assert checked != BloscCodec(cname="lz4", typesize=4)

    wrapper = NumcodecsBlosc(cname="lz4", clevel=5)
    checked_wrapper = checked_codec(wrapper)
    assert type(checked_wrapper) is CheckedNumcodecsBlosc
    assert checked_wrapper == wrapper
    assert wrapper == checked_wrapper
    assert checked_wrapper.to_dict() == wrapper.to_dict()

    v2 = V2Codec(filters=None, compressor=numcodecs.Blosc(cname="lz4", typesize=4))
    checked_v2 = checked_codec(v2)
    assert type(checked_v2.compressor) is CheckedBlosc
    assert checked_v2.compressor == v2.compressor
    assert vars(checked_v2.compressor) == vars(v2.compressor)  # typesize too
    values = np.arange(1000, dtype="<f4").tobytes()
    assert checked_v2.compressor.encode(values) == v2.compressor.encode(values)


def test_codecs_without_blosc_are_given_back_as_they_are() -> None:
    sharding = ShardingCodec(chunk_shape=(4,), codecs=[zarr.codecs.BytesCodec()])
    assert checked_codec(sharding) is sharding
    v2 = V2Codec(filters=None, compressor=numcodecs.Zstd())
    assert checked_codec(v2) is v2
    # a nested blosc codec is checked; the holder keeps its class and settings
    nested = ShardingCodec(chunk_shape=(4,), codecs=[zarr.codecs.BytesCodec(), BloscCodec()],
                           index_location="start")
    checked = checked_codec(nested)
    assert type(checked) is ShardingCodec
    assert checked == nested
    assert type(checked.codecs[1]) is CheckedBloscCodec
    assert checked_codec(checked) is checked  # once checked, given back as it is
    conditional = ConditionalCodec(codecs=[BloscCodec(cname="lz4")])
    assert type(checked_codec(conditional).codecs[0]) is CheckedBloscCodec


# -- arrays read through zarrext ----------------------------------------------------------

DATA = np.arange(32 * 32, dtype="<f4").reshape(32, 32) / 7
DAMAGE = {"cut by 5 bytes": lambda b: b[:-5], "7 bytes after": lambda b: b + bytes(7)}


def _blosc_frame(values: np.ndarray) -> bytes:
    return bytes(numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE,
                                 typesize=values.dtype.itemsize).encode(values.tobytes()))


def _unsharded(where: Where, damage: Any) -> tuple[str, str]:
    array = zarr.create_array(where.location("a.zarr"), shape=DATA.shape, chunks=(16, 16),
                              dtype="<f4", compressors=BloscCodec(cname="lz4"),
                              storage_options=where.options)
    array[:] = DATA
    where.put("a.zarr", "c/1/0", damage(where.stored("a.zarr")["c/1/0"]))
    return "c/1/0", "a.zarr"


def _sharded(where: Where, damage: Any) -> tuple[str, str]:
    """A shard built by hand: four 8x32 inner chunks, each a blosc frame; the third damaged."""
    array = zarr.create_array(where.location("s.zarr"), shape=DATA.shape, chunks=(8, 32),
                              shards=(32, 32), dtype="<f4", compressors=BloscCodec(cname="lz4"),
                              storage_options=where.options)
    frames = {i: _blosc_frame(DATA[8 * i: 8 * i + 8]) for i in range(4)}
    frames[2] = damage(frames[2])
    where.put("s.zarr", "c/0/0", dense_shard(4, frames))
    assert array.metadata.codecs[0].codecs[1] == BloscCodec(cname="lz4", typesize=4,
                                                              shuffle="shuffle")
    return "c/0/0", "s.zarr"


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
@pytest.mark.parametrize("build", [_unsharded, _sharded], ids=["unsharded", "sharded"])
def test_a_damaged_blosc_chunk_is_refused_naming_it(where: Where, build: Any, damage: str) -> None:
    """zarr-python decodes these into other values with no error; zarrext refuses them,
    naming the chunk, on local disk and on S3, reads the chunks around them, and
    ``check --deep`` finds them."""
    key, name = build(where, DAMAGE[damage])
    array = zarrext.open_array(where.location(name), mode="r", storage_options=where.options)
    with pytest.raises(ChunkDecodeError, match="blosc") as raised:
        array[:]
    assert raised.value.key == key
    said = "cut short" if damage.startswith("cut") else "other bytes after the frame"
    assert said in str(raised.value)
    np.testing.assert_array_equal(array[:8], DATA[:8])
    (finding,) = zarrext.check(array, deep=True)  # a deep check finds it too
    assert finding.key == key
    assert any(said in problem for problem in finding.problems)


def test_a_damaged_blosc_chunk_of_a_format_2_source_stops_convert(where: Where,
                                                                  tmp_path: Path) -> None:
    source = zarr.create_array(where.location("v2.zarr"), shape=DATA.shape, chunks=(16, 16),
                               dtype="<f4", zarr_format=2, storage_options=where.options,
                               compressors=numcodecs.Blosc(cname="lz4"))
    source[:] = DATA
    where.put("v2.zarr", "1.0", where.stored("v2.zarr")["1.0"][:-5])
    with pytest.raises(ChunkDecodeError, match="cut short") as raised:
        zarrext.convert(where.location("v2.zarr"), tmp_path / "out.zarr",
                        storage_options=where.options)
    assert raised.value.key == "1.0"
    assert not (tmp_path / "out.zarr").exists()


def test_the_checked_codec_writes_what_zarr_writes(tmp_path: Path) -> None:
    """A blosc array written through zarrext stores the bytes zarr-python stores."""
    kwargs: dict[str, Any] = {"shape": DATA.shape, "chunks": (16, 16), "dtype": "<f4",
                              "compressors": BloscCodec(cname="zstd", clevel=3)}
    zarr.create_array(tmp_path / "zarr.zarr", **kwargs)[:] = DATA
    ours = zarrext.create_array(tmp_path / "ours.zarr", **kwargs)
    ours[:] = DATA
    assert type(ours.metadata.codecs[1]) is CheckedBloscCodec
    ours.attrs["units"] = "K"  # the metadata written again, through the checked codec
    zarr.open_array(tmp_path / "zarr.zarr", mode="r+").attrs["units"] = "K"
    for key in ("zarr.json", "c/0/0", "c/1/1"):
        assert (tmp_path / "ours.zarr" / key).read_bytes() == (
            tmp_path / "zarr.zarr" / key).read_bytes()


@pytest.mark.parametrize("build", [_unsharded, _sharded], ids=["unsharded", "sharded"])
def test_zarrs_own_reads_refuse_it_with_zarrexts_pipeline_configured(
    where: Where, build: Any
) -> None:
    """``codec_pipeline.path`` set to zarrext's pipeline: plain ``zarr.open_array``
    refuses the chunk too (format 3 here, format 2 below)."""
    key, name = build(where, DAMAGE["cut by 5 bytes"])
    with zarr.config.set({"codec_pipeline.path": "zarrext.pipeline.ZarrextCodecPipeline"}):
        array = zarr.open_array(where.location(name), mode="r", storage_options=where.options)
        with pytest.raises(ChunkDecodeError, match="cut short") as raised:
            array[:]
    assert raised.value.key == key


def test_zarrs_own_format_2_reads_refuse_it_with_zarrexts_pipeline_configured(
    tmp_path: Path,
) -> None:
    source = zarr.create_array(tmp_path / "v2.zarr", shape=DATA.shape, chunks=(16, 16),
                               dtype="<f4", zarr_format=2,
                               compressors=numcodecs.Blosc(cname="lz4"))
    source[:] = DATA
    chunk = tmp_path / "v2.zarr" / "1.0"
    chunk.write_bytes(chunk.read_bytes()[:-5])
    with zarr.config.set({"codec_pipeline.path": "zarrext.pipeline.ZarrextCodecPipeline"}):
        array = zarr.open_array(tmp_path / "v2.zarr", mode="r")
        with pytest.raises(ChunkDecodeError, match="cut short") as raised:
            array[:]
        np.testing.assert_array_equal(array[:16], DATA[:16])
    assert raised.value.key == "1.0"


@pytest.mark.parametrize("layout", ["optional", "optional-in-shards", "filters-and-edges"])
def test_every_blosc_codec_zarrext_decodes_with_is_checked(tmp_path: Path, layout: str) -> None:
    """Over the configurations users create (an optional data type's mask and values,
    the optional codec inside shards, filters before blosc and partial edge chunks),
    every blosc codec in the pipeline zarrext reads with is a checked form, and the
    array reads what was written."""
    from zarrext import OptionalCodec, OptionalDType, PackBitsCodec
    from zarrext.codecs.walk import walk_codecs
    from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline

    blosc = BloscCodec(cname="lz4")
    values = np.ma.MaskedArray(np.arange(30, dtype="<f4"), mask=np.arange(30) % 7 == 0)
    if layout == "filters-and-edges":
        from zarr.codecs import TransposeCodec

        kwargs: dict[str, Any] = {
            "shape": (5, 6), "chunks": (2, 4), "dtype": "<f4",
            "filters": [TransposeCodec(order=(1, 0))], "compressors": [blosc]}
        written: Any = np.arange(30, dtype="<f4").reshape(5, 6)
    else:
        optional = OptionalCodec(mask_codecs=[PackBitsCodec(), blosc],
                                 data_codecs=[zarr.codecs.BytesCodec(), blosc])
        kwargs = {"shape": (30,), "chunks": (8,), "dtype": OptionalDType("float32"),
                  "fill_value": None, "serializer": optional, "compressors": None}
        if layout == "optional-in-shards":
            kwargs["shards"] = (16,)
        written = values
    array = zarrext.create_array(tmp_path / "a.zarr", **kwargs)
    array[...] = written
    back = zarrext.open_array(tmp_path / "a.zarr", mode="r")
    pipeline = back._async_array.codec_pipeline
    assert isinstance(pipeline, ZarrextCodecPipeline)
    found = list(walk_codecs(list(pipeline)))
    for codec in found:  # shards' inner chains through the sharding codec's own pipeline
        if isinstance(codec, ShardingCodec):
            found += walk_codecs(list(codec.codec_pipeline))
    bloscs = [c for c in found if isinstance(c, BloscCodec)]
    assert bloscs
    assert all(type(c) is CheckedBloscCodec for c in bloscs)
    if layout == "filters-and-edges":
        np.testing.assert_array_equal(back[...], written)
    else:
        got = zarrext.read_masked(back)
        np.testing.assert_array_equal(got.mask, values.mask)
        np.testing.assert_array_equal(got.compressed(), values.compressed())
