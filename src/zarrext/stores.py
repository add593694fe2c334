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
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import LocalStore, ZipStore

from zarrext._exit import settle_at_exit

__all__ = [
    "OBSTORE_SCHEMES",
    "ObstoreOptions",
    "StoreAccessError",
    "ReadOnlyError",
    "StoreOpenError",
    "is_url",
    "list_keys",
    "local_directory",
    "local_path",
    "obstore_options",
    "open_job_array",
    "open_store",
    "parse_storage_options",
    "remote_location",
    "refuse_read_only",
    "remote_store_at",
    "store_error",
    "writes_in_place",
]

# URL schemes opened through obstore, by the family of options they take. memory://
# stays with fsspec: fsspec's memory file system is one per process, obstore's one
# per store object (a second open would see an empty store).
_S3_SCHEMES = frozenset({"s3", "s3a"})
_GCS_SCHEMES = frozenset({"gs", "gcs"})
_AZURE_SCHEMES = frozenset({"az", "abfs", "abfss", "adl", "azure"})
_HTTP_SCHEMES = frozenset({"http", "https"})
OBSTORE_SCHEMES = _S3_SCHEMES | _GCS_SCHEMES | _AZURE_SCHEMES | _HTTP_SCHEMES
"""URL schemes that open as zarr's ``ObjectStore`` (obstore) when obstore is installed."""

# fsspec's options for its own caches of file-system objects and listings: obstore
# keeps no such caches, so they mean nothing there and are dropped.
_FSSPEC_CACHE_KEYS = frozenset(
    {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"}
)
# s3fs's option names (also inside ``client_kwargs``, as botocore's) -> obstore's S3Config.
_S3_KEYS = {
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "endpoint_url": "endpoint",
    "region_name": "region",
}
# adlfs's option names -> obstore's AzureConfig (the rest are spelled alike).
_AZURE_KEYS = {"sas_token": "sas_key"}


class StoreOpenError(ValueError):
    """A location that cannot be opened as a store (bad URL, missing backend, options)."""


class StoreAccessError(OSError):
    """A store that cannot be reached or refuses a request (network, credentials, a
    missing bucket): its message names the location, what failed and what to do.

    Attributes
    ----------
    location : str
        The store's URL or path, as the user gave it.
    """

    def __init__(self, message: str, location: str) -> None:
        super().__init__(message)
        self.location = location

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.location))


# What obstore's GenericError (one type for most failures) says, by the words in its
# message: (pattern, what went wrong, what to do).
_GENERIC_OBSTORE = (
    (re.compile(r"NoSuchBucket|ContainerNotFound|bucket does not exist", re.I),
     "the bucket or container does not exist", "check the URL, or create it first"),
    (re.compile(r"169\.254\.169\.254|metadata\.google\.internal|credential|token request",
                re.I),
     "no credentials found (the cloud's instance metadata service was asked)",
     "give keys in --storage-options or the environment (e.g. AWS_ACCESS_KEY_ID), "
     "or anon: true for a public bucket"),
    (re.compile(r"Unable to recognise URL|Unable to parse|invalid url", re.I),
     "not a URL of an object store", "give scheme://bucket/path"),
    (re.compile(r"must be specified", re.I),
     "the store's configuration is incomplete",
     "give the missing setting in --storage-options (e.g. account_name for Azure)"),
    (re.compile(r"AccessDenied|Forbidden|InvalidAccessKeyId|SignatureDoesNotMatch", re.I),
     "access denied", "check the credentials and their permissions"),
    (re.compile(r"error sending request|kind: Connect|connection refused|dns error", re.I),
     "cannot connect", "check the endpoint and that the service runs"),
    (re.compile(r"timed? ?out", re.I),
     "the request timed out", "check the endpoint and the network"),
)


def _obstore_reason(error: Exception) -> tuple[str, str] | None:
    """(what went wrong, what to do) for one of obstore's errors; None for others."""
    try:
        from obstore import exceptions as ox
    except ImportError:
        return None
    if not isinstance(error, ox.BaseError):
        return None
    by_type: tuple[tuple[type[Exception], str, str], ...] = (
        (ox.NotFoundError, "not found", "check the URL"),
        (ox.PermissionDeniedError, "permission denied", "check the credentials' permissions"),
        (ox.UnauthenticatedError, "not authenticated", "check the credentials"),
        (ox.UnknownConfigurationKeyError, "an unknown storage option",
         "see obstore's configuration keys for this store"),
        (ox.InvalidPathError, "an invalid path", "check the URL"),
        (ox.NotSupportedError, "an operation this store does not support",
         "use another kind of store"),
        (ox.AlreadyExistsError, "the object already exists", "rerun, or remove it first"),
        (ox.PreconditionError, "an object changed during the request", "rerun"),
    )
    for kind, what, todo in by_type:
        if isinstance(error, kind):
            return what, todo
    text = str(error).split("Debug source:")[0]
    for pattern, what, todo in _GENERIC_OBSTORE:
        if pattern.search(text):
            return what, todo
    code = re.search(r"<Code>([^<]+)</Code>", text)
    return (code.group(1) if code else " ".join(text.split())[:200]), (
        "check the URL, --storage-options and credentials"
    )


