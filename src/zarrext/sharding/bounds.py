"""How big one inner chunk can get once encoded: the fixed slot size of a shard.

A ``fixed-slot`` shard gives every inner chunk a slot of ``S`` bytes, so ``S`` must
be at least the largest encoded size an inner chunk can have, for any values.
Fixed-size codecs (``bytes``, ``crc32c``, ``transpose``, ``shuffle``) state their
size through ``compute_encoded_size``; zarrext's variable-size codecs state their
bound with a ``max_encoded_size`` method beside their own code
(:meth:`zarrext.codecs.conditional.ConditionalCodec.max_encoded_size`); the
compressors of zarr-python and numcodecs, whose bounds their libraries document,
are sized by :data:`KNOWN_BOUNDS` below, each with the source of its formula.

A slot is the chain's bound rounded up to whole blocks of :data:`SLOT_BLOCK`
bytes when the chain compresses: an inner chunk then fills only the first blocks
of its slot, and the rest, never written, stays a hole of a sparse file.

Earlier versions of zarrext sized slots otherwise (:data:`SLOT_RULES`). Their
shards stay in their slots: a writer, ``inspect``, ``recompress`` and ``compact``
recognise each shard's slot size from where its index puts its chunks
(:meth:`zarrext.sharding.geometry.ShardGeometry.for_shard`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numcodecs.blosc
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec
from zarr.codecs import numcodecs as zarr_numcodecs

from zarrext.codecs.blosc_frames import CheckedBloscCodec, CheckedNumcodecsBlosc
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.errors import codec_name
from zarrext.sharding.geometry import ShardLayoutError

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.array_spec import ArraySpec

__all__ = [
    "KNOWN_BOUNDS",
    "SLOT_BLOCK",
    "SLOT_RULES",
    "KnownBound",
    "SlotRule",
    "chain_bound",
    "deflate_bound",
    "encoded_size_bound",
    "lz4_bound",
    "raw_header_slot",
    "slot_bound",
    "slot_sizes",
    "zstd_bound",
]

SLOT_BLOCK = 4096
"""Slots of compressing chains are whole multiples of this many bytes (the block of
ext4, xfs, btrfs and tmpfs, and the page size). A constant rather than the block
size of the file system the array is on: the slot size places every chunk of a
shard, so it must be a function of the array's metadata alone, the same for every
writer, for ``inspect``/``check``/``compact`` on a copy in an object store, and
after the array moves to another file system."""


def zstd_bound(n: int) -> int:
    """``ZSTD_COMPRESSBOUND(n)`` from ``zstd.h``: the worst-case size of one zstd
    frame of ``n`` bytes, checksum included. numcodecs (which zarr's ``zstd`` codec
    uses) compresses into a buffer of exactly ``ZSTD_compressBound(n)`` bytes, so
    no frame it returns is larger."""
    margin = ((128 << 10) - n) >> 11 if n < (128 << 10) else 0
    return n + (n >> 8) + margin


def deflate_bound(n: int) -> int:
    """Worst-case size of a raw deflate stream of ``n`` bytes, for any level,
    window and memory level: the larger of the two conservative bounds of zlib's
    ``deflateBound`` (``deflate.c``, zlib >= 1.2.12: fixed blocks with 9-bit
    literals, and stored blocks) and zlib 1.2.11's conservative bound, so that it
    holds for whichever zlib Python links."""
    fixed = n + (n >> 3) + (n >> 8) + (n >> 9) + 4
    stored = n + (n >> 5) + (n >> 7) + (n >> 11) + 7
    old = n + ((n + 7) >> 3) + ((n + 63) >> 6) + 5
    return max(fixed, stored, old)


GZIP_WRAPPER = 18
"""gzip member header (10 bytes: Python's ``gzip`` module, which numcodecs' ``GZip``
uses, writes no file name, comment or extra field for an in-memory file) and
trailer (CRC-32 and size, 8 bytes); RFC 1952."""
ZLIB_WRAPPER = 6
"""zlib stream header (2 bytes, no preset dictionary) and Adler-32 trailer (4);
RFC 1950, and the ``wraplen`` of zlib's ``deflateBound``."""


def lz4_bound(n: int) -> int:
    """``LZ4_COMPRESSBOUND(n)`` from ``lz4.h`` (``n + n/255 + 16``) plus the 4-byte
    little-endian size header numcodecs' ``LZ4`` writes before the block."""
    return n + n // 255 + 16 + 4


@dataclass(frozen=True)
class KnownBound:
    """The worst-case encoded size of a compressor zarrext does not own.

    Attributes
    ----------
    bound : callable
        Input size in bytes -> largest encoded size, for any input of that size.
    source : str
        Where the formula comes from.
    """

    bound: Callable[[int], int]
    source: str


