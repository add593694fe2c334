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


@settings(max_examples=60, deadline=None)
@given(
    payload=st.binary(min_size=0, max_size=300),
    element_size=st.sampled_from([1, 2, 3, 4, 5, 8, 16]),
    offset=st.integers(0, 3),
    step=st.sampled_from([1, 2]),
)
def test_planes_are_the_transpositions(
    payload: bytes, element_size: int, offset: int, step: int
) -> None:
    # views at any byte offset (unaligned integers), and strided ones
    data = np.frombuffer(b"\x00" * offset + payload, np.uint8)[offset:][::step]
    shuffled = shuffle_bytes(data, element_size)
    np.testing.assert_array_equal(shuffled, _transposed(data, element_size))
    np.testing.assert_array_equal(unshuffle_bytes(shuffled, element_size), data)


@settings(max_examples=60, deadline=None)
@given(
    payload=st.binary(min_size=0, max_size=300),
    element_size=st.sampled_from([1, 2, 3, 4, 5, 8, 16]),
    offset=st.integers(0, 3),
    step=st.sampled_from([1, 2]),
)
def test_unshuffled_elements_are_the_inverse_transposition(
    payload: bytes, element_size: int, offset: int, step: int
) -> None:
    # any bytes as planes (not only shuffle's output), at any offset, strided or not
    data = np.frombuffer(b"\x00" * offset + payload, np.uint8)[offset:][::step]
    whole = (data.size // element_size) * element_size
    expected = np.concatenate(
        [data[:whole].reshape(element_size, -1).T.ravel(), data[whole:]])
    np.testing.assert_array_equal(unshuffle_bytes(data, element_size), expected)
