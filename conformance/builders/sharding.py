"""Spec 001: ``sharding_indexed`` v1.0.

A shard: inner chunks anywhere in the object (any order, unused space allowed) and an
index of ``(offset, nbytes)`` u64 pairs per inner chunk, shaped ``chunks per shard +
[2]``, encoded by the index codecs, at the start or end of the object. Empty inner
chunks have both entries ``2^64 - 1``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from conformance.builders.common import (
    U64_MAX,
    Case,
    Coords,
    Runtime,
    array_metadata,
    assemble_shard,
    c_bytes,
    c_crc32c,
    c_gzip,
    c_sharding,
    c_transpose,
    c_zstd,
    chunk_key,
    chunks_of,
    encode_chain,
    read_case,
    refuse_case,
    rng_for,
    write_case,
)

SPEC = "001"
read = partial(read_case, SPEC)
refuse = partial(refuse_case, SPEC)
write = partial(write_case, SPEC)

CONFIG = "Configuration parameters"
BINARY = "Binary shard format"
DEFINITIONS = "Definitions"

LOCATION = ("Specifies whether the shard index is located at the beginning or end of the "
            "file. The parameter value must be either the string ``start`` or ``end``.")
DEFAULT_END = "If the parameter is not present, the value defaults to ``end``."
PLACED = ("The index is either placed at the end of the file or at the beginning of the "
          "file, as configured by the ``index_location`` parameter.")
EMPTY = ("Empty inner chunks are denoted by setting both offset and nbytes to ``2^64 - 1``. "
         "Empty inner chunks are interpreted as being filled with the fill value.")
FULL_SHAPE = ("The index always has the full shape of all possible inner chunks per shard, "
              "even if they extend beyond the array shape.")
INDEX_ARRAY = ("The index is an array with 64-bit unsigned integers with a shape that matches "
               "the chunks per shard tuple with an appended dimension of size 2.")
OFFSET = ("The ``offset[i]`` specifies the byte offset within the shard at which the encoded "
          "representation of chunk ``i`` begins, and ``nbytes[i]`` specifies the encoded "
          "length in bytes.")
INDEX_CODECS = ("The index is encoded into binary representations using the specified index "
                "codecs.")
ORDER = ("The actual order of the chunk content is not fixed and may be chosen by the "
         "implementation. All possible write orders are valid according to this "
         "specification and therefore can be read by any other implementation.")
UNUSED = ("In the ``sharding_indexed`` binary format, inner chunks are written successively "
          "in a shard, where unused space between them is allowed, followed by an index "
          "referencing them.")
EXAMPLE_68 = ("The size of the corresponding index is ``16 (2x uint64) * 4 (chunks per "
              "shard) + 4 (crc32c checksum) = 68 bytes``.")
NO_COMPRESSED_INDEX = ("Codecs that produce variable-sized encoded representation, such as "
                       "compression codecs, MUST NOT be used for index codecs.")
INDEX_ONE_A2B = ("The ``index_codecs`` member is required and needs to contain exactly one "
                 "``array -> bytes`` codec.")
CODECS_ONE_A2B = ("The ``codecs`` member is required and needs to contain exactly one "
                  "``array -> bytes`` codec.")
DIVIDE = ("The length of the ``chunk_shape`` array must match the number of dimensions of "
          "the shard shape to which this sharding codec is applied, and the inner chunk "
          "shape along each dimension must evenly divide the size of the shard shape.")
APPEND = ("**Append-only**: Any chunk to write is appended to the existing shard, followed "
          "by an updated index. If previous inner chunks are updated, their storage space "
          "becomes unused, as well as the previous index.")
FIXED = ("**Fixed order**: Specify a fixed order (e.g. row-, column-major, or Morton order). "
         "When replacing existing inner chunks larger or equal-sized inner chunks may be "
         "replaced in-place, leaving unused space up to an upper limit that might possibly "
         "be specified.")
OTHER_FORMATS = ("**Other formats**: Other formats that accept additional bytes at the end of "
                 "the file (such as HDF) could be used for storing shards, by writing the "
                 "inner chunks in the order the format prescribes and appending a binary "
                 "index derived from the byte offsets and lengths at the end of the file.")
RECOMMENDED = ("It is RECOMMENDED to use a little-endian codec followed by a crc32c checksum "
               "as index codecs.")
INNER_CODECS = "Specifies a list of codecs to be used for encoding and decoding inner chunks."
SHARD_IS = ("**Shard** is a chunk of the outer array that corresponds to one storage object. "
            "As described in this document, shards MAY have multiple inner chunks.")


INDEX = [c_bytes(), c_crc32c()]
FILL = 7  # a fill value that zeros cannot fake


def values_u16(case_id: str, shape: Sequence[int]) -> np.ndarray:
    """Distinct-looking uint16 values (never the fill value 7)."""
    v = rng_for(case_id).integers(100, 60000, size=tuple(shape)).astype("<u2")
    return v


def base_meta(codecs: list, *, shape=(8, 8), shard=(4, 8), dtype="uint16", fill=FILL) -> dict:
    return array_metadata(shape, shard, dtype, fill, codecs)


def shards_by_hand(values: np.ndarray, shard: Sequence[int], inner: Sequence[int],
                   inner_codecs: list, *, index_codecs: list = INDEX,
                   index_location: str = "end",
                   order: Callable[[list[tuple[int, ...]]], list[tuple[int, ...]]] | None = None,
                   gap: Callable[[tuple[int, ...]], bytes] | None = None,
                   empty: Callable[[tuple[int, ...], tuple[int, ...]], bool] | None = None,
                   tail: bytes = b"", fill: int = FILL) -> dict[str, bytes]:
    """Every shard of ``values`` assembled with a chosen order, gaps and empty entries.

    ``empty(shard_coords, inner_coords)`` leaves an inner chunk out (its index entries
    ``2^64 - 1``); its values must then be the fill value in ``values``.
    """
    objects = {}
    cps = tuple(s // i for s, i in zip(shard, inner, strict=True))
    for sc, shard_values in chunks_of(values, shard, fill):
        encoded = {}
        for ic, inner_values in chunks_of(shard_values, inner, fill):
            if empty is not None and empty(sc, ic):
                assert (inner_values == fill).all(), (sc, ic)
                continue
            encoded[ic] = encode_chain(inner_codecs, inner_values, fill=fill, coords=ic,
                                       runtime=Runtime())
        coords = order(sorted(encoded)) if order is not None else sorted(encoded)
        objects[chunk_key(sc)] = assemble_shard(
            encoded, cps, index_codecs=index_codecs, index_location=index_location,
            order=coords, gap_before={c: gap(c) for c in coords} if gap else None, tail=tail)
    return objects


def read_cases() -> list[Case]:
    out: list[Case] = []

    # The spec's own configuration and its 68-byte index example.
    v = (np.add.outer(np.arange(64), np.arange(64)) % 251).astype("<u2")
    m = array_metadata((64, 64), (64, 64), "uint16", 0, [c_sharding(
        (32, 32), [c_bytes(), c_gzip(1)], INDEX, "end")])
    objects = shards_by_hand(v, (64, 64), (32, 32), [c_bytes(), c_gzip(1)], fill=0)
    index = objects["c/0/0"][-68:]
    offsets = np.frombuffer(index[:64], "<u8").reshape(2, 2, 2)
    assert offsets[1, 1, 0] + offsets[1, 1, 1] == len(objects["c/0/0"]) - 68
    out.append(read("shard-spec-example-68-byte-index", BINARY, EXAMPLE_68,
                    "The spec's configuration (inner [32, 32], codecs [bytes, gzip(1)], "
                    "index [bytes, crc32c], end) on a [64, 64] shard: a 68-byte index.",
                    m, v, objects=objects))

    v = values_u16("shard-index-end", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "end")])
    out.append(read("shard-index-end", BINARY, PLACED,
                    "index_location end: the index is the last 8*16+4 bytes.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()])))

    v = values_u16("shard-index-start", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "start")])
    out.append(read("shard-index-start", BINARY, LOCATION,
                    "index_location start: the index is the first 132 bytes and the offsets "
                    "count from the start of the shard, index included.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           index_location="start")))

    v = values_u16("shard-index-location-absent", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, None)])
    out.append(read("shard-index-location-absent", CONFIG, DEFAULT_END,
                    "No index_location in the configuration: the index is at the end.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()])))

    v = values_u16("shard-index-big-endian", (8, 8))
    big = [c_bytes("big"), c_crc32c()]
    m = base_meta([c_sharding((2, 2), [c_bytes()], big, "end")])
    out.append(read("shard-index-big-endian", BINARY, INDEX_CODECS,
                    "Index codecs [bytes(big), crc32c]: offsets and sizes stored big-endian.",
                    m, v, objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                                 index_codecs=big)))

    v = values_u16("shard-index-big-endian-start", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], big, "start")])
    out.append(read("shard-index-big-endian-start", BINARY, INDEX_CODECS,
                    "Index codecs [bytes(big), crc32c] at the start.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()], index_codecs=big,
                                           index_location="start")))

    v = values_u16("shard-index-without-crc32c", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], [c_bytes()], "end")])
    out.append(read("shard-index-without-crc32c", CONFIG, INDEX_ONE_A2B,
                    "Index codecs [bytes] alone: a 128-byte index without checksum.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           index_codecs=[c_bytes()])))

    v = values_u16("shard-index-transposed", (8, 8))
    tindex = [c_transpose([1, 0, 2]), c_bytes(), c_crc32c()]
    m = base_meta([c_sharding((2, 2), [c_bytes()], tindex, "end")])
    out.append(read("shard-index-transposed", BINARY, INDEX_ARRAY,
                    "Index codecs [transpose([1, 0, 2]), bytes, crc32c]: the [2, 4, 2] index "
                    "array stored with its first two axes swapped.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           index_codecs=tindex)))

    v = values_u16("shard-empty-inner-chunks", (8, 8))
    v[0:2, 2:4] = FILL
    v[6:8, :] = FILL
    hole = lambda s, i: (s, i) in {((0, 0), (0, 1)), ((1, 0), (1, 0)), ((1, 0), (1, 1)),  # noqa: E731
                                   ((1, 0), (1, 2)), ((1, 0), (1, 3))}
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "end")])
    out.append(read("shard-empty-inner-chunks", BINARY, EMPTY,
                    "Five inner chunks empty (both entries 2^64-1): they read as the fill "
                    "value 7.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()], empty=hole)))

    v = np.full((8, 8), FILL, "<u2")
    v[4:, :] = values_u16("shard-all-entries-empty", (4, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "end")])
    out.append(read("shard-all-entries-empty", BINARY, EMPTY,
                    "A stored shard whose index holds only empty entries (the object is the "
                    "index alone): all fill value.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           empty=lambda s, i: s == (0, 0))))

    v = np.full((8, 8), FILL, "<u2")
    v[:4] = values_u16("shard-missing-shard-object", (4, 8))
    objects = shards_by_hand(v, (4, 8), (2, 2), [c_bytes()])
    del objects["c/1/0"]
    out.append(read("shard-missing-shard-object", DEFINITIONS, SHARD_IS,
                    "The second shard's object does not exist: its chunk (a shard) reads as "
                    "the fill value.", base_meta([c_sharding((2, 2), [c_bytes()])]), v,
                    objects=objects))

    v = values_u16("shard-order-reversed", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "end")])
    out.append(read("shard-order-reversed", BINARY, ORDER,
                    "Inner chunks stored in reverse C order.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           order=lambda cs: cs[::-1])))

    v = values_u16("shard-order-column-major", (8, 8))
    out.append(read("shard-order-column-major", BINARY, FIXED,
                    "Inner chunks stored in column-major (Fortran) order.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           order=lambda cs: sorted(cs, key=lambda c: c[::-1]))))

    v = values_u16("shard-order-morton", (8, 8))
    m8 = array_metadata((8, 8), (8, 8), "uint16", FILL,
                        [c_sharding((2, 2), [c_bytes()], INDEX, "end")])
    morton = lambda cs: sorted(cs, key=_morton)  # noqa: E731
    out.append(read("shard-order-morton", BINARY, FIXED,
                    "A 4x4 grid of inner chunks stored in Morton (Z) order.", m8, v,
                    objects=shards_by_hand(v, (8, 8), (2, 2), [c_bytes()], order=morton)))

    v = values_u16("shard-gaps-between-chunks", (8, 8))
    out.append(read("shard-gaps-between-chunks", BINARY, UNUSED,
                    "Unused bytes (0xAB, 1 to 8 of them) before every inner chunk, the first "
                    "included.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           gap=lambda c: b"\xab" * (1 + (c[0] * 4 + c[1]) % 8))))

    v = values_u16("shard-gap-after-start-index", (8, 8))
    ms = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "start")])
    out.append(read("shard-gap-after-start-index", BINARY, UNUSED,
                    "Index at the start, then 100 unused bytes, then the chunks, then 50 more "
                    "unused bytes.", ms, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()], index_location="start",
                                           gap=lambda c: b"\xcd" * 100 if c == (0, 0) else b"",
                                           tail=b"\xef" * 50)))

    v = values_u16("shard-unused-space-before-end-index", (8, 8))
    out.append(read("shard-unused-space-before-end-index", BINARY, UNUSED,
                    "64 unused bytes between the last chunk and the index at the end.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()], tail=bytes(64))))

    v = values_u16("shard-foreign-file-prefix", (8, 8))
    prefix = b"\x89HDF\r\n\x1a\n" + bytes(24)
    out.append(read("shard-foreign-file-prefix", BINARY, OTHER_FORMATS,
                    "A shard that begins with another format's 32-byte file header, then the "
                    "chunks, then the index at the end.", m, v,
                    objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes()],
                                           gap=lambda c: prefix if c == (0, 0) else b"")))

    out.append(_shared_bytes_case())
    out.append(_append_layout_case())
    out.append(_fixed_slot_case())

    v = np.full((6, 6), FILL, "<u2")
    v[...] = values_u16("shard-index-covers-chunks-beyond-array", (6, 6))
    m = array_metadata((6, 6), (4, 4), "uint16", FILL,
                       [c_sharding((2, 2), [c_bytes()], INDEX, "end")])
    out.append(read("shard-index-covers-chunks-beyond-array", BINARY, FULL_SHAPE,
                    "Shape [6, 6] in [4, 4] shards of [2, 2] inner chunks: the edge shards' "
                    "inner chunks beyond the array are empty entries, and every index still "
                    "has 2x2 entries.", m, v,
                    objects=shards_by_hand(v, (4, 4), (2, 2), [c_bytes()],
                                           empty=lambda s, i: any(
                                               sc * 4 + ic * 2 >= 6 for sc, ic in zip(s, i,
                                                                                        strict=True)
                                           ))))

    v = values_u16("shard-chunks-beyond-array-stored", (6, 6))
    out.append(read("shard-chunks-beyond-array-stored", BINARY, FULL_SHAPE,
                    "The same edge shards with the inner chunks beyond the array stored (as "
                    "fill value): readers ignore them.", m, v,
                    objects=shards_by_hand(v, (4, 4), (2, 2), [c_bytes()])))

    for name, codecs, note in (
        ("gzip", [c_bytes(), c_gzip(5)], "[bytes, gzip(5)]"),
        ("zstd", [c_bytes(), c_zstd(3)], "[bytes, zstd(3)]"),
        ("crc32c", [c_bytes(), c_crc32c()], "[bytes, crc32c]"),
        ("big-endian", [c_bytes("big")], "[bytes(big)]"),
        ("transpose", [c_transpose([1, 0]), c_bytes()], "[transpose([1, 0]), bytes]"),
    ):
        cid = f"shard-inner-codecs-{name}"
        v = values_u16(cid, (8, 8))
        mm = base_meta([c_sharding((2, 4), codecs, INDEX, "end")])
        out.append(read(cid, CONFIG, INNER_CODECS,
                        f"Inner codecs {note} (inner chunks [2, 4]).", mm, v,
                        objects=shards_by_hand(v, (4, 8), (2, 4), codecs)))

    v = values_u16("shard-nested-shards", (8, 8))
    inner_shard = c_sharding((2, 2), [c_bytes()], INDEX, "end")
    m = array_metadata((8, 8), (8, 8), "uint16", FILL,
                       [c_sharding((4, 4), [inner_shard], INDEX, "end")])
    out.append(read("shard-nested-shards", CONFIG, CODECS_ONE_A2B,
                    "A shard of [4, 4] inner chunks, each itself a shard of [2, 2] chunks "
                    "(sharding_indexed is the inner chain's array -> bytes codec).", m, v))

    v = values_u16("shard-nested-start-inside-end", (8, 8))
    inner_shard = c_sharding((2, 2), [c_bytes(), c_crc32c()], [c_bytes("big")], "start")
    m = array_metadata((8, 8), (8, 8), "uint16", FILL,
                       [c_sharding((4, 4), [inner_shard], INDEX, "end")])
    out.append(read("shard-nested-start-inside-end", BINARY, PLACED,
                    "Nested shards: the inner shards' big-endian index at their start, the "
                    "outer index at the end.", m, v))

    v = values_u16("shard-codec-after-sharding", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "end"), c_gzip(1)])
    out.append(read("shard-codec-after-sharding", DEFINITIONS, SHARD_IS,
                    "A bytes -> bytes codec after sharding_indexed: each stored object is "
                    "gzip of the shard.", m, v))

    v = values_u16("shard-after-transpose", (8, 8))
    m = base_meta([c_transpose([1, 0]), c_sharding((4, 2), [c_bytes()], INDEX, "end")])
    out.append(read("shard-after-transpose", CONFIG,
                    "An array of integers specifying the shape of the inner chunks in a shard "
                    "along each dimension of the outer array.",
                    "transpose([1, 0]) before sharding_indexed: the shard codec sees [8, 4] "
                    "shards and splits them into [4, 2] inner chunks.", m, v))

    v = values_u16("shard-three-dimensions", (4, 4, 6))
    m = array_metadata((4, 4, 6), (4, 4, 6), "uint16", FILL,
                       [c_sharding((2, 2, 3), [c_bytes()], INDEX, "end")])
    out.append(read("shard-three-dimensions", BINARY, INDEX_ARRAY,
                    "A 3-D shard: the index has shape [2, 2, 2, 2].", m, v,
                    objects=shards_by_hand(v, (4, 4, 6), (2, 2, 3), [c_bytes()],
                                           order=lambda cs: cs[::-1])))

    v = values_u16("shard-recommended-index-codecs", (8, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes(), c_crc32c()], INDEX, "start")])
    out.append(read("shard-recommended-index-codecs", CONFIG, RECOMMENDED,
                    "Index codecs [bytes(little), crc32c] at the start, inner [bytes, crc32c].",
                    m, v, objects=shards_by_hand(v, (4, 8), (2, 2), [c_bytes(), c_crc32c()],
                                                 index_location="start")))
    return out


def _morton(c: tuple[int, ...]) -> int:
    key = 0
    for bit in range(8):
        for d, x in enumerate(c):
            key |= (x >> bit & 1) << (bit * len(c) + d)
    return key


def _raw_inner(values: np.ndarray, c: Coords, codecs: list | None = None) -> bytes:
    """Inner chunk ``c`` (2x2) of ``values`` through ``codecs`` (default ``[bytes]``)."""
    block = values[c[0] * 2:c[0] * 2 + 2, c[1] * 2:c[1] * 2 + 2]
    return encode_chain(codecs or [c_bytes()], block, fill=FILL, coords=c, runtime=Runtime())


def _shared_bytes_case() -> Case:
    """Two index entries reference the same bytes (a deduplicated chunk)."""
    v = values_u16("shard-two-entries-share-bytes", (4, 8))
    v[:, 4:6] = v[:, 0:2]
    encoded: dict[Coords, bytes] = {
        c: _raw_inner(v, c) for c in itertools.product(range(2), range(4)) if c[1] != 2}
    shard = assemble_shard(encoded, (2, 4), index_codecs=INDEX,
                           entries={(0, 2): (0, 8), (1, 2): (8 * 3, 8)})
    return read_case(SPEC, "shard-two-entries-share-bytes", BINARY, OFFSET,
                     "Inner chunks (0, 2) and (1, 2) have no bytes of their own: their index "
                     "entries point at the bytes of (0, 0) and (1, 0), which hold the same "
                     "values.", base_meta([c_sharding((2, 2), [c_bytes()])], shape=(4, 8)), v,
                     objects={"c/0/0": shard})


def _append_layout_case() -> Case:
    """An append-only shard: stale chunks and a stale index before the live ones."""
    old = values_u16("shard-append-only-layout-old", (4, 8))
    v = values_u16("shard-append-only-layout", (4, 8))
    v[:, :4] = old[:, :4]  # chunks (.., 0) and (.., 1) never rewritten
    cps = (2, 4)

    def enc(values: np.ndarray) -> dict[Coords, bytes]:
        return {c: _raw_inner(values, c, [c_bytes(), c_crc32c()])
                for c in itertools.product(range(2), range(4))}

    first = assemble_shard(enc(old), cps, index_codecs=INDEX)  # version 1: 8 chunks, index
    newer = enc(v)
    body = bytearray(first)  # stays in place, now partly unused (its index entirely)
    offsets = {c: (c[0] * 4 + c[1]) * 12 for c in newer}  # version 1: dense, 12 bytes each
    for c in sorted(newer):
        if c[1] >= 2:  # rewritten: appended after the old index
            offsets[c] = len(body)
            body += newer[c]
    entries = {c: (offsets[c], 12) for c in newer}
    shard = assemble_shard({}, cps, index_codecs=INDEX, tail=bytes(body), entries=entries)
    return read_case(SPEC, "shard-append-only-layout", BINARY, APPEND,
                     "An append-only shard: version 1 (8 chunks and their index), then new "
                     "versions of 4 chunks appended after it, then the new index; the old "
                     "copies and the old index are unused space.",
                     base_meta([c_sharding((2, 2), [c_bytes(), c_crc32c()])], shape=(4, 8)), v,
                     objects={"c/0/0": shard})


def _fixed_slot_case() -> Case:
    """zarrext's fixed-slot layout: compressed inner chunks in equal slots, holes of zeros."""
    v = values_u16("shard-fixed-slots-with-holes", (4, 8))
    v[2:, :] = np.arange(16, dtype="<u2").reshape(2, 8)  # compresses well
    slot = 64
    encoded: dict[Coords, bytes] = {}
    gaps: dict[Coords, bytes] = {}
    previous = 0
    for n, c in enumerate(itertools.product(range(2), range(4))):
        encoded[c] = _raw_inner(v, c, [c_bytes(), c_zstd()])
        assert len(encoded[c]) <= slot
        gaps[c] = bytes(n * slot - previous)
        previous = n * slot + len(encoded[c])
    shard = assemble_shard(encoded, (2, 4), index_codecs=INDEX, gap_before=gaps,
                           tail=bytes(8 * slot - previous))
    return read_case(SPEC, "shard-fixed-slots-with-holes", BINARY, FIXED,
                     "Inner chunks [bytes, zstd] each at the start of a 64-byte slot (slot i "
                     "at offset 64*i), the rest of each slot zeros, the index at the end.",
                     base_meta([c_sharding((2, 2), [c_bytes(), c_zstd()])], shape=(4, 8)), v,
                     objects={"c/0/0": shard})


