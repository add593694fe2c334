"""Spec 003: the ``optional`` array -> bytes codec of the nullable ``optional`` data type.

Encoded chunk: u64 LE mask length, u64 LE data length, the mask (bool, chunk shape)
through ``mask_codecs``, the present values (1-D, C order, inner type) through
``data_codecs``. In memory (``expected.npy``, ``input.npy``) an optional array is a
structured array of ``(value, valid)`` records, nested for nested optionals; a
missing element's ``value`` is 0 and means nothing.
"""

from __future__ import annotations

import struct
from functools import partial
from typing import Any

import numpy as np

from conformance.builders.common import (
    Case,
    Runtime,
    array_metadata,
    bytes_codec,
    c_bytes,
    c_crc32c,
    c_gzip,
    c_optional,
    c_packbits,
    c_sharding,
    c_zstd,
    crc32c,
    encode_array,
    gzip,
    optional_numpy,
    optional_type,
    packbits,
    read_case,
    refuse_case,
    rng_for,
    write_case,
    zstd,
)

SPEC = "003"
read = partial(read_case, SPEC)
refuse = partial(refuse_case, SPEC)
write = partial(write_case, SPEC)

NAME = "Codec name"
CONFIG = "Configuration parameters"
FORMAT = "Format and algorithm / Encoded format"
ALGO = "Format and algorithm / Algorithm"
ABOUT = "Format and algorithm"

NAME_MUST = "The value of the `name` member in the codec object MUST be `optional`."
ONLY_OPTIONAL = ("This codec is only compatible with the "
                 "[`optional`](../../data-types/optional/README.md) data type.")
NULLABLE = ("This codec is designed for the `optional` data type, which represents nullable "
            "values of any underlying data type.")
MASK_LENGTH = ("8 bytes: mask length (u64 little-endian) - the number of bytes in the encoded "
               "mask.")
DATA_LENGTH = ("8 bytes: data length (u64 little-endian) - the number of bytes in the encoded "
               "data.")
ENCODED_MASK = ("N bytes: encoded mask - the result of applying the mask codec chain to the "
                "boolean mask.")
ENCODED_DATA = ("M bytes: encoded data - the result of applying the data codec chain to the "
                "flattened bytes of only valid elements.")
MASK_CODECS = ("An array of codec configurations that will be applied to encode the mask "
               "(boolean array indicating which elements are present).")
DATA_CODECS = ("An array of codec configurations that will be applied to encode the data "
               "(flattened bytes of only the valid/present elements).")
SEPARATE = ("The optional codec separates encoding of the mask (boolean array) and the data "
            "(flattened bytes, excluding missing elements).")
READ_LENGTHS = "Read the mask length and data length from the first 16 bytes."
DECODE_MASK = "Read and decode the mask using the mask codec chain."
DECODE_DATA = "Read and decode the flattened data using the data codec chain."
RECONSTRUCT = ("Reconstruct the masked array into a suitable in-memory format, with null "
               "values where the mask is false.")
EXAMPLE = ("For example, the array metadata below specifies the optional codec with `packbits` "
           "serialisation for the mask, and `gzip` compression for the data:")
EFFICIENT = ("This allows for efficient storage when many elements are missing, and enables "
             "independent compression strategies for mask and data.")
EXTRACT = "Extract only the valid (non-null) elements into a flattened data array."
APPLY_DATA = "Apply the data codec chain to the flattened data bytes."
WRITE_LENGTHS = "Write the lengths and encoded data in the specified format."

ZARRS_NOTE = ("zarrs (0.23.8) names the data type and the codec `zarrs.optional`; arrays "
              "zarrs writes carry that name, so readers meet it (REFERENCE: zarrs also "
              "accepts `zarrs.optional`).")
FILL_NOTE = ("The fill value of an optional data type is null (missing) or a one-element "
             "list holding the inner type's fill value, recursively ([null], [[42]]), per "
             "the optional data type's specification.")

PB_BYTES = ([c_packbits()], [c_bytes()])


