"""Implementations the runner can test, each behind one small interface.

An adapter reads a case's store and writes values into a fresh store; the runner
does everything else (scratch copies, comparing values and bytes). To add an
implementation, subclass :class:`Adapter` (or run any program through
:class:`CommandAdapter`) and add it to :data:`ADAPTERS`:

- ``read(store, case) -> numpy array``: open the Zarr v3 array whose root is the
  folder ``store`` and read all of it. Raise :class:`Refused` with a cause to
  refuse; raise :class:`Unsupported` when the implementation says it lacks a codec
  or data type the case uses.
- ``write(store, case, values, selection)``: ``store`` holds ``zarr.json`` only;
  write ``values`` into ``selection`` (a list of ``[start, stop]`` per dimension, or
  ``None`` for the whole array). The runner then compares the objects the
  implementation stored with ``expected/``. ``case["writer"]`` holds what
  metadata cannot say (the conditional masks to apply, a decision); raise
  :class:`Unsupported` when the implementation cannot be told it.

A refusal is a :class:`Refused` with one cause of :data:`CAUSES` (PROTOCOL.md);
the Python adapters turn an implementation's own errors into one with
:func:`refusals`. Any other exception is an error, never a refusal.

Optional (nullable) arrays are exchanged as numpy structured arrays with fields
``value`` and ``valid`` (nested for nested optionals).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from conformance import values as value_files

JSON = Any

__all__ = ["ADAPTERS", "CAUSES", "EXIT_CODES", "Adapter", "CommandAdapter", "Crashed",
           "Refused", "Unsupported", "codec_names", "data_type_names", "refusals"]

#: Why an implementation refuses: every refuse case names one (PROTOCOL.md).
CAUSES: dict[str, str] = {
    "invalid_metadata": "the array's metadata breaks the spec: a required parameter is "
                        "missing, a value is outside its domain, or codecs do not fit "
                        "together or the data type",
    "malformed_chunk": "a stored object does not decode under the spec's layout: too short "
                       "or too long, lengths or checksums that do not match, a reserved "
                       "bit set, a stream that is not one",
    "value_not_representable": "a value read or written has no representation in the "
                               "target data type under the codec's configuration",
}
#: The ``cmd:`` protocol's exit statuses: 0 done, 3 not supported, one per cause.
EXIT_CODES: dict[int, str] = {0: "done", 3: "not supported", 10: "invalid_metadata",
                              11: "malformed_chunk", 12: "value_not_representable"}
#: Python errors that signal a bug rather than a judgement (unless also a ValueError).
BUG_TYPES = (TypeError, AttributeError, NameError, AssertionError, RecursionError,
             NotImplementedError, UnboundLocalError, KeyError, IndexError)


class Unsupported(Exception):
    """The implementation lacks a feature the case needs (a codec, a data type, a setting)."""


class Refused(Exception):
    """The implementation refused, for ``cause`` (one of :data:`CAUSES`)."""

    def __init__(self, cause: str, message: str) -> None:
        assert cause in CAUSES, cause
        super().__init__(message)
        self.cause = cause


class Crashed(Exception):
    """The implementation crashed, hung or failed otherwise than by refusing."""


# Words that mark an error about a value (not about the bytes or the metadata) in the
# messages of zarr-python, zarrext, tensorstore and zarrs.
_VALUE_WORDS = re.compile(
    r"out of range|outside the range|outside \S+ range|outside \S+'s|cannot store|"
    r"cannot cast (nan|inf)|not representable|overflow|has no (nan|infinity)|"
    r"cannot be represented", re.I)


def _chain(error: BaseException) -> list[BaseException]:
    out = [error]
    while (nxt := out[-1].__cause__ or out[-1].__context__) is not None and nxt not in out:
        out.append(nxt)
    return out


def cause_of(error: BaseException, phase: str) -> str:
    """The cause of a refusal raised while ``phase`` (``open``, ``read`` or ``write``).

    Opening an array checks its metadata, so a refusal there is ``invalid_metadata``.
    Later, a refusal whose error (or an error it was raised from) is zarrext's
    :class:`~zarrext.errors.UnstorableValueError` or speaks of a value out of range, an
    overflow or a cast is ``value_not_representable``; otherwise a read's is
    ``malformed_chunk`` and a write's ``value_not_representable`` (the metadata was
    checked on opening, the written values are all that is left).
    """
    if phase == "open":
        return "invalid_metadata"
    chain = _chain(error)
    if any(type(e).__name__ == "UnstorableValueError" for e in chain) or any(
            _VALUE_WORDS.search(str(e)) for e in chain):
        return "value_not_representable"
    return "malformed_chunk" if phase == "read" else "value_not_representable"


def is_bug(error: BaseException) -> bool:
    """Whether ``error`` signals a bug (a crash) rather than a refusal."""
    return not isinstance(error, Exception) or (
        isinstance(error, BUG_TYPES) and not isinstance(error, ValueError))


@contextlib.contextmanager
def refusals(phase: str, unsupported: Any = None) -> Iterator[None]:
    """Turn an implementation's refusal inside the block into :class:`Refused`.

    ``unsupported(error)`` says when an error is the implementation's own statement
    that it lacks a codec or data type (raised as :class:`Unsupported`). A bug
    (:func:`is_bug`) passes through unchanged: the runner reports it as an error.
    """
    try:
        yield
    except (Unsupported, Refused, Crashed, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        if unsupported is not None and unsupported(error):
            raise Unsupported(f"{type(error).__name__}: {error}") from error
        if is_bug(error):
            raise
        raise Refused(cause_of(error, phase), f"{type(error).__name__}: {error}") from error


def codec_names(metadata: dict[str, JSON]) -> set[str]:
    """Every codec name in ``metadata``, nested ones (shards, conditional, optional) too."""
    names: set[str] = set()

    def visit(codecs: Any) -> None:
        for codec in codecs or ():
            if isinstance(codec, str):
                names.add(codec)
                continue
            names.add(codec.get("name"))
            config = codec.get("configuration") or {}
            for key in ("codecs", "index_codecs", "mask_codecs", "data_codecs"):
                if isinstance(config.get(key), list):
                    visit(config[key])

    visit(metadata.get("codecs"))
    return names


def data_type_names(metadata: dict[str, JSON]) -> set[str]:
    """The data type's name and, for wrapping types such as optional, its inner names."""
    names: set[str] = set()
    data_type = metadata.get("data_type")
    while isinstance(data_type, dict) and "name" in data_type:
        names.add(data_type["name"])
        data_type = data_type.get("configuration")
    if isinstance(data_type, str):
        names.add(data_type)
    return names


