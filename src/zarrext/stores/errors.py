"""The errors zarrext raises for stores: a location that does not open, a store that
cannot be reached, a job that writes given a read-only store.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ACCESS_CAUSES",
    "ReadOnlyError",
    "refuse_read_only",
    "StoreAccessError",
    "StoreOpenError",
]


class StoreOpenError(ValueError):
    """A location that cannot be opened as a store (bad URL, missing backend, options)."""


class StoreAccessError(OSError):
    """A store that cannot be reached or refuses a request (network, credentials, a
    missing bucket): its message names the location, what failed and what to do.

    Raised by the stores :func:`open_store` opens for object-store URLs, from the
    store's own error (obstore's, with its debug dump), which stays chained as
    ``__cause__``.

    Attributes
    ----------
    location : str
        The store's URL or path, as the user gave it.
    cause : str
        What failed, one of :data:`ACCESS_CAUSES`: ``"missing bucket"``,
        ``"no credentials"``, ``"access denied"``, ``"timed out"``, ``"refused"``
        (nothing listens at the endpoint), ``"unreachable"`` (no connection, an
        unknown host), ``"configuration"``, ``"not found"``, or ``"other"``.
    """

    def __init__(self, message: str, location: str, cause: str = "other") -> None:
        super().__init__(message)
        self.location = location
        self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.location, self.cause))


ACCESS_CAUSES = (
    "missing bucket", "no credentials", "access denied", "timed out", "refused",
    "unreachable", "configuration", "not found", "other",
)
"""The values of :attr:`StoreAccessError.cause`."""


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
