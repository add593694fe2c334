"""Where arrays live: local directories, zip archives and object-store URLs.

Every whole-store job and :func:`zarrext.open_array` take a *location*: a local
path, a ``file://`` URL, a ``.zip`` archive, or a URL (``s3://``, ``gs://``,
``az://``, ``https://``, ``memory://``...), with ``storage_options`` for the URL's
store (credentials, endpoint, region, ...). A local path never goes through
:class:`pathlib.Path` as a URL would (``Path("s3://b/x")`` is ``s3:/b/x``).

URLs of the object stores obstore speaks (:data:`OBSTORE_SCHEMES`: S3, Google Cloud
Storage, Azure, HTTP) open as zarr's :class:`zarr.storage.ObjectStore`, whose
requests run in Rust, many at once; other URLs, and options only fsspec knows,
open as :class:`zarr.storage.FsspecStore` (see :func:`obstore_options` for which
options map to obstore's). ``file://`` URLs open as local directories.

What each kind of store can do decides what zarrext does there:

- a local directory (:class:`zarr.storage.LocalStore`) is written in place:
  shard layouts that write inner chunks at their offsets (``fixed-slot``,
  ``append``), locks and journals, ``check --repair``;
- an object store or a remote file system takes whole objects only: arrays are
  read and rewritten object by object (``recompress``, ``compact``), in-place
  shard layouts are refused when the array is opened;
- a zip archive is read-only for zarrext's jobs (zip entries cannot be replaced).

The package's modules: :mod:`~zarrext.stores.locations` (what a location names),
:mod:`~zarrext.stores.options` (a store's options), :mod:`~zarrext.stores.opening` (a
location opened), :mod:`~zarrext.stores.remote` (an object store's failures named),
:mod:`~zarrext.stores.errors` (its errors), :mod:`~zarrext.stores.classification` (a
store's own errors said),
:mod:`~zarrext.stores.objects` (conditional writes) and :mod:`~zarrext.stores.listings`
(keys and sizes). Every public name is importable from ``zarrext.stores``.
"""

from __future__ import annotations

from zarrext.stores.classification import classify, is_obstore_error, store_error
from zarrext.stores.errors import (
    ACCESS_CAUSES,
    ReadOnlyError,
    StoreAccessError,
    StoreOpenError,
    refuse_read_only,
)
from zarrext.stores.listings import list_keys, object_sizes
from zarrext.stores.locations import OBSTORE_SCHEMES, is_url, local_directory, local_path
from zarrext.stores.objects import create_object, create_object_async, read_object, replace_object
from zarrext.stores.opening import (
    open_job_array,
    open_store,
    remote_location,
    remote_store_at,
    writes_in_place,
)
from zarrext.stores.options import (
    DEFAULT_STORE_TIMEOUT,
    STORE_TIMEOUT_ENV,
    ObstoreOptions,
    obstore_options,
    parse_storage_options,
    store_timeout,
)
from zarrext.stores.remote import ONE_REQUEST_MAX_BYTES, RemoteObjectStore

__all__ = [
    "ACCESS_CAUSES",
    "DEFAULT_STORE_TIMEOUT",
    "OBSTORE_SCHEMES",
    "ONE_REQUEST_MAX_BYTES",
    "STORE_TIMEOUT_ENV",
    "ObstoreOptions",
    "RemoteObjectStore",
    "StoreAccessError",
    "ReadOnlyError",
    "StoreOpenError",
    "classify",
    "create_object",
    "create_object_async",
    "is_obstore_error",
    "is_url",
    "list_keys",
    "local_directory",
    "local_path",
    "object_sizes",
    "obstore_options",
    "open_job_array",
    "open_store",
    "parse_storage_options",
    "remote_location",
    "read_object",
    "refuse_read_only",
    "remote_store_at",
    "replace_object",
    "store_error",
    "store_timeout",
    "writes_in_place",
]