def values(case_id: str, shape: tuple[int, ...], inner: str = "uint8", *,
           present: float = 0.6, depth: int = 1) -> np.ndarray:
    """Optional records: random values, present with probability ``present`` per level
    (and every third element present at every level)."""
    rng = rng_for(case_id)
    dtype = optional_numpy(np.dtype(inner), depth)
    out = np.zeros(shape, dtype)
    level, valid = out, np.ones(shape, bool)
    # Every third element present at every level: no chunk is all missing by chance
    # (the cases about all-missing chunks make them so on purpose).
    every_third = np.arange(int(np.prod(shape))).reshape(shape) % 3 == 0
    for _ in range(depth):
        valid = valid & ((rng.random(shape) < present) | every_third)
        level["valid"] = valid
        level = level["value"]
    kind = np.dtype(inner).kind
    if kind == "f":
        raw = (rng.standard_normal(shape) * 100).astype(inner)
    elif kind == "b":
        raw = rng.random(shape) < 0.5
    else:
        info = np.iinfo(inner)
        raw = rng.integers(max(info.min, -30000), min(info.max, 30000), size=shape,
                           endpoint=True).astype(inner)
    level[...] = np.where(valid, raw, np.zeros((), inner))
    return out


def meta(inner: Any, codec: dict, *, shape=(5, 7), chunks=(4, 4), fill: Any = None,
         name: str = "optional", extra: list | None = None) -> dict:
    dtype = inner if isinstance(inner, dict) else optional_type(inner, name)
    return array_metadata(shape, chunks, dtype, fill, [codec, *(extra or [])])


def chunk(mask_bytes: bytes, data_bytes: bytes) -> bytes:
    return struct.pack("<QQ", len(mask_bytes), len(data_bytes)) + mask_bytes + data_bytes