def refuse_cases() -> list[Case]:
    out: list[Case] = []
    v = values_u16("refuse", (4, 8))
    m = base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "end")], shape=(4, 8))
    good = shards_by_hand(v, (4, 8), (2, 2), [c_bytes()])["c/0/0"]

    bad = bytearray(good)
    bad[-5] ^= 0x10  # inside the index, before the checksum
    out.append(refuse("shard-index-crc32c-mismatch", BINARY, INDEX_CODECS,
                      "One bit of the index flipped: its crc32c does not match.", m,
                      "the index codecs' crc32c rejects the index", objects={"c/0/0": bytes(bad)}))

    out.append(refuse("shard-shorter-than-index", BINARY,
                      "The byte size of the index is determined by the number of inner chunks "
                      "in the shard ``n``, i.e. the product of chunks per shard, and the choice "
                      "of index codecs.",
                      "The shard object is 40 bytes; its index alone takes 132.", m,
                      "the object cannot hold the index", objects={"c/0/0": good[-40:]}))

    out.append(refuse("shard-chunk-past-end-of-shard", BINARY, OFFSET,
                      "Inner chunk (1, 3)'s entry (offset 190, nbytes 8) ends at byte 198 of "
                      "the 196-byte shard object.",
                      m, "inner chunk (1, 3) would end beyond the shard object",
                      objects={"c/0/0": _with_entries(v, {(1, 3): (190, 8)})}))

    out.append(refuse("shard-half-empty-entry-offset", BINARY, EMPTY,
                      "An entry with offset 2^64-1 and nbytes 8: not an empty entry, and no "
                      "such offset exists.", m, "only both entries 2^64-1 mean empty",
                      objects={"c/0/0": _with_entries(v, {(0, 1): (U64_MAX, 8)})}))

    out.append(refuse("shard-half-empty-entry-nbytes", BINARY, EMPTY,
                      "An entry with offset 0 and nbytes 2^64-1.", m,
                      "only both entries 2^64-1 mean empty; 2^64-1 bytes do not exist",
                      objects={"c/0/0": _with_entries(v, {(0, 1): (0, U64_MAX)})}))

    out.append(refuse("shard-inner-chunk-too-short", BINARY, OFFSET,
                      "An entry whose nbytes (6) is less than the 8 bytes its [bytes] chain "
                      "needs.", m, "the inner chunk decodes to 3 elements, not 4",
                      objects={"c/0/0": _with_entries(v, {(0, 0): (0, 6)})}))

    out.append(refuse("shard-inner-chunk-zero-bytes", BINARY, OFFSET,
                      "An entry (offset 0, nbytes 0): zero bytes are not an encoded "
                      "[bytes] chunk of 4 elements (and not the empty marker).", m,
                      "zero bytes do not decode to a 2x2 uint16 chunk",
                      objects={"c/0/0": _with_entries(v, {(0, 0): (0, 0)})}))

    out.append(refuse("shard-index-location-invalid", CONFIG, LOCATION,
                      "index_location \"middle\".",
                      base_meta([c_sharding((2, 2), [c_bytes()], INDEX, "middle")],
                                shape=(4, 8)),
                      "index_location must be start or end", objects={"c/0/0": good}))

    out.append(refuse("shard-index-codecs-compressed", CONFIG, NO_COMPRESSED_INDEX,
                      "index_codecs [bytes, gzip].",
                      base_meta([c_sharding((2, 2), [c_bytes()], [c_bytes(), c_gzip()])],
                                shape=(4, 8)),
                      "gzip's output size varies; it must not encode the index",
                      objects={"c/0/0": shards_by_hand(
                          v, (4, 8), (2, 2), [c_bytes()], index_codecs=[c_bytes(), c_gzip()]
                      )["c/0/0"]}))

    out.append(refuse("shard-index-codecs-without-array-to-bytes", CONFIG, INDEX_ONE_A2B,
                      "index_codecs [crc32c]: no array -> bytes codec.",
                      base_meta([c_sharding((2, 2), [c_bytes()], [c_crc32c()])], shape=(4, 8)),
                      "the index codecs lack their array -> bytes codec",
                      objects={"c/0/0": good}))

    out.append(refuse("shard-codecs-without-array-to-bytes", CONFIG, CODECS_ONE_A2B,
                      "Inner codecs [gzip]: no array -> bytes codec.",
                      base_meta([c_sharding((2, 2), [c_gzip()])], shape=(4, 8)),
                      "the inner codecs lack their array -> bytes codec",
                      objects={"c/0/0": good}))

    out.append(refuse("shard-codecs-two-array-to-bytes", CONFIG, CODECS_ONE_A2B,
                      "Inner codecs [bytes, bytes].",
                      base_meta([c_sharding((2, 2), [c_bytes(), c_bytes()])], shape=(4, 8)),
                      "the inner codecs hold two array -> bytes codecs",
                      objects={"c/0/0": good}))

    out.append(refuse("shard-chunk-shape-does-not-divide", CONFIG, DIVIDE,
                      "Inner chunk_shape [2, 3] in [4, 8] shards: 3 does not divide 8.",
                      base_meta([c_sharding((2, 3), [c_bytes()])], shape=(4, 8)),
                      "the inner chunk shape must evenly divide the shard shape",
                      objects={"c/0/0": good}))

    out.append(refuse("shard-chunk-shape-wrong-rank", CONFIG, DIVIDE,
                      "Inner chunk_shape [2] for 2-D shards.",
                      base_meta([c_sharding((2,), [c_bytes()])], shape=(4, 8)),
                      "chunk_shape has 1 dimension, the shard 2",
                      objects={"c/0/0": good}))
    return out


