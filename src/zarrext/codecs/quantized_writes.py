"""Which values a quantized array gives back as themselves; zarrext refuses the others.

A quantized array stores floats through ``scale_offset`` + ``cast_value``: a value
becomes the integer code its scaled value rounds to. Codes listed in
``cast_value``'s ``scalar_map`` decode to what the map says (NaN, +Inf, -Inf, or a
fill value far from the planned range), so a finite value that lands on one of them
reads back as that with no error; a code
outside the integer type is an error for ``cast_value`` (clamped or wrapped with
``out_of_range``). :class:`StorableValues` says, from the filters alone, which
values of a write would not come back as themselves; with the plan the array's
attributes record (:class:`PlannedRange`, written by :func:`zarrext.create_array`
given :func:`zarrext.quantize.plan`'s filters, by xarray's ``to_zarr`` given them
in ``encoding``, and by ``zarrext quantize``), also those that would decode
farther than the planned ``max_abs_error``.

Where zarrext refuses them, each time before anything of the write is stored:

- :class:`~zarrext.pipeline.ZarrextCodecPipeline`'s ``write``: every write through
  zarrext's pipeline (arrays of :func:`zarrext.open_array` /
  :func:`zarrext.create_array`, plain ``zarr.open_array`` with
  ``codec_pipeline.path`` set to zarrext's, ``recompress``, each task of
  :func:`zarrext.write_dask`). zarr-python hands the pipeline all the chunks of one
  write in one call, with the values of the whole selection: they are checked
  before the first chunk is encoded.
- :func:`zarrext.create_array` given ``data=``: before the array is created.
- :func:`zarrext.write_dask`: the whole source, before any task writes (one more
  pass over a Dask source's inputs).
- xarray's ``to_zarr`` (new arrays, appends, region writes): every variable,
  before xarray creates or resizes an array (one more pass over a Dask-backed
  variable's inputs).
- ``zarrext quantize``: each block before it is written; the output is published
  only when complete.

A writer without zarrext (zarr-python's own pipeline, another implementation) is
not checked: what protects it is the headroom :func:`zarrext.quantize.plan` leaves
between the planned range and the reserved codes.

This module imports nothing of zarrext's runtime: the pipeline, the API and the
quantize jobs use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs import TransposeCodec
from zarr.codecs.cast_value import CastValue
from zarr.codecs.scale_offset import ScaleOffset
from zarr.codecs.sharding import ShardingCodec
from zarr.core.dtype import get_data_type_from_native_dtype

from zarrext.codecs.decisions import with_record, zarrext_record
from zarrext.errors import UnstorableValueError

__all__ = [
    "PLAN_KEY",
    "PlannedFilters",
    "PlannedRange",
    "Refusal",
    "StorableValues",
    "array_label",
]

PLAN_KEY = "quantize"
"""The plan's entry in zarrext's record in an array's attributes
(:func:`zarrext.codecs.decisions.zarrext_record`)."""


def array_label(path: str | None) -> str:
    """An array as a refusal names it: ``"array 'path'"`` (``'/'`` for the root)."""
    return f"array {(path or '/')!r}" if path is not None else "a quantized array"


@dataclass(frozen=True)
class PlannedRange:
    """What a quantization was planned for, as the array's attributes record it.

    Attributes
    ----------
    value_range : (float, float)
        The finite range ``[lo, hi]`` the plan covers.
    max_abs_error : float
        The bound every value of that range meets.
    headroom : (float, float)
        How far below ``lo`` and above ``hi`` values still decode within
        ``max_abs_error`` (verified when the plan was made), whoever writes them.
    """

    value_range: tuple[float, float]
    max_abs_error: float
    headroom: tuple[float, float]

    @property
    def verified(self) -> tuple[float, float]:
        """``[lo - headroom below, hi + headroom above]``: values any writer stores within
        the bound."""
        (lo, hi), (below, above) = self.value_range, self.headroom
        return lo - below, hi + above

    def to_json(self) -> dict[str, Any]:
        return {
            "range": list(self.value_range),
            "max_abs_error": self.max_abs_error,
            "headroom": list(self.headroom),
        }

    def recorded_in(self, attributes: Mapping[str, Any] | None) -> dict[str, Any]:
        """``attributes`` with this plan recorded as zarrext's record's ``quantize``
        (:func:`zarrext.codecs.decisions.with_record`; the rest of the record, such as
        the decision, kept).

        Raises
        ------
        ValueError
            When ``attributes["zarrext"]`` is there and not a record.
        """
        return with_record(attributes, "quantization plan", **{PLAN_KEY: self.to_json()})

    @classmethod
    def recorded(cls, attributes: Mapping[str, Any]) -> PlannedRange | None:
        """The plan ``attributes`` record, or None (none, or not one zarrext wrote: the
        filters alone are then checked)."""
        record = zarrext_record(attributes)
        plan = record.get(PLAN_KEY) if record is not None else None
        if not isinstance(plan, Mapping):
            return None
        try:
            lo, hi = (float(v) for v in plan["range"])
            below, above = (float(v) for v in plan["headroom"])
            bound = float(plan["max_abs_error"])
        except (KeyError, TypeError, ValueError):
            return None
        numbers = (lo, hi, below, above, bound)
        if not all(math.isfinite(v) for v in numbers) or lo > hi or min(below, above, bound) < 0:
            return None
        return cls((lo, hi), bound, (below, above))


class PlannedFilters(list[ArrayArrayCodec]):
    """:func:`zarrext.quantize.plan`'s filter list, carrying the plan it was made for.

    A list as ``zarr.create_array(filters=...)`` takes it; :func:`zarrext.create_array`
    and xarray's ``to_zarr`` (``encoding={"v": {"filters": ...}}``) also record
    :attr:`planned` in the new array's attributes, for later writers to check.
    :attr:`fill_value` is the fill value the plan was made for.
    """

    def __init__(
        self, filters: Iterable[ArrayArrayCodec], planned: PlannedRange, fill_value: float
    ) -> None:
        super().__init__(filters)
        self.planned = planned
        self.fill_value = fill_value


def _quantizing(codecs: Iterable[Any]) -> tuple[ScaleOffset | None, CastValue] | None:
    """The ``scale_offset`` (if any) and integer ``cast_value`` a chain's values meet
    first, through transposes and into a sharding codec's inner chain; else None."""
    scale_offset: ScaleOffset | None = None
    for codec in codecs:
        if isinstance(codec, TransposeCodec):
            continue  # moves values, changes none
        if isinstance(codec, ScaleOffset) and scale_offset is None:
            scale_offset = codec
            continue
        if isinstance(codec, CastValue):
            if codec.dtype.to_native_dtype().kind not in "iu":
                return None
            return scale_offset, codec
        if isinstance(codec, ShardingCodec) and scale_offset is None:
            return _quantizing(codec.codecs)
        return None
    return None