def read_cases() -> list[Case]:
    out: list[Case] = []

    v = values("opt-registry-example", (5, 7))
    m = meta("uint8", c_optional([c_packbits()], [c_bytes(None), c_gzip(5)]))
    out.append(read("opt-registry-example", "Example", EXAMPLE,
                    "The spec's example metadata (optional<uint8>, mask [packbits], data "
                    "[bytes, gzip(5)], fill null) over a 5x7 array in 4x4 chunks.", m, v))

    v = values("opt-packbits-mask-bytes-data", (5, 7), "int16")
    m = meta("int16", c_optional(*PB_BYTES))
    out.append(read("opt-packbits-mask-bytes-data", FORMAT, ENCODED_DATA,
                    "optional<int16>, mask [packbits], data [bytes(little)]: only present "
                    "values, C order of the chunk, edge chunks full-size (their outside "
                    "elements missing).", m, v))

    v = values("opt-mask-bytes-codec", (5, 7))
    out.append(read("opt-mask-bytes-codec", CONFIG, MASK_CODECS,
                    "mask_codecs [bytes]: one byte (0 or 1) per element.",
                    meta("uint8", c_optional([c_bytes(None)], [c_bytes(None)])), v))

    v = values("opt-mask-packbits-gzip", (5, 7))
    out.append(read("opt-mask-packbits-gzip", ABOUT, EFFICIENT,
                    "mask_codecs [packbits, gzip], data [bytes, zstd]: independent chains.",
                    meta("uint8", c_optional([c_packbits(), c_gzip(1)],
                                             [c_bytes(None), c_zstd(1)])), v))

    v = values("opt-data-big-endian", (5, 7), "int16")
    out.append(read("opt-data-big-endian", CONFIG, DATA_CODECS,
                    "optional<int16>, data [bytes(big)].",
                    meta("int16", c_optional([c_packbits()], [c_bytes("big")])), v))

    v = values("opt-data-crc32c", (5, 7), "int32")
    out.append(read("opt-data-crc32c", CONFIG, DATA_CODECS,
                    "optional<int32>, data [bytes, crc32c].",
                    meta("int32", c_optional([c_packbits()], [c_bytes(), c_crc32c()])), v))

    v = values("opt-float32-nan-present", (4, 4), "float32")
    v["value"][0, 0], v["valid"][0, 0] = np.nan, True
    v["value"][1, 1], v["valid"][1, 1] = -0.0, True
    out.append(read("opt-float32-nan-present", ALGO, RECONSTRUCT,
                    "optional<float32>: a present NaN and a present -0.0 are values, not "
                    "missing.", meta("float32", c_optional(*PB_BYTES), shape=(4, 4)), v))

    for inner in ("bool", "int64", "float64", "uint16"):
        cid = f"opt-inner-{inner}"
        v = values(cid, (5, 7), inner)
        out.append(read(cid, "Description", NULLABLE,
                        f"optional<{inner}>, mask [packbits], data [bytes].",
                        meta(inner, c_optional([c_packbits()], [c_bytes(
                            None if inner == "bool" else "little")])), v))

    # All-missing chunks in every form: the data chain applied to nothing, and nothing.
    for chain_name, data_codecs, empty in (
        ("bytes", [c_bytes(None)], b""),
        ("gzip", [c_bytes(None), c_gzip(1)], gzip(b"")),
        ("crc32c", [c_bytes(None), c_crc32c()], crc32c(b"")),
        ("zstd", [c_bytes(None), c_zstd(1)], zstd(b"")),
        ("gzip-crc32c", [c_bytes(None), c_gzip(1), c_crc32c()], crc32c(gzip(b""))),
    ):
        v = values(f"opt-all-missing-{chain_name}", (8,))
        v[4:] = np.zeros(4, v.dtype)  # chunk 1: nothing present
        v["valid"][:4] = True
        m = meta("uint8", c_optional([c_packbits()], data_codecs), shape=(8,), chunks=(4,))
        spec_form = encode_array(m, v, keep_fill_chunks=True)
        assert spec_form["c/1"][16 + 1:] == empty, chain_name
        if empty:
            out.append(read(f"opt-all-missing-{chain_name}-chain-of-nothing", FORMAT,
                            ENCODED_DATA,
                            f"Chunk 1 has no present element; its data section is the data "
                            f"chain [{chain_name}] applied to no element ({len(empty)} "
                            "bytes), as the spec defines it.", m, v, objects=spec_form))
        zero = encode_array(m, v, runtime=Runtime(empty_optional="zero-length"),
                            keep_fill_chunks=True)
        out.append(read(f"opt-all-missing-{chain_name}-zero-length", FORMAT, DATA_LENGTH,
                        f"Chunk 1 has no present element; its data length is 0 (zarrs' and "
                        f"zarrext's form; data chain [{chain_name}]).", m, v, objects=zero,
                        notes="zarrs writes an empty data section for a chunk with no present "
                              "element instead of running the data chain."))

    v = values("opt-all-missing-mask-gzip", (8,))
    v[:4] = np.zeros(4, v.dtype)
    m = meta("uint8", c_optional([c_packbits(), c_gzip(1)], [c_bytes(None), c_gzip(1)]),
             shape=(8,), chunks=(4,))
    out.append(read("opt-all-missing-both-chains-compressed", FORMAT, ENCODED_MASK,
                    "Chunk 0 all missing with mask [packbits, gzip] and data [bytes, gzip]: "
                    "the mask is gzip of one zero byte, the data gzip of nothing.", m, v,
                    objects=encode_array(m, v, keep_fill_chunks=True)))

    v = values("opt-all-present", (8, 8), present=1.0)
    assert v["valid"].all()
    out.append(read("opt-all-present", FORMAT, ENCODED_MASK,
                    "Every element present: the packbits mask is all ones, the data every "
                    "value.", meta("uint8", c_optional([c_packbits()], [c_bytes(None),
                                                                         c_gzip(1)]),
                                   shape=(8, 8), chunks=(4, 4)), v))

    v = values("opt-all-present-partial-mask-byte", (10,), present=1.0)
    out.append(read("opt-all-present-partial-mask-byte", FORMAT, ENCODED_MASK,
                    "Chunks of 5, all present: each packbits mask is one byte 0x1f (three "
                    "zero padding bits).", meta("uint8", c_optional(*PB_BYTES), shape=(10,),
                                                chunks=(5,)), v))

    v = np.zeros((8,), optional_numpy(np.dtype("uint8")))
    v[:4] = values("opt-missing-chunk-fill-null", (4,), present=0.5)
    objects = encode_array(meta("uint8", c_optional(*PB_BYTES), shape=(8,), chunks=(4,)), v)
    assert list(objects) == ["c/0"]
    out.append(read("opt-missing-chunk-fill-null", ALGO, RECONSTRUCT,
                    "Fill value null; chunk 1 not stored: every element missing.",
                    meta("uint8", c_optional(*PB_BYTES), shape=(8,), chunks=(4,)), v,
                    objects=objects, notes=FILL_NOTE))

    v = np.zeros((8,), optional_numpy(np.dtype("uint8")))
    v[:4] = values("opt-missing-chunk-fill-present", (4,), present=0.5)
    v[4:] = (42, True)
    m = meta("uint8", c_optional(*PB_BYTES), shape=(8,), chunks=(4,), fill=[42])
    out.append(read("opt-missing-chunk-fill-present", ALGO, RECONSTRUCT,
                    "Fill value [42]; chunk 1 not stored: every element present, 42.", m, v,
                    objects={"c/0": encode_array(m, v)["c/0"]}, notes=FILL_NOTE))

    out.extend(_nested_cases())
    out.extend(_name_cases())

    v = values("opt-inside-shard", (8, 8))
    m = array_metadata((8, 8), (8, 8), optional_type("uint8"), None,
                       [c_sharding((4, 4), [c_optional(*PB_BYTES)])])
    out.append(read("opt-inside-shard", ABOUT, SEPARATE,
                    "The optional codec as the inner chunks' array -> bytes codec of "
                    "sharding_indexed.", m, v))

    v = values("opt-compressor-after-codec", (5, 7))
    out.append(read("opt-compressor-after-codec", ABOUT, SEPARATE,
                    "A bytes -> bytes codec after the optional codec: [optional, gzip].",
                    meta("uint8", c_optional(*PB_BYTES), extra=[c_gzip(1)]), v))
    return out


