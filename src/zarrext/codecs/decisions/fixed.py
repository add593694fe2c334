"""Decisions that do not look at the chunk's bytes: the same mask for every chunk
(:class:`FixedMask`), masks computed beforehand (:func:`from_plan`), and what a codec
holds when given no decision (:data:`NO_DECISION`, :class:`Undecided`)."""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext.codecs.decisions.base import (
    ChunkEncoding,
    Decision,
    DecisionError,
    NoDecisionWarning,
)
from zarrext.codecs.decisions.masks import all_bits, check_mask

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer

__all__ = ["NO_DECISION", "FixedMask", "Plan", "Undecided", "from_plan"]


class FixedMask(Decision):
    """The same mask for every chunk (``None``: every nested codec)."""

    keeps_chunk_bytes = False
    opaque_bytes = True

    def __init__(self, mask: int | None, name: str) -> None:
        self.mask = mask
        self.name = name
        self.guarantees_no_inflation = mask == 0

    def check(self, n_codecs: int) -> None:
        if self.mask is not None:
            check_mask(self.mask, n_codecs, f"decision {self.name!r}")

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        # Bits beyond the codecs were refused by check(); the codec checks the result too.
        mask = all_bits(len(chunk.codecs)) if self.mask is None else self.mask
        return mask, chunk.apply(mask)


class Plan(Decision):
    """Masks computed beforehand, looked up by chunk index (spec example 3)."""

    name = "plan"
    keeps_chunk_bytes = False
    opaque_bytes = True

    def __init__(self, masks: np.ndarray) -> None:
        masks = np.asarray(masks)
        if not np.issubdtype(masks.dtype, np.integer):
            raise DecisionError(f"from_plan: masks must be an integer array, got {masks.dtype}")
        if masks.size and masks.min() < 0:
            raise DecisionError("from_plan: masks must be >= 0")
        self.masks = masks

    def check(self, n_codecs: int) -> None:
        if self.masks.size and int(self.masks.max()) >> n_codecs:
            check_mask(int(self.masks.max()), n_codecs, "from_plan")

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        index = chunk.chunk_index
        if index is None:
            raise DecisionError(
                "a plan decision needs the chunk index; open the array with "
                "zarrext.open_array or zarrext.create_array"
            )
        if len(index) != self.masks.ndim or any(
            not 0 <= c < s for c, s in zip(index, self.masks.shape, strict=True)
        ):
            raise DecisionError(
                f"{chunk.where()} is outside the plan, whose shape is {self.masks.shape}"
            )
        # check() refused bits beyond the codecs; the codec checks the result too.
        mask = int(self.masks[index])
        return mask, chunk.apply(mask)


def from_plan(masks: Any) -> Decision:
    """A decision that applies precomputed masks, indexed by chunk index.

    Parameters
    ----------
    masks : array-like of int
        One mask per chunk, shaped like the chunk grid (for sharded arrays, like
        the array-wide grid of inner chunks).
    """
    return Plan(np.asarray(masks))


class _NoDecision(FixedMask):
    """What a ``conditional`` codec holds when given no decision: mask 0, the spec's
    default, like ``never_apply`` but not chosen. zarrext's writers tell the two
    apart: they replace this one with the decision an array's attributes record, or
    with :class:`Undecided`, which says that chunks are stored raw; a
    ``never_apply`` given on purpose is kept. Unpickles as :data:`NO_DECISION`."""

    opaque_bytes = True

    def __init__(self) -> None:
        # a name of its own: reprs and reports tell "not given" from Undecided's "none"
        super().__init__(0, "not given")

    def __reduce__(self) -> str:
        return "NO_DECISION"


NO_DECISION = _NoDecision()


class Undecided(FixedMask):
    """No decision given and none recorded: mask 0 (the spec's default), said once.

    zarrext binds it to the ``conditional`` codecs of an array opened or created
    with neither a ``decision=`` nor a recorded one. It stores every chunk raw, as
    plain zarr-python writers do, and warns (:class:`NoDecisionWarning`) when it
    chooses the first chunk: one warning per opened array, however many chunks,
    threads or ``conditional`` codecs (they share this object).

    Parameters
    ----------
    array : str
        The array, as the warning names it.
    advice : str, optional
        What the warning tells the writer to do, for writers that do not go through
        :func:`zarrext.open_array` (xarray's ``to_zarr``).
    """

    opaque_bytes = True
    ADVICE = (
        "pass decision=, e.g. 'compress_if_smaller', to zarrext.open_array or "
        "zarrext.create_array (create_array records a built-in decision for later "
        "opens), or run zarrext recompress"
    )

    def __init__(self, array: str, advice: str | None = None) -> None:
        super().__init__(0, "none")
        self.array = array
        self.advice = advice or self.ADVICE
        self.warned = False

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        if not self.warned:
            with _WARN_LOCK:  # codec threads choose chunks concurrently
                first = not self.warned
                self.warned = True
            if first:
                warnings.warn(
                    f"array {self.array} has a conditional codec but no decision, so its "
                    f"chunks are stored raw (mask 0); {self.advice}",
                    NoDecisionWarning,
                    stacklevel=2,
                )
        return super().choose(chunk)


# One lock for all Undecided objects: a lock of their own would not pickle (Dask).
_WARN_LOCK = threading.Lock()
