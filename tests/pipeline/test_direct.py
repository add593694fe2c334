"""Chunks of ``[bytes, zstd]`` and ``[bytes, blosc]`` chains decoded by zarrext itself
(:mod:`zarrext.pipeline.direct`):
the same values as zarr-python wherever a read lands, the copy skipped where the
chunk's place is one contiguous block, zarr's decoder taken for none of the chunks
it can decode, no result sharing the threads' reused memory, and damaged chunks
still named."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs import Blosc, Zstd
from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec

import zarrext
import zarrext.pipeline.chunk_reads
import zarrext.pipeline.direct
from zarrext.errors import ChunkDecodeError

_NAMES = itertools.count()  # one array per example (hypothesis reuses tmp_path)
DTYPES = ["uint8", "int16", "<f4", ">f4", "float64", "complex64", "bool"]
COMPRESSORS = {"zstd": lambda: ZstdCodec(level=1), "blosc": lambda: BloscCodec(cname="lz4")}
# numcodecs' forms, to store frames by hand (a chunk of other values, say)
FRAMES = {"zstd": lambda: Zstd(level=1), "blosc": lambda: Blosc(cname="lz4")}


def _spy_places(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each chunk read through a ``[bytes, zstd]`` chain found a place to
    decode into (True) or took zarr's decode and copy (False)."""
    seen: list[bool] = []
    real = zarrext.pipeline.direct._place

    def place(*args: Any) -> Any:
        found = real(*args)
        seen.append(found is not None)
        return found

    monkeypatch.setattr(zarrext.pipeline.direct, "_place", place)
    return seen


