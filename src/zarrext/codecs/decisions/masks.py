"""A conditional codec's mask as a value: zarrext's one notation for it
(:func:`format_mask`) and the checks that it fits the nested codecs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from zarrext.codecs.decisions.base import DecisionError

__all__ = ["all_bits", "check_mask", "format_mask", "lowest_bit_beyond"]


def all_bits(n: int) -> int:
    return (1 << n) - 1


def format_mask(mask: int, n_codecs: int) -> str:
    """A conditional codec's mask as zarrext prints it everywhere: ``0b`` + one digit per codec.

    Bit ``i`` (nested codec ``i`` applied) is the ``i``-th digit from the right, so
    with two nested codecs ``0b01`` is the first codec alone and ``0b11`` both. A mask
    with bits beyond ``n_codecs`` (invalid) shows all of its bits.

    >>> format_mask(1, 2), format_mask(0, 4), format_mask(0b101, 2)
    ('0b01', '0b0000', '0b101')
    """
    return f"0b{int(mask):0{max(int(n_codecs), 1)}b}"


def lowest_bit_beyond(mask: int, n_codecs: int) -> int | None:
    """The lowest bit of ``mask`` at or above ``n_codecs``, or ``None`` if there is none."""
    extra = mask >> n_codecs
    return n_codecs + (extra & -extra).bit_length() - 1 if extra else None


def check_mask(mask: int, n_codecs: int, where: str | Callable[[], str]) -> int:
    """Refuse masks that set bits beyond the configured codecs, naming ``where`` (or
    what ``where()`` returns: a message made only for a mask refused)."""
    if mask.__class__ is int and mask >= 0 and not mask >> n_codecs:
        return mask  # the common case, every chunk: nothing built for a message

    def named() -> str:
        return where() if callable(where) else where

    if isinstance(mask, bool) or not isinstance(mask, int | np.integer):
        raise DecisionError(f"{named()}: mask must be an integer, got {mask!r}")
    mask = int(mask)
    if mask < 0:
        raise DecisionError(f"{named()}: mask must be >= 0, got {mask}")
    bit = lowest_bit_beyond(mask, n_codecs)
    if bit is not None:
        raise DecisionError(
            f"{named()}: mask {format_mask(mask, n_codecs)} sets bit {bit}, but only "
            f"{n_codecs} nested codecs are configured"
        )
    return mask
