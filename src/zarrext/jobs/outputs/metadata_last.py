"""A store that holds an output's ``zarr.json`` documents until the job publishes them:
chunks go to their final keys at once, the metadata last, the root's where none is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from zarrext import stores

__all__ = ["MetadataLastStore", "RootTakenError"]


def _is_metadata(key: str) -> bool:
    return key == "zarr.json" or key.endswith("/zarr.json")


def _depth(key: str) -> int:
    return key.count("/")


def _sliced(value: Buffer, byte_range: ByteRequest | None) -> Buffer:
    """``value`` cut as a store's ``get`` cuts an object for ``byte_range``."""
    if byte_range is None:
        return value
    if isinstance(byte_range, RangeByteRequest):
        return value[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return value[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return value[max(0, len(value) - byte_range.suffix) :]
    raise TypeError(f"unexpected byte range {byte_range!r}")


class MetadataLastStore(WrapperStore[Store]):
    """A store whose ``zarr.json`` writes wait in memory until :meth:`publish`.

    Chunks go to the wrapped store at once, at their final keys; ``zarr.json``
    documents are kept here (reads, listings and ``exists`` see them as if they
    were stored) and written by :meth:`publish`, innermost first, the root's last.
    A job interrupted before then leaves chunks that open as nothing.

    Parameters
    ----------
    store : Store
        Where the output goes.
    pending : dict, optional
        ``zarr.json`` documents already written (shared with the copies zarr makes,
        e.g. a read-only view, so that they all see the same ones).
    keep : mapping, optional
        Objects that ``delete_dir`` must leave in place (put back after it): the
        :data:`~zarrext.jobs.outputs.remote.UNFINISHED` marker, which zarr's
        ``overwrite`` would delete.
    root_where_none : bool
        Whether :meth:`publish` writes the root's ``zarr.json`` only where none is
        (a conditional create, where the store has one), raising
        :class:`RootTakenError` if one is there.
    """

    def __init__(
        self,
        store: Store,
        pending: dict[str, Buffer] | None = None,
        keep: Mapping[str, Buffer] | None = None,
        *,
        root_where_none: bool = False,
    ) -> None:
        super().__init__(store)
        self.pending: dict[str, Buffer] = {} if pending is None else pending
        self.keep: Mapping[str, Buffer] = dict(keep or {})
        self.root_where_none = root_where_none

    @property
    def wrapped(self) -> Store:
        """The store chunks go to (and, once published, the metadata)."""
        return self._store

    def _with_store(self, store: Store) -> MetadataLastStore:
        return type(self)(store, self.pending, self.keep, root_where_none=self.root_where_none)

    @property
    def _supports_sync_io(self) -> bool:
        # The synchronous methods would bypass the held-back documents.
        return False

    def __eq__(self, value: object) -> bool:
        return isinstance(value, MetadataLastStore) and value.pending is self.pending

    __hash__ = None  # type: ignore[assignment]

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key in self.pending:
            return _sliced(self.pending[key], byte_range)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(
            await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges))
        )

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        return key in self.pending or await self._store.exists(key)

    async def set(self, key: str, value: Buffer) -> None:
        if _is_metadata(key):
            self._check_writable()
            self.pending[key] = value
        else:
            await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if not await self.exists(key):
            await self.set(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await asyncio.gather(*(self.set(k, v) for k, v in values))

    async def delete(self, key: str) -> None:
        self.pending.pop(key, None)
        await self._store.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        within = f"{prefix.rstrip('/')}/" if prefix else ""
        for key in [k for k in self.pending if k.startswith(within)]:
            del self.pending[key]
        await self._store.delete_dir(prefix)
        for key, value in self.keep.items():
            if key.startswith(within):
                await self._store.set(key, value)

    async def is_empty(self, prefix: str) -> bool:
        within = f"{prefix.rstrip('/')}/" if prefix else ""
        if any(k.startswith(within) for k in self.pending):
            return False
        return await self._store.is_empty(prefix)

    async def _merged(
        self, listed: AsyncIterator[str], held: Iterable[str], within: str = ""
    ) -> AsyncIterator[str]:
        # The kept objects (the UNFINISHED marker) are zarrext's, no part of the Zarr
        # hierarchy: listed, zarr's group walk would warn "Object at
        # .zarrext-tmp-unfinished is not recognized as a component of a Zarr hierarchy".
        seen = {k[len(within):] for k in self.keep if k.startswith(within)}
        async for key in listed:
            if key not in seen:
                seen.add(key)
                yield key
        for key in held:
            if key not in seen:
                seen.add(key)
                yield key

    def list(self) -> AsyncIterator[str]:
        return self._merged(self._store.list(), list(self.pending))

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        return self._merged(
            self._store.list_prefix(prefix), [k for k in self.pending if k.startswith(prefix)]
        )

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        within = f"{prefix.rstrip('/')}/" if prefix else ""
        children = [
            k[len(within):].split("/", 1)[0] for k in self.pending if k.startswith(within)
        ]
        return self._merged(self._store.list_dir(prefix), children, within)

    async def publish(self) -> None:
        """Write the held ``zarr.json`` documents: innermost first, the root's last.

        Raises
        ------
        RootTakenError
            If the root's is to be written where none is, and one is there (the
            others are written; the root's is held).
        """
        for key in sorted(self.pending, key=lambda k: (-_depth(k), k)):
            if key == "zarr.json" and self.root_where_none:
                # Read first too: the one check where a store has no conditional
                # write, or a server ignores it (see remote.staged).
                if await self._store.exists(key):
                    raise RootTakenError(key)
                created = await stores.create_object_async(self._store, key,
                                                           self.pending[key].to_bytes())
                if created is None:
                    await self._store.set(key, self.pending[key])
                elif not created:
                    raise RootTakenError(key)
            else:
                await self._store.set(key, self.pending[key])
        self.pending.clear()


class RootTakenError(Exception):
    """A ``zarr.json`` another writer put at the root of an output being published."""