def _spy_zarr_decodes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per chunk that took zarr's ``decode_and_scatter_chunk`` (True when
    it had stored bytes: a missing chunk is filled there)."""
    seen: list[bool] = []
    real = zarrext.pipeline.chunk_reads.decode_and_scatter_chunk

    def decode_and_scatter_chunk(chunk_bytes: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(chunk_bytes is not None)
        return real(chunk_bytes, *args, **kwargs)

    monkeypatch.setattr(
        zarrext.pipeline.chunk_reads, "decode_and_scatter_chunk", decode_and_scatter_chunk
    )
    return seen


def _create(
    path: str, values: np.ndarray, chunks: tuple[int, ...], *, header: bool,
    endian: str = "little", compressor: str = "zstd",
) -> None:
    """``values`` stored as ``[bytes, zstd]`` (or blosc), or with ``header`` as
    zarrext's ``[bytes, conditional([zstd])]`` (compress_if_smaller: chunks that do
    not shrink are stored raw behind the header)."""
    if header:
        zarrext.create_array(
            path, shape=values.shape, chunks=chunks, dtype=values.dtype, fill_value=0,
            serializer=BytesCodec(endian=endian),  # type: ignore[arg-type]
            compressors=[zarrext.ConditionalCodec([COMPRESSORS[compressor]()])],
            decision="compress_if_smaller",
        )[...] = values
        return
    zarr.create_array(
        path, shape=values.shape, chunks=chunks, dtype=values.dtype, fill_value=0,
        serializer=BytesCodec(endian=endian),  # type: ignore[arg-type]
        compressors=[COMPRESSORS[compressor]()],
    )[...] = values


def _values(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == bool:
        return rng.random(shape) < 0.5
    return (rng.random(shape) * 100).astype(dtype)


@st.composite
def _arrays(
    draw: st.DrawFn,
) -> tuple[tuple[int, ...], tuple[int, ...], str, str, Any, bool, str]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=ndim, max_size=ndim)))
    # Chunks spanning every trailing axis (contiguous places) as often as not.
    full = draw(st.booleans())
    chunks = tuple(
        n if (full and axis > 0) else draw(st.integers(1, n))
        for axis, n in enumerate(shape)
    )
    dtype = draw(st.sampled_from(DTYPES))
    endian = draw(st.sampled_from(["little", "big"]))
    selection = tuple(
        draw(st.sampled_from([slice(None), slice(0, max(1, n // 2)), slice(n // 3, n), 0]))
        for n in shape
    )
    return (shape, chunks, dtype, endian, selection, draw(st.booleans()),
            draw(st.sampled_from(sorted(COMPRESSORS))))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_arrays(), seed=st.integers(0, 2**16))
def test_reads_match_zarr_python_wherever_they_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Any, seed: int
) -> None:
    shape, chunks, dtype, endian, selection, header, compressor = case
    path = tmp_path / f"a{next(_NAMES)}.zarr"
    values = _values(shape, dtype, seed)
    _create(str(path), values, chunks, header=header, endian=endian, compressor=compressor)
    expected = zarr.open_array(str(path), mode="r")[selection]
    seen = _spy_places(monkeypatch)
    decoded_by_zarr = _spy_zarr_decodes(monkeypatch)
    got = zarrext.open_array(str(path), mode="r")[selection]
    monkeypatch.undo()
    np.testing.assert_array_equal(got, expected)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    if endian != "little" and np.dtype(dtype).itemsize > 1:
        assert not any(seen)  # stored bytes in another order are not the values
        assert any(decoded_by_zarr)  # ... so zarr's decoder swaps them
    else:
        assert not any(decoded_by_zarr)  # every stored chunk decoded here


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_arrays(), seed=st.integers(0, 2**16), workers=st.sampled_from([1, 2]))
def test_no_read_shares_the_memory_later_reads_reuse(
    tmp_path: Path, case: Any, seed: int, workers: int
) -> None:
    # Chunks are decoded into (and raw ones read into) memory each codec thread
    # reuses for its next chunk: a result holding any of it would change under the
    # caller's feet. Reads of another array's chunks of the same sizes, after
    # these, leave every earlier result as it was.
    shape, chunks, dtype, _, selection, header, compressor = case
    first, second = (tmp_path / f"{n}{next(_NAMES)}.zarr" for n in "ab")
    values = _values(shape, dtype, seed)
    _create(str(first), values, chunks, header=header, compressor=compressor)
    _create(str(second), _values(shape, dtype, seed + 1), chunks, header=header,
            compressor=compressor)
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        got = [zarrext.open_array(str(first), mode="r")[selection] for _ in range(2)]
        zarrext.open_array(str(second), mode="r")[...]
        zarrext.open_array(str(second), mode="r")[selection]
    for back in got:
        np.testing.assert_array_equal(back, values[selection])
    if isinstance(got[0], np.ndarray) and got[0].size:
        assert not np.shares_memory(got[0], got[1])


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("header", [False, True], ids=["plain", "conditional"])
def test_whole_row_chunks_decode_into_their_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, header: bool, compressor: str
) -> None:
    values = _values((64, 40), "<f4", 1)
    values[:32] = 1.5  # compresses: the other rows are stored raw behind the header
    _create(str(tmp_path / "a.zarr"), values, (8, 40), header=header, compressor=compressor)
    seen = _spy_places(monkeypatch)
    decoded_by_zarr = _spy_zarr_decodes(monkeypatch)
    np.testing.assert_array_equal(zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")[:],
                                  values)
    assert seen == [True] * 8
    seen.clear()  # columns: each chunk's place is strided: decoded apart, then copied
    _create(str(tmp_path / "b.zarr"), values, (64, 8), header=header, compressor=compressor)
    np.testing.assert_array_equal(zarrext.open_array(str(tmp_path / "b.zarr"), mode="r")[:],
                                  values)
    assert True not in seen
    assert decoded_by_zarr == []  # by zarrext, both ways
    seen.clear()  # one column's chunks: the output is that column, each place a block
    np.testing.assert_array_equal(
        zarrext.open_array(str(tmp_path / "b.zarr"), mode="r")[:, 8:16], values[:, 8:16]
    )
    assert seen == [True]


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("header", [False, True], ids=["plain", "conditional"])
@pytest.mark.parametrize(
    "damage", ["garbage", "another size", "oversized", "truncated", "cut by 5 bytes",
               "unknown bit"]
)
def test_a_damaged_chunk_is_still_named(
    tmp_path: Path, damage: str, header: bool, compressor: str
) -> None:
    values = _values((16, 32), "<f4", 2)
    values[8:] = 2.5  # compresses
    _create(str(tmp_path / "a.zarr"), values, (8, 32), header=header, compressor=compressor)
    chunk = tmp_path / "a.zarr" / "c" / "1" / "0"
    stored = chunk.read_bytes()
    head = stored[:1] if header else b""
    if damage == "garbage":
        chunk.write_bytes(b"\x00" * len(stored))
    elif damage == "another size":  # a valid frame of half the chunk's bytes
        chunk.write_bytes(head + FRAMES[compressor]().encode(values[:4].tobytes()))
    elif damage == "oversized":  # a valid frame of more than the chunk's bytes
        chunk.write_bytes(head + FRAMES[compressor]().encode(np.tile(values, (2, 1)).tobytes()))
    elif damage == "truncated":
        chunk.write_bytes(stored[: len(stored) // 2])
    elif damage == "cut by 5 bytes":
        chunk.write_bytes(stored[:-5])
    elif header:  # a header bit for a nested codec the metadata does not list
        chunk.write_bytes(bytes([stored[0] | 0x80]) + stored[1:])
    else:
        chunk.write_bytes(b"\xff" + stored[1:])
    # the conditional codec, run in the chunk's context, names its index too
    named = r"c/1/0.*chunk \(1, 0\)" if header and damage == "unknown bit" else "c/1/0"
    with pytest.raises(ChunkDecodeError, match=named):
        zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")[:]


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("header", [False, True], ids=["plain", "conditional"])
def test_a_zero_dimensional_array_reads_its_value(
    tmp_path: Path, header: bool, compressor: str
) -> None:
    # Its one chunk's place is the whole 0-d output: a view of it, not a copy.
    _create(str(tmp_path / "a.zarr"), np.array(2.5, "<f4"), (), header=header,
            compressor=compressor)
    back = zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")
    assert back[()] == 2.5
    assert back[...] == 2.5


# -- format 2 arrays (zarrext.pipeline.format2): one codec, numcodecs' Blosc or Zstd ------

FORMAT_2_COMPRESSORS = {"blosc": lambda: Blosc(cname="lz4"), "zstd": lambda: Zstd(level=1)}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_arrays(), seed=st.integers(0, 2**16), order=st.sampled_from(["C", "F"]))
def test_format_2_reads_match_zarr_python_wherever_they_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Any, seed: int, order: str
) -> None:
    """A format 2 array read through zarrext's pipeline: zarr-python's values for every
    selection; chunks in C order and the machine's byte order decoded here (others, in
    F order or another byte order, by zarr's decoder)."""
    from zarrext.pipeline.format2 import format_2_reader

    shape, chunks, dtype, endian, selection, _, compressor = case
    path = tmp_path / f"v2-{next(_NAMES)}.zarr"
    values = _values(shape, dtype, seed)
    stored = np.dtype(dtype).newbyteorder("<" if endian == "little" else ">")
    zarr.create_array(
        str(path), shape=shape, chunks=chunks, dtype=stored, fill_value=0, zarr_format=2,
        order=order, compressors=FORMAT_2_COMPRESSORS[compressor](),  # type: ignore[arg-type]
    )[...] = values
    expected = zarr.open_array(str(path), mode="r")[selection]
    decoded_by_zarr = _spy_zarr_decodes(monkeypatch)
    got = format_2_reader(zarr.open_array(str(path), mode="r"))[selection]
    monkeypatch.undo()
    np.testing.assert_array_equal(got, expected)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    if order == "C" and (endian == "little" or stored.itemsize == 1):
        assert not any(decoded_by_zarr)  # every stored chunk decoded here
