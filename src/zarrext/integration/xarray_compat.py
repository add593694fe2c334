"""The names of xarray's zarr backend that zarrext wraps, checked before it wraps them.

xarray writes into an existing array with the array's stored NumPy dtype: for an
optional array that is the (value, valid) record, and NumPy casts a float to it by
putting the number in ``value`` and ``bool(number)`` in ``valid`` (NaN present, 0
missing). No xarray hook comes before that cast, so zarrext wraps, for optional
arrays only (see :func:`zarrext.integration.optional.install_xarray_hooks`):

- ``xarray.backends.zarr.encode_zarr_variable``, which ``ZarrStore.encode_variable``
  looks up at call time, to convert NaN-form values first;
- ``ZarrStore.open_store_variable``, to warn a reader of the ``zarr`` engine;
- ``ZarrStore.encode`` (inherited from xarray's writable data store), the one place
  that knows each variable's name, to convert there and name a variable whose
  values the optional type cannot hold;

and, for arrays with a ``conditional`` codec that carries no decision,
``ArrayWriter.add`` of ``xarray.backends.common``, through which the zarr backend
writes every array: the array is given the decision zarrext's own writers use (see
:mod:`zarrext.xarray.writes`).

The ``zarrext`` engine's store also overrides ``ZarrStore._fetch_members`` (each
array read through zarrext's pipeline), which is checked with the others.

Like :mod:`zarrext._zarr_compat`, each name is checked (it exists, takes the
parameters zarrext passes, is looked up where zarrext expects) before it is
wrapped; a mismatch is an :class:`XarrayCompatibilityError` naming it and the
installed xarray version. xarray is never imported here: :func:`when_imported` runs
the installer once ``xarray.backends.zarr`` is imported, by whoever imports it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version
from types import ModuleType
from typing import Any

__all__ = [
    "XARRAY_COMMON",
    "XARRAY_ZARR",
    "XarrayCompatibilityError",
    "check",
    "when_imported",
    "wrap",
    "wrap_array_writer",
]

XARRAY_ZARR = "xarray.backends.zarr"

# (name in xarray.backends.zarr, parameters): what zarrext wraps and how it calls it
_FUNCTION: tuple[str, tuple[str, ...]] = (
    "encode_zarr_variable", ("var", "needs_copy", "name", "zarr_format"))
_METHODS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ZarrStore.open_store_variable", ("self", "name")),
    ("ZarrStore.encode", ("self", "variables", "attributes")),
    # overridden by the zarrext engine's store (zarrext/xarray/backend.py): its arrays
    # are read through zarrext's pipeline; were it no longer called, they would be
    # read through zarr's, which does not refuse a blosc chunk cut short
    ("ZarrStore._fetch_members", ("self",)),
)


class XarrayCompatibilityError(ImportError):
    """xarray lacks, or has changed, a name of its zarr backend that zarrext wraps."""


def _fail(where: str, problem: str) -> XarrayCompatibilityError:
    try:
        installed = version("xarray")
    except Exception:  # a vendored or uninstalled copy: say so rather than fail here
        installed = "(version unknown)"
    return XarrayCompatibilityError(
        f"zarrext needs xarray.backends.zarr.{where}, which {problem} in xarray {installed}"
    )


def _parameters(function: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(inspect.signature(inspect.unwrap(function)).parameters)


def check(module: ModuleType) -> None:
    """Raise XarrayCompatibilityError unless ``module`` has what zarrext wraps."""
    name, parameters = _FUNCTION
    function = getattr(module, name, None)
    if not callable(function):
        raise _fail(name, "does not exist")
    if _parameters(function) != parameters:
        raise _fail(f"{name}({', '.join(parameters)})", f"takes {_parameters(function)}")
    store = getattr(module, "ZarrStore", None)
    encode_variable = getattr(store, "encode_variable", None)
    code = getattr(inspect.unwrap(encode_variable), "__code__", None) if encode_variable else None
    if code is None or name not in code.co_names:
        # a wrapper of the module function would then never run
        raise _fail("ZarrStore.encode_variable", f"does not call the module's {name}")
    members = getattr(store, "members", None)
    fetch = getattr(getattr(members, "fget", None), "__code__", None)
    if fetch is None or "_fetch_members" not in fetch.co_names:
        # the zarrext engine's arrays would be read through zarr's pipeline
        raise _fail("ZarrStore.members", "does not call ZarrStore._fetch_members")
    for where, method_parameters in _METHODS:
        method = getattr(store, where.split(".")[1], None)
        if not callable(method):
            raise _fail(where, "does not exist")
        if _parameters(method) != method_parameters:
            raise _fail(f"{where}({', '.join(method_parameters)})",
                        f"takes {_parameters(method)}")


def wrap(
    module: ModuleType,
    encode: Callable[[Callable[..., Any]], Callable[..., Any]],
    open_variable: Callable[[Callable[..., Any]], Callable[..., Any]],
    encode_all: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
) -> bool:
    """Wrap the names of ``module`` (checked first), once; whether it wrapped now.

    ``encode_all`` (optional) wraps ``ZarrStore.encode``.
    """
    check(module)
    name = _FUNCTION[0]
    original = getattr(module, name)
    if getattr(original, "_zarrext_wrapped", False):
        return False
    store = module.ZarrStore
    wrappers: list[tuple[Any, str, Any, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
        (module, name, original, encode),
        (store, "open_store_variable", store.open_store_variable, open_variable),
    ]
    if encode_all is not None:
        wrappers.append((store, "encode", store.encode, encode_all))
    for owner, attribute, old, make in wrappers:
        new = functools.update_wrapper(make(old), old)
        new._zarrext_wrapped = True  # type: ignore[attr-defined]
        setattr(owner, attribute, new)
    return True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks on one module right after it is first executed."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name, self.callbacks = name, [callback]

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return None  # not a plain source module: leave it to the other finders
        exec_module, callbacks = loader.exec_module, self.callbacks

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_then_call  # type: ignore[method-assign]
        return spec


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """``callback(module)`` now if ``name`` is imported, else right after its import.

    Several callbacks may wait for one module (zarrext's optional types and its
    decisions both wrap parts of xarray's zarr backend); each runs once.
    """
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _AfterImport) and finder.name == name:
            if callback not in finder.callbacks:
                finder.callbacks.append(callback)
            return
    sys.meta_path.insert(0, _AfterImport(name, callback))


XARRAY_COMMON = "xarray.backends.common"
# what zarrext wraps for decisions, and how xarray's zarr backend calls it
_WRITER_ADD: tuple[str, tuple[str, ...]] = (
    "ArrayWriter.add", ("self", "source", "target", "region"))


def wrap_array_writer(
    common: ModuleType, make: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> bool:
    """Wrap ``ArrayWriter.add`` of ``xarray.backends.common`` (checked first), once;
    whether it wrapped now.

    xarray's zarr backend hands every array it writes, new or opened, to
    ``writer.add(data, zarr_array, region)`` right before it writes (or, for dask
    data, keeps it for ``dask.array.store``): the one place where a write's target
    array is known, for zarrext to give its ``conditional`` codecs a decision.
    """
    where, parameters = _WRITER_ADD
    writer = getattr(common, "ArrayWriter", None)
    add = getattr(writer, "add", None)
    if not callable(add):
        raise _fail(where, "does not exist")
    if _parameters(add) != parameters:
        raise _fail(f"{where}({', '.join(parameters)})", f"takes {_parameters(add)}")
    if getattr(add, "_zarrext_wrapped", False):
        return False
    new = functools.update_wrapper(make(add), add)
    new._zarrext_wrapped = True  # type: ignore[attr-defined]
    writer.add = new  # type: ignore[union-attr]
    return True
