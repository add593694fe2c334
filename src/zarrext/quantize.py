"""Plan ``scale_offset`` + ``cast_value`` filters that store floats as small integers.

zarr-python 3.4.2 ships both codecs (``zarr.codecs.ScaleOffset`` and
``zarr.codecs.CastValue``); this module only *chooses* their configuration:

- :func:`plan` returns the filter list for ``zarr.create_array(filters=...)`` that
  stores floating-point data in the smallest integer type while every finite value
  decodes within ``max_abs_error``. The bound is not only derived on paper: the
  candidate filters are run over the data (or, for a value range, over probe values
  that include the worst-case points between quantization levels) and the scale is
  tightened until the decoded values meet it.
- :func:`from_cf` converts netCDF/CF packing attributes (``scale_factor``,
  ``add_offset``, ``_FillValue``, ``missing_value``) into equivalent filters.

Layout of the integer codes: the planned range's codes, headroom on each side of
them (an eighth of the range, at least 8 codes), and the codes reserved for NaN, +Inf
and -Inf at the far end of the integer type, mapped in both directions through
``cast_value``'s ``scalar_map``. The offset is the array's fill value when that is
finite (so that it round-trips exactly, as code 0); else it places the codes in the
type. A finite fill far from the values (netCDF's ``-9999``), which as the offset
would take a wider integer type, gets a reserved code of its own instead, mapped to
and from its scaled value so that it still round-trips exactly. Values a little
beyond the range are thus stored within the bound by any writer; zarrext's writers
refuse any value that would not come back within it
(:mod:`zarrext.codecs.quantized_writes`, :class:`UnstorableValueError`).

This module is the public face of what lives below it:
:mod:`~zarrext.codecs.filter_roundtrip` runs the real codecs and measures errors,
:mod:`~zarrext.quantization.planning` chooses the configuration,
:mod:`~zarrext.quantization.cf` converts CF packing. The copy job (``zarrext
quantize``, the only part doing I/O, :mod:`zarrext.jobs.quantize`) is ``zarrext
convert``'s quantizing form: one engine (:mod:`zarrext.jobs.convert`) scans, writes,
checks and publishes every conversion. :func:`copy_quantized` copies one array
(:mod:`zarrext.jobs.quantize.copying`), :func:`copy_group_quantized` a group
(:mod:`zarrext.jobs.quantize.groups`).

Layer: above :mod:`zarrext.jobs` (beside :mod:`zarrext.xarray`, neither importing the
other); may import the jobs, :mod:`zarrext.api` and every layer below.
"""

from __future__ import annotations

from zarrext.codecs.filter_roundtrip import roundtrip, worst_error
from zarrext.errors import UnstorableValueError
from zarrext.jobs.quantize.copying import CopyReport, LargerOutputError, copy_quantized
from zarrext.jobs.quantize.groups import copy_group_quantized, floating_arrays
from zarrext.quantization.cf import CFConversion, InexactConversionWarning, from_cf
from zarrext.quantization.planning import (
    QuantizationError,
    QuantizationPlan,
    plan,
    plan_quantization,
)

__all__ = [
    "CFConversion",
    "CopyReport",
    "InexactConversionWarning",
    "LargerOutputError",
    "QuantizationError",
    "QuantizationPlan",
    "UnstorableValueError",
    "copy_group_quantized",
    "copy_quantized",
    "floating_arrays",
    "from_cf",
    "plan",
    "plan_quantization",
    "roundtrip",
    "worst_error",
]
