"""Implementations the runner can test, each behind one small interface.

An adapter reads a case's store and writes values into a fresh store; the runner
does everything else (scratch copies, comparing values and bytes). To add an
implementation, subclass :class:`Adapter` (or run any program through
:class:`CommandAdapter`) and add it to :data:`ADAPTERS`:

- ``read(store, case) -> numpy array``: open the Zarr v3 array whose root is the
  folder ``store`` and read all of it. Raise any exception to refuse; raise
  :class:`Unsupported` when the implementation lacks a codec or data type the case
  uses.
- ``write(store, case, values, selection)``: ``store`` holds ``zarr.json`` only;
  write ``values`` into ``selection`` (a list of ``[start, stop]`` per dimension, or
  ``None`` for the whole array). The runner then compares the objects the
  implementation stored with ``expected/``. ``case["writer"]`` holds what
  metadata cannot say (the conditional masks to apply, a decision); raise
  :class:`Unsupported` when the implementation cannot be told it.

Optional (nullable) arrays are exchanged as numpy structured arrays with fields
``value`` and ``valid`` (nested for nested optionals).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import tempfile
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

JSON = Any

__all__ = ["ADAPTERS", "Adapter", "CommandAdapter", "Unsupported", "codec_names",
           "data_type_names"]


class Unsupported(Exception):
    """The implementation lacks a feature the case needs (a codec, a data type, a setting)."""


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

    def check_supported(self, metadata: dict[str, JSON]) -> None:  # noqa: B027 - optional hook
        """Raise :class:`Unsupported` for a codec or data type known to be missing."""

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

        return np.asarray(zarrext.open_array(str(store), mode="r")[...])

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        import zarrext

        writer = case.get("writer") or {}
        decision: Any = writer.get("decision")
        masks = writer.get("conditional_masks")
        if masks is not None:
            decision = zarrext.from_plan(np.array(masks["masks"], dtype=np.int64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NoDecisionWarning: the default mask is the point
            array = zarrext.open_array(str(store), mode="r+", decision=decision)
            array[region(selection)] = values


class ZarrAdapter(Adapter):
    """Plain ``zarr.open_array``: zarr-python with zarrext's codecs from its entry points."""

    name = "zarr"
    description = "plain zarr.open_array (zarr-python, codecs from installed entry points)"

    def version(self) -> str:
        return f"zarr {_version('zarr')} with zarrext {_version('zarrext')}'s entry points"

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        import zarr

        return np.asarray(zarr.open_array(str(store), mode="r")[...])

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        import zarr

        need = needs_runtime(case)
        if need is not None:
            raise Unsupported(f"plain zarr-python cannot be given {need}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.open_array(str(store), mode="r+")[region(selection)] = values


# Codecs and data types tensorstore 0.1.86's zarr3 driver and zarrs 0.23.8 (zarrs-python
# 0.2.3) know, as probed on this corpus: anything else is "not supported".
TENSORSTORE_CODECS = {"bytes", "transpose", "gzip", "blosc", "zstd", "crc32c",
                      "sharding_indexed"}
ZARRS_CODECS = TENSORSTORE_CODECS | {"packbits", "zarrs.optional"}
PLAIN_TYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "float32", "float64", "complex64", "complex128"}


def _check_names(who: str, metadata: dict[str, JSON], codecs: set[str], types: set[str]
                 ) -> None:
    missing = sorted(codec_names(metadata) - codecs)
    if missing:
        raise Unsupported(f"{who} has no codec {', '.join(missing)}")
    missing = sorted(data_type_names(metadata) - types)
    if missing:
        raise Unsupported(f"{who} has no data type {', '.join(missing)}")


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

    def check_supported(self, metadata: dict[str, JSON]) -> None:
        _check_names("tensorstore", metadata, TENSORSTORE_CODECS, PLAIN_TYPES)

    @staticmethod
    def _open(store: Path, **options: Any) -> Any:
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store) + "/"}}
        return ts.open(spec, open=True, **options).result()

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        return np.asarray(self._open(store, read=True).read().result())

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        need = needs_runtime(case)
        if need is not None:
            raise Unsupported(f"tensorstore cannot be given {need}")
        array = self._open(store, write=True)
        array[region(selection)].write(values).result()