def _blosc_bound(n: int) -> int:
    return n + int(numcodecs.blosc.MAX_OVERHEAD)


_ZSTD = KnownBound(zstd_bound, "ZSTD_COMPRESSBOUND, zstd.h")
_GZIP = KnownBound(
    lambda n: deflate_bound(n) + GZIP_WRAPPER, "deflateBound, zlib deflate.c; RFC 1952"
)
_BLOSC = KnownBound(
    _blosc_bound,
    "BLOSC_MAX_OVERHEAD, blosc.h (numcodecs.blosc.MAX_OVERHEAD): blosc stores a "
    "buffer that does not compress as a copy after its 16-byte header",
)

KNOWN_BOUNDS: dict[type[BytesBytesCodec], KnownBound] = {
    ZstdCodec: _ZSTD,
    zarr_numcodecs.Zstd: _ZSTD,
    GzipCodec: _GZIP,
    zarr_numcodecs.GZip: _GZIP,
    zarr_numcodecs.Zlib: KnownBound(
        lambda n: deflate_bound(n) + ZLIB_WRAPPER, "deflateBound, zlib deflate.c; RFC 1950"
    ),
    BloscCodec: _BLOSC,
    zarr_numcodecs.Blosc: _BLOSC,
    CheckedBloscCodec: _BLOSC,  # zarrext's forms of the two, which only check decodes
    CheckedNumcodecsBlosc: _BLOSC,
    zarr_numcodecs.LZ4: KnownBound(lz4_bound, "LZ4_COMPRESSBOUND, lz4.h; numcodecs lz4.pyx"),
    zarr_numcodecs.Shuffle: KnownBound(lambda n: n, "a permutation of the bytes"),
}
"""Worst-case encoded sizes of zarr-python's and numcodecs' compressors, by class
(exactly: a subclass may encode otherwise). Each is checked against its library
for random and incompressible inputs in ``tests/sharding/test_bounds.py``."""


def encoded_size_bound(codec: BytesBytesCodec, n: int) -> int | None:
    """Largest encoded size of ``n`` bytes through bytes->bytes ``codec``; None when
    zarrext knows no bound."""
    if codec.is_fixed_size:
        # compute_encoded_size of bytes->bytes codecs does not look at the spec
        return int(codec.compute_encoded_size(n, None))  # type: ignore[arg-type]
    if isinstance(codec, ConditionalCodec):
        return codec.max_encoded_size(n, nested_bound=encoded_size_bound)
    known = KNOWN_BOUNDS.get(type(codec))
    if known is not None:
        return known.bound(n)
    own = getattr(codec, "max_encoded_size", None)
    if callable(own):
        limit = own(n)
        return None if limit is None else int(limit)
    return None


def chain_bound(codecs: tuple[Codec, ...], chunk_spec: ArraySpec) -> tuple[int, bool]:
    """``(bound, exact)``: the largest encoded size of one inner chunk through
    ``codecs``, and whether every inner chunk has exactly that size.

    Raises
    ------
    ShardLayoutError
        When a codec's output size has no bound zarrext knows.
    """
    dtype = chunk_spec.dtype
    item_size = getattr(dtype, "item_size", None)
    if not isinstance(item_size, int):
        raise ShardLayoutError(
            f"shard_layout='fixed-slot': data type {dtype} has no fixed item size, so an "
            "inner chunk's encoded size has no bound"
        )
    nbytes = math.prod(chunk_spec.shape) * item_size
    exact = True
    spec = chunk_spec
    for i, codec in enumerate(codecs):
        where = f"inner codec {i} ({codec_name(codec)!r})"
        if isinstance(codec, ArrayArrayCodec | ArrayBytesCodec):
            if not codec.is_fixed_size:
                raise ShardLayoutError(
                    f"shard_layout='fixed-slot': {where} produces variable-size output, so "
                    "inner chunks have no fixed slot size; use shard_layout='append'"
                )
            nbytes = codec.compute_encoded_size(nbytes, spec)
            spec = codec.resolve_metadata(spec)
            continue
        if codec.is_fixed_size:
            nbytes = codec.compute_encoded_size(nbytes, spec)
            continue
        limit = encoded_size_bound(codec, nbytes) if isinstance(codec, BytesBytesCodec) else None
        if limit is None:
            raise ShardLayoutError(
                f"shard_layout='fixed-slot': {where} has no bound on its encoded size "
                "that zarrext knows (zstd, gzip, zlib, blosc, lz4, crc32c and shuffle "
                "have one); use shard_layout='append', or wrap the compressor in a "
                "'conditional' codec opened with a decision that never inflates "
                "(e.g. decision='compress_if_smaller')"
            )
        nbytes = limit
        exact = False
    return int(nbytes), exact


