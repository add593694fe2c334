"""Spec 004: ``pad`` (bytes -> bytes): ``nbytes`` of padding at the start or end.

Decoding drops ``nbytes`` from the configured end, whatever they hold; encoding
writes ``padding`` (base64 in ``zarr.json``) literally, or ``nbytes`` zeros.
"""

from __future__ import annotations

import base64
import struct
from functools import partial

import numpy as np

from conformance.builders.common import (
    Case,
    array_metadata,
    bytes_codec,
    c_bytes,
    c_crc32c,
    c_gzip,
    c_pad,
    c_sharding,
    c_transpose,
    c_zstd,
    crc32c,
    gzip,
    n5_header,
    read_case,
    refuse_case,
    rng_for,
    write_case,
    zstd,
)

SPEC = "004"
read = partial(read_case, SPEC)
refuse = partial(refuse_case, SPEC)
write = partial(write_case, SPEC)

DESCRIPTION = "Description"
CONFIG = "Configuration Parameters"
EXAMPLE_1 = "Examples / Example 1: Creating a Valid TIFF File per Chunk"
EXAMPLE_2 = "Examples / Example 2: Creating a file with a custom header"
EXAMPLE_3 = "Examples / Example 3: Reading an N5 dataset with Zarr v3"
DYNAMIC = "Implementation Notes / Handling Dynamic Padding"

DECODE = "When decoding, it removes a specified number of bytes from the chunk data."
ENCODE = "When encoding, it adds a specified padding (or zeros) to the chunk data."
TWICE = ("To add both a prefix and a suffix, the `pad` codec can be applied twice in the codec "
         "pipeline.")
LOCATION = ("`location`: A string specifying whether the padding is at the `\"start\"` or "
            "`\"end\"` of the chunk. This is a required parameter.")
NBYTES = ("`nbytes`: An integer specifying the number of bytes of padding. This is a required "
          "parameter.")
PADDING = ("`padding`: An optional base64-encoded string of the literal bytes to use for "
           "padding when encoding. If not provided, the padding defaults to a sequence of "
           "`nbytes` zero bytes (i.e. `\\x00` bytes).")
TIFF = ("**Encoding process:** The `bytes` codec ensures the `uint16` chunk data is "
        "little-endian. The `pad` codec then prepends the 110-byte valid TIFF header. The "
        "resulting stored chunk is a standalone, readable TIFF file.")
CUSTOM = ("**Encoding process:** The data is compressed by `gzip`, and then the `pad` codec "
          "prepends the 16-byte custom header.")
N5_SKIP = ("**`pad`**: First, the `pad` codec with `location: \"start\"` skips the first 12 "
           "bytes of the stored N5 chunk.")
N5_TEMPLATE = ("The `padding` value `AAAAAgAAAEAAAABA` is the base64 encoding of the 12-byte "
               "N5 header template.")
DYNAMIC_CLAUSE = ("A robust implementation of this codec could address this by providing a "
                  "mechanism to generate padding dynamically during the encoding process.")
SKIP_FOREIGN = ("Skipping a header or footer when reading from a foreign data format (e.g., "
                "N5).")

EXAMPLE_1_PADDING = base64.b64decode(
    "SUkqAAgAAAAIAAABAwABAAAAAAEAAAEBAwABAAAAAAEAAAIBAwABAAAAEAAAAAMBAwABAAAAAQAAAAYBAwABAAAA"
    "AQAAABEBBAABAAAAbgAAABYBAwABAAAAAAEAABcBBAABAAAAAAACAAAAAAA=")
MY_CUSTOM_HEADER = base64.b64decode("TVlfQ1VTVE9NX0hFQURFUg==")
N5_TEMPLATE_BYTES = base64.b64decode("AAAAAgAAAEAAAABA")

TRANSPOSE_NOTE = ("Spec 004's Example 3 leaves out a transpose: N5 blocks are column-major, so "
                  "a zarr.json keeping N5's dimension order needs transpose([N-1, ..., 0]) "
                  "before bytes(big) (REFERENCE).")


def tiff_header(width: int, length: int, strip_bytes: int) -> bytes:
    """The spec appendix's generator: a 110-byte little-endian single-strip uint16 TIFF."""
    entry = lambda tag, kind, value: struct.pack("<HHII", tag, kind, 1, value)  # noqa: E731
    ifd = struct.pack("<H", 8) + b"".join([
        entry(256, 3, width), entry(257, 3, length), entry(258, 3, 16), entry(259, 3, 1),
        entry(262, 3, 1), entry(273, 4, 110), entry(278, 3, length),
        entry(279, 4, strip_bytes)]) + struct.pack("<I", 0)
    return b"II*\x00\x08\x00\x00\x00" + ifd