def _os_reason(error: OSError) -> tuple[str, str]:
    """(what went wrong, what to do) for an ``OSError`` of a remote file system."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused", "check the host, the port and that the service runs"
    if isinstance(error, socket.gaierror):
        return "unknown host", "check the host name"
    if isinstance(error, TimeoutError):
        return "timed out", "check the host and the network"
    if isinstance(error, ConnectionError):
        return "the connection failed", "check the host and the network"
    if isinstance(error, PermissionError):
        return "permission denied", "check the credentials and their permissions"
    if isinstance(error, FileNotFoundError):
        return "not found", "check the URL"
    said = error.strerror or str(error) or type(error).__name__
    return " ".join(said.split()), "check the URL, --storage-options and credentials"


def store_error(
    error: BaseException, locations: Iterable[str | os.PathLike[str] | None]
) -> StoreAccessError | None:
    """``error`` (obstore's, or an ``OSError`` of a remote file system) as a
    :class:`StoreAccessError` naming which of ``locations`` it concerns; None when
    it is neither, or every location is local (a local path's ``OSError`` names
    its file itself).

    The location is the one whose bucket (host) and path appear in the error's
    text (obstore names the request it made), else the only URL among them.
    """
    if isinstance(error, StoreAccessError):
        return error
    urls = [os.fspath(x) for x in locations if x is not None and local_path(x) is None]
    if not urls:
        return None
    reason = _obstore_reason(error) if isinstance(error, Exception) else None
    if reason is None:
        if not isinstance(error, OSError) or getattr(error, "filename", None):
            return None
        reason = _os_reason(error)
    location = _named_in(str(error), urls)
    if location is None:
        if len(set(urls)) > 1:
            return None
        location = urls[0]
    what, todo = reason
    error_type = type(error).__name__
    return StoreAccessError(f"{location}: {what} ({error_type}); {todo}", location)


def _named_in(text: str, urls: list[str]) -> str | None:
    """The URL of ``urls`` whose bucket and path ``text`` names most of."""
    from urllib.parse import quote

    def score(url: str) -> int:
        rest = url.partition("://")[2].strip("/")
        bucket, _, prefix = rest.partition("/")
        found = int(bool(bucket) and bucket in text)
        if found and prefix and (prefix in text or quote(prefix, safe="") in text):
            found += 1
        return found

    scores = {url: score(url) for url in urls}
    best = max(scores.values())
    winners = [url for url, n in scores.items() if n == best]
    return winners[0] if best and len(winners) == 1 else None


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


@dataclass(frozen=True)
class ObstoreOptions:
    """What obstore's ``from_url`` takes for one URL: the store's configuration,
    the HTTP client's options and the retry policy."""

    config: dict[str, Any] = field(default_factory=dict)
    client_options: dict[str, Any] = field(default_factory=dict)
    retry_config: dict[str, Any] | None = None


def _fsspec_option(scheme: str, key: str, value: Any, config: dict[str, Any]) -> bool:
    """Put fsspec's option ``key`` into obstore's ``config`` for ``scheme``; whether
    it is one that maps (else it is obstore's own key, or one only fsspec knows)."""
    if key == "anon":
        if value:
            config["skip_signature"] = True
        return scheme not in _HTTP_SCHEMES
    if scheme in _S3_SCHEMES:
        if key == "client_kwargs" and isinstance(value, Mapping):
            if not set(value) <= {"region_name", "endpoint_url"}:
                return False  # other botocore client settings: fsspec's alone
            config.update({_S3_KEYS[k]: v for k, v in value.items()})
            return True
        if key in _S3_KEYS:
            config[_S3_KEYS[key]] = value
            return True
    elif scheme in _GCS_SCHEMES and key == "token" and isinstance(value, str):
        # gcsfs's token: "anon", or the path of a service account's JSON key
        # ("google_default", "cache", "cloud" name gcsfs's own credential lookups)
        if value in ("google_default", "cache", "cloud", "browser"):
            return False
        if value == "anon":
            config["skip_signature"] = True
        else:
            config["service_account"] = value
        return True
    elif scheme in _AZURE_SCHEMES and key in _AZURE_KEYS:
        config[_AZURE_KEYS[key]] = value
        return True
    return False


def _needs_aws_profile(options: Mapping[str, Any]) -> bool:
    """Whether S3 credentials would come from AWS's profile files (``AWS_PROFILE``,
    ``~/.aws``), which botocore (fsspec) reads and obstore does not: no keys in
    ``options`` or the environment, no anonymous access, and a profile to read."""
    given = {"key", "access_key_id", "aws_access_key_id", "anon", "skip_signature"}
    if given & set(options) or os.environ.get("AWS_ACCESS_KEY_ID"):
        return False
    if os.environ.get("AWS_PROFILE") or "profile" in options:
        return True
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
        os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
    )
    return any(Path(f).expanduser().is_file() for f in files)


