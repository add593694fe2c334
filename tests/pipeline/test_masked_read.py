"""zarrext.read_masked: optional arrays read into numpy.ma, values and mask apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

import zarrext
from tests.conftest import raises_chunk_error
from zarrext import OptionalCodec, OptionalDType, PackBitsCodec
from zarrext.codecs.optional import OptionalCodecError
from zarrext.pipeline.masked_read import SplitOptionalBuffer

FLOAT = OptionalDType("float32")


def same(got: np.ma.MaskedArray[Any, Any], expected: np.ma.MaskedArray[Any, Any]) -> None:
    """Same shape, same missing elements, same present values."""
    assert got.shape == expected.shape
    assert np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(expected))
    present = ~np.ma.getmaskarray(expected)
    assert np.array_equal(np.asarray(got.data)[present], np.asarray(expected.data)[present])


def stored(store: Any, fill: float | None, *, shards: bool = False) -> np.ma.MaskedArray[Any, Any]:
    """A 37 x 23 optional float array with missing values, a missing chunk and a
    chunk of missing values only; returns what was written."""
    rng = np.random.default_rng(7)
    kwargs: dict[str, Any] = {"chunks": (8, 5)}
    if shards:
        kwargs = {
            "chunks": (16, 10),
            "serializer": ShardingCodec(
                chunk_shape=(8, 5), codecs=[OptionalCodec.default_for(FLOAT)]
            ),
        }
    array = zarrext.create_array(
        store, shape=(37, 23), dtype=FLOAT, fill_value=fill, overwrite=True, **kwargs
    )
    data = rng.random((37, 23)).astype(np.float32)
    written = np.ma.MaskedArray(data, mask=rng.random((37, 23)) < 0.3)
    written[10:18, 5:10] = np.ma.masked
    array[3:30, 2:20] = written[3:30, 2:20]
    return written


SELECTIONS = [
    Ellipsis,
    (slice(None), slice(None)),
    (slice(1, 30, 3), 4),
    (5, 7),
    (slice(0, 0),),
    (slice(4, 36), slice(2, 21, 2)),
    (0,),
]


@pytest.mark.parametrize("fill", [None, 2.5], ids=["fill-missing", "fill-2.5"])
@pytest.mark.parametrize("opener", ["zarrext", "zarr"])
@pytest.mark.parametrize("shards", [False, True], ids=["chunks", "shards"])
def test_read_masked_matches_to_masked(
    tmp_path: Path, fill: float | None, opener: str, shards: bool
) -> None:
    stored(str(tmp_path / "a.zarr"), fill, shards=shards)
    open_ = zarrext.open_array if opener == "zarrext" else zarr.open_array
    array = open_(str(tmp_path / "a.zarr"), mode="r")
    for selection in SELECTIONS:
        same(zarrext.read_masked(array, selection), zarrext.to_masked(array[selection]))


def test_read_masked_in_memory_and_the_fill_value() -> None:
    store = zarr.storage.MemoryStore()
    written = stored(store, 2.5)
    got = zarrext.read_masked(zarr.open_array(store, mode="r"))
    assert not got.mask[0].any()  # a row never written: the (present) fill value
    assert np.all(got.data[0] == 2.5)
    inside = (slice(3, 30), slice(2, 20))
    same(got[inside], written[inside])


def test_data_and_mask_are_contiguous_and_data_under_the_mask_is_zero(tmp_path: Path) -> None:
    stored(str(tmp_path / "a.zarr"), None)
    got = zarrext.read_masked(zarrext.open_array(str(tmp_path / "a.zarr"), mode="r"))
    assert got.data.flags.c_contiguous
    assert got.mask.flags.c_contiguous
    assert got.data.dtype == np.float32
    assert got.mask.dtype == np.bool_
    assert np.all(got.data[got.mask] == 0)


def test_a_single_element_is_a_0d_masked_array(tmp_path: Path) -> None:
    written = stored(str(tmp_path / "a.zarr"), None)
    array = zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")
    present = next(zip(*np.nonzero(~np.ma.getmaskarray(written[3:30, 2:20])), strict=True))
    at = (3 + int(present[0]), 2 + int(present[1]))
    got = zarrext.read_masked(array, at)
    assert got.shape == ()
    assert not got.mask
    assert got.data == written[at]
    assert zarrext.read_masked(array, (12, 6)).mask  # inside the all-missing block


@given(
    shape=st.tuples(st.integers(1, 20), st.integers(1, 20)),
    chunks=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    missing=st.floats(0, 1),
    seed=st.integers(0, 2**16),
    start=st.tuples(st.integers(0, 19), st.integers(0, 19)),
    step=st.integers(1, 3),
)
def test_property_read_masked_round_trips_what_was_written(
    shape: tuple[int, int],
    chunks: tuple[int, int],
    missing: float,
    seed: int,
    start: tuple[int, int],
    step: int,
) -> None:
    rng = np.random.default_rng(seed)
    written = np.ma.MaskedArray(
        rng.integers(-50, 50, shape).astype(np.int16), mask=rng.random(shape) < missing
    )
    array = zarrext.create_array(
        zarr.storage.MemoryStore(), shape=shape, chunks=chunks, dtype=OptionalDType("int16"),
        fill_value=None,
    )
    array[:] = written
    selection = (slice(start[0], None, step), slice(start[1], None))
    same(zarrext.read_masked(array, selection), written[selection])


@pytest.mark.parametrize("shards", [False, True], ids=["chunks", "shards"])
def test_local_reads_never_build_the_interleaved_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: bool
) -> None:
    written = stored(str(tmp_path / "a.zarr"), None, shards=shards)
    array = zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the interleaved (value, valid) chunk was built")

    monkeypatch.setattr(OptionalCodec, "_assemble", refuse)
    inside = (slice(3, 30), slice(2, 20))
    same(zarrext.read_masked(array)[inside], written[inside])
    # A plain structured read decodes into the output's fields the same way.
    same(zarrext.to_masked(array[inside]), written[inside])
    same(zarrext.to_masked(array[5, 3:19]), written[5, 3:19])  # a dropped axis


def test_split_decode_names_the_chunk_of_a_damaged_chunk(tmp_path: Path) -> None:
    stored(str(tmp_path / "a.zarr"), None)
    key = tmp_path / "a.zarr" / "c" / "1" / "1"
    key.write_bytes(key.read_bytes()[:-3])
    array = zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")
    with raises_chunk_error(OptionalCodecError, match=r"chunk \(1, 1\)"):
        zarrext.read_masked(array)


def test_nested_optional_splits_one_level() -> None:
    dtype = OptionalDType(OptionalDType("uint8"))
    array = zarrext.create_array(
        zarr.storage.MemoryStore(), shape=(6,), chunks=(4,), dtype=dtype, fill_value=None
    )
    inner = zarrext.from_masked(
        np.ma.MaskedArray(np.arange(6, dtype=np.uint8), mask=[0, 1, 0, 0, 0, 0]), dtype.inner
    )
    array[:] = np.ma.MaskedArray(inner, mask=[0, 0, 1, 0, 0, 0])
    got = zarrext.read_masked(array)
    expected = zarrext.to_masked(array[:])  # numpy.ma gives structured data a mask per field
    assert got.mask.tolist() == expected.mask.tolist()
    assert [m[0] for m in got.mask.tolist()] == [False, False, True, False, False, False]
    assert got.data.dtype == dtype.inner.to_native_dtype()  # the inner level stays optional
    assert got.data["valid"].tolist()[:2] == [True, False]
    assert got.data["value"][0] == 0
    assert got.data["value"][3] == 3


def test_read_masked_refuses_other_data_types() -> None:
    array = zarr.create_array(zarr.storage.MemoryStore(), shape=(4,), dtype="float32")
    with pytest.raises(TypeError, match="optional data type"):
        zarrext.read_masked(array)


def test_buffer_refuses_writes_that_would_be_lost() -> None:
    buffer = SplitOptionalBuffer.empty_for((4, 4), FLOAT.to_native_dtype())
    with pytest.raises(ValueError, match="read-only"):
        buffer._data[0, 0] = (1.0, True)  # the stand-in is never written
    with pytest.raises(TypeError, match="basic keys"):
        buffer[np.array([0, 2])]  # an advanced index copies
    with pytest.raises(TypeError, match="value, valid"):
        buffer[0] = np.zeros(4, np.float32)


def test_buffer_rewrites_the_mask_of_a_region_marked_before() -> None:
    dtype = FLOAT.to_native_dtype()
    buffer = SplitOptionalBuffer.empty_for((4,), dtype)
    buffer[...] = np.zeros(4, dtype)  # all missing
    assert buffer.as_ndarray_like().mask.all()
    view = buffer[1:3]
    view[...] = np.array([(1.0, True), (2.0, True)], dtype)  # through a view
    assert buffer.as_ndarray_like().mask.tolist() == [True, False, False, True]
    assert buffer.as_numpy_array()["value"][1:3].tolist() == [1.0, 2.0]


def test_a_compressor_after_the_optional_codec_takes_the_generic_split(tmp_path: Path) -> None:
    # The split decode needs the optional codec as the whole chain; with a
    # compressor after it, decoded chunks are split as they are written.
    array = zarrext.create_array(
        str(tmp_path / "b.zarr"), shape=(9,), chunks=(4,), dtype=FLOAT, fill_value=None,
        serializer=OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=[BytesCodec()]),
        compressors=[ZstdCodec()],
    )
    written = np.ma.MaskedArray(np.arange(9, dtype=np.float32), mask=[1, 0, 0, 1, 0, 0, 0, 0, 1])
    array[:] = written
    same(zarrext.read_masked(zarrext.open_array(str(tmp_path / "b.zarr"))), written)