def region(selection: list[list[int]] | None) -> tuple[Any, ...]:
    return (Ellipsis,) if selection is None else tuple(slice(a, b) for a, b in selection)


def needs_runtime(case: dict[str, JSON]) -> str | None:
    """What a write case asks of a writer beyond metadata, or None.

    ``never_apply`` asks nothing: the spec's default mask is all zeros.
    """
    writer = case.get("writer") or {}
    if "conditional_masks" in writer:
        return "per-chunk conditional masks"
    decision = writer.get("decision")
    if decision not in (None, "never_apply"):
        return f"the conditional decision {decision!r}"
    return None


class Adapter(ABC):
    """One implementation, as the runner drives it."""

    name: str = ""
    description: str = ""

    def unavailable(self) -> str | None:
        """Why this implementation cannot run here (not installed), or None."""
        return None

    def version(self) -> str:
        return ""

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Set up the process before the first case (e.g. leave plugins out)."""

    @abstractmethod
    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray: ...

    @abstractmethod
    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None: ...


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


class ZarrextAdapter(Adapter):
    """zarrext's own entry points: ``zarrext.open_array`` with runtime settings."""

    name = "zarrext"
    description = "zarrext.open_array (zarrext's codec pipeline and runtime settings)"

    def unavailable(self) -> str | None:
        try:
            import zarrext  # noqa: F401
        except ImportError as e:
            return str(e)
        return None

    def version(self) -> str:
        return f"zarrext {_version('zarrext')}, zarr {_version('zarr')}"

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        import zarrext

        with refusals("open"):
            array = zarrext.open_array(str(store), mode="r")
        with refusals("read"):
            return np.asarray(array[...])

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        import zarrext
        from zarrext.codecs.decisions import DecisionError

        writer = case.get("writer") or {}
        decision: Any = writer.get("decision")
        masks = writer.get("conditional_masks")
        if masks is not None:
            decision = zarrext.from_plan(np.array(masks["masks"], dtype=np.int64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NoDecisionWarning: the default mask is the point
            refused_mask = None
            with refusals("open"):
                try:
                    array = zarrext.open_array(str(store), mode="r+", decision=decision)
                except DecisionError as error:  # the writer's masks, not the metadata
                    refused_mask = error
            with refusals("write"):
                if refused_mask is not None:
                    raise refused_mask
                array[region(selection)] = values


def _unknown_to_zarr(error: BaseException) -> bool:
    """zarr-python's own word that it has no codec or data type of a name."""
    from zarr.errors import UnknownCodecError

    return any(isinstance(e, UnknownCodecError) or "No Zarr data type found" in str(e)
               for e in _chain(error))


def without_zarrext_entry_points() -> None:
    """Make zarr-python (imported after this call) ignore zarrext's entry points.

    zarr collects entry points once, when it is first imported; an implementation
    measured by itself must not find zarrext's codecs, data type or pipeline there.
    """
    import importlib.metadata as metadata
    import sys

    if "zarr" in sys.modules:
        raise RuntimeError("zarr-python was imported before zarrext's entry points could "
                           "be left out: run this implementation in a process of its own")
    original = metadata.entry_points

    def entry_points(**params: Any) -> Any:
        found = original(**params)
        if not params:
            return metadata.EntryPoints(e for e in found
                                        if not e.value.startswith("zarrext"))
        return found

    metadata.entry_points = entry_points


class ZarrPluginAdapter(Adapter):
    """Plain ``zarr.open_array`` with zarrext installed: zarrext's codecs from its entry
    points. The route zarrext's users take through zarr-python; not a peer."""

    name = "zarr+zarrext"
    description = "plain zarr.open_array, zarrext's codecs from its entry points"

    def version(self) -> str:
        return f"zarr {_version('zarr')} with zarrext {_version('zarrext')}'s entry points"

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        import zarr

        with refusals("open", _unknown_to_zarr):
            array = zarr.open_array(str(store), mode="r")
        with refusals("read"):
            return np.asarray(array[...])

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        import zarr

        need = needs_runtime(case)
        if need is not None:
            raise Unsupported(f"plain zarr-python cannot be given {need}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with refusals("open", _unknown_to_zarr):
                array = zarr.open_array(str(store), mode="r+")
            with refusals("write"):
                array[region(selection)] = values


class ZarrAdapter(ZarrPluginAdapter):
    """zarr-python by itself: zarrext's entry points left out (a process of its own)."""

    name = "zarr"
    description = "zarr-python by itself (zarrext's entry points left out)"

    def version(self) -> str:
        return f"zarr {_version('zarr')}"

    def prepare(self) -> None:
        without_zarrext_entry_points()


class TensorstoreAdapter(Adapter):
    name = "tensorstore"
    description = "tensorstore's zarr3 driver"

    def unavailable(self) -> str | None:
        try:
            import tensorstore  # noqa: F401
        except ImportError as e:
            return str(e)
        return None

    def version(self) -> str:
        return f"tensorstore {_version('tensorstore')}"

    @staticmethod
    def _unknown(error: BaseException) -> bool:
        """tensorstore's own word that it has no codec or data type of a name."""
        return bool(re.search(r"is not registered|is not one of the supported data types",
                              str(error)))

    @classmethod
    def _open(cls, store: Path, **options: Any) -> Any:
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store) + "/"}}
        with refusals("open", cls._unknown):
            return ts.open(spec, open=True, **options).result()

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        array = self._open(store, read=True)
        with refusals("read"):
            return np.asarray(array.read().result())

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        need = needs_runtime(case)
        if need is not None:
            raise Unsupported(f"tensorstore cannot be given {need}")
        array = self._open(store, write=True)
        with refusals("write"):
            array[region(selection)].write(values).result()