def obstore_options(
    scheme: str, storage_options: Mapping[str, Any] | None
) -> ObstoreOptions | None:
    """``storage_options`` as obstore's, for a URL of ``scheme``; None when they are
    fsspec's alone (the URL is then opened through fsspec, which takes them).

    Options that users pass to fsspec map as follows:

    - every scheme but HTTP: ``anon: true`` -> ``skip_signature``;
    - ``s3://`` (s3fs): ``endpoint_url`` -> ``endpoint`` (an ``http://`` endpoint also
      sets the client option ``allow_http``), ``key`` -> ``access_key_id``,
      ``secret`` -> ``secret_access_key``, ``token`` -> ``session_token``,
      ``client_kwargs: {"region_name", "endpoint_url"}`` -> ``region``,
      ``endpoint``;
    - ``http://`` (and an ``http://`` endpoint) sets ``allow_http``;
    - ``gs://`` (gcsfs): ``token: "anon"`` -> ``skip_signature``, ``token: PATH`` (a
      service account's JSON key file) -> ``service_account``;
    - ``az://`` (adlfs): ``sas_token`` -> ``sas_key``; ``account_name``,
      ``account_key``, ``client_id``, ``client_secret``, ``tenant_id`` are spelled
      alike;
    - fsspec's cache settings (``skip_instance_cache``, ``use_listings_cache``,
      ``listings_expiry_time``, ``max_paths``) are dropped: obstore has no such caches.

    obstore's own keys are taken as they are: any key of its store configuration
    (``S3Config``, ``GCSConfig``, ``AzureConfig``: ``access_key_id``, ``region``,
    ``endpoint``, ``skip_signature``, ...; obstore checks them when the store is
    made), ``client_options`` (obstore's ``ClientConfig``, e.g. ``{"allow_http":
    true, "timeout": "30s"}``) and ``retry_config``. A key obstore does not know
    either (s3fs's ``config_kwargs``, ``requester_pays``, gcsfs's ``project``, ...)
    makes :func:`open_store` open the URL through fsspec; so do any options of an
    ``http(s)://`` URL but ``client_options`` and ``retry_config``, and an ``s3://`` URL
    whose credentials would come from AWS's profile files (``AWS_PROFILE``,
    ``~/.aws/credentials``, ``~/.aws/config``) when neither the options nor the
    environment hold keys: obstore reads no profile files.
    """
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] | None = None
    options = dict(storage_options or {})
    if scheme in _S3_SCHEMES and _needs_aws_profile(options):
        return None
    for key, value in options.items():
        if key in _FSSPEC_CACHE_KEYS or _fsspec_option(scheme, key, value, config):
            continue
        if key == "client_options" and isinstance(value, Mapping):
            client.update(value)
        elif key == "retry_config" and isinstance(value, Mapping):
            retry = dict(value)
        elif scheme in _HTTP_SCHEMES:
            return None  # an HTTP store has no configuration beyond its client's
        else:
            config[key] = value  # obstore's own key, or unknown: obstore says which
    endpoint = config.get("endpoint")
    if scheme == "http" or (isinstance(endpoint, str) and endpoint.startswith("http://")):
        client.setdefault("allow_http", True)  # the user named plain HTTP
    return ObstoreOptions(config, client, retry)


@dataclass(frozen=True)
class _UnknownKey:
    """obstore's refusal of a storage option's key (fsspec may know it)."""

    key: str


