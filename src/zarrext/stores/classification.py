"""A store's own error classified (a missing bucket, no credentials, a timeout...) and
said in one line naming the location, what went wrong and what to do.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable

from zarrext.stores.errors import StoreAccessError
from zarrext.stores.locations import (
    AZURE_SCHEMES,
    GCS_SCHEMES,
    HTTP_SCHEMES,
    S3_SCHEMES,
    local_path,
)
from zarrext.stores.options import STORE_TIMEOUT_ENV

__all__ = [
    "BUCKET_MISSING",
    "classify",
    "error_words",
    "is_obstore_error",
    "not_found_errors",
    "passed_through_errors",
    "store_error",
]


# What a store's error says, by its words (obstore's GenericError is one type for most
# failures, the kind of a network failure said only in its debug dump; icechunk's and
# fsspec's errors are worded alike): (cause, pattern, what went wrong). First match wins:
# a failed credential request names the metadata service however it failed.
BUCKET_MISSING = re.compile(r"NoSuchBucket|ContainerNotFound|bucket does not exist", re.I)


_BY_WORDS = tuple(
    (cause, re.compile(pattern, re.I), what) for cause, pattern, what in (
        ("missing bucket", BUCKET_MISSING.pattern, "the bucket or container does not exist"),
        ("no credentials",
         r"169\.254\.169\.254|metadata\.google\.internal|credential|token request",
         "no credentials found (the cloud's instance metadata service was asked)"),
        ("configuration", r"Unable to recognise URL|Unable to parse|invalid url",
         "not a URL of an object store"),
        ("configuration", r"must be specified", "the store's configuration is incomplete"),
        ("access denied", r"AccessDenied|Forbidden|InvalidAccessKeyId|SignatureDoesNotMatch",
         "access denied"),
        # not "timeout" alone: every obstore dump names its retry_timeout
        ("timed out", r"kind: Timeout|TimedOut|timed out|operation timeout",
         "the request timed out"),
        ("refused", r"ConnectionRefused|connection refused", "connection refused"),
        ("unreachable",
         r"error sending request|kind: Connect|dns error|failed to lookup address",
         "cannot connect"),
    )
)


# Where each store takes its credentials (obstore's configuration keys and variables).
_CREDENTIALS = {
    "s3": "give key and secret in --storage-options, or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY in the environment, or anon: true for a public bucket",
    "gs": "give a service account's key file in --storage-options (token: PATH), or "
    "GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT (its path) or "
    "GOOGLE_SERVICE_ACCOUNT_KEY (its JSON) in the environment, or anon: true for a "
    "public bucket",
    "az": "give account_name with account_key or sas_token in --storage-options, or "
    "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_KEY "
    "(a service principal: AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, AZURE_TENANT_ID) in the "
    "environment, or anon: true for a public container",
}


def _family(location: str) -> str:
    """``"s3"``, ``"gs"``, ``"az"`` or ``"http"`` for a URL of those stores, else ``""``."""
    scheme = location.partition("://")[0].lower()
    for family, schemes in (("s3", S3_SCHEMES), ("gs", GCS_SCHEMES), ("az", AZURE_SCHEMES),
                            ("http", HTTP_SCHEMES)):
        if scheme in schemes:
            return family
    return ""


def _what_to_do(cause: str, location: str, what: str, timeout: float | None) -> str:
    family = _family(location)
    if cause == "missing bucket":
        return "check the URL, or create it first"
    if cause == "no credentials":
        return _CREDENTIALS.get(family, "give credentials in --storage-options")
    if cause == "configuration":
        if what.startswith("not a URL"):
            return "give scheme://bucket/path"
        if family == "az":  # the account is named with the credentials
            return _CREDENTIALS["az"]
        return "give the missing setting in --storage-options"
    if cause == "access denied":
        return "check the credentials and their permissions"
    if cause == "timed out":
        return f"check the endpoint and the network; {STORE_TIMEOUT_ENV} sets the bound"
    if cause == "refused":
        return "check the endpoint (host and port) and that the service runs"
    if cause == "unreachable":
        return "check the endpoint and the network"
    if cause == "not found":
        return "check the URL"
    return "check the URL, --storage-options and credentials"


def is_obstore_error(error: BaseException) -> bool:
    """Whether ``error`` is one of obstore's (False when obstore is not installed)."""
    try:
        from obstore.exceptions import BaseError
    except ImportError:
        return False
    return isinstance(error, BaseError)


def passed_through_errors() -> tuple[type[Exception], ...]:
    """obstore's errors that say how a request went, not that the store failed:
    callers handle them (zarr suppresses ``AlreadyExistsError`` and falls back on
    ``NotSupportedError``; a conditional write's ``PreconditionError``)."""
    try:
        from obstore import exceptions as ox
    except ImportError:
        return ()
    return (ox.AlreadyExistsError, ox.PreconditionError, ox.NotSupportedError,
            ox.NotModifiedError)