def _with_entries(values: np.ndarray, entries: dict) -> bytes:
    """The 2x4 shard of ``values`` ([bytes], index at the end, 196 bytes), some entries
    replaced."""
    encoded: dict[Coords, bytes] = {
        c: _raw_inner(values, c) for c in itertools.product(range(2), range(4))}
    return assemble_shard(encoded, (2, 4), index_codecs=INDEX, entries=entries)


def write_cases() -> list[Case]:
    out: list[Case] = []
    for cid, codecs, clause, section, note in (
        ("shard-write-index-end", [c_sharding((2, 2), [c_bytes()], INDEX, "end")], PLACED,
         BINARY, "index at the end"),
        ("shard-write-index-start", [c_sharding((2, 2), [c_bytes()], INDEX, "start")],
         LOCATION, CONFIG, "index at the start"),
        ("shard-write-index-location-absent", [c_sharding((2, 2), [c_bytes()], INDEX, None)],
         DEFAULT_END, CONFIG, "no index_location: at the end"),
        ("shard-write-index-big-endian",
         [c_sharding((2, 2), [c_bytes()], [c_bytes("big"), c_crc32c()], "end")],
         INDEX_CODECS, BINARY, "index codecs [bytes(big), crc32c]"),
        ("shard-write-index-without-crc32c",
         [c_sharding((2, 2), [c_bytes()], [c_bytes()], "end")], INDEX_ONE_A2B, CONFIG,
         "index codecs [bytes]"),
        ("shard-write-inner-crc32c",
         [c_sharding((2, 2), [c_bytes(), c_crc32c()], INDEX, "end")], INNER_CODECS, CONFIG,
         "inner codecs [bytes, crc32c]"),
        ("shard-write-nested",
         [c_sharding((4, 4), [c_sharding((2, 2), [c_bytes()], INDEX, "start")], INDEX,
                     "end")], CODECS_ONE_A2B, CONFIG, "nested shards"),
    ):
        v = values_u16(cid, (8, 8))
        out.append(write(cid, section, clause,
                         f"{note}; expected/ lays the inner chunks out in C order, dense.",
                         array_metadata((8, 8), (8, 8), "uint16", FILL, codecs), v))

    v = values_u16("shard-write-empty-inner-chunks", (8, 8))
    v[0:2, 2:4] = FILL
    v[4:6, 4:8] = FILL
    out.append(write("shard-write-empty-inner-chunks", BINARY, EMPTY,
                     "Inner chunks equal to the fill value are not stored (the writer's "
                     "write_empty_chunks false, zarr's default): their entries are 2^64-1.",
                     array_metadata((8, 8), (8, 8), "uint16", FILL,
                                    [c_sharding((2, 2), [c_bytes()], INDEX, "end")]), v))

    v = values_u16("shard-write-edge-shards", (6, 6))
    out.append(write("shard-write-edge-shards", BINARY, FULL_SHAPE,
                     "Shape [6, 6] in [4, 4] shards of [2, 2]: the index of an edge shard "
                     "still has 2x2 entries; those beyond the array are empty.",
                     array_metadata((6, 6), (4, 4), "uint16", FILL,
                                    [c_sharding((2, 2), [c_bytes()], INDEX, "end")]), v))
    return out


def cases() -> list[Case]:
    return read_cases() + refuse_cases() + write_cases()