def _nested_cases() -> list[Case]:
    out: list[Case] = []
    nested_type = optional_type(optional_type("uint8"))
    inner_codec = c_optional([c_packbits()], [c_bytes(None)])
    codec = c_optional([c_packbits()], [inner_codec])

    v = values("opt-nested", (5, 7), depth=2, present=0.7)
    out.append(read("opt-nested", ABOUT, NULLABLE,
                    "optional<optional<uint8>>: the data chain is another optional codec, "
                    "which sees the outer-present elements (1-D) and splits them again.",
                    meta(nested_type, codec), v))

    v = np.zeros((8,), optional_numpy(np.dtype("uint8"), 2))
    v[:4] = values("opt-nested-fill-null-inside", (4,), depth=2, present=0.7)
    v["valid"][4:] = True  # fill [null]: outer present, inner missing
    m = meta(nested_type, codec, shape=(8,), chunks=(4,), fill=[None])
    out.append(read("opt-nested-fill-null-inside", ALGO, RECONSTRUCT,
                    "Nested, fill value [null]; chunk 1 not stored: outer present, inner "
                    "missing everywhere.", m, v, objects={"c/0": encode_array(m, v)["c/0"]},
                    notes=FILL_NOTE))

    v = np.zeros((8,), optional_numpy(np.dtype("uint8"), 2))
    v[:4] = values("opt-nested-fill-present", (4,), depth=2, present=0.7)
    v[4:] = ((42, True), True)
    m = meta(nested_type, codec, shape=(8,), chunks=(4,), fill=[[42]])
    out.append(read("opt-nested-fill-present", ALGO, RECONSTRUCT,
                    "Nested, fill value [[42]]; chunk 1 not stored: 42 everywhere.", m, v,
                    objects={"c/0": encode_array(m, v)["c/0"]}, notes=FILL_NOTE))

    v = values("opt-nested-outer-all-missing", (8,), depth=2, present=0.7)
    v[4:] = np.zeros(4, v.dtype)
    m = meta(nested_type, codec, shape=(8,), chunks=(4,))
    spec_form = encode_array(m, v, keep_fill_chunks=True)
    assert spec_form["c/1"][17:] == struct.pack("<QQ", 0, 0)
    out.append(read("opt-nested-outer-all-missing-chain-of-nothing", FORMAT, ENCODED_DATA,
                    "Nested; chunk 1 has no outer-present element: its data section is the "
                    "inner optional codec applied to no element, 16 bytes (lengths 0 and 0).",
                    m, v, objects=spec_form))
    out.append(read("opt-nested-outer-all-missing-zero-length", FORMAT, DATA_LENGTH,
                    "Nested; chunk 1 has no outer-present element and a zero-length data "
                    "section.", m, v,
                    objects=encode_array(m, v, runtime=Runtime(empty_optional="zero-length"),
                                         keep_fill_chunks=True)))

    crc_inner = c_optional([c_packbits()], [c_bytes(None), c_crc32c()])
    v = values("opt-nested-inner-all-missing", (8,), depth=2, present=0.9)
    v["valid"][:4] = True
    v["value"]["valid"][:4] = False
    v["value"]["value"][:4] = 0
    m = meta(nested_type, c_optional([c_packbits()], [crc_inner]), shape=(8,), chunks=(4,))
    out.append(read("opt-nested-inner-all-missing", FORMAT, ENCODED_DATA,
                    "Nested with inner data [bytes, crc32c]; chunk 0's elements are all "
                    "outer-present and inner-missing: the inner data section is crc32c of "
                    "nothing (4 bytes).", m, v))
    return out