def _read_back_as(value: Any, offset: Any, scale: Any) -> str:
    """What a reserved code whose decode map gives ``value`` reads back as: NaN or an
    infinity as it is, a finite value through ``scale_offset``'s decode."""
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "+Infinity" if value > 0 else "-Infinity"
    with np.errstate(all="ignore"):
        return str(value / scale + offset)


def _round(scaled: npt.NDArray[Any], rounding: str) -> npt.NDArray[np.float64]:
    """``cast_value``'s rounding of scaled values to integers, as float64."""
    s = scaled.astype(np.float64)
    if rounding == "towards-zero":
        return np.trunc(s)
    if rounding == "towards-positive":
        return np.ceil(s)
    if rounding == "towards-negative":
        return np.floor(s)
    if rounding == "nearest-away":
        whole = np.trunc(s)
        return whole + np.where(np.abs(s - whole) >= 0.5, np.sign(s), 0.0)
    return np.rint(s)  # nearest-even


@dataclass(frozen=True)
class Refusal:
    """A value a write would not get back, and why (see :meth:`StorableValues.reason`)."""

    value: float
    reason: str


@dataclass(frozen=True)
class StorableValues:
    """Which finite values an array quantized by ``scale_offset`` + ``cast_value`` stores.

    Build it with :meth:`of_codecs` or :meth:`of_metadata` (None for an array that
    does not quantize floats to integers). NaN and infinities are not its concern:
    they are stored as the ``scalar_map`` says, or refused by ``cast_value``.

    A finite value is refused when its code (``(value - offset) * scale`` in the
    array's float type, rounded as ``cast_value`` rounds) would be

    - a key of ``cast_value``'s decode map (reserved, e.g. for NaN, or for a finite
      fill value far from the planned range), unless the value's scaled value is a
      key of the encode map (mapped on purpose: with a recorded plan, such a value
      is stored when the map gives it back within ``max_abs_error``, as it gives a
      fill value back exactly);
    - outside the integer type when ``cast_value``'s ``out_of_range`` is unset (it
      would refuse it), or not finite (``scale_offset`` overflows); an array whose
      metadata asks to ``clamp`` or ``wrap`` gets what the spec prescribes (its
      metadata says so: nothing silent), unless the clamped or wrapped code is
      reserved, or a recorded plan's bound is missed;
    - with a :class:`PlannedRange` recorded, for a value outside its verified range:
      decoded (by zarr-python's codecs) farther than ``max_abs_error``.
    """

    dtype: np.dtype[Any]
    offset: Any
    scale: Any
    stored: np.dtype[Any]
    rounding: str
    out_of_range: str | None
    reserved: Mapping[int, str]  # code -> what it reads back as
    mapped: frozenset[float]  # the encode map's finite keys (scaled values)
    filters: tuple[ArrayArrayCodec, ...]
    fill_value: Any
    planned: PlannedRange | None = None

    @classmethod
    def of_codecs(
        cls,
        codecs: Iterable[Any],
        dtype: npt.DTypeLike,
        fill_value: Any,
        planned: PlannedRange | None = None,
    ) -> StorableValues | None:
        """What an array of ``dtype`` with ``codecs`` (its whole chain) stores; None
        unless it is floats quantized to integers."""
        float_type = np.dtype(dtype)
        if float_type.kind != "f":
            return None
        float_type = float_type.newbyteorder("=")
        found = _quantizing(codecs)
        if found is None:
            return None
        scale_offset, cast_value = found
        zdtype = get_data_type_from_native_dtype(float_type)
        if scale_offset is None:
            offset, scale = float_type.type(0), float_type.type(1)
        else:
            offset = zdtype.from_json_scalar(scale_offset.offset, zarr_format=3)
            scale = zdtype.from_json_scalar(scale_offset.scale, zarr_format=3)
        stored = cast_value.dtype.to_native_dtype()
        scalar_map: Mapping[str, Any] = dict(cast_value.scalar_map or {})
        reserved = {
            int(cast_value.dtype.from_json_scalar(code, zarr_format=3)):
                _read_back_as(zdtype.from_json_scalar(value, zarr_format=3), offset, scale)
            for code, value in (scalar_map.get("decode") or {}).items()
        }
        # the encode map's keys are what cast_value is given: values after scale_offset
        mapped = frozenset(
            v for v in (
                float(zdtype.from_json_scalar(k, zarr_format=3))
                for k in (scalar_map.get("encode") or {})
            ) if math.isfinite(v)
        )
        filters = tuple(c for c in (scale_offset, cast_value) if c is not None)
        return cls(
            dtype=float_type, offset=offset, scale=scale, stored=stored,
            rounding=cast_value.rounding, out_of_range=cast_value.out_of_range,
            reserved=reserved, mapped=mapped, filters=filters, fill_value=fill_value,
            planned=planned,
        )

    @classmethod
    def of_metadata(cls, metadata: Any) -> StorableValues | None:
        """What a Zarr format 3 array stores, its plan read from its attributes."""
        from zarr.core.metadata import ArrayV3Metadata

        if not isinstance(metadata, ArrayV3Metadata):
            return None
        try:
            native = metadata.dtype.to_native_dtype()
        except Exception:  # a data type without a NumPy form quantizes nothing
            return None
        return cls.of_codecs(
            metadata.codecs, native, metadata.fill_value,
            PlannedRange.recorded(metadata.attributes),
        )

    # -- codes ----------------------------------------------------------------------

    @cached_property
    def _type_bounds(self) -> tuple[float, float]:
        """The integer type's codes as ``[low, end)`` in float64 (both exact)."""
        info = np.iinfo(self.stored)
        return float(int(info.min)), float(int(info.max) + 1)

    @cached_property
    def _reserved_codes(self) -> npt.NDArray[np.float64]:
        return np.array(sorted(self.reserved), dtype=np.float64)

    @cached_property
    def _mapped_keys(self) -> npt.NDArray[Any]:
        return np.array(sorted(self.mapped), dtype=self.dtype)

    @property
    def _keeps_out_of_range(self) -> bool:
        """Whether ``cast_value`` stores codes beyond the integer type (clamped or
        wrapped, as the array's metadata asks) instead of refusing them."""
        return self.out_of_range in ("clamp", "wrap")

    def _effective(self, codes: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The codes ``cast_value`` stores: clamped or wrapped into the type as the
        metadata asks (codes inside it unchanged)."""
        low, end = self._type_bounds
        if self.out_of_range == "clamp":
            return np.clip(codes, low, end - 1)
        if self.out_of_range == "wrap":
            return np.mod(codes - low, end - low) + low
        return codes

    def _scaled(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        # scale_offset's arithmetic, in the array's own type
        with np.errstate(all="ignore"):
            return (values - self.offset) * self.scale

    def _codes(self, values: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(scaled, codes)``: codes as float64, 0 where ``scaled`` is not finite."""
        scaled = self._scaled(values)
        finite = np.isfinite(scaled)
        return scaled, _round(np.where(finite, scaled, 0), self.rounding)

    def _clear(self, lo: Any, hi: Any) -> bool:
        """Whether every value in ``[lo, hi]`` is stored as itself: codes grow (or shrink)
        with values, so the codes of all lie between those of the two ends."""
        scaled, codes = self._codes(np.array([lo, hi], dtype=self.dtype))
        if not np.isfinite(scaled).all():
            return False
        low, end = self._type_bounds
        cmin, cmax = float(codes.min()), float(codes.max())
        if cmin < low or cmax >= end:  # refused, or clamped or wrapped: look at each
            return False
        rc = self._reserved_codes
        if np.any((rc >= cmin) & (rc <= cmax)):
            return False
        if any(min(scaled) <= k <= max(scaled) for k in self.mapped):
            return False  # a value between them may be mapped: look at each
        if self.planned is not None:
            vlo, vhi = self.planned.verified
            return bool(lo >= vlo and hi <= vhi)
        return True

    def _decoded(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """``values`` encoded and decoded by zarr-python's own codecs."""
        from zarrext.codecs.filter_roundtrip import roundtrip

        _, decoded = roundtrip(self.filters, values, fill_value=self.fill_value)
        return decoded

    # -- the check ------------------------------------------------------------------

    def first_refused(self, values: npt.ArrayLike) -> Refusal | None:
        """The first finite value of ``values`` (C order) that would not come back as
        itself, or None. ``values`` are cast to the array's type first, as zarr does."""
        x = np.asarray(values)
        if x.dtype != self.dtype:
            with np.errstate(all="ignore"):
                x = x.astype(self.dtype)
        x = x.reshape(-1)
        if x.size == 0:
            return None
        lo, hi = x.min(), x.max()  # NaN propagates: both finite means all are
        if not (np.isfinite(lo) and np.isfinite(hi)):
            x = x[np.isfinite(x)]
            if x.size == 0:
                return None
            lo, hi = x.min(), x.max()
        if self._clear(lo, hi):
            return None
        bad = self._refused_mask(x)
        hits = np.flatnonzero(bad)
        if hits.size == 0:
            return None
        value = x[hits[0]]
        return Refusal(float(value), self.reason(value))

    def _refused_mask(self, x: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        scaled, codes = self._codes(x)
        low, end = self._type_bounds
        bad = ~np.isfinite(scaled)
        if not self._keeps_out_of_range:
            bad |= (codes < low) | (codes >= end)
        if self.reserved:
            bad |= np.isin(self._effective(codes), self._reserved_codes)
        mapped = np.isin(scaled, self._mapped_keys)
        bad &= ~mapped
        if self.planned is not None:
            vlo, vhi = self.planned.verified
            # beyond the verified range, and mapped values: each read back and measured
            where = np.flatnonzero(((x < vlo) | (x > vhi) | mapped) & ~bad)
            if where.size:
                decoded = self._decoded(x[where])
                error = np.abs(decoded.astype(np.float64) - x[where].astype(np.float64))
                too_far = ~(error <= self.planned.max_abs_error)  # NaN too
                bad[where[too_far]] = True
        return bad

    def reason(self, value: Any) -> str:
        """Why ``value`` (finite) would not come back as itself."""
        x = np.array([value], dtype=self.dtype)
        scaled, codes = self._codes(x)
        if not np.isfinite(scaled[0]):
            return f"scale_offset takes it beyond {self.dtype}'s range"
        code = float(codes[0])
        low, end = self._type_bounds
        stored = int(self._effective(codes)[0])
        if stored in self.reserved:
            how = {"clamp": "clamped", "wrap": "wrapped"}.get(self.out_of_range or "")
            moved = f" ({how} from code {code:.0f})" if stored != code else ""
            return (f"it would be stored as code {stored}{moved}, which reads back as "
                    f"{self.reserved[stored]}")
        if (code < low or code >= end) and not self._keeps_out_of_range:
            return (f"its code {code:.0f} is outside {self.stored}'s "
                    f"[{int(low)}, {int(end) - 1}] (cast_value refuses it)")
        decoded = self._decoded(x)[0]
        bound = self.planned.max_abs_error if self.planned is not None else math.nan
        return (f"it would read back as {decoded} ({abs(float(decoded) - float(value)):.3g} "
                f"away, max_abs_error {bound:g})")

    def refuse(self, values: npt.ArrayLike, where: str) -> None:
        """Raise :class:`~zarrext.errors.UnstorableValueError` naming ``where`` (``"array
        'temp'"``) for the first value of ``values`` the array would not give back."""
        refusal = self.first_refused(values)
        if refusal is not None:
            raise self.error(refusal, where)

    def refuse_dask(self, data: Any, where: str) -> None:
        """:meth:`refuse` for a Dask array: every block checked (computed once more),
        before the caller writes any. The value named is the first refused in the
        first block, in block order, that has one."""
        import dask

        blocks = data.to_delayed().reshape(-1)
        found = dask.compute(*[dask.delayed(self.first_refused)(b) for b in blocks])
        refusal = next((r for r in found if r is not None), None)
        if refusal is not None:
            raise self.error(refusal, where)

    def error(self, refusal: Refusal, where: str) -> UnstorableValueError:
        """The one-line error for ``refusal``."""
        lo, hi = self.storable_range
        value = str(self.dtype.type(refusal.value))  # as short as the type allows
        planned = ""
        if self.planned is not None:
            (plo, phi), (below, above) = self.planned.value_range, self.planned.headroom
            planned = (f" (planned for [{plo:.7g}, {phi:.7g}] within "
                       f"{self.planned.max_abs_error:g}, headroom {below:.3g} below and "
                       f"{above:.3g} above)")
        return UnstorableValueError(
            f"{where}: cannot store {value}: {refusal.reason}; it stores finite values "
            f"from {lo:.7g} to {hi:.7g} as {self.stored} codes{planned}; nothing of this "
            "write was stored",
            where=where, value=refusal.value,
        )

    # -- what it stores -------------------------------------------------------------

    @cached_property
    def storable_range(self) -> tuple[float, float]:
        """The values whose codes form the longest run of the integer type that holds no
        reserved code (approximately, in float64): the range this array stores."""
        info = np.iinfo(self.stored)
        start, runs = int(info.min), []
        for code in sorted(c for c in self.reserved if info.min <= c <= info.max):
            if code > start:
                runs.append((start, code - 1))
            start = code + 1
        if start <= int(info.max):
            runs.append((start, int(info.max)))
        if not runs:
            return math.nan, math.nan
        first, last = max(runs, key=lambda r: r[1] - r[0])
        scale, offset = float(self.scale), float(self.offset)
        ends = sorted((first / scale + offset, last / scale + offset))
        return ends[0], ends[1]

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the stored type, the range stored, reserved codes and the plan."""
        lo, hi = self.storable_range
        return {
            "stored_as": str(self.stored),
            "storable_range": [lo, hi],
            "reserved": {name: code for code, name in sorted(self.reserved.items())},
            "planned": None if self.planned is None else self.planned.to_json(),
        }