def u16(case_id: str, shape: tuple[int, ...]) -> np.ndarray:
    return rng_for(case_id).integers(0, 65536, size=shape).astype("<u2")


def meta(codecs: list, *, shape=(8,), chunks=(4,), dtype="uint16", **kw) -> dict:
    return array_metadata(shape, chunks, dtype, 0, codecs, **kw)


def read_cases() -> list[Case]:
    out: list[Case] = []
    padding = b"HEAD"

    v = u16("pad-start-zeros", (8,))
    out.append(read("pad-start-zeros", DESCRIPTION, DECODE,
                    "pad(start, 6) without padding: six zero bytes before each chunk.",
                    meta([c_bytes(), c_pad("start", 6)]), v))

    v = u16("pad-end-zeros", (8,))
    out.append(read("pad-end-zeros", DESCRIPTION, DECODE,
                    "pad(end, 5): five zero bytes after each chunk.",
                    meta([c_bytes(), c_pad("end", 5)]), v))

    v = u16("pad-start-literal", (8,))
    out.append(read("pad-start-literal", CONFIG, PADDING,
                    "pad(start, 4, \"HEAD\").", meta([c_bytes(), c_pad("start", 4, padding)]), v))

    v = u16("pad-end-literal", (8,))
    out.append(read("pad-end-literal", CONFIG, LOCATION,
                    "pad(end, 4, \"HEAD\").", meta([c_bytes(), c_pad("end", 4, padding)]), v))

    v = u16("pad-stored-bytes-differ-from-padding", (8,))
    raw = [bytes_codec(v[:4]), bytes_codec(v[4:])]
    out.append(read("pad-stored-bytes-differ-from-padding", DESCRIPTION, DECODE,
                    "Configured padding \"HEAD\"; the stored chunks carry other bytes there "
                    "(\"ABCD\", and zeros): a reader drops them unread.",
                    meta([c_bytes(), c_pad("start", 4, padding)]), v,
                    objects={"c/0": b"ABCD" + raw[0], "c/1": bytes(4) + raw[1]}))

    v = u16("pad-nbytes-zero", (8,))
    out.append(read("pad-nbytes-zero", CONFIG, NBYTES,
                    "pad(start, 0): no padding at all.", meta([c_bytes(), c_pad("start", 0)]), v))

    v = u16("pad-twice-prefix-and-suffix", (8,))
    out.append(read("pad-twice-prefix-and-suffix", DESCRIPTION, TWICE,
                    "[bytes, pad(start, 3, \"<<<\"), pad(end, 2, \">>\")].",
                    meta([c_bytes(), c_pad("start", 3, b"<<<"), c_pad("end", 2, b">>")]), v))

    v = u16("pad-twice-same-end", (8,))
    out.append(read("pad-twice-same-end", DESCRIPTION, TWICE,
                    "[bytes, pad(start, 2, \"in\"), pad(start, 3, \"out\")]: the last codec's "
                    "padding is outermost: \"outin\" + data.",
                    meta([c_bytes(), c_pad("start", 2, b"in"), c_pad("start", 3, b"out")]), v))

    image = (np.add.outer(np.arange(256), np.arange(256) * 256) % 65536).astype("<u2")
    ex1 = array_metadata((256, 256), (256, 256), "uint16", 0,
                         [c_bytes(), c_pad("start", 110, EXAMPLE_1_PADDING)])
    assert tiff_header(256, 256, 131072) == EXAMPLE_1_PADDING
    out.append(read("pad-example-1-tiff-chunk", EXAMPLE_1, TIFF,
                    "Example 1 verbatim: a 256x256 uint16 chunk stored as the 110-byte TIFF "
                    "header + little-endian data (the stored chunk is a TIFF file).", ex1,
                    image))

    v = u16("pad-example-2-custom-header", (16,))
    out.append(read("pad-example-2-custom-header", EXAMPLE_2, CUSTOM,
                    "Example 2: [bytes, gzip, pad(start, 16, \"MY_CUSTOM_HEADER\")].",
                    meta([c_bytes(), c_gzip(1), c_pad("start", 16, MY_CUSTOM_HEADER)],
                         shape=(16,), chunks=(8,)), v))

    out.extend(_n5_cases())

    v = u16("pad-computed-headers", (64, 64))
    objects = {}
    for i in range(2):
        for j in range(2):
            body = zstd(bytes_codec(v[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32]))
            objects[f"c/{i}/{j}"] = tiff_header(32, 32, len(body)) + body
    out.append(read("pad-computed-headers", DYNAMIC, DYNAMIC_CLAUSE,
                    "Each chunk carries its own computed 110-byte TIFF header (strip byte "
                    "count = its zstd stream's size); zarr.json has nbytes 110 and no "
                    "padding. Reading drops the headers whatever they hold.",
                    array_metadata((64, 64), (32, 32), "uint16", 0,
                                   [c_bytes(), c_zstd(1), c_pad("start", 110)]), v,
                    objects=objects))

    v = u16("pad-inside-shard", (8, 8))
    out.append(read("pad-inside-shard", DESCRIPTION, DECODE,
                    "pad(start, 3) as an inner codec of sharding_indexed.",
                    array_metadata((8, 8), (8, 8), "uint16", 0, [c_sharding(
                        (4, 4), [c_bytes(), c_pad("start", 3, b"abc")])]), v))

    v = u16("pad-after-shard", (8, 8))
    out.append(read("pad-after-shard", DESCRIPTION, DECODE,
                    "pad(end, 8) after sharding_indexed: 8 bytes after each shard's index.",
                    array_metadata((8, 8), (4, 8), "uint16", 0, [
                        c_sharding((2, 2), [c_bytes()]), c_pad("end", 8, b"trailer!")]), v))

    v = u16("pad-before-crc32c", (8,))
    out.append(read("pad-before-crc32c", DESCRIPTION, ENCODE,
                    "[bytes, pad(start, 4), crc32c]: the checksum covers the padding.",
                    meta([c_bytes(), c_pad("start", 4, padding), c_crc32c()]), v,
                    objects={"c/0": crc32c(padding + bytes_codec(v[:4])),
                             "c/1": crc32c(padding + bytes_codec(v[4:]))}))

    v = u16("pad-end-after-gzip", (16,))
    out.append(read("pad-end-after-gzip", DESCRIPTION, DECODE,
                    "[bytes, gzip, pad(end, 7)]: a footer after a gzip stream.",
                    meta([c_bytes(), c_gzip(1), c_pad("end", 7, b"FOOTER!")], shape=(16,),
                         chunks=(8,)), v))
    return out