def _name_cases() -> list[Case]:
    out: list[Case] = []
    v = values("opt-name-zarrs-optional", (5, 7))
    out.append(read("opt-name-zarrs-optional", NAME, NAME_MUST,
                    "Data type and codec named `zarrs.optional`, as zarrs writes them.",
                    meta(optional_type("uint8", "zarrs.optional"),
                         c_optional(*PB_BYTES, name="zarrs.optional")), v,
                    level="interop", notes=ZARRS_NOTE))
    v = values("opt-name-zarrs-optional-nested", (5, 7), depth=2)
    nested = optional_type(optional_type("uint8", "zarrs.optional"), "zarrs.optional")
    out.append(read("opt-name-zarrs-optional-nested", NAME, NAME_MUST,
                    "Nested, every level named `zarrs.optional`.",
                    meta(nested, c_optional([c_packbits()], [c_optional(
                        *PB_BYTES, name="zarrs.optional")], name="zarrs.optional")), v,
                    level="interop", notes=ZARRS_NOTE))
    v = values("opt-name-optional", (5, 7))
    out.append(read("opt-name-optional", NAME, NAME_MUST,
                    "Data type and codec named `optional`.",
                    meta("uint8", c_optional(*PB_BYTES)), v))
    return out


def refuse_cases() -> list[Case]:
    out: list[Case] = []
    m = meta("uint8", c_optional(*PB_BYTES), shape=(16,), chunks=(16,))
    mask = np.array([1, 0, 1, 1] * 4, bool)
    present = np.arange(12, dtype="u1") + 1
    good_mask, good_data = packbits(mask), bytes_codec(present)
    assert len(good_mask) == 2
    assert len(good_data) == 12

    out.append(refuse("opt-header-truncated", FORMAT, READ_LENGTHS,
                      "A 10-byte chunk: no room for the two lengths.", m,
                      "the chunk is shorter than the 16-byte header",
                      objects={"c/0": chunk(good_mask, good_data)[:10]}))
    out.append(refuse("opt-mask-length-overruns", FORMAT, MASK_LENGTH,
                      "Mask length 100 in a 30-byte chunk.", m,
                      "the mask length runs past the end of the chunk",
                      objects={"c/0": struct.pack("<QQ", 100, 12) + good_mask + good_data}))
    out.append(refuse("opt-data-length-overruns", FORMAT, DATA_LENGTH,
                      "Data length 13 where 12 bytes follow the mask.", m,
                      "the data length runs past the end of the chunk",
                      objects={"c/0": struct.pack("<QQ", 2, 13) + good_mask + good_data}))
    out.append(refuse("opt-trailing-bytes", FORMAT, WRITE_LENGTHS,
                      "Four bytes after the data section that neither length covers.", m,
                      "16 + mask length + data length must be the chunk's size",
                      objects={"c/0": chunk(good_mask, good_data) + b"\0\0\0\0"},
                      level="implied",
                      notes="The encoded format consists of the four parts and nothing else."))
    out.append(refuse("opt-data-count-differs-from-mask", ALGO, DECODE_DATA,
                      "The mask marks 12 present elements; the data section holds 11.", m,
                      "the data decodes to 11 values for 12 present elements",
                      objects={"c/0": chunk(good_mask, good_data[:11])}))
    out.append(refuse("opt-mask-too-short", ALGO, DECODE_MASK,
                      "A 1-byte packbits mask for a 16-element chunk.", m,
                      "the mask decodes to 8 elements, not 16",
                      objects={"c/0": chunk(good_mask[:1], good_data)}))
    none = np.zeros(16, bool)
    out.append(refuse("opt-all-missing-data-not-empty", FORMAT, ENCODED_DATA,
                      "No element present, data chain [bytes], and 4 data bytes: [bytes] of "
                      "no element is 0 bytes.", m,
                      "4 bytes are not the data chain [bytes] applied to no element",
                      objects={"c/0": chunk(packbits(none), b"\1\2\3\4")}))
    crc_m = meta("uint8", c_optional([c_packbits()], [c_bytes(None), c_crc32c()]),
                 shape=(16,), chunks=(16,))
    bad = bytearray(crc32c(good_data))
    bad[0] ^= 0x80
    out.append(refuse("opt-data-crc32c-mismatch", ALGO, DECODE_DATA,
                      "Data chain [bytes, crc32c] with one data bit flipped.", crc_m,
                      "the data chain's crc32c rejects the data section",
                      objects={"c/0": chunk(good_mask, bytes(bad))}))
    out.append(refuse("opt-codec-on-plain-data-type", ABOUT, ONLY_OPTIONAL,
                      "The optional codec on a plain uint8 array.",
                      array_metadata((16,), (16,), "uint8", 0, [c_optional(*PB_BYTES)]),
                      "the optional codec needs the optional data type",
                      objects={"c/0": chunk(good_mask, good_data)}))
    return out