def slot_bound(codecs: tuple[Codec, ...], chunk_spec: ArraySpec) -> int:
    """The fixed slot size ``S`` of inner chunks encoded by ``codecs``.

    The chain's bound (:func:`chain_bound`); for a chain whose encoded size varies,
    rounded up to whole :data:`SLOT_BLOCK` blocks once it is a block or more, so
    that the part of a slot a chunk does not fill is whole blocks, left as holes.
    (Smaller slots are not rounded: several share a block, which a hole could not
    save.) Chains of fixed-size codecs fill their slots exactly and keep them.

    Raises
    ------
    ShardLayoutError
        When a codec's output size has no bound zarrext knows.
    """
    bound, exact = chain_bound(codecs, chunk_spec)
    if exact or bound < SLOT_BLOCK:
        return bound
    return -(-bound // SLOT_BLOCK) * SLOT_BLOCK


def raw_header_slot(codecs: tuple[Codec, ...], chunk_spec: ArraySpec) -> int:
    """The slot size zarrext gave fixed-slot shards before it knew compressors'
    bounds (layout version 1, see :data:`SLOT_RULES`).

    Fixed-size codecs add what ``compute_encoded_size`` says; a ``conditional``
    codec adds its header to its input (``raw + header_bits / 8``: version 1 let
    only a decision that never inflates write fixed slots, so a chunk never
    outgrew its raw bytes); a codec with a ``max_encoded_size(n)`` of its own,
    that bound. No rounding to blocks. So a chain ``bytes, conditional(zstd),
    crc32c`` of 8 KiB inner chunks had 8,192 + 1 + 4 = 8,197-byte slots.

    Raises
    ------
    ShardLayoutError
        When version 1 gave these codecs no slot (another compressor, or a data
        type of no fixed size): it wrote no fixed-slot shard for them.
    """
    item_size = getattr(chunk_spec.dtype, "item_size", None)
    if not isinstance(item_size, int):
        raise ShardLayoutError(f"data type {chunk_spec.dtype} has no fixed item size")
    nbytes = math.prod(chunk_spec.shape) * item_size
    spec = chunk_spec
    for codec in codecs:
        if isinstance(codec, ArrayArrayCodec | ArrayBytesCodec):
            if not codec.is_fixed_size:
                raise ShardLayoutError(f"{codec_name(codec)!r} has variable-size output")
            nbytes = codec.compute_encoded_size(nbytes, spec)
            spec = codec.resolve_metadata(spec)
        elif codec.is_fixed_size:
            nbytes = codec.compute_encoded_size(nbytes, spec)
        elif isinstance(codec, ConditionalCodec):
            nbytes += codec.header_nbytes
        elif callable(own := getattr(codec, "max_encoded_size", None)) and (
            (limit := own(nbytes)) is not None
        ):
            nbytes = int(limit)
        else:
            raise ShardLayoutError(f"{codec_name(codec)!r} had no slot bound in version 1")
    return int(nbytes)


@dataclass(frozen=True)
class SlotRule:
    """How one version of zarrext sized the slots of ``fixed-slot`` shards.

    Attributes
    ----------
    version : int
        The layout version.
    written : str
        Which zarrext wrote shards with it.
    size : callable
        ``(inner codecs, inner chunk spec) -> slot size``; raises
        :class:`ShardLayoutError` for codecs the version gave no slot.
    """

    version: int
    written: str
    size: Callable[[tuple[Codec, ...], ArraySpec], int]


SLOT_RULES: tuple[SlotRule, ...] = (
    SlotRule(2, "from 2026-11-25 (commit 217cea7) on", slot_bound),
    SlotRule(1, "from 2026-11-21 (commit c7d2612) to 217cea7", raw_header_slot),
)
"""Every slot size formula zarrext has written shards with, newest first.

Both place inner chunk ``i`` at ``data_start + i * S`` and its spare slot at
``spare_start + i * S`` (:class:`~zarrext.sharding.geometry.ShardGeometry`); only
``S`` differs, and only for chains that compress (a chain of fixed-size codecs has
the same ``S`` in both). Nothing records the version: ``zarr.json`` is what zarr
writes (layouts are runtime settings), and a shard's index tells which ``S`` it is
laid out in (:meth:`~zarrext.sharding.geometry.ShardGeometry.for_shard`). A new
rule goes first here; the ones before it stay, so that their shards keep their
slots."""


def slot_sizes(codecs: tuple[Codec, ...], chunk_spec: ArraySpec) -> tuple[int | None, ...]:
    """The slot size of each rule of :data:`SLOT_RULES` for these inner codecs,
    newest first: None where a rule gives them none."""
    sizes: list[int | None] = []
    for rule in SLOT_RULES:
        try:
            sizes.append(rule.size(codecs, chunk_spec))
        except ShardLayoutError:
            sizes.append(None)
    return tuple(sizes)
