"""Where arrays live: local directories, zip archives and object-store URLs.

Every whole-store job and :func:`zarrext.open_array` take a *location*: a local
path, a ``file://`` URL, a ``.zip`` archive, or a URL that fsspec understands
(``s3://``, ``gs://``, ``https://``, ``memory://``...), with ``storage_options``
for the URL's file system (credentials, ``endpoint_url``, ...). A local path never
goes through :class:`pathlib.Path` as a URL would (``Path("s3://b/x")`` is
``s3:/b/x``).

What each kind of store can do decides what zarrext does there:

- a local directory (:class:`zarr.storage.LocalStore`) is written in place:
  shard layouts that write inner chunks at their offsets (``fixed-slot``,
  ``append``), locks and journals, ``check --repair``;
- an object store or a remote file system takes whole objects only: arrays are
  read and rewritten object by object (``recompress``, ``compact``), in-place
  shard layouts are refused when the array is opened;
- a zip archive is read-only for zarrext's jobs (zip entries cannot be replaced).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import LocalStore, ZipStore

__all__ = [
    "StoreOpenError",
    "is_url",
    "list_keys",
    "local_directory",
    "local_path",
    "open_store",
    "parse_storage_options",
    "writes_in_place",
]


class StoreOpenError(ValueError):
    """A location that cannot be opened as a store (bad URL, missing backend, options)."""


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL (``scheme://...``) rather than a local path."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").isalnum()


def local_path(location: str | os.PathLike[str]) -> Path | None:
    """The local file or directory ``location`` names (a path or ``file://`` URL);
    None for other URLs."""
    text = os.fspath(location)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    return None if is_url(text) else Path(text)


def local_directory(location: str | Path) -> Path | None:
    """The local directory ``location`` names; None for URLs and zip archives."""
    path = local_path(location)
    return None if path is None or path.suffix == ".zip" else path


def parse_storage_options(text: str | None) -> dict[str, Any] | None:
    """``--storage-options`` JSON as a dict (None when not given).

    Raises
    ------
    StoreOpenError
        When ``text`` is not a JSON object.
    """
    if text is None or not text.strip():
        return None
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise StoreOpenError(f"--storage-options is not valid JSON: {e}") from e
    if not isinstance(options, dict):
        raise StoreOpenError(
            f"--storage-options must be a JSON object, e.g. '{{\"anon\": true}}'; got {text}"
        )
    return options


def open_store(
    location: str | Path,
    *,
    mode: str = "r",
    storage_options: Mapping[str, Any] | None = None,
) -> Store:
    """The zarr store at ``location``.

    Parameters
    ----------
    location : str or Path
        A local path, ``file://`` URL, ``.zip`` archive, or fsspec URL.
    mode : {"r", "r+", "w"}
        ``"r"`` opens read-only; ``"r+"`` for writing into an existing store;
        ``"w"`` for a new one (a zip archive is then created).
    storage_options : mapping, optional
        Passed to the URL's fsspec file system; refused for local paths.

    Raises
    ------
    StoreOpenError
        For storage options given with a local path, a zip archive opened for
        rewriting, or a URL whose file system is not installed or refuses it.
    """
    text = str(location)
    read_only = mode == "r"
    local = local_path(text)
    if local is not None:
        if storage_options:
            raise StoreOpenError(
                f"{text}: --storage-options are for URLs (s3://, gs://, https://...), "
                "not local paths"
            )
        if local.suffix == ".zip" and not local.is_dir():
            if mode == "r+":
                raise StoreOpenError(
                    f"{text}: zip archives are read-only for zarrext (an entry cannot be "
                    "replaced); unzip it, run the job on the directory, zip it again"
                )
            # "a": a new archive is created, an existing one is added to (zarr
            # refuses to create over an existing array unless told to overwrite).
            return ZipStore(local, mode="r" if read_only else "a")
        return LocalStore(local, read_only=read_only)
    from zarr.storage import FsspecStore

    try:
        return FsspecStore.from_url(
            text, storage_options=dict(storage_options or {}), read_only=read_only
        )
    except ImportError as e:  # a known protocol whose package is missing (gcsfs, ...)
        scheme = text.partition("://")[0]
        if (e.name or "").split(".")[0] == "fsspec":
            raise StoreOpenError(
                f"{text}: URLs need fsspec, which is not installed: pip install 'zarrext[remote]'"
            ) from e
        raise StoreOpenError(f"{text}: no file system for {scheme}:// is installed ({e})") from e
    except ValueError as e:  # fsspec: "Protocol not known"
        scheme = text.partition("://")[0]
        raise StoreOpenError(f"{text}: no file system for {scheme}:// ({e})") from e
    except TypeError as e:  # storage options the file system does not take
        raise StoreOpenError(f"{text}: cannot open this URL as a store ({e})") from e


def writes_in_place(store: Store) -> bool:
    """Whether ``store`` is of a kind that writes bytes at an offset of a stored object.

    Only local files do; object stores, remote file systems, zip archives and
    in-memory stores take whole objects.
    """
    return isinstance(store, LocalStore)


async def _collect(store: Store, prefix: str) -> list[str]:
    return [key async for key in store.list_prefix(prefix)]


def list_keys(store: Store, prefix: str = "") -> list[str]:
    """Every key of ``store`` under ``prefix``, sorted (on zarr's event loop)."""
    from zarr.core.sync import sync

    return sorted(sync(_collect(store, prefix)))