def _n5_cases() -> list[Case]:
    out: list[Case] = []
    # Example 3's zarr.json, verbatim but for a smaller shape: 2x2 blocks of 64x64.
    v = u16("pad-example-3-n5-configuration", (128, 128))
    m = array_metadata((128, 128), (64, 64), "uint16", 0,
                       [c_bytes("big"), c_zstd(3), {"name": "pad", "configuration": {
                           "location": "start", "nbytes": 12}}],
                       key_encoding="v2", separator="/")
    objects = {f"{i}/{j}": n5_header((64, 64)) + zstd(bytes_codec(
        v[i * 64:(i + 1) * 64, j * 64:(j + 1) * 64], "big"), 3)
        for i in range(2) for j in range(2)}
    out.append(read("pad-example-3-n5-configuration", EXAMPLE_3, N5_SKIP,
                    "Example 3's zarr.json (shape 128x128 instead of 1024x1024): each block "
                    "is the 12-byte N5 header, then zstd of the big-endian block; v2 keys "
                    "\"i/j\". Square blocks, read in the zarr.json's own C order.", m, v,
                    objects=objects, notes=TRANSPOSE_NOTE + " zstd's configuration (level 3, "
                    "checksum false) is added: the zstd codec's own specification requires "
                    "it, and zarr-python refuses {\"name\": \"zstd\"} without one."))

    # N5 as N5 writers lay it out: dimension order kept, blocks column-major.
    v = u16("pad-n5-blocks-transposed", (10, 6))
    blocks = (4, 3)
    m = array_metadata((10, 6), blocks, "uint16", 0,
                       [c_transpose([1, 0]), c_bytes("big"), c_gzip(1), c_pad("start", 12)],
                       key_encoding="v2", separator="/")
    objects = {}
    for i in range(3):
        for j in range(2):
            block = np.zeros(blocks, "<u2")
            part = v[i * 4:(i + 1) * 4, j * 3:(j + 1) * 3]
            block[:part.shape[0], :part.shape[1]] = part
            column_major = np.ascontiguousarray(block.T)  # N5: first dimension fastest
            objects[f"{i}/{j}"] = n5_header(blocks) + gzip(bytes_codec(column_major, "big"))
    out.append(read("pad-n5-blocks-transposed", EXAMPLE_3, SKIP_FOREIGN,
                    "An N5 dataset (dimensions [10, 6], blockSize [4, 3], gzip) read in "
                    "place: [transpose([1, 0]), bytes(big), gzip, pad(start, 12)]; edge "
                    "blocks full-size (as tensorstore writes them).", m, v, objects=objects,
                    notes=TRANSPOSE_NOTE))

    v = u16("pad-n5-three-dimensions-raw", (4, 6, 5))
    blocks3 = (2, 3, 5)
    m = array_metadata((4, 6, 5), blocks3, "uint16", 0,
                       [c_transpose([2, 1, 0]), c_bytes("big"), c_pad("start", 16)],
                       key_encoding="v2", separator="/")
    objects = {}
    for i in range(2):
        for j in range(2):
            block = v[i * 2:(i + 1) * 2, j * 3:(j + 1) * 3, :]
            objects[f"{i}/{j}/0"] = n5_header(blocks3) + bytes_codec(
                np.ascontiguousarray(block.transpose(2, 1, 0)), "big")
    out.append(read("pad-n5-three-dimensions-raw", EXAMPLE_3, SKIP_FOREIGN,
                    "A 3-D uncompressed N5 dataset: a 16-byte header (mode, ndim 3, three "
                    "sizes), transpose([2, 1, 0]), bytes(big).", m, v, objects=objects,
                    notes=TRANSPOSE_NOTE))
    return out


