"""zarr's ObjectStore for a URL zarrext opened: its failures named with the URL, the
cause and what to do.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from zarr.abc.store import ByteRequest
from zarr.storage import ObjectStore

from zarrext.stores.classification import (
    BUCKET_MISSING,
    not_found_errors,
    passed_through_errors,
    store_error,
)
from zarrext.stores.errors import StoreAccessError

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = [
    "ONE_REQUEST_MAX_BYTES",
    "RemoteObjectStore",
]


# Objects up to this size are uploaded with one request. obstore (zarr's
# ObjectStore) splits any object over 5 MiB into a multipart upload: three more
# requests for a 16 MiB shard, and on the loopback moto server 56 MiB in 14 MiB
# objects took 2.6-2.9 s against 1.2-1.8 s in one PUT each (tensorstore
# sends one PUT). Larger objects keep obstore's multipart upload, whose parts go
# in parallel and fail alone.
ONE_REQUEST_MAX_BYTES = 256 * 2**20


class RemoteObjectStore(ObjectStore):
    """zarr's :class:`~zarr.storage.ObjectStore` for a URL zarrext opened: the same
    requests, but a request that fails raises :class:`StoreAccessError` naming the
    URL, the cause (a missing bucket, no credentials, a timeout, a refused or failed
    connection...) and what to do, ``from`` obstore's error.

    A read of a missing ``zarr.json`` asks once whether the bucket exists (zarr reads
    a missing key as nothing: a missing bucket would look like an empty store).

    Parameters
    ----------
    store : obstore store
    read_only : bool
    location : str
        The URL, as the user gave it (named in errors).
    timeout : float, optional
        The seconds a request may take, retries included (named in a timeout's error).
    """

    def __init__(
        self, store: Any, *, read_only: bool = False, location: str, timeout: float | None = None
    ) -> None:
        super().__init__(store, read_only=read_only)
        self.location = location
        self.timeout = timeout
        # whether the bucket is known to exist: then a missing key is only missing
        self._bucket_seen = isinstance(getattr(store, "url", None), str)  # HTTP: no bucket

    def with_read_only(self, read_only: bool = False) -> RemoteObjectStore:
        return type(self)(
            self.store, read_only=read_only, location=self.location, timeout=self.timeout
        )

    def error_words(self, error: BaseException) -> StoreAccessError | None:
        """``error`` as a :class:`StoreAccessError`; None for an error callers expect
        as it is (a missing key's ``FileNotFoundError``, obstore's ``AlreadyExistsError``,
        ``PreconditionError``, ``NotSupportedError``...) and for errors of no store."""
        if isinstance(error, (StoreAccessError, *passed_through_errors())):
            return None
        if isinstance(error, (FileNotFoundError, *not_found_errors())) and not (
            BUCKET_MISSING.search(str(error))
        ):
            return None
        return store_error(error, [self.location], timeout=self.timeout)

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        """Raise a failed request's error as a :class:`StoreAccessError`."""
        try:
            yield
        except Exception as e:
            said = self.error_words(e)
            if said is None:
                raise
            raise said from e

    async def _bucket_exists_or_raise(self, key: str) -> None:
        """After ``key`` (a ``zarr.json``) was not found: raise if the bucket is missing.

        A HEAD request's 404 has no body; a GET's names ``NoSuchBucket``. Asked once
        per store, until the bucket is seen.
        """
        if self._bucket_seen or key.rsplit("/", 1)[-1] != "zarr.json":
            return
        import obstore as obs

        missing: tuple[type[Exception], ...] = (FileNotFoundError, *not_found_errors())
        with self._naming():
            try:
                await obs.get_async(self.store, key)
            except missing as e:
                if BUCKET_MISSING.search(str(e)):
                    raise
        self._bucket_seen = True

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with self._naming():
            found = await super().get(key, prototype, byte_range)
        if found is None:
            await self._bucket_exists_or_raise(key)
        else:
            self._bucket_seen = True
        return found

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        with self._naming():
            return await super().get_partial_values(prototype, key_ranges)

    async def exists(self, key: str) -> bool:
        with self._naming():
            found = await super().exists(key)
        if not found:
            await self._bucket_exists_or_raise(key)
        else:
            self._bucket_seen = True
        return found

    async def set(self, key: str, value: Buffer) -> None:
        import obstore as obs

        self._check_writable()
        with self._naming():
            # one request up to ONE_REQUEST_MAX_BYTES (obstore splits any object
            # over 5 MiB into a multipart upload: more requests, slower)
            await obs.put_async(
                self.store, key, value.as_buffer_like(),
                use_multipart=len(value) > ONE_REQUEST_MAX_BYTES,
            )

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        with self._naming():
            await super().set_if_not_exists(key, value)

    async def delete(self, key: str) -> None:
        with self._naming():
            await super().delete(key)

    async def delete_dir(self, prefix: str) -> None:
        with self._naming():
            await super().delete_dir(prefix)

    async def _listed(self, items: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
        with self._naming():
            async for item in items:
                yield item

    def list(self) -> AsyncGenerator[str, None]:
        return self._listed(super().list())

    def list_prefix(self, prefix: str) -> AsyncGenerator[str, None]:
        return self._listed(super().list_prefix(prefix))

    def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        return self._listed(super().list_dir(prefix))

    async def getsize(self, key: str) -> int:
        with self._naming():
            return await super().getsize(key)

    async def getsize_prefix(self, prefix: str) -> int:
        with self._naming():
            return await super().getsize_prefix(prefix)