class ZarrsAdapter(Adapter):
    """zarrs-python: zarr-python parses ``zarr.json``, zarrs (Rust) runs every codec.

    Strict: zarrs refuses what it cannot run instead of falling back to zarr-python.
    zarrext's entry points are left out, as for zarr-python by itself. A Rust panic is
    an error.
    """

    name = "zarrs"
    description = "zarrs-python's ZarrsCodecPipeline, strict (zarrext's entry points left out)"
    CONFIG: ClassVar[dict[str, Any]] = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
                                        "codec_pipeline.strict": True}

    def unavailable(self) -> str | None:
        import importlib.util

        return None if importlib.util.find_spec("zarrs") else "zarrs is not installed"

    def version(self) -> str:
        return f"zarrs-python {_version('zarrs')}"

    def prepare(self) -> None:
        without_zarrext_entry_points()

    @staticmethod
    def _unknown(error: BaseException) -> bool:
        """zarr-python's or zarrs' own word that it has no codec or data type of a name.

        zarrs' ``UnsupportedMetadataError`` also stands for metadata it judges invalid
        ("missing array to bytes codec"): only the message it wraps tells them apart.
        """
        chain = _chain(error)
        return _unknown_to_zarr(error) or any(
            type(e).__name__ == "UnsupportedDataTypeError" for e in chain) or (
            any(type(e).__name__ == "UnsupportedMetadataError" for e in chain)
            and any(re.search(r"is not supported|unsupported", str(e), re.I) for e in chain))

    def _open(self, store: Path, mode: str) -> Any:
        import zarr

        with refusals("open", self._unknown):
            array = zarr.open_array(str(store), mode=mode)
        pipeline = type(array.async_array.codec_pipeline).__module__
        if not pipeline.startswith("zarrs"):
            raise Crashed(f"zarrs' pipeline was not used ({pipeline})")
        return array

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        import zarr

        with zarr.config.set(self.CONFIG), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            array = self._open(store, "r")
            with refusals("read", self._unknown):
                return np.asarray(array[...])

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        import zarr

        need = needs_runtime(case)
        if need is not None:
            raise Unsupported(f"zarrs-python cannot be given {need}")
        with zarr.config.set(self.CONFIG), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            array = self._open(store, "r+")
            with refusals("write", self._unknown):
                array[region(selection)] = values


