"""shuffle's planes taken with integer shifts in one call (element sizes 2, 4; others by
the transposed copy), and the elements rebuilt from them with shifts (2, 4), are the
transposition's, byte for byte, for any bytes, element size and length."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrext.codecs.shuffle import shuffle_bytes, unshuffle_bytes


def _transposed(data: np.ndarray, element_size: int) -> np.ndarray:
    """Byte j of every element into plane j, a partial element last: the definition."""
    whole = (data.size // element_size) * element_size
    planes = data[:whole].reshape(-1, element_size).T
    return np.concatenate([planes.ravel(), data[whole:]])


@st.composite
def byte_views(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Any bytes as a view at any byte offset (unaligned integers), strided or not,
    and an element size."""
    payload = draw(st.binary(min_size=0, max_size=300))
    offset, step = draw(st.integers(0, 3)), draw(st.sampled_from([1, 2]))
    data = np.frombuffer(b"\x00" * offset + payload, np.uint8)[offset:][::step]
    return data, draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16]))


@settings(max_examples=60, deadline=None)
@given(case=byte_views())
def test_planes_are_the_transpositions(case: tuple[np.ndarray, int]) -> None:
    data, element_size = case
    shuffled = shuffle_bytes(data, element_size)
    np.testing.assert_array_equal(shuffled, _transposed(data, element_size))
    np.testing.assert_array_equal(unshuffle_bytes(shuffled, element_size), data)


@settings(max_examples=60, deadline=None)
@given(case=byte_views())
def test_unshuffled_elements_are_the_inverse_transposition(case: tuple[np.ndarray, int]) -> None:
    # any bytes as planes (not only shuffle's output)
    data, element_size = case
    whole = (data.size // element_size) * element_size
    expected = np.concatenate(
        [data[:whole].reshape(element_size, -1).T.ravel(), data[whole:]])
    np.testing.assert_array_equal(unshuffle_bytes(data, element_size), expected)
