"""What a location names: a local path or ``file://`` URL, or a URL of a store, and
which URL schemes open through obstore.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zarr.storage import LocalStore, ZipStore

__all__ = [
    "AZURE_SCHEMES",
    "GCS_SCHEMES",
    "HTTP_SCHEMES",
    "is_url",
    "local_directory",
    "local_path",
    "OBSTORE_SCHEMES",
    "S3_SCHEMES",
]


# URL schemes opened through obstore, by the family of options they take. memory://
# stays with fsspec: fsspec's memory file system is one per process, obstore's one
# per store object (a second open would see an empty store).
S3_SCHEMES = frozenset({"s3", "s3a"})


GCS_SCHEMES = frozenset({"gs", "gcs"})


AZURE_SCHEMES = frozenset({"az", "abfs", "abfss", "adl", "azure"})


HTTP_SCHEMES = frozenset({"http", "https"})


OBSTORE_SCHEMES = S3_SCHEMES | GCS_SCHEMES | AZURE_SCHEMES | HTTP_SCHEMES
"""URL schemes that open as zarr's ``ObjectStore`` (obstore) when obstore is installed."""


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL (``scheme://...``) rather than a local path."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").isalnum()


def local_path(location: Any) -> Path | None:
    """The local file or directory ``location`` names: a path, a ``file://`` URL, a
    :class:`~zarr.storage.LocalStore` (its root) or a :class:`~zarr.storage.ZipStore`
    (its file); None for other URLs and stores."""
    if isinstance(location, LocalStore):
        return Path(location.root)
    if isinstance(location, ZipStore):
        return Path(location.path) if isinstance(location.path, str | Path) else None
    if not isinstance(location, str | os.PathLike):
        return None
    text = os.fspath(location)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    return None if is_url(text) else Path(text)


def local_directory(location: str | Path) -> Path | None:
    """The local directory ``location`` names; None for URLs and zip archives."""
    path = local_path(location)
    return None if path is None or path.suffix == ".zip" else path
