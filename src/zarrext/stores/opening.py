"""A location opened as a store: a local directory, a zip archive, obstore's ObjectStore
or fsspec's FsspecStore; where a remote store is, and a store at a path within it.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import LocalStore, ObjectStore, ZipStore

from zarrext._exit import settle_at_exit
from zarrext.stores.classification import classify, store_error
from zarrext.stores.errors import StoreOpenError, refuse_read_only
from zarrext.stores.locations import OBSTORE_SCHEMES, local_path
from zarrext.stores.options import (
    ObstoreOptions,
    bounded_options,
    fsspec_takes,
    obstore_options,
    store_timeout,
)
from zarrext.stores.remote import RemoteObjectStore

__all__ = [
    "open_job_array",
    "open_store",
    "remote_location",
    "remote_store_at",
    "writes_in_place",
]


@dataclass(frozen=True)
class _UnknownKey:
    """obstore's refusal of a storage option's key (fsspec may know it)."""

    key: str


# obstore's stores, one per URL, options and environment, kept for the next open of
# the same location: building one costs a few milliseconds (its HTTP client, its
# TLS roots), and a kept store keeps its open connections. Keyed by the process
# too: a store's runtime does not survive a fork.
_KEPT_OBSTORES = 32
_obstores: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_obstores_lock = threading.Lock()


def _obstore_key(text: str, options: ObstoreOptions) -> tuple[Any, ...]:
    """What makes two of obstore's stores alike: the URL, the options and the
    environment it reads credentials and proxies from, in this process."""
    given = json.dumps(
        [options.config, options.client_options, options.retry_config], sort_keys=True,
        default=str,
    )
    return os.getpid(), text, given, tuple(sorted(os.environ.items()))


def _obstore_from_url(text: str, options: ObstoreOptions) -> Any:
    """obstore's store for ``text``: the one made for the same key (see
    :func:`_obstore_key`) when it is among the last :data:`_KEPT_OBSTORES`, else a new one."""
    from obstore.store import from_url

    key = _obstore_key(text, options)
    with _obstores_lock:
        if key in _obstores:
            _obstores.move_to_end(key)
            return _obstores[key]
    store = from_url(
        text,
        config=options.config or None,  # type: ignore[arg-type]
        client_options=options.client_options or None,  # type: ignore[arg-type]
        retry_config=options.retry_config,  # type: ignore[arg-type]
    )
    with _obstores_lock:
        _obstores[key] = store
        while len(_obstores) > _KEPT_OBSTORES:
            _obstores.popitem(last=False)
    return store


def _open_obstore(
    text: str, options: ObstoreOptions, read_only: bool
) -> Store | _UnknownKey | None:
    """The URL as zarr's ``ObjectStore``; None if obstore is not installed, the key
    obstore does not know when it refuses one of the options (fsspec may know it)."""
    try:
        from obstore.exceptions import BaseError, UnknownConfigurationKeyError
    except ImportError:
        return None
    options, bound = bounded_options(options, store_timeout())
    try:
        store = _obstore_from_url(text, options)
    except UnknownConfigurationKeyError as e:
        named = re.search(r"key: '([^']*)'", str(e)) or re.search(r'key: "([^"]*)"', str(e))
        return _UnknownKey(named.group(1) if named else "?")
    except (ValueError, TypeError) as e:  # a value obstore refuses ("Invalid key" too)
        raise StoreOpenError(f"{text}: cannot open this URL as a store ({e})") from e
    except BaseError as e:  # an unrecognised URL, a configuration missing a setting
        _, what, todo = classify(e, text)
        raise StoreOpenError(f"{text}: cannot open this URL as a store: {what}; {todo}") from e
    settle_at_exit()  # obstore's threads must not be in Python as the process exits
    return RemoteObjectStore(store, read_only=read_only, location=text, timeout=bound)


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
        A local path, ``file://`` URL, ``.zip`` archive, or URL. A URL of
        :data:`OBSTORE_SCHEMES` opens as zarr's ``ObjectStore`` (obstore), others
        as zarr's ``FsspecStore``.
    mode : {"r", "r+", "w"}
        ``"r"`` opens read-only; ``"r+"`` for writing into an existing store;
        ``"w"`` for a new one (a zip archive is then created).
    storage_options : mapping, optional
        The URL's options, in fsspec's spelling or obstore's
        (:func:`obstore_options` says which map); options that only fsspec knows
        open the URL through fsspec. Refused for local paths.

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
    scheme = text.partition("://")[0].lower()
    unknown: str | None = None
    if scheme in OBSTORE_SCHEMES:
        options = obstore_options(scheme, storage_options)
        if options is not None:
            store = _open_obstore(text, options, read_only)
            if isinstance(store, _UnknownKey):
                unknown = store.key
            elif store is not None:
                return store
    return _open_fsspec(text, storage_options, read_only, unknown)


def open_job_array(
    target: Any, *, writes: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> Any:
    """The array a job works on: a ``zarr.Array`` as it is; a local path, zip archive
    or URL opened with :func:`open_store` (and ``storage_options``); another store or
    ``StorePath`` with ``zarr.open_array``.

    ``writes`` names a job that writes into the array (``"compact"``): the array is
    opened for writing, and refused by name (:func:`refuse_read_only`) when it, or
    the store it was given on, is read-only. Without it the array is opened to read.
    """
    import zarr

    from zarrext.errors import naming_codec_holder

    mode = "r+" if writes is not None else "r"
    named = str(target)
    if isinstance(target, str | os.PathLike):
        named = os.fspath(target)
        target = open_store(named, mode=mode, storage_options=storage_options)
    elif not isinstance(target, zarr.Array) and getattr(target, "read_only", False):
        # a store given read-only stays read-only: the job refuses it by name below
        # rather than through zarr's mode mismatch
        mode = "r"
    if isinstance(target, zarr.Array):
        array = target
    else:
        with naming_codec_holder(store=named):
            array = zarr.open_array(target, mode=mode)
    if writes is not None:
        refuse_read_only(array, writes)
    return array


def _open_fsspec(
    text: str,
    storage_options: Mapping[str, Any] | None,
    read_only: bool,
    unknown: str | None = None,
) -> Store:
    """The URL as zarr's ``FsspecStore``; ``unknown`` is the storage option's key
    that obstore refused (named when fsspec refuses the options too)."""
    from zarr.storage import FsspecStore

    if unknown is not None:
        # fsspec would fail only at the first request, naming the first key its HTTP
        # session does not take (often a valid one of obstore's): say which keys now.
        scheme = text.partition("://")[0]
        if not fsspec_takes(scheme, unknown):
            raise StoreOpenError(
                f"{text}: unknown storage option {unknown!r} (neither obstore's {scheme}:// "
                "store nor fsspec's file system takes it); remove or correct it"
            )
        foreign = [k for k in storage_options or {} if not fsspec_takes(scheme, k)]
        if foreign:
            raise StoreOpenError(
                f"{text}: storage options mix two libraries' names: obstore does not take "
                f"{unknown!r}, fsspec's {scheme}:// file system does not take "
                f"{', '.join(map(repr, foreign))}; use one library's names"
            )
    try:
        return FsspecStore.from_url(
            text, storage_options=dict(storage_options or {}), read_only=read_only
        )
    except TypeError as e:  # storage options the file system does not take
        raise StoreOpenError(f"{text}: cannot open this URL as a store ({e})") from e
    except (StoreOpenError, FileNotFoundError):
        raise
    except OSError as e:  # a file system that connects when made (ftp://, sftp://...)
        raise store_error(e, [text]) or e from e
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


def remote_location(store: Store) -> tuple[str, str] | None:
    """``(scheme, "bucket/prefix")`` of an object store or fsspec store, to compare
    two of them; None for other stores."""
    from zarr.storage import FsspecStore

    if isinstance(store, FsspecStore):
        protocol = store.fs.protocol
        return (protocol if isinstance(protocol, str) else protocol[0]), store.path.strip("/")
    if not isinstance(store, ObjectStore):
        return None
    inner = store.store
    url = getattr(inner, "url", None)  # an HTTP store
    if isinstance(url, str):
        scheme, _, rest = url.partition("://")
        return scheme, rest.strip("/")
    config = getattr(inner, "config", {}) or {}
    container = config.get("bucket") or config.get("container_name") or ""
    scheme = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az"}.get(
        type(inner).__name__, type(inner).__name__
    )
    prefix = str(getattr(inner, "prefix", None) or "")
    return scheme, f"{container}/{prefix}".strip("/")


def remote_store_at(store: Store, path: str) -> Store:
    """A store like ``store`` (an object store or fsspec store: same kind, options
    and credentials) rooted at ``path``, ``"bucket/prefix"`` in the same bucket.

    Raises
    ------
    StoreOpenError
        For other stores, or a ``path`` in another bucket or container.
    """
    from zarr.storage import FsspecStore

    if isinstance(store, FsspecStore):
        return FsspecStore(store.fs, path=path, read_only=store.read_only)
    location = remote_location(store)
    if location is None or not isinstance(store, ObjectStore):
        raise StoreOpenError(f"{store} is not an object store or fsspec store")
    inner = store.store
    if isinstance(getattr(inner, "url", None), str):
        new = type(inner).from_url(
            f"{location[0]}://{path}", client_options=inner.client_options,
            retry_config=inner.retry_config,
        )
    else:
        container, _, prefix = path.strip("/").partition("/")
        if container != location[1].partition("/")[0]:
            raise StoreOpenError(
                f"{path} is not in the bucket of {location[0]}://{location[1]}"
            )
        new = type(inner)(
            config=inner.config, prefix=prefix or None, client_options=inner.client_options,
            retry_config=inner.retry_config, credential_provider=inner.credential_provider,
        )
    if isinstance(store, RemoteObjectStore):
        return RemoteObjectStore(new, read_only=store.read_only,
                                 location=f"{location[0]}://{path.strip('/')}",
                                 timeout=store.timeout)
    return ObjectStore(new, read_only=store.read_only)


def writes_in_place(store: Store) -> bool:
    """Whether ``store`` is of a kind that writes bytes at an offset of a stored object.

    Only local files do; object stores, remote file systems, zip archives and
    in-memory stores take whole objects.
    """
    return isinstance(store, LocalStore)
