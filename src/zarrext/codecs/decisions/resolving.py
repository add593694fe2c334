"""Anything accepted as a decision turned into a :class:`~zarrext.codecs.decisions.Decision`."""

from __future__ import annotations

import numpy as np

from zarrext.codecs.decisions.base import Decision, DecisionError, DecisionLike
from zarrext.codecs.decisions.fixed import NO_DECISION, FixedMask
from zarrext.codecs.decisions.functions import from_function
from zarrext.codecs.decisions.masks import format_mask
from zarrext.codecs.decisions.registry import from_spelling

__all__ = ["resolve_decision"]


def resolve_decision(decision: DecisionLike, trial_encode: bool | None = None) -> Decision:
    """Turn anything accepted as a decision into a :class:`Decision`.

    ``None`` means no decision: every nested codec is skipped (the spec's default),
    as :data:`NO_DECISION`, which zarrext's writers tell from ``"never_apply"``.
    """
    if decision is None:
        return NO_DECISION
    if isinstance(decision, str):
        decision = from_spelling(decision)
    if isinstance(decision, Decision):
        if trial_encode is False and decision.trial_encode:
            raise DecisionError(
                f"decision {decision.name!r} works by trial encoding; trial_encode=False "
                "contradicts it"
            )
        return decision
    if isinstance(decision, bool):
        raise DecisionError("a decision cannot be a bool; use 'always_apply' or 'never_apply'")
    if isinstance(decision, int | np.integer):
        if decision < 0:
            raise DecisionError(f"a fixed mask must be >= 0, got {decision}")
        # the decision does not know its codec yet: as many digits as the mask needs
        return FixedMask(int(decision), f"mask {format_mask(decision, int(decision).bit_length())}")
    if callable(decision):
        return from_function(decision, trial_encode)
    raise DecisionError(f"not a decision: {decision!r}")
