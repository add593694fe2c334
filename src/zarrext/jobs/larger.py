"""A copy that takes more bytes than its source is refused, unless allowed.

``zarrext convert`` and ``zarrext quantize`` exist to make arrays smaller; a copy
whose chunks take more bytes than its source's (a source's filters the copy cannot
keep, codecs that compress less, an error bound too tight for small integers) is
refused once it is written, before anything is published: the staged output is
discarded and nothing opens at the output (``allow_larger`` keeps it). Both jobs
check each array's :class:`~zarrext.jobs.convert.reports.ConvertReport` here, the one
definition of "larger" (:func:`is_larger`): the stored bytes of the copy's chunks
against the source's (its chunk objects for a format 2 source), as the report
counts them, beyond a margin of :data:`MARGIN` of the source and at least
:data:`MARGIN_BYTES`. The margin is what an encoding adds to data no codec
compresses (``conditional``'s header, a checksum, a shard index: a few bytes per
chunk), so that such data converts; a copy that lost its source's filters or
compression (1.4x, 2.7x) does not.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from zarrext.errors import LargerOutputError

__all__ = ["ALLOW_LARGER", "MARGIN", "MARGIN_BYTES", "CopySizes", "is_larger",
           "refuse_larger", "refusing_larger"]


class CopySizes(Protocol):
    """What a copy's report says of its size (a conversion's ``ConvertReport``)."""

    @property
    def source_bytes(self) -> int: ...

    @property
    def output_bytes(self) -> int: ...


class CopiedArray(Protocol):
    """The array a copy wrote (a conversion's ``Target``)."""

    @property
    def path(self) -> str: ...

    def describe(self) -> str: ...

MARGIN = 0.05
"""How much more than its source a copy may take (a fraction of the source's bytes)."""

MARGIN_BYTES = 1024
"""How many bytes more than its source a copy may take at least (small arrays)."""

ALLOW_LARGER = "accept it with --allow-larger (allow_larger=True)"
"""How a refused copy is kept, as the refusal says it."""


def is_larger(source_bytes: int, output_bytes: int, *, margin: bool = True) -> bool:
    """Whether a copy of ``output_bytes`` counts as larger than its ``source_bytes``:
    beyond the margin (:data:`MARGIN` of the source, at least :data:`MARGIN_BYTES`), or
    by any byte without it (``margin=False``: a quantized copy, which exists to be
    smaller, adds no header to incompressible data)."""
    allowed = max(MARGIN_BYTES, int(source_bytes * MARGIN)) if margin else 0
    return output_bytes - source_bytes > allowed


def refuse_larger(
    report: CopySizes,
    *,
    allow_larger: bool,
    copy: str,
    detail: str,
    remedy: str,
    error: type[LargerOutputError] = LargerOutputError,
    margin: bool = True,
) -> None:
    """Raise ``error`` (one line) if the copy ``report`` describes is larger than its
    source (:func:`is_larger`) and not ``allow_larger``.

    ``copy`` names it (``"the copy of temperature"``), ``detail`` says what it stores
    (its encoding), ``remedy`` what to do instead of accepting it.
    """
    if allow_larger or not is_larger(report.source_bytes, report.output_bytes, margin=margin):
        return
    from zarrext.jobs.inspection import size_change

    raise error(
        f"{copy} would be {size_change(report.source_bytes, report.output_bytes)} than its "
        f"source ({report.output_bytes:,} vs {report.source_bytes:,} bytes of chunks; "
        f"{detail}); {remedy}, or {ALLOW_LARGER}"
    )


def refusing_larger(
    allow_larger: bool, source: object
) -> Callable[[CopiedArray, CopySizes], None]:
    """``convert``'s check on each array written (``run_conversion``'s ``written``): a
    copy larger than its source refused, unless ``allow_larger``; ``source`` as the
    user gave it names a lone array."""

    def written(target: CopiedArray, report: CopySizes) -> None:
        name = target.path or (
            os.fspath(source) if isinstance(source, str | os.PathLike) else "/"
        )
        refuse_larger(
            report, allow_larger=allow_larger, copy=f"the copy of {name}",
            detail=target.describe(), remedy="give other codecs (--codecs)",
        )

    return written