class ZarrsAdapter(Adapter):
    """zarrs-python: zarr-python parses ``zarr.json``, zarrs (Rust) runs every codec.

    Strict: zarrs refuses what it cannot run instead of falling back to zarr-python.
    """

    name = "zarrs"
    description = "zarrs-python's ZarrsCodecPipeline, strict"
    CONFIG: ClassVar[dict[str, Any]] = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
                                        "codec_pipeline.strict": True}

    def unavailable(self) -> str | None:
        try:
            import zarrs  # noqa: F401
        except ImportError as e:
            return str(e)
        return None

    def version(self) -> str:
        return f"zarrs-python {_version('zarrs')}"

    def check_supported(self, metadata: dict[str, JSON]) -> None:
        _check_names("zarrs", metadata, ZARRS_CODECS, PLAIN_TYPES | {"zarrs.optional"})

    @contextlib.contextmanager
    def _strict(self) -> Iterator[None]:
        import zarr
        from zarrs.pipeline import UnsupportedDataTypeError, UnsupportedMetadataError

        try:
            with zarr.config.set(self.CONFIG), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
        except UnsupportedDataTypeError as e:  # the in-memory dtype (optional's records)
            raise Unsupported(f"zarrs: {type(e).__name__} {e}".strip()) from e
        except UnsupportedMetadataError as e:
            # check_supported let every codec and data type name through: zarrs knows
            # them, so this is its judgement on the metadata, a refusal.
            raise RuntimeError(f"zarrs refused the metadata: {type(e).__name__} {e}") from e

    def _open(self, store: Path, mode: str) -> Any:
        import zarr

        array = zarr.open_array(str(store), mode=mode)
        pipeline = type(array.async_array.codec_pipeline).__module__
        if not pipeline.startswith("zarrs"):
            raise RuntimeError(f"zarrs' pipeline was not used ({pipeline})")
        return array

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        with self._strict():
            return np.asarray(self._open(store, "r")[...])

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        need = needs_runtime(case)
        if need is not None:
            raise Unsupported(f"zarrs-python cannot be given {need}")
        with self._strict():
            self._open(store, "r+")[region(selection)] = values


class CommandAdapter(Adapter):
    """Any program, e.g. another language's implementation: ``--impl cmd:PROGRAM``.

    ``PROGRAM read STORE OUT.npy`` writes the array it reads to ``OUT.npy``;
    ``PROGRAM write STORE IN.npy SELECTION_JSON WRITER_JSON`` writes ``IN.npy``
    into the array. Exit 0: done; exit 3: not supported; any other exit: refused.
    """

    def __init__(self, command: str) -> None:
        self.argv = shlex.split(command)
        self.name = f"cmd:{command}"
        self.description = f"the program {command!r}"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.argv, *args], capture_output=True, text=True,
                              check=False, timeout=120)
        lines = (done.stderr or done.stdout).strip().splitlines()
        message = lines[-1] if lines else f"exit {done.returncode}"
        if done.returncode == 3:
            raise Unsupported(message)
        if done.returncode:
            raise RuntimeError(message)

    def read(self, store: Path, case: dict[str, JSON]) -> np.ndarray:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.npy")
            self._run("read", str(store), out)
            return np.load(out, allow_pickle=False)

    def write(self, store: Path, case: dict[str, JSON], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "in.npy")
            np.save(source, values, allow_pickle=False)
            self._run("write", str(store), source, json.dumps(selection),
                      json.dumps(case.get("writer") or {}))


ADAPTERS: dict[str, type[Adapter]] = {
    "zarrext": ZarrextAdapter,
    "zarr": ZarrAdapter,
    "tensorstore": TensorstoreAdapter,
    "zarrs": ZarrsAdapter,
}


def adapter(name: str) -> Adapter:
    """The adapter called ``name`` (``cmd:PROGRAM`` for :class:`CommandAdapter`)."""
    if name.startswith("cmd:"):
        return CommandAdapter(name[4:])
    try:
        return ADAPTERS[name]()
    except KeyError:
        raise SystemExit(f"unknown implementation {name!r}; one of {sorted(ADAPTERS)} "
                         "or cmd:PROGRAM") from None
