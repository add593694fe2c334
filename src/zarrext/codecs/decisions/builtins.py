"""zarrext's built-in decisions, each one class registered with
:func:`~zarrext.codecs.decisions.registry.builtin` under the name its spelling uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zarrext.codecs.decisions.base import ChunkEncoding, Decision, DecisionError, apply_after_first
from zarrext.codecs.decisions.fixed import FixedMask
from zarrext.codecs.decisions.masks import all_bits
from zarrext.codecs.decisions.registry import BuiltinDecision, builtin

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer

__all__ = [
    "MAX_SMALLEST_CODECS",
    "NEVER_APPLY",
    "AlwaysApply",
    "CompressIfSmaller",
    "NeverApply",
    "RatioAtMost",
    "Smallest",
    "SpecLiteral",
]

MAX_SMALLEST_CODECS = 8


@builtin
class CompressIfSmaller(BuiltinDecision):
    """Apply a codec only when it makes the chunk strictly smaller.

    The spec's rule, ``len(trial) < len(unencoded)``, cascaded. A codec whose trial
    keeps the size unchanged (a filter such as ``shuffle``) is applied tentatively
    and kept only if the next size-changing codec, applied on top of it, makes the
    bytes smaller than they were before the filter; otherwise that codec is tried
    once more without the filter. Filters with no size-changing codec after them
    are not applied. Every kept step shrinks the bytes, so the result is never
    longer than the input.
    """

    name = "compress_if_smaller"
    opaque_bytes = True
    trial_encode = True
    guarantees_no_inflation = True

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = 0
        base = chunk.data  # bytes before any tentative filter
        current = base
        pending = 0  # bits of tentatively applied size-preserving codecs
        for i in range(len(chunk.codecs)):
            out = chunk.encode(i, current)
            if len(out) == len(current):
                pending |= 1 << i
                current = out
                continue
            if len(out) < len(base):
                mask |= pending | 1 << i
                base = current = out
            elif pending:
                alone = chunk.encode(i, base)
                if len(alone) < len(base):
                    mask |= 1 << i
                    base = alone
                current = base
            else:
                current = base
            pending = 0
        return mask, base


@builtin
class AlwaysApply(FixedMask, BuiltinDecision):
    """Every nested codec, in order, on every chunk."""

    name = "always_apply"
    opaque_bytes = True

    def __init__(self) -> None:
        super().__init__(None, self.name)


@builtin
class NeverApply(FixedMask, BuiltinDecision):
    """No nested codec: every chunk stored raw (mask 0). Its spelling gives
    :data:`NEVER_APPLY`, which the codec stores without asking it."""

    name = "never_apply"
    opaque_bytes = True

    def __init__(self) -> None:
        super().__init__(0, self.name)

    @classmethod
    def from_arguments(cls, *args: Any, **kwargs: Any) -> Decision:
        return NEVER_APPLY


NEVER_APPLY = NeverApply()


@builtin
class SpecLiteral(BuiltinDecision):
    """Spec 000's default rule read literally: every codec judged on the original chunk.

    Nested codec ``i`` is trial-encoded on the chunk as it entered the conditional
    codec (not on the output of the codecs before it) and enabled when its trial
    is strictly shorter than that chunk; the enabled codecs are then applied in
    order (the first one's trial is its output; the rest are encoded once more on
    what precedes them). A filter that keeps the size (``shuffle``) is never
    enabled, and the enabled codecs together may give more bytes than the raw
    chunk, so the output is not bounded by it (``guarantees_no_inflation`` False).
    ``compress_if_smaller`` is zarrext's cascaded reading (see :mod:`zarrext.codecs.decisions`).
    """

    name = "spec_literal"
    opaque_bytes = True
    trial_encode = True

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = 0
        first: Buffer | None = None
        for i in range(len(chunk.codecs)):
            trial = chunk.encode(i, chunk.data)
            if len(trial) < len(chunk.data):
                first = trial if first is None else first
                mask |= 1 << i
        return mask, apply_after_first(chunk, mask, first)


@builtin
class Smallest(BuiltinDecision):
    """Try every mask and keep the smallest output; ties go to fewer codecs.

    Prefixes are shared (a depth-first walk), so ``2**n - 1`` nested encodes at
    most. Refuses more than :data:`MAX_SMALLEST_CODECS` nested codecs.
    """

    name = "smallest"
    opaque_bytes = True
    trial_encode = True
    guarantees_no_inflation = True

    def check(self, n_codecs: int) -> None:
        if n_codecs > MAX_SMALLEST_CODECS:
            raise DecisionError(
                f"decision 'smallest' tries all 2**n masks and refuses more than "
                f"{MAX_SMALLEST_CODECS} nested codecs; this conditional codec has {n_codecs}"
            )

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        n = len(chunk.codecs)
        self.check(n)
        best: tuple[tuple[int, int, int], Buffer] | None = None

        def visit(i: int, mask: int, buffer: Buffer) -> None:
            nonlocal best
            if i == n:
                key = (len(buffer), mask.bit_count(), mask)
                if best is None or key < best[0]:
                    best = (key, buffer)
                return
            visit(i + 1, mask, buffer)
            visit(i + 1, mask | 1 << i, chunk.encode(i, buffer))

        visit(0, 0, chunk.data)
        assert best is not None
        return best[0][2], best[1]


@builtin
class RatioAtMost(BuiltinDecision):
    """Every nested codec, in order, when together they make the chunk at most ``r``
    of its size; else none (the chunk stored raw).

    ``ratio_at_most(0.9)`` compresses only the chunks it shrinks by 10% or more, so
    that readers decode only where it pays. ``r`` is in (0, 1], so the output is
    never longer than the input.
    """

    name = "ratio_at_most"
    opaque_bytes = True
    parameters = ("r",)
    example = "ratio_at_most(0.9)"
    trial_encode = True
    guarantees_no_inflation = True

    def __init__(self, r: float) -> None:
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0 < r <= 1:
            raise DecisionError(f"decision {self.name!r}: r must be a number in (0, 1], got {r!r}")
        self.r = float(r)

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = all_bits(len(chunk.codecs))
        out = chunk.apply(mask)
        if len(chunk.data) and len(out) / len(chunk.data) <= self.r:
            return mask, out
        return 0, chunk.data
