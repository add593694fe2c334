"""FirstValue: a chunk it calls different from the fill value is one zarr's own
emptiness check (``chunk_is_empty``) keeps; it decides most chunks written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_utils import chunk_is_empty
from zarr.core.dtype import parse_dtype

from zarrext.pipeline.fill_check import FirstValue

SPECIAL = [0.0, -0.0, 3.0, -3.0, np.nan, "NaN of other bits", np.inf, 1.0, 255.0]


def _nan_of_other_bits(native: np.dtype) -> np.ndarray:
    value = np.array([np.nan], dtype=native)
    value.view(np.uint8)[0] ^= 1  # the lowest bit of the payload (little-endian)
    return value


def _spec(dtype: str, fill: float, write_empty_chunks: bool = False) -> ArraySpec:
    native = np.dtype(dtype)
    return ArraySpec(
        shape=(3, 4), dtype=parse_dtype(native, zarr_format=3),
        fill_value=native.type(fill) if native.kind == "f" else native.type(int(fill)),
        config=ArrayConfig.from_dict({"write_empty_chunks": write_empty_chunks}),
        prototype=default_buffer_prototype())


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(["f4", "f8", "i2", "u1", "i8"]),
    fill=st.sampled_from([0.0, -0.0, 3.0, np.nan]),
    first=st.sampled_from(SPECIAL),  # type: ignore[arg-type]
    rest=st.sampled_from(["fill", "first", "random"]),
    seed=st.integers(0, 2**16),
)
def test_a_chunk_called_different_is_not_empty_to_zarr(
    dtype: str, fill: float, first: float | str, rest: str, seed: int
) -> None:
    native = np.dtype(dtype)
    if native.kind != "f" and (isinstance(first, str) or np.isnan(fill)
                               or not np.isfinite(first) or first < 0):
        fill, first = 0.0, 3.0  # integers: no NaN, inf, or negative for u1
    spec = _spec(dtype, fill)
    fill_value = spec.fill_value
    start = _nan_of_other_bits(native)[0] if isinstance(first, str) else native.type(first)
    values = np.full((3, 4), fill_value, dtype=native)
    if rest == "first":
        values[:] = start
    elif rest == "random":
        values[:] = (np.random.default_rng(seed).normal(size=(3, 4)) * 10).astype(native)
    values[0, 0] = start
    check = FirstValue.of(spec)
    assert check is not None
    nd = default_buffer_prototype().nd_buffer.from_ndarray_like(values)
    if check.differs(nd):
        assert not chunk_is_empty(nd, spec)
    # a chunk of fill values only is never called different
    full = default_buffer_prototype().nd_buffer.from_ndarray_like(
        np.full((3, 4), fill_value, dtype=native))
    assert not check.differs(full)
    assert chunk_is_empty(full, spec)


def test_it_decides_the_usual_chunk_and_leaves_the_rest_to_zarr() -> None:
    nd = default_buffer_prototype().nd_buffer.from_ndarray_like
    zero = FirstValue.of(_spec("f4", 0.0))
    nan = FirstValue.of(_spec("f4", np.nan))
    assert zero is not None
    assert nan is not None
    assert zero.differs(nd(np.arange(12, dtype="f4").reshape(3, 4) + 1))
    assert zero.differs(nd(np.full((3, 4), -0.0, dtype="f4")))  # zarr: not 0.0's bits
    assert not zero.differs(nd(np.arange(12, dtype="f4").reshape(3, 4)))  # starts with 0.0
    assert nan.differs(nd(np.ones((3, 4), dtype="f4")))
    other_nan = np.repeat(_nan_of_other_bits(np.dtype("f8")), 12).reshape(3, 4)
    assert not FirstValue.of(_spec("f8", np.nan)).differs(nd(other_nan))  # type: ignore[union-attr]
    assert chunk_is_empty(nd(other_nan), _spec("f8", np.nan))


@pytest.mark.parametrize("dtype", ["bool", "c8", "M8[s]"])
def test_other_data_types_and_written_empty_chunks_are_left_to_zarr(dtype: str) -> None:
    native = np.dtype(dtype)
    spec = ArraySpec(shape=(3, 4), dtype=parse_dtype(native, zarr_format=3),
                     fill_value=np.zeros((), native)[()],
                     config=ArrayConfig.from_dict({}), prototype=default_buffer_prototype())
    assert FirstValue.of(spec) is None
    assert FirstValue.of(_spec("f4", 0.0, write_empty_chunks=True)) is None
