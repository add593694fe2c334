"""A store wrapper that counts the bytes a reader fetches, key by key.

For the tests and ``benchmarks/bench_quantize.py``: whether a read of one inner chunk
of a shard fetches that chunk's bytes (and the shard's index) or the whole shard.
Every way zarr-python fetches bytes goes through it: ``get`` (async and sync),
``get_partial_values``, ``get_ranges`` (and ``get_ranges_sync``) and ``_get_many``,
the last ones as zarr's ``Store`` makes them of ``get``, so that each merged fetch
counts whole. Nothing here calls zarrext.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore


class ByteCountingStore(WrapperStore[Any]):
    """A store that counts, per key, the requests made and the bytes they returned.

    ``fetched`` and ``requests`` count every fetch since the last :meth:`reset`;
    :attr:`total` is the sum of ``fetched``. Metadata documents (``zarr.json``) count
    like any other key: filter them out with :meth:`chunk_bytes`.
    """

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.fetched: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()

    def _with_store(self, store: Any) -> ByteCountingStore:
        # zarr reopens stores read-only (with_read_only): keep counting in the same place
        other = type(self)(store)
        other.fetched, other.requests = self.fetched, self.requests
        return other

    def reset(self) -> None:
        self.fetched.clear()
        self.requests.clear()

    @property
    def total(self) -> int:
        return sum(self.fetched.values())

    def chunk_bytes(self) -> dict[str, int]:
        """Bytes fetched per key, metadata documents left out."""
        return {k: n for k, n in self.fetched.items() if not k.endswith("zarr.json")}

    def _count(self, key: str, value: Buffer | None) -> Buffer | None:
        self.requests[key] += 1
        if value is not None:
            self.fetched[key] += len(value)
        return value

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return self._count(key, await self._store.get(key, prototype, byte_range))

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        return self._count(key, super().get_sync(key, prototype=prototype, byte_range=byte_range))

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        return [self._count(k, v) for (k, _), v in zip(key_ranges, values, strict=True)]

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        max_concurrency: int = 10,
        max_gap_bytes: int = 1 << 20,
        max_coalesced_bytes: int = 16 << 20,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        # Store's own coalescer over self.get, which counts each merged fetch (gaps
        # between ranges included); the stores zarr ships have no other get_ranges
        async for group in Store.get_ranges(
            self, key, byte_ranges, prototype=prototype, max_concurrency=max_concurrency,
            max_gap_bytes=max_gap_bytes, max_coalesced_bytes=max_coalesced_bytes,
        ):
            yield group

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:  # Store's own: one counted get each
            yield key, await self.get(key, prototype, byte_range)
