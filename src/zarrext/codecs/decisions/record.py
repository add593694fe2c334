"""The record zarrext keeps in an array's attributes (``attributes["zarrext"]``): the
built-in decision :func:`zarrext.create_array` was given, so that later writers take
it again, and what other writers record beside it (a quantization plan)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from zarrext.codecs.decisions.base import DecisionError
from zarrext.codecs.decisions.registry import builtin_choices, builtin_spelling

__all__ = [
    "RECORD_KEY",
    "decision_record",
    "recorded_decision",
    "with_record",
    "without_decision_record",
    "zarrext_record",
]

# The attribute under which zarrext records what later writers need: the decision
# zarrext.create_array was given, a quantization plan.
RECORD_KEY = "zarrext"


def zarrext_record(attributes: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``attributes["zarrext"]`` records, as an object (``None``: nothing, or not
    a record zarrext wrote).

    zarrext writes the record as a string holding a JSON object (:func:`with_record`),
    so that xarray can write it to netCDF (any engine) and back to Zarr; the nested
    object that zarrext wrote before is read too.
    """
    value = attributes.get(RECORD_KEY)
    if isinstance(value, bytes):  # netCDF 3 text read without decoding
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


def with_record(attributes: Mapping[str, Any] | None, what: str, **entries: Any) -> dict[str, Any]:
    """``attributes`` with ``entries`` recorded under ``"zarrext"``, beside what is
    recorded there already, as a string holding a JSON object (:func:`zarrext_record`).

    Raises
    ------
    ValueError
        When ``attributes["zarrext"]`` is there and not a record; ``what`` (e.g.
        ``"decision"``) names what was to be recorded.
    """
    out = dict(attributes or {})
    record = zarrext_record(out)
    if record is None and out.get(RECORD_KEY) is not None:
        raise ValueError(
            f"attributes[{RECORD_KEY!r}] is {out[RECORD_KEY]!r}; zarrext records the "
            f"array's {what} in a JSON object under that key (pass attributes without "
            f"{RECORD_KEY!r})"
        )
    out[RECORD_KEY] = json.dumps({**(record or {}), **entries})
    return out


def decision_record(attributes: Mapping[str, Any]) -> Any:
    """What an array's attributes record as its decision, as stored (``None`` if nothing).

    The record is the ``decision`` of :func:`zarrext_record`; attributes that use the
    ``zarrext`` key for something other than a record record nothing.
    """
    record = zarrext_record(attributes)
    return record.get("decision") if record is not None else None


def without_decision_record(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` less the decision record (:func:`decision_record`): for a copy
    of an array whose codecs have no ``conditional`` for the record to steer, so
    that no report (``zarrext info``) names a decision the copy does not have."""
    out = dict(attributes)
    record = zarrext_record(out)
    if record is not None and "decision" in record:
        del record["decision"]
        del out[RECORD_KEY]
        if record:
            out = with_record(out, "records", **record)
    return out


def recorded_decision(attributes: Mapping[str, Any], where: str) -> str | None:
    """The built-in decision's spelling an array's attributes record, checked.

    Parameters
    ----------
    attributes : mapping
        The array's attributes.
    where : str
        The array, as an error names it.

    Raises
    ------
    DecisionError
        When the record spells no built-in decision (hand-edited, or written by a
        newer zarrext).
    """
    spelling = decision_record(attributes)
    if spelling is None or builtin_spelling(spelling) is not None:
        return spelling
    raise DecisionError(
        f"{where}: attribute {RECORD_KEY}.decision records {spelling!r}, which is not a "
        f"built-in decision ({builtin_choices()}); pass decision= to choose one"
    )
