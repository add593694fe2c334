"""What a conversion plans for each array: the encoding asked, the quantization
planned, and the checked target.

:class:`Encoding` is what the caller asks an array to become; :class:`Quantized` what
the quantization planner gives one float array (:func:`zarrext.jobs.convert.scanning.
quantized`); :class:`Target` the keyword arguments of :func:`zarrext.create_array`
that make one array's copy, as :func:`zarrext.jobs.convert.targets.plan_targets`
checked them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Encoding", "Layout", "Quantized", "Target", "shape_text"]

Layout = Literal["fixed-slot", "append"] | None


@dataclass(frozen=True)
class Quantized:
    """What the quantization planner gives one float array
    (:func:`zarrext.jobs.convert.scanning.quantized`): the filters storing it as
    integers, the attributes recording the plan, and the bound to check on writing."""

    filters: tuple[Any, ...]
    attributes: dict[str, Any]
    max_abs_error: float
    stored_dtype: str
    plan: Any = field(default=None, compare=False)
    """The planner's own record of the plan
    (:class:`~zarrext.quantization.planning.QuantizationPlan`)."""
    sampled: bool = False
    """Planned from a dry run's sample of the array, not from all of it."""


@dataclass(frozen=True)
class Encoding:
    """What a converted array becomes; every field left ``None`` keeps zarrext's default.

    Attributes
    ----------
    codecs : sequence of dict, optional
        The codec chain inside a chunk (inside the shard's inner chunks when
        sharded) as zarr's codec JSON (``[{"name": "bytes"}, {"name": "zstd"}]``).
        Default: the source's array->bytes codec, then ``conditional([shuffle,
        zstd])`` with the decision ``compress_if_smaller``
        (:func:`~zarrext.jobs.convert.targets.default_compressors`).
    chunks : tuple of int, optional
        The chunk shape (the inner chunks when sharded). Default: the source's.
    shards : tuple of int, "auto" or False, optional
        The shard shape, fitted to each array (:func:`zarrext.jobs.shard_shapes.
        fitted_shards`: clipped to it, or ``"auto"``: grown from its chunks towards
        a target size), or ``False`` for no shards. Default: the source's shards.
    shard_layout : {"fixed-slot", "append"}, optional
        How the shards' inner chunks are laid out; ``None``: dense.
    like : array, path or URL, optional
        Take chunks, shards, codecs and layout from this array (each field given
        here still wins), and the decision its attributes record, which no field
        here sets (without ``like``: ``compress_if_smaller``).
    max_abs_error : float, optional
        Quantize float arrays within this bound (scale_offset + cast_value).
    decision : Decision, str, int or callable, optional
        The decision for the ``conditional`` codecs (a built-in's spelling is
        recorded, as :func:`zarrext.create_array` records it). Default: ``like``'s
        recorded decision, else ``compress_if_smaller``.
    """

    codecs: Sequence[Mapping[str, Any]] | None = None
    chunks: tuple[int, ...] | None = None
    shards: tuple[int, ...] | Literal[False, "auto"] | None = None
    shard_layout: Layout = None
    like: Any = None
    max_abs_error: float | None = None
    decision: Any = None


@dataclass(frozen=True)
class Target:
    """A selected array's plan: its path in the group and the keyword arguments of
    :func:`zarrext.create_array` that make its copy, checked."""

    path: str
    source: Any
    kwargs: dict[str, Any]
    quantized: Quantized | None = None
    chain: str = ""
    """The codecs inside a chunk as the checked metadata names them."""

    @property
    def write_unit(self) -> tuple[int, ...]:
        shards = self.kwargs.get("shards")
        return tuple(shards if shards is not None else self.kwargs["chunks"])

    def describe(self) -> str:
        """What the array becomes, in one line (``--dry-run``, reports)."""
        layout = self.kwargs.get("shard_layout")
        grid = f"chunks {shape_text(self.kwargs['chunks'])}"
        if self.kwargs.get("shards") is not None:
            grid += f" in shards {shape_text(self.kwargs['shards'])} ({layout or 'dense'})"
        quantized = (
            f"; quantized to {self.quantized.stored_dtype} within "
            f"{self.quantized.max_abs_error:g}"
            f"{' (range of the sample)' if self.quantized.sampled else ''}"
            if self.quantized else ""
        )
        return f"{grid}; {self.chain}{quantized}"


def shape_text(shape: Iterable[int]) -> str:
    return "x".join(str(n) for n in shape)