def _open_obstore(
    text: str, options: ObstoreOptions, read_only: bool
) -> Store | _UnknownKey | None:
    """The URL as zarr's ``ObjectStore``; None if obstore is not installed, the key
    obstore does not know when it refuses one of the options (fsspec may know it)."""
    try:
        from obstore.exceptions import BaseError, UnknownConfigurationKeyError
        from obstore.store import from_url
        from zarr.storage import ObjectStore
    except ImportError:
        return None
    try:
        store = from_url(
            text,
            config=options.config or None,  # type: ignore[arg-type]
            client_options=options.client_options or None,  # type: ignore[arg-type]
            retry_config=options.retry_config,  # type: ignore[arg-type]
        )
    except UnknownConfigurationKeyError as e:
        named = re.search(r"key: '([^']*)'", str(e)) or re.search(r'key: "([^"]*)"', str(e))
        return _UnknownKey(named.group(1) if named else "?")
    except (ValueError, TypeError) as e:  # a value obstore refuses ("Invalid key" too)
        raise StoreOpenError(f"{text}: cannot open this URL as a store ({e})") from e
    except BaseError as e:  # an unrecognised URL, a configuration missing a setting
        what, todo = _obstore_reason(e) or (str(e), "check the URL")
        raise StoreOpenError(f"{text}: cannot open this URL as a store: {what}; {todo}") from e
    settle_at_exit()  # obstore's threads must not be in Python as the process exits
    return ObjectStore(store, read_only=read_only)


class ReadOnlyError(ValueError):
    """A job that writes, given an array or store opened read-only.

    A ``ValueError``, as zarr-python's own refusal of ``ro[...] = x`` on a store
    opened with ``mode="r"`` ("store was opened in read-only mode and does not
    support writing"): a job refuses before it writes anything.
    """


def refuse_read_only(target: Any, job: str) -> None:
    """Refuse ``job``, which writes, when ``target`` was opened read-only.

    ``target`` is a ``zarr.Array``, a ``StorePath`` or a store: each says
    ``read_only`` (an array opened with ``mode="r"`` is read-only even over a
    writable store: zarr opens it on a read-only copy of the store). A job must
    ask before it writes, and before it sends the array's description to other
    processes, which reopen it from a path or URL (and so could write).

    Raises
    ------
    ReadOnlyError
        When ``target`` is read-only.
    """
    if not getattr(target, "read_only", False):
        return
    store_path = getattr(target, "store_path", None)
    where = str(store_path if store_path is not None else target)
    raise ReadOnlyError(
        f"{where} was opened in read-only mode: {job} writes into it; open it for "
        "writing (mode='r+') to run it, or use a job that only reads"
    )


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

    mode = "r+" if writes is not None else "r"
    if isinstance(target, str | os.PathLike):
        target = open_store(os.fspath(target), mode=mode, storage_options=storage_options)
    elif not isinstance(target, zarr.Array) and getattr(target, "read_only", False):
        # a store given read-only stays read-only: the job refuses it by name below
        # rather than through zarr's mode mismatch
        mode = "r"
    array = target if isinstance(target, zarr.Array) else zarr.open_array(target, mode=mode)
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
        if not _fsspec_takes(scheme, unknown):
            raise StoreOpenError(
                f"{text}: unknown storage option {unknown!r} (neither obstore's {scheme}:// "
                "store nor fsspec's file system takes it); remove or correct it"
            )
        foreign = [k for k in storage_options or {} if not _fsspec_takes(scheme, k)]
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


def _fsspec_takes(scheme: str, key: str) -> bool:
    """Whether fsspec's file system for ``scheme`` names ``key`` among its options
    (True when the file system cannot be found: fsspec then says what is missing)."""
    import inspect

    try:
        import fsspec

        kind = fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError):
        return True
    named = set(_FSSPEC_CACHE_KEYS) | {"asynchronous", "loop"}
    for cls in kind.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None:
            named |= set(inspect.signature(init).parameters)
    return key in named


def remote_location(store: Store) -> tuple[str, str] | None:
    """``(scheme, "bucket/prefix")`` of an object store or fsspec store, to compare
    two of them; None for other stores."""
    from zarr.storage import FsspecStore, ObjectStore

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
    from zarr.storage import FsspecStore, ObjectStore

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
        return ObjectStore(new, read_only=store.read_only)
    container, _, prefix = path.strip("/").partition("/")
    if container != location[1].partition("/")[0]:
        raise StoreOpenError(f"{path} is not in the bucket of {location[0]}://{location[1]}")
    new = type(inner)(
        config=inner.config, prefix=prefix or None, client_options=inner.client_options,
        retry_config=inner.retry_config, credential_provider=inner.credential_provider,
    )
    return ObjectStore(new, read_only=store.read_only)


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