def refuse_cases() -> list[Case]:
    out: list[Case] = []
    v = u16("pad-refuse", (4,))
    raw = bytes_codec(v)
    m = meta([c_bytes(), c_pad("start", 6)], shape=(4,))
    out.append(refuse("pad-chunk-shorter-than-padding", DESCRIPTION, DECODE,
                      "pad(start, 6); the stored chunk is 4 bytes.", m,
                      "there are not 6 bytes to remove", objects={"c/0": b"\0\0\0\0"}))
    out.append(refuse("pad-chunk-one-byte-short", DESCRIPTION, DECODE,
                      "pad(end, 6); the stored chunk is 13 bytes: after removing 6, 7 are "
                      "left for a chunk of 8 bytes.",
                      meta([c_bytes(), c_pad("end", 6)], shape=(4,)),
                      "the chunk without its padding is one byte short",
                      objects={"c/0": raw[:-1] + bytes(6)}))
    out.append(refuse("pad-location-invalid", CONFIG, LOCATION, "location \"middle\".",
                      meta([c_bytes(), c_pad("middle", 2)], shape=(4,)),
                      "location must be \"start\" or \"end\"",
                      objects={"c/0": bytes(2) + raw}))
    out.append(refuse("pad-location-missing", CONFIG, LOCATION, "No location.",
                      meta([c_bytes(), {"name": "pad", "configuration": {"nbytes": 2}}],
                           shape=(4,)),
                      "location is required", objects={"c/0": bytes(2) + raw}))
    out.append(refuse("pad-nbytes-missing", CONFIG, NBYTES, "No nbytes.",
                      meta([c_bytes(), {"name": "pad", "configuration": {"location": "start"}}],
                           shape=(4,)),
                      "nbytes is required", objects={"c/0": raw}))
    out.append(refuse("pad-nbytes-negative", CONFIG, NBYTES, "nbytes -2.",
                      meta([c_bytes(), {"name": "pad", "configuration": {
                          "location": "start", "nbytes": -2}}], shape=(4,)),
                      "a number of bytes cannot be negative", objects={"c/0": raw}))
    out.append(refuse("pad-padding-length-differs", CONFIG, PADDING,
                      "nbytes 4 with a padding of 3 bytes (\"YWJj\").",
                      meta([c_bytes(), {"name": "pad", "configuration": {
                          "location": "start", "nbytes": 4, "padding": "YWJj"}}], shape=(4,)),
                      "the literal padding must be nbytes long", objects={"c/0": bytes(4) + raw},
                      level="implied"))
    out.append(refuse("pad-padding-not-base64", CONFIG, PADDING,
                      "padding \"not base64!\".",
                      meta([c_bytes(), {"name": "pad", "configuration": {
                          "location": "start", "nbytes": 4, "padding": "not base64!"}}],
                           shape=(4,)),
                      "padding must be base64", objects={"c/0": bytes(4) + raw}))
    return out


