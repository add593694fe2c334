"""A store's options: ``--storage-options`` parsed, fsspec's option names mapped to
obstore's, and the bound on a request's time (``ZARREXT_STORE_TIMEOUT``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from zarrext.stores.errors import StoreOpenError
from zarrext.stores.locations import AZURE_SCHEMES, GCS_SCHEMES, HTTP_SCHEMES, S3_SCHEMES

__all__ = [
    "bounded_options",
    "DEFAULT_STORE_TIMEOUT",
    "fsspec_takes",
    "obstore_options",
    "ObstoreOptions",
    "parse_storage_options",
    "store_timeout",
    "STORE_TIMEOUT_ENV",
]


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


STORE_TIMEOUT_ENV = "ZARREXT_STORE_TIMEOUT"
"""Seconds an object store may take to answer a request, retries included (default
:data:`DEFAULT_STORE_TIMEOUT`); read when a store is opened."""


DEFAULT_STORE_TIMEOUT = 60.0


# obstore's own defaults, which a lower ZARREXT_STORE_TIMEOUT lowers in turn.
_OBSTORE_ATTEMPT_TIMEOUT = 30.0  # one request (ClientConfig.timeout)


_OBSTORE_CONNECT_TIMEOUT = 5.0  # its connection (ClientConfig.connect_timeout)


_OBSTORE_MAX_BACKOFF = 15.0  # the longest pause between attempts (BackoffConfig)


def store_timeout() -> float:
    """Seconds an object store may take to answer a request, retries included:
    ``$ZARREXT_STORE_TIMEOUT``, or :data:`DEFAULT_STORE_TIMEOUT`.

    Raises
    ------
    StoreOpenError
        When the variable is not a number of seconds above 0.
    """
    text = os.environ.get(STORE_TIMEOUT_ENV, "").strip()
    try:
        seconds = float(text) if text else DEFAULT_STORE_TIMEOUT
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise StoreOpenError(f"{STORE_TIMEOUT_ENV}={text!r}: expected a number of seconds > 0")
    return seconds


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
        return scheme not in HTTP_SCHEMES
    if scheme in S3_SCHEMES:
        if key == "client_kwargs" and isinstance(value, Mapping):
            if not set(value) <= {"region_name", "endpoint_url"}:
                return False  # other botocore client settings: fsspec's alone
            config.update({_S3_KEYS[k]: v for k, v in value.items()})
            return True
        if key in _S3_KEYS:
            config[_S3_KEYS[key]] = value
            return True
    elif scheme in GCS_SCHEMES and key == "token" and isinstance(value, str):
        # gcsfs's token: "anon", or the path of a service account's JSON key
        # ("google_default", "cache", "cloud" name gcsfs's own credential lookups)
        if value in ("google_default", "cache", "cloud", "browser"):
            return False
        if value == "anon":
            config["skip_signature"] = True
        else:
            config["service_account"] = value
        return True
    elif scheme in AZURE_SCHEMES and key in _AZURE_KEYS:
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
    if scheme in S3_SCHEMES and _needs_aws_profile(options):
        return None
    for key, value in options.items():
        if key in _FSSPEC_CACHE_KEYS or _fsspec_option(scheme, key, value, config):
            continue
        if key == "client_options" and isinstance(value, Mapping):
            client.update(value)
        elif key == "retry_config" and isinstance(value, Mapping):
            retry = dict(value)
        elif scheme in HTTP_SCHEMES:
            return None  # an HTTP store has no configuration beyond its client's
        else:
            config[key] = value  # obstore's own key, or unknown: obstore says which
    endpoint = config.get("endpoint")
    if scheme == "http" or (isinstance(endpoint, str) and endpoint.startswith("http://")):
        client.setdefault("allow_http", True)  # the user named plain HTTP
    return ObstoreOptions(config, client, retry)


def bounded_options(options: ObstoreOptions, timeout: float) -> tuple[ObstoreOptions, float | None]:
    """``options`` with obstore's timeouts lowered so that a request that gets no
    answer fails within ``timeout`` seconds, retries included; and the bound (None
    when the options set obstore's timeouts themselves: theirs are kept).

    obstore gives one request 30 s (``ClientConfig.timeout``) and retries it for 3
    minutes (``RetryConfig.retry_timeout``, pauses of up to 15 s between attempts): a
    frozen server failed a writer after 180 s. Here one attempt gets at most half the
    bound, and no retry starts after the bound less one attempt and one pause.
    """
    attempt = min(_OBSTORE_ATTEMPT_TIMEOUT, timeout / 2)
    pause = min(_OBSTORE_MAX_BACKOFF, timeout / 10)
    given_client, given_retry = options.client_options, dict(options.retry_config or {})
    client = {
        "timeout": timedelta(seconds=attempt),
        "connect_timeout": timedelta(seconds=min(_OBSTORE_CONNECT_TIMEOUT, attempt)),
        **given_client,
    }
    retry = {
        "retry_timeout": timedelta(seconds=max(timeout - attempt - pause, 0.0)),
        "backoff": {"max_backoff": timedelta(seconds=pause)},
        **given_retry,
    }
    own = "timeout" not in given_client and "retry_timeout" not in given_retry
    return ObstoreOptions(options.config, client, retry), (timeout if own else None)


def fsspec_takes(scheme: str, key: str) -> bool:
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