def not_found_errors() -> tuple[type[Exception], ...]:
    """obstore's class of a missing object (it raises Python's ``FileNotFoundError``
    for one, which zarr reads as a missing key; its own class is kept to be sure)."""
    try:
        from obstore.exceptions import NotFoundError
    except ImportError:
        return ()
    return (NotFoundError,)


def _by_type(error: BaseException) -> tuple[str, str, str | None] | None:
    """(cause, what went wrong, what to do if not the cause's) for an error whose type
    says it."""
    if is_obstore_error(error):
        from obstore import exceptions as ox

        by_type: tuple[tuple[type[Exception], str, str, str | None], ...] = (
            (ox.PermissionDeniedError, "access denied", "permission denied", None),
            (ox.UnauthenticatedError, "no credentials", "not authenticated", None),
            (ox.UnknownConfigurationKeyError, "configuration", "an unknown storage option",
             "see obstore's configuration keys for this store"),
            (ox.InvalidPathError, "configuration", "an invalid path", "check the URL"),
            (ox.NotSupportedError, "other", "an operation this store does not support",
             "use another kind of store"),
            (ox.AlreadyExistsError, "other", "the object already exists",
             "rerun, or remove it first"),
            (ox.PreconditionError, "other", "an object changed during the request", "rerun"),
        )
        for kind, cause, what, todo in by_type:
            if isinstance(error, kind):
                return cause, what, todo
        return None
    if isinstance(error, ConnectionRefusedError):
        return "refused", "connection refused", None
    if isinstance(error, socket.gaierror):
        return "unreachable", "unknown host", "check the host name"
    if isinstance(error, TimeoutError):
        return "timed out", "timed out", None
    if isinstance(error, ConnectionError):
        return "unreachable", "the connection failed", None
    if isinstance(error, PermissionError):
        return "access denied", "permission denied", None
    return None


def error_words(error: BaseException) -> str:
    """What ``error`` says, without obstore's debug dump, on one line."""
    text = str(error).split("Debug source:")[0]
    code = re.search(r"<Code>([^<]+)</Code>", text)
    if code:
        return code.group(1)
    if isinstance(error, OSError) and not is_obstore_error(error) and error.strerror:
        text = error.strerror
    return " ".join(text.split())[:200] or type(error).__name__


def classify(
    error: BaseException, location: str, timeout: float | None = None
) -> tuple[str, str, str]:
    """(cause, what went wrong, what to do) for a store's ``error`` at ``location``.

    ``cause`` is one of :data:`ACCESS_CAUSES`; what to do names the settings of the
    location's own store (S3's, Google Cloud Storage's, Azure's credentials) and, for
    a timeout, ``timeout`` (the seconds :data:`STORE_TIMEOUT_ENV` allowed).
    """
    typed = _by_type(error)
    # a missing bucket is said in the server's answer, whatever type obstore raised
    # (GET and PUT answer 404, NotFound)
    words = next(((c, w) for c, p, w in _BY_WORDS if p.search(str(error))), None)
    if typed is not None and (words is None or words[0] != "missing bucket"):
        cause, what, todo = typed
        if todo is not None:
            return cause, what, todo
    elif words is not None:
        cause, what = words
    elif isinstance(error, (FileNotFoundError, *not_found_errors())):
        cause, what = "not found", "not found"
    else:
        cause, what = "other", error_words(error)
    if cause == "timed out" and timeout is not None:
        what = f"the request timed out (bound: {timeout:g} s, retries included)"
    elif cause == "missing bucket" and _family(location) in ("s3", "gs", "az"):
        bucket = location.partition("://")[2].split("/")[0].split("@")[0]
        kind = "container" if _family(location) == "az" else "bucket"
        what = f"the {kind} {bucket!r} does not exist"
    return cause, what, _what_to_do(cause, location, what, timeout)


def store_error(
    error: BaseException,
    locations: Iterable[str | os.PathLike[str] | None],
    *,
    timeout: float | None = None,
) -> StoreAccessError | None:
    """``error`` (obstore's, or an ``OSError`` of a remote file system) as a
    :class:`StoreAccessError` naming which of ``locations`` it concerns, the cause
    and what to do (:func:`classify`); None when it is neither, or every location is
    local (a local path's ``OSError`` names its file itself).

    The location is the one whose bucket (host) and path appear in the error's
    text (obstore names the request it made), else the only URL among them.
    ``timeout`` is the seconds the store allowed a request (named in a timeout's
    message). The result's ``__cause__`` is not set: raise it ``from error``.
    """
    if isinstance(error, StoreAccessError):
        return error
    urls = [os.fspath(x) for x in locations if x is not None and local_path(x) is None]
    if not urls:
        return None
    if not is_obstore_error(error) and (
        not isinstance(error, OSError) or getattr(error, "filename", None)
    ):
        return None
    location = _named_in(str(error), urls)
    if location is None:
        if len(set(urls)) > 1:
            return None
        location = urls[0]
    cause, what, todo = classify(error, location, timeout)
    error_type = type(error).__name__
    return StoreAccessError(f"{location}: {what} ({error_type}); {todo}", location, cause)


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