class CommandAdapter(Adapter):
    """Any program, e.g. another language's implementation: ``--impl cmd:PROGRAM``.

    The ``cmd:`` protocol (PROTOCOL.md): ``PROGRAM read STORE OUT.npy`` writes the array
    it reads to ``OUT.npy``; ``PROGRAM write STORE IN.npy SELECTION_JSON WRITER_JSON``
    writes ``IN.npy`` into the array. Exit status (:data:`EXIT_CODES`): 0 done, 3 not
    supported, 10-12 refused for a cause; any other status, a signal or running past
    ``timeout`` seconds is an error.
    """

    def __init__(self, command: str, timeout: float = 60.0) -> None:
        self.argv = shlex.split(command)
        self.name = f"cmd:{command}"
        self.description = f"the program {command!r}"
        self.timeout = timeout

    def _run(self, *args: str) -> None:
        try:
            done = subprocess.run([*self.argv, *args], capture_output=True, text=True,
                                  check=False, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise Crashed(f"no answer within {self.timeout:g} s") from None
        lines = (done.stderr or done.stdout).strip().splitlines()
        message = lines[-1] if lines else f"exit {done.returncode}"
        status = done.returncode
        if status == 0:
            return
        if status == 3:
            raise Unsupported(message)
        if status in EXIT_CODES:
            raise Refused(EXIT_CODES[status], message)
        if status < 0:
            raise Crashed(f"killed by {signal.Signals(-status).name}: {message}")
        raise Crashed(f"exit {status}: {message}")

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.npy")
            self._run("read", str(store), out)
            try:
                return value_files.load_file(out)
            except (OSError, ValueError) as e:
                raise Crashed(f"exit 0 without a readable OUT.npy: {e}") from None

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "in.npy")
            value_files.save_file(source, values)
            self._run("write", str(store), source, json.dumps(selection),
                      json.dumps(case.get("writer") or {}))


ADAPTERS: dict[str, type[Adapter]] = {
    "zarrext": ZarrextAdapter,
    "zarr+zarrext": ZarrPluginAdapter,
    "zarr": ZarrAdapter,
    "tensorstore": TensorstoreAdapter,
    "zarrs": ZarrsAdapter,
}


def adapter(name: str, timeout: float = 60.0) -> Adapter:
    """The adapter called ``name`` (``cmd:PROGRAM`` for :class:`CommandAdapter`)."""
    if name.startswith("cmd:"):
        return CommandAdapter(name[4:], timeout)
    try:
        return ADAPTERS[name]()
    except KeyError:
        raise SystemExit(f"unknown implementation {name!r}; one of {sorted(ADAPTERS)} "
                         "or cmd:PROGRAM") from None
