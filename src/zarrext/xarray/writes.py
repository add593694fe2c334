"""xarray's ``to_zarr`` writes ``conditional`` arrays as zarrext's own writers do.

A ``conditional`` codec given no decision stores every chunk raw (the spec's
default). ``zarrext.open_array`` and ``zarrext.create_array`` then take the
decision the array's attributes record, or say once that chunks are stored raw
(:class:`~zarrext.codecs.decisions.NoDecisionWarning`). xarray opens and creates its
arrays through zarr itself, so its writes missed both: the codecs kept their
silent default. zarrext wraps ``ArrayWriter.add`` of xarray's backends (through
which the zarr backend writes every array, right after opening or creating it)
so that an array whose ``conditional`` codecs carry no decision is written with
the recorded decision, or with one that warns once per array and variable written
(:func:`zarrext.api.with_decision_when_none_given`). Every other target passes
through untouched: arrays without a ``conditional`` codec, codecs given a
decision (``ConditionalCodec(..., decision=...)`` in the encoding, which xarray
hands to zarr as it is), and the other backends' targets.

``import zarrext`` installs the wrapper once ``xarray.backends.zarr`` is imported
(:func:`zarrext.integration.xarray_compat.when_imported`); this module is loaded only then.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from zarrext.integration.xarray_compat import (
    XARRAY_COMMON,
    XarrayCompatibilityError,
    wrap_array_writer,
)

__all__ = ["install_xarray_decisions"]


def install_xarray_decisions(zarr_backend: ModuleType) -> None:
    """Wrap xarray's ``ArrayWriter.add`` (``zarr_backend`` has imported it); if xarray
    has changed it, a ``RuntimeWarning`` says that its writes get no decision."""
    del zarr_backend  # imported: its writer's module is too
    try:
        wrap_array_writer(importlib.import_module(XARRAY_COMMON), _with_decisions)
    except XarrayCompatibilityError as e:
        warnings.warn(
            f"{e}: xarray's to_zarr writes the chunks of conditional codecs that carry "
            "no decision raw, without a NoDecisionWarning; give the codec a decision "
            "(ConditionalCodec(codecs, decision=...)) in the encoding",
            RuntimeWarning, stacklevel=2,
        )


def _with_decisions(add: Callable[..., Any]) -> Callable[..., Any]:
    def add_with_decision(self: Any, source: Any, target: Any, region: Any = None) -> Any:
        from zarrext.api import with_decision_when_none_given

        return add(self, source, with_decision_when_none_given(target), region)

    return add_with_decision
