"""One model of an array's codec chain, which every runtime feature asks.

A Zarr v3 chain is array->array codecs (filters), one array->bytes codec (the
serializer) and bytes->bytes codecs. When the serializer is ``sharding_indexed``
its inner chunks have a chain of their own, which may be sharded again. Where a
codec stands decides what zarrext may do with an array:

- Bytes->bytes codecs *after* the sharding codec (zarr-python adds ``zstd`` there
  when ``serializer=ShardingCodec(...)`` is given without ``compressors=``) make the
  stored object not a shard but a compressed or checksummed shard: its bytes are
  rewritten whole on every write, and reading its index needs the whole object
  decoded first (:meth:`CodecChain.decode_stored`).
- Array->array codecs *before* the sharding codec map each region of a shard to
  the same (``scale_offset``, ``cast_value``) or the transposed (``transpose``)
  region of the array the sharding codec sees, so an inner chunk still owns its
  own byte range (:meth:`CodecChain.local_filters`).

Layouts (:mod:`zarrext.sharding.layout`), ``write_dask``, the jobs (recompress,
compact, expand, check, inspect, info) and the pipeline ask this model instead of
looking for the sharding codec themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarr.codecs import TransposeCodec
from zarr.codecs.cast_value import CastValue
from zarr.codecs.scale_offset import ScaleOffset
from zarr.codecs.sharding import ShardingCodec
from zarr.core.codec_pipeline import codecs_from_list_unchecked

from zarrext._zarr_compat import codec_supports_sync
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.optional import OptionalCodec
from zarrext.errors import codec_name

if TYPE_CHECKING:
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, Codec
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer
    from zarr.core.metadata import ArrayV3Metadata

__all__ = ["CodecChain", "ConditionalPlacement", "decode_bytes"]

# Filters that map every element to the element at the same place: a region of the
# filtered array comes from the same region of the array.
ELEMENTWISE_FILTERS: tuple[type, ...] = (ScaleOffset, CastValue)


@dataclass(frozen=True)
class ConditionalPlacement:
    """Where an array's (first) conditional codec sits.

    Attributes
    ----------
    codec : ConditionalCodec
    after : tuple of BytesBytesCodec
        The bytes->bytes codecs applied after it in its own chain (decoded first
        when reading).
    sharding : ShardingCodec or None
        The sharding codec whose inner chunks carry the conditional header.
    """

    codec: ConditionalCodec
    after: tuple[BytesBytesCodec, ...]
    sharding: ShardingCodec | None


@dataclass(frozen=True)
class CodecChain:
    """An array's (or a shard's inner chunks') codecs, by role.

    Attributes
    ----------
    array_array : tuple of ArrayArrayCodec
        Filters, applied first when writing.
    serializer : ArrayBytesCodec
        The array->bytes codec (``bytes``, ``sharding_indexed``, ``optional``, ...).
    bytes_bytes : tuple of BytesBytesCodec
        Compressors and checksums applied to the serializer's output.
    """

    array_array: tuple[ArrayArrayCodec, ...]
    serializer: ArrayBytesCodec
    bytes_bytes: tuple[BytesBytesCodec, ...]

    @classmethod
    def of(cls, codecs: Iterable[Codec]) -> CodecChain:
        """Split ``codecs`` by role (zarr-python's validation of their order)."""
        array_array, serializer, bytes_bytes = codecs_from_list_unchecked(tuple(codecs))
        return cls(tuple(array_array), serializer, tuple(bytes_bytes))

    @classmethod
    def from_metadata(cls, metadata: ArrayV3Metadata) -> CodecChain:
        """The chain of a Zarr format 3 array."""
        return cls.of(metadata.codecs)

    @property
    def codecs(self) -> tuple[Codec, ...]:
        """Every codec in order."""
        return (*self.array_array, self.serializer, *self.bytes_bytes)

    @property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec, when it is this chain's serializer."""
        return self.serializer if isinstance(self.serializer, ShardingCodec) else None

    @property
    def inner(self) -> CodecChain | None:
        """The chain of the inner chunks, when this chain shards."""
        sharding = self.sharding
        return None if sharding is None else CodecChain.of(sharding.codecs)

    @property
    def stores_bare_shards(self) -> bool:
        """Whether each stored object is a shard as ``sharding_indexed`` lays it out
        (a sharded chain with nothing after the sharding codec)."""
        return self.sharding is not None and not self.bytes_bytes

    @property
    def optional(self) -> OptionalCodec | None:
        """The ``optional`` codec serializing the (inner) chunks, if any."""
        if isinstance(self.serializer, OptionalCodec):
            return self.serializer
        inner = self.inner
        return None if inner is None else inner.optional

    def conditional(self) -> ConditionalPlacement | None:
        """The (first) conditional codec, at top level or in the inner chunks' chain."""
        for i, codec in enumerate(self.bytes_bytes):
            if isinstance(codec, ConditionalCodec):
                return ConditionalPlacement(codec, self.bytes_bytes[i + 1 :], None)
        inner = self.inner
        if inner is None:
            return None
        found = inner.conditional()
        if found is None:
            return None
        # A conditional codec two shards deep is placed by its own sharding codec.
        sharding = found.sharding or self.sharding
        return ConditionalPlacement(found.codec, found.after, sharding)

    def local_filters(self) -> str | None:
        """Why a filter would move an inner chunk's values to other inner chunks, or
        None when every filter is elementwise or a transpose."""
        for i, codec in enumerate(self.array_array):
            if not isinstance(codec, (*ELEMENTWISE_FILTERS, TransposeCodec)):
                return (
                    f"array->array codec {i} ({codec_name(codec)!r}) before sharding_indexed "
                    "is not known to keep each inner chunk's values in that inner chunk"
                )
        return None

    def _transposes(self) -> list[tuple[int, ...]]:
        return [tuple(c.order) for c in self.array_array if isinstance(c, TransposeCodec)]

    def to_serializer_axes(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """Coordinates (or a shape) in the array's axes, in the axes the serializer
        sees: each transpose before it permutes them."""
        for order in self._transposes():
            coords = tuple(coords[axis] for axis in order)
        return coords

    def to_array_axes(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """The inverse of :meth:`to_serializer_axes`."""
        for order in reversed(self._transposes()):
            unpermuted = [0] * len(coords)
            for k, axis in enumerate(order):
                unpermuted[axis] = coords[k]
            coords = tuple(unpermuted)
        return coords

    def names(self) -> list[str]:
        """Codec names in order, a sharding codec's inner chain in brackets."""
        out = []
        for codec in self.codecs:
            name = codec_name(codec)
            if isinstance(codec, ShardingCodec):
                name = f"{name}[{', '.join(CodecChain.of(codec.codecs).names())}]"
            out.append(name)
        return out

    def outer_names(self) -> str:
        """The bytes->bytes codecs after the serializer, for messages."""
        return ", ".join(repr(codec_name(c)) for c in self.bytes_bytes)

    def filtered_spec(self, spec: ArraySpec) -> ArraySpec:
        """``spec`` of a chunk as the serializer sees it (after the filters)."""
        for codec in self.array_array:
            spec = codec.resolve_metadata(spec)
        return spec

    def decode_stored(self, data: bytes, spec: ArraySpec) -> bytes:
        """The serializer's bytes of a stored object: its bytes->bytes codecs undone.

        ``spec`` is the stored chunk's (shard's) spec as the array gives it.
        """
        if not self.bytes_bytes:
            return data
        buffer = spec.prototype.buffer.from_bytes(data)
        return bytes(decode_bytes(self._bytes_transform(spec), buffer).to_bytes())

    def encode_stored(self, data: bytes, spec: ArraySpec) -> bytes:
        """The stored object for serializer bytes ``data`` (bytes->bytes codecs applied)."""
        if not self.bytes_bytes:
            return data
        buffer: Any = spec.prototype.buffer.from_bytes(data)
        for codec, codec_spec in self._bytes_transform(spec):
            buffer = _step(codec, "encode", buffer, codec_spec)
        return bytes(buffer.to_bytes())

    def _bytes_transform(self, spec: ArraySpec) -> list[tuple[BytesBytesCodec, ArraySpec]]:
        spec = self.serializer.resolve_metadata(self.filtered_spec(spec))
        out = []
        for codec in self.bytes_bytes:
            evolved = codec.evolve_from_array_spec(spec)
            out.append((evolved, spec))
            spec = evolved.resolve_metadata(spec)
        return out


def decode_bytes(steps: Sequence[tuple[BytesBytesCodec, ArraySpec]], buffer: Buffer) -> Buffer:
    """Undo bytes->bytes codecs, each given with the spec it encoded with, the last
    applied first."""
    for codec, spec in reversed(steps):
        buffer = _step(codec, "decode", buffer, spec)
    return buffer


def _step(codec: Any, direction: str, buffer: Any, spec: ArraySpec) -> Any:
    """One bytes->bytes step, synchronously where the codec can."""
    if codec_supports_sync(codec):
        out = getattr(codec, f"_{direction}_sync")(buffer, spec)
    else:
        from zarr.core.sync import sync

        out = sync(getattr(codec, f"_{direction}_single")(buffer, spec))
    if out is None:
        raise ValueError(f"codec {codec_name(codec)!r} {direction}d a stored object to nothing")
    return out