def write_cases() -> list[Case]:
    out: list[Case] = []
    filled = [0]  # a present fill value: a chunk with nothing present is still stored

    v = values("opt-write-packbits-bytes", (8, 8), "int16")
    out.append(write("opt-write-packbits-bytes", ALGO, WRITE_LENGTHS,
                     "optional<int16>, mask [packbits], data [bytes(little)].",
                     meta("int16", c_optional(*PB_BYTES), shape=(8, 8), fill=filled), v))

    v = values("opt-write-mask-bytes", (8,))
    out.append(write("opt-write-mask-bytes", CONFIG, MASK_CODECS,
                     "mask [bytes]: one 0/1 byte per element.",
                     meta("uint8", c_optional([c_bytes(None)], [c_bytes(None)]), shape=(8,),
                          chunks=(4,), fill=filled), v))

    v = values("opt-write-data-crc32c", (8,), "uint16")
    out.append(write("opt-write-data-crc32c", CONFIG, DATA_CODECS,
                     "data [bytes, crc32c]: the checksum covers the present values only.",
                     meta("uint16", c_optional([c_packbits()], [c_bytes(), c_crc32c()]),
                          shape=(8,), chunks=(4,), fill=filled), v))

    v = values("opt-write-data-big-endian", (8,), "int32")
    out.append(write("opt-write-data-big-endian", CONFIG, DATA_CODECS,
                     "optional<int32>, data [bytes(big)].",
                     meta("int32", c_optional([c_packbits()], [c_bytes("big")]), shape=(8,),
                          chunks=(4,), fill=filled), v))

    v = values("opt-write-all-missing-crc32c", (8,), "uint16", present=0.7)
    v[4:] = np.zeros(4, v.dtype)
    m = meta("uint16", c_optional([c_packbits()], [c_bytes(), c_crc32c()]), shape=(8,),
             chunks=(4,), fill=filled)
    case = write("opt-write-all-missing-crc32c", FORMAT, ENCODED_DATA,
                 "Chunk 1 has no present element, data [bytes, crc32c]: its data section is "
                 "crc32c of no bytes, 00 00 00 00 (data length 4).", m, v)
    assert case.expected_objects["c/1"][8:16] == struct.pack("<Q", 4)
    out.append(case)

    v = values("opt-write-all-missing-bytes", (8,), present=0.7)
    v[4:] = np.zeros(4, v.dtype)
    out.append(write("opt-write-all-missing-bytes", FORMAT, ENCODED_DATA,
                     "Chunk 1 has no present element, data [bytes]: a 0-byte data section "
                     "(both forms agree here).",
                     meta("uint8", c_optional(*PB_BYTES), shape=(8,), chunks=(4,),
                          fill=filled), v))

    v = values("opt-write-all-present", (8,), "float32", present=1.0)
    out.append(write("opt-write-all-present", ALGO, EXTRACT,
                     "Every element present: mask 0xff per 8 elements, every value.",
                     meta("float32", c_optional(*PB_BYTES), shape=(8,), chunks=(8,),
                          fill=filled), v))

    v = values("opt-write-float-nan-present", (4,), "float32", present=1.0)
    v["value"][1] = np.nan
    v["valid"][3] = False
    v["value"][3] = 0
    out.append(write("opt-write-float-nan-present", ALGO, EXTRACT,
                     "A present NaN is a value: stored among the data (0x7fc00000).",
                     meta("float32", c_optional(*PB_BYTES), shape=(4,), chunks=(4,),
                          fill=filled), v))

    nested_type = optional_type(optional_type("uint8"))
    codec = c_optional([c_packbits()], [c_optional([c_packbits()], [c_bytes(None)])])
    v = values("opt-write-nested", (8,), depth=2, present=0.7)
    out.append(write("opt-write-nested", ABOUT, NULLABLE,
                     "optional<optional<uint8>>: the inner optional codec in data_codecs.",
                     meta(nested_type, codec, shape=(8,), chunks=(8,), fill=[[0]]), v))

    v = values("opt-write-nested-outer-all-missing", (8,), depth=2, present=0.8)
    v[4:] = np.zeros(4, v.dtype)
    out.append(write("opt-write-nested-outer-all-missing", FORMAT, ENCODED_DATA,
                     "Nested; chunk 1 has no outer-present element: the data section is the "
                     "inner optional codec applied to no element (16 bytes: two zero "
                     "lengths).",
                     meta(nested_type, codec, shape=(8,), chunks=(4,), fill=[[0]]), v))

    v = values("opt-write-zarrs-optional-name", (8,))
    out.append(write("opt-write-zarrs-optional-name", NAME, NAME_MUST,
                     "The `zarrs.optional` names: the same bytes as `optional`.",
                     meta(optional_type("uint8", "zarrs.optional"),
                          c_optional(*PB_BYTES, name="zarrs.optional"), shape=(8,),
                          chunks=(4,), fill=filled), v, level="interop", notes=ZARRS_NOTE))
    return out


def cases() -> list[Case]:
    return read_cases() + refuse_cases() + write_cases()