def write_cases() -> list[Case]:
    out: list[Case] = []
    v = u16("pad-write-zeros-default", (8,))
    out.append(write("pad-write-zeros-default", CONFIG, PADDING,
                     "pad(start, 6) without padding: six zero bytes.",
                     meta([c_bytes(), c_pad("start", 6)]), v))
    v = u16("pad-write-literal-start", (8,))
    out.append(write("pad-write-literal-start", CONFIG, PADDING,
                     "pad(start, 4, \"HEAD\"): the literal bytes.",
                     meta([c_bytes(), c_pad("start", 4, b"HEAD")]), v))
    v = u16("pad-write-literal-end", (8,))
    out.append(write("pad-write-literal-end", CONFIG, LOCATION,
                     "pad(end, 4, \"TAIL\").",
                     meta([c_bytes(), c_pad("end", 4, b"TAIL")]), v))
    v = u16("pad-write-twice", (8,))
    out.append(write("pad-write-twice", DESCRIPTION, TWICE,
                     "[bytes, pad(start, 3, \"<<<\"), pad(end, 2, \">>\")].",
                     meta([c_bytes(), c_pad("start", 3, b"<<<"), c_pad("end", 2, b">>")]), v))
    v = u16("pad-write-nbytes-zero", (8,))
    out.append(write("pad-write-nbytes-zero", CONFIG, NBYTES, "pad(end, 0).",
                     meta([c_bytes(), c_pad("end", 0)]), v))

    image = (np.add.outer(np.arange(256) * 7, np.arange(256)) % 65536).astype("<u2")
    out.append(write("pad-write-example-1-tiff", EXAMPLE_1, TIFF,
                     "Example 1 verbatim on a 256x256 uint16 array: header + data, a TIFF.",
                     array_metadata((256, 256), (256, 256), "uint16", 0,
                                    [c_bytes(), c_pad("start", 110, EXAMPLE_1_PADDING)]), image))

    v = u16("pad-write-example-1-header-other-chunks", (32, 32))
    out.append(write("pad-write-example-1-header-other-chunks", CONFIG, PADDING,
                     "Example 1's padding (made for 256x256 chunks) on 16x16 chunks: written "
                     "byte for byte, the literal bytes, even where they describe another "
                     "image size.",
                     array_metadata((32, 32), (16, 16), "uint16", 0,
                                    [c_bytes(), c_pad("start", 110, EXAMPLE_1_PADDING)]), v))

    v = u16("pad-write-example-1-header-under-zstd", (64, 64))
    out.append(write("pad-write-example-1-header-under-zstd", CONFIG, PADDING,
                     "Example 1's padding after zstd: the literal 110 bytes (strip byte "
                     "count 131072 included) start every chunk; the chunk reads back.",
                     array_metadata((64, 64), (64, 64), "uint16", 0,
                                    [c_bytes(), c_zstd(1),
                                     c_pad("start", 110, EXAMPLE_1_PADDING)]), v,
                     compare={"mode": "prefix", "nbytes": 110, "roundtrip": True}))

    v = u16("pad-write-example-2-custom-header", (16,))
    out.append(write("pad-write-example-2-custom-header", EXAMPLE_2, CUSTOM,
                     "Example 2: \"MY_CUSTOM_HEADER\" before the gzip stream. The first 16 "
                     "bytes are compared (any valid gzip stream may follow); the chunk must "
                     "read back.",
                     meta([c_bytes(), c_gzip(1), c_pad("start", 16, MY_CUSTOM_HEADER)],
                          shape=(16,), chunks=(8,)), v,
                     compare={"mode": "prefix", "nbytes": 16, "roundtrip": True}))

    v = u16("pad-write-n5-header-template", (128, 128))
    out.append(write("pad-write-n5-header-template", EXAMPLE_3, N5_TEMPLATE,
                     "Example 3's header template as padding, uncompressed big-endian "
                     "64x64 blocks: each block is a valid N5 default-mode block.",
                     array_metadata((128, 128), (64, 64), "uint16", 0,
                                    [c_bytes("big"), c_pad("start", 12, N5_TEMPLATE_BYTES)],
                                    key_encoding="v2", separator="/"), v))

    v = u16("pad-write-inside-shard", (8, 8))
    out.append(write("pad-write-inside-shard", DESCRIPTION, ENCODE,
                     "pad(start, 3, \"abc\") inside sharding_indexed, shard in C order, dense.",
                     array_metadata((8, 8), (8, 8), "uint16", 0, [c_sharding(
                         (4, 4), [c_bytes(), c_pad("start", 3, b"abc")])]), v,
))
    return out


def cases() -> list[Case]:
    return read_cases() + refuse_cases() + write_cases()
