"""Spec 000: the per-chunk meta-codec (``conditional``; first published as ``optional``).

Encoded chunk: ``header || payload``; the header is ``header_bits / 8`` bytes, bit
``i`` (byte 0 bit 0 first) set when nested codec ``i`` was applied. Nested codecs
are applied in list order and undone in reverse order.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from conformance.builders.common import (
    Case,
    Runtime,
    array_metadata,
    c_bytes,
    c_conditional,
    c_crc32c,
    c_gzip,
    c_sharding,
    c_shuffle,
    c_zstd,
    crc32c,
    encode_array,
    gzip,
    masks_runtime,
    read_case,
    refuse_case,
    rng_for,
    shuffle,
    write_case,
    zstd,
)

SPEC = "000"
read = partial(read_case, SPEC)
refuse = partial(refuse_case, SPEC)
write = partial(write_case, SPEC)

ENCODING = "Detailed Description / Encoding Process"
DECODING = "Detailed Description / Decoding Process"
CONFIG = "Detailed Description / Codec Configuration"
PHASE1 = "Implementation / Phase 1: Core Codec Logic (Required)"
PHASE2 = "Implementation / Phase 2: Writer-Side Automation (Required)"
PHASE3 = "Implementation / Phase 3: Built-in Heuristics (Recommended)"

BIT_ORDER = ("Bit `0` of the mask corresponds to the first codec in the `codecs` list, bit "
             "`1` to the second, and so on (using a little-endian bit order).")
BIT_ONE = "If a bit is set to **`1`**, the corresponding codec **is applied** during encoding."
BIT_ZERO = "If a bit is set to **`0`**, the corresponding codec **is skipped**."
RESERVED = ("Any reserved bits (i.e., from index `len(codecs)` up to `header_bits - 1`) "
            "**must** be set to `0`.")
HEADER_SIZE = "The on-disk size of the header is always `header_bits / 8` bytes."
MULTIPLE_OF_8 = "This value **must** be a multiple of 8."
DEFAULT_BITS = ("If not provided, it defaults to the smallest multiple of 8 that is greater "
                "than or equal to the number of configured codecs.")
AT_LEAST = "The provided value **must** be greater than or equal to `len(codecs)`."
REVERSE = "It iterates through its `codecs` list **in reverse order**."
READ_HEADER = ("The codec first reads the header from the start of the byte stream. The "
               "header size is known from its configuration (`header_bits / 8` bytes).")
OLDER = ("This logic ensures that chunks written with older metadata (and thus fewer "
         "codecs) can be correctly read by newer applications, as the `0` in the reserved "
         "bit positions safely signals that the new codecs should be skipped.")
DEFAULT_MASK = ("If no mask is set before encoding, it **must** default to all `0`s (skip "
                "all nested codecs).")
PREPEND = ("The final bitmask is written as a sequence of `header_bits / 8` bytes and "
           "prepended to the processed byte stream.")
APPLY = ("For each codec, it checks the corresponding bit in the mask and either applies the "
         "codec's `encode` method or passes the data through unchanged.")
CODECS_REQUIRED = ("**`codecs`** (list, required): A list of Zarr v3 codec configuration "
                   "objects. These are the codecs that will be conditionally applied.")
BYTE_STREAM = ("The codec internally processes the input byte stream by iterating through its "
               "`codecs` list.")
DECODE_ONLY_IF = ("The decoding procedure for each nested codec is applied only if the "
                  "corresponding bit in the *header's bitmask* is `1`.")
PER_CHUNK = ("The optional codec is a meta-codec that enables or disables an encapsulated "
             "sequence of other codecs on a per-chunk basis.")
PLAN = ("The `chunk_index` parameter allows the `decision_function` to use these "
        "pre-computed results during the final write process.")
TRIAL = ("If trial encoding is enabled, perform an in-memory trial encode of the original, "
         "unencoded chunk using the current nested `codec`.")
COMPRESS_IF_SMALLER = ("A critical one is `'compress_if_smaller'`, which requires trial "
                       "encoding and implements the logic: `len(trial_encoded_chunk) < "
                       "len(unencoded_chunk)`.")
HEURISTICS = "Other simple heuristics could include `'always_apply'` and `'never_apply'`."
SLOTS = ('This enables a sharded store to be designed with fixed-size "slots." Each chunk '
         "within the shard is allocated a padded space equal to this upper bound.")

CHAIN_DEVIATION = (
    "zarrext's decisions see a chain: nested codec i is trial-encoded on the bytes as they "
    "stand after the codecs already enabled before it (the spec's Phase 2 trial-encodes "
    "'the original, unencoded chunk'), and compress_if_smaller applies a size-preserving "
    "filter such as shuffle when the next compressor, on top of it, shrinks the chunk. "
    "Kept on purpose: every kept step shrinks the stored bytes, so a chunk is never stored "
    "larger than raw plus the header, and shuffle+zstd is chosen where it pays. Its "
    "chunks read back under the spec either way; its masks are not the text's."
)


def u16_ramp(case_id: str, shape: tuple[int, ...]) -> np.ndarray:
    """Compressible uint16 values: a ramp with a little noise, seeded by the case id."""
    rng = rng_for(case_id)
    n = int(np.prod(shape))
    return (np.arange(n) * 3 + rng.integers(0, 4, n)).astype("<u2").reshape(shape)


def meta(codecs: list, *, shape=(16,), chunks=(8,), dtype="uint16", fill=0) -> dict:
    return array_metadata(shape, chunks, dtype, fill, codecs)


def one_chunk(header: bytes, payload: bytes) -> dict[str, bytes]:
    return {"c/0": header + payload}


def _raw(values: np.ndarray) -> bytes:
    return values.astype("<u2").tobytes()


def read_cases() -> list[Case]:
    out: list[Case] = []

    v = u16_ramp("cond-mask-0-skips", (8,))
    m = meta([c_bytes(), c_conditional([c_gzip()])], shape=(8,))
    out.append(read("cond-mask-0-skips", ENCODING, BIT_ZERO,
                    "One gzip codec, header 0x00: the payload is the raw chunk.", m, v,
                    objects=one_chunk(b"\x00", _raw(v))))

    v = u16_ramp("cond-mask-1-applies", (8,))
    out.append(read("cond-mask-1-applies", ENCODING, BIT_ONE,
                    "One gzip codec, header 0x01: the payload is gzip of the raw chunk.",
                    meta([c_bytes(), c_conditional([c_gzip()])], shape=(8,)), v,
                    objects=one_chunk(b"\x01", gzip(_raw(v)))))

    v = u16_ramp("cond-masks-differ-per-chunk", (32,))
    masks = np.array([0, 1, 1, 0])
    out.append(read("cond-masks-differ-per-chunk", "Abstract", PER_CHUNK,
                    "Four chunks of one array, headers 0, 1, 1, 0 (gzip).",
                    meta([c_bytes(), c_conditional([c_gzip()])], shape=(32,)), v,
                    runtime=masks_runtime(masks)))

    # Two codecs, every mask, one chunk each.
    v = u16_ramp("cond-two-codecs-every-mask", (32,))
    out.append(read("cond-two-codecs-every-mask", ENCODING, BIT_ORDER,
                    "Codecs [gzip, crc32c]; chunks 0-3 carry masks 0b00, 0b01, 0b10, 0b11 "
                    "(0b10: crc32c alone, 0b11: crc32c of gzip).",
                    meta([c_bytes(), c_conditional([c_gzip(), c_crc32c()])], shape=(32,)), v,
                    runtime=masks_runtime(np.arange(4))))

    v = u16_ramp("cond-decode-reverse-crc-then-gzip", (8,))
    out.append(read("cond-decode-reverse-crc-then-gzip", DECODING, REVERSE,
                    "Codecs [crc32c, gzip], mask 0b11: stored gzip(crc32c(raw)); gzip is "
                    "undone first.",
                    meta([c_bytes(), c_conditional([c_crc32c(), c_gzip()])], shape=(8,)), v,
                    objects=one_chunk(b"\x03", gzip(crc32c(_raw(v))))))

    v = u16_ramp("cond-decode-reverse-gzip-then-crc", (8,))
    out.append(read("cond-decode-reverse-gzip-then-crc", DECODING, REVERSE,
                    "Codecs [gzip, crc32c], mask 0b11: stored crc32c(gzip(raw)); the "
                    "checksum is checked and removed first.",
                    meta([c_bytes(), c_conditional([c_gzip(), c_crc32c()])], shape=(8,)), v,
                    objects=one_chunk(b"\x03", crc32c(gzip(_raw(v))))))

    v = u16_ramp("cond-three-codecs-all-8-masks", (64,))
    out.append(read("cond-three-codecs-all-8-masks", ENCODING, APPLY,
                    "Codecs [shuffle(2), zstd, crc32c]; chunk i carries mask i, 0 to 7.",
                    meta([c_bytes(), c_conditional([c_shuffle(2), c_zstd(), c_crc32c()])],
                         shape=(64,)), v, runtime=masks_runtime(np.arange(8))))

    eight = [c_zstd()] + [c_crc32c()] * 6 + [c_gzip()]
    v = u16_ramp("cond-bit-7-is-codec-7", (8,))
    out.append(read("cond-bit-7-is-codec-7", ENCODING, BIT_ORDER,
                    "Eight codecs [zstd, crc32c x6, gzip], header 0x80: only codec 7 (gzip) "
                    "was applied. Reading the byte's bits the other way round would undo zstd.",
                    meta([c_bytes(), c_conditional(eight)], shape=(8,)), v,
                    objects=one_chunk(b"\x80", gzip(_raw(v)))))

    nine = [c_gzip()] + [c_crc32c()] * 7 + [c_zstd()]
    v = u16_ramp("cond-nine-codecs-bit-8", (8,))
    out.append(read("cond-nine-codecs-bit-8", ENCODING, BIT_ORDER,
                    "Nine codecs [gzip, crc32c x7, zstd], header_bits absent (16): header "
                    "bytes 00 01 mean bit 8, codec 8 (zstd) alone.",
                    meta([c_bytes(), c_conditional(nine)], shape=(8,)), v,
                    objects=one_chunk(b"\x00\x01", zstd(_raw(v)))))

    v = u16_ramp("cond-nine-codecs-bits-0-and-8", (8,))
    out.append(read("cond-nine-codecs-bits-0-and-8", ENCODING, BIT_ORDER,
                    "Nine codecs [gzip, crc32c x7, zstd], header bytes 01 01: gzip, then "
                    "zstd on top.",
                    meta([c_bytes(), c_conditional(nine)], shape=(8,)), v,
                    objects=one_chunk(b"\x01\x01", zstd(gzip(_raw(v))))))

    v = u16_ramp("cond-default-header-bits-nine-codecs", (8,))
    out.append(read("cond-default-header-bits-nine-codecs", CONFIG, DEFAULT_BITS,
                    "Nine codecs and no header_bits: the header is 2 bytes (16 bits); "
                    "here 0x0000, the payload raw.",
                    meta([c_bytes(), c_conditional(nine)], shape=(8,)), v,
                    objects=one_chunk(b"\x00\x00", _raw(v))))

    v = u16_ramp("cond-default-header-bits-one-codec", (8,))
    out.append(read("cond-default-header-bits-one-codec", CONFIG, DEFAULT_BITS,
                    "One codec and no header_bits: a 1-byte header.",
                    meta([c_bytes(), c_conditional([c_crc32c()])], shape=(8,)), v,
                    objects=one_chunk(b"\x01", crc32c(_raw(v)))))

    v = u16_ramp("cond-header-bits-16-one-codec", (8,))
    out.append(read("cond-header-bits-16-one-codec", CONFIG, HEADER_SIZE,
                    "header_bits 16 with one codec: header bytes 01 00, then gzip.",
                    meta([c_bytes(), c_conditional([c_gzip()], header_bits=16)], shape=(8,)), v,
                    objects=one_chunk(b"\x01\x00", gzip(_raw(v)))))

    v = u16_ramp("cond-header-bits-64", (8,))
    out.append(read("cond-header-bits-64", DECODING, READ_HEADER,
                    "header_bits 64, codecs [gzip, crc32c], mask 0b10: an 8-byte header, then "
                    "crc32c of the raw chunk.",
                    meta([c_bytes(), c_conditional([c_gzip(), c_crc32c()], header_bits=64)],
                         shape=(8,)), v,
                    objects=one_chunk(b"\x02" + bytes(7), crc32c(_raw(v)))))

    v = u16_ramp("cond-no-codecs-no-header", (8,))
    out.append(read("cond-no-codecs-no-header", CONFIG, DEFAULT_BITS,
                    "An empty codecs list and no header_bits: the smallest multiple of 8 "
                    "that is >= 0 is 0, so the chunk is its raw bytes, no header.",
                    meta([c_bytes(), c_conditional([])], shape=(8,)), v,
                    objects=one_chunk(b"", _raw(v))))

    v = u16_ramp("cond-no-codecs-header-bits-8", (8,))
    out.append(read("cond-no-codecs-header-bits-8", CONFIG, HEADER_SIZE,
                    "An empty codecs list with header_bits 8: a zero header byte, then raw.",
                    meta([c_bytes(), c_conditional([], header_bits=8)], shape=(8,)), v,
                    objects=one_chunk(b"\x00", _raw(v))))

    v = u16_ramp("cond-codecs-appended-later", (16,))
    out.append(read("cond-codecs-appended-later", DECODING, OLDER,
                    "Metadata now lists [gzip, zstd]; both chunks were written when it listed "
                    "[gzip] alone (headers 0x00 and 0x01): bit 1 is 0, zstd is skipped.",
                    meta([c_bytes(), c_conditional([c_gzip(), c_zstd()])]), v,
                    objects={"c/0": b"\x00" + _raw(v[:8]), "c/1": b"\x01" + gzip(_raw(v[8:]))}))

    v = u16_ramp("cond-codecs-appended-within-reserved-header", (16,))
    out.append(read("cond-codecs-appended-within-reserved-header", CONFIG,
                    "This allows for future expansion of the codec pipeline without requiring "
                    "a rewrite of existing chunks.",
                    "header_bits 16 reserved room: chunks written with one codec [crc32c] "
                    "(headers 01 00 and 00 00) read under metadata listing [crc32c, gzip, "
                    "zstd] with the same header_bits.",
                    meta([c_bytes(), c_conditional([c_crc32c(), c_gzip(), c_zstd()],
                                                   header_bits=16)]), v,
                    objects={"c/0": b"\x01\x00" + crc32c(_raw(v[:8])),
                             "c/1": b"\x00\x00" + _raw(v[8:])}))

    v = u16_ramp("cond-first-name-optional", (16,))
    out.append(read("cond-first-name-optional", CONFIG,
                    "The `configuration` object for the `optional` codec contains the "
                    "following parameters:",
                    "The seed's own name: a codec named `optional` whose configuration has "
                    "`codecs` (not the nullable codec's mask_codecs/data_codecs).",
                    meta([c_bytes(), c_conditional([c_gzip()], name="optional")]), v,
                    runtime=masks_runtime(np.array([1, 0]))))

    f = (np.linspace(0, 1, 64, dtype="<f4") ** 2).reshape(64)
    ex1 = array_metadata((64,), (16,), "float32", 0.0, [
        c_bytes(), c_conditional([c_shuffle(4), c_zstd(5)], name="optional"), c_crc32c()])
    out.append(read("cond-example-1-configuration", "Usage and Impact / Example 1",
                    "This ensures that each chunk occupies the minimum possible space.",
                    "Example 1's chain [bytes, optional(shuffle(4), zstd(5)), crc32c] with "
                    "chunk masks 0b00, 0b01, 0b10, 0b11.", ex1, f,
                    runtime=masks_runtime(np.arange(4))))

    f2 = np.tile(np.linspace(-1, 1, 16, dtype="<f4"), (16, 1))
    f2[:8, 8:] = rng_for("cond-example-3-plan").standard_normal((8, 8)).astype("<f4")
    plan = np.array([[0b11, 0b00], [0b11, 0b11]])
    ex3 = array_metadata((16, 16), (8, 8), "float32", 0.0,
                         [c_bytes(), c_conditional([c_shuffle(4), c_zstd(5)])])
    out.append(read("cond-example-3-plan", "Usage and Impact / Example 3", PLAN,
                    "A precomputed plan over a 2x2 chunk grid: 0b11 (shuffle and zstd) "
                    "everywhere but the noisy chunk (0, 1), stored raw (0b00).", ex3, f2,
                    runtime=masks_runtime(plan)))

    v = u16_ramp("cond-edge-chunk", (13,))
    out.append(read("cond-edge-chunk", ENCODING, PREPEND,
                    "Shape 13 in chunks of 8: the edge chunk is stored full-size (8 elements) "
                    "behind its header like any other.",
                    meta([c_bytes(), c_conditional([c_gzip()])], shape=(13,)), v,
                    runtime=masks_runtime(np.array([0, 1]))))

    v = u16_ramp("cond-inside-shard", (8, 8))
    inner_masks = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 1]])
    m = array_metadata((8, 8), (8, 8), "uint16", 0, [c_sharding(
        (2, 2), [c_bytes(), c_conditional([c_gzip()])])])
    out.append(read("cond-inside-shard", "Motivation and Scope / Enabling Advanced I/O "
                    "Patterns with Sharding",
                    "The optional codec, when combined with the sharding codec, unlocks "
                    "high-performance I/O patterns that are otherwise difficult to achieve, "
                    "specifically parallel writes within a single shard.",
                    "Conditional as an inner codec of sharding_indexed: each of the 16 inner "
                    "chunks has its own header (masks by inner chunk).", m, v,
                    runtime=masks_runtime(inner_masks)))

    v = u16_ramp("cond-fixed-slots-in-shard", (8, 16))
    out.append(_fixed_slot_case(v))

    v = u16_ramp("cond-after-shard", (8, 8))
    m = array_metadata((8, 8), (4, 8), "uint16", 0, [
        c_sharding((2, 4), [c_bytes()]), c_conditional([c_gzip(), c_crc32c()])])
    out.append(read("cond-after-shard", ENCODING, APPLY,
                    "Conditional after sharding_indexed: whole shards behind a header "
                    "(masks 0b11 and 0b01).", m, v,
                    runtime=masks_runtime(np.array([[3], [1]]))))

    v = u16_ramp("cond-nested-conditional", (8,))
    inner = b"\x01" + gzip(_raw(v))
    out.append(read("cond-nested-conditional", ENCODING, BYTE_STREAM,
                    "A conditional nested in a conditional: outer [conditional([gzip]), "
                    "crc32c] with mask 0b11, inner mask 1: stored 03 || crc32c(01 || "
                    "gzip(raw)).",
                    meta([c_bytes(), c_conditional([c_conditional([c_gzip()]), c_crc32c()])],
                         shape=(8,)), v,
                    objects=one_chunk(b"\x03", crc32c(inner))))

    v = u16_ramp("cond-big-endian-bytes", (16,))
    out.append(read("cond-big-endian-bytes", ENCODING, BYTE_STREAM,
                    "The conditional codec sees the bytes codec's output whatever its "
                    "endianness: bytes(big) then conditional([zstd]).",
                    meta([c_bytes("big"), c_conditional([c_zstd()])]), v,
                    runtime=masks_runtime(np.array([1, 0]))))
    return out


def _fixed_slot_case(values: np.ndarray) -> Case:
    """A shard of fixed-size slots: each conditional inner chunk padded to raw + header."""
    from conformance.builders.common import assemble_shard

    values = values.copy()
    values[:4, 8:] = 500  # compressible inner chunks: stored zstd, short of their slots
    values[4:, :8] = 501
    slot = 4 * 8 * 2 + 1  # a 4x8 uint16 inner chunk plus the 1-byte header
    encoded, gaps = {}, {}
    previous = 0
    for n, c in enumerate(np.ndindex(2, 2)):
        raw = _raw(values[c[0] * 4:(c[0] + 1) * 4, c[1] * 8:(c[1] + 1) * 8])
        packed = zstd(raw)
        encoded[c] = b"\x01" + packed if len(packed) < len(raw) else b"\x00" + raw
        gaps[c] = bytes(n * slot - previous)
        previous = n * slot + len(encoded[c])
    assert {e[0] for e in encoded.values()} == {0, 1}
    shard = assemble_shard(encoded, (2, 2), index_codecs=[c_bytes(), c_crc32c()],
                           gap_before=gaps, tail=bytes(4 * slot - previous))
    m = array_metadata((8, 16), (8, 16), "uint16", 0, [c_sharding(
        (4, 8), [c_bytes(), c_conditional([c_zstd()])])])
    return read_case(SPEC, "cond-fixed-slots-in-shard",
                     "Motivation and Scope / Enabling Advanced I/O Patterns with Sharding", SLOTS,
                     "Four inner chunks in slots of raw size + header (65 bytes each): noisy "
                     "ones raw (filling the slot), flat ones zstd (zeros after them), the "
                     "index at the end.", m, values, objects={"c/0/0": shard})


def refuse_cases() -> list[Case]:
    out: list[Case] = []
    v = u16_ramp("refuse", (8,))
    one = meta([c_bytes(), c_conditional([c_gzip()])], shape=(8,))
    out.append(refuse("cond-reserved-bit-1-set", ENCODING, RESERVED,
                      "One codec, header 0x03: bit 1 is reserved and set.", one,
                      "bit 1 of the header is reserved (only one nested codec) and is 1",
                      objects=one_chunk(b"\x03", gzip(_raw(v)))))
    out.append(refuse("cond-reserved-bit-7-set", ENCODING, RESERVED,
                      "One codec, header 0x80: bit 7 is reserved and set; the payload is "
                      "raw.", one, "bit 7 of the header is reserved and is 1",
                      objects=one_chunk(b"\x80", _raw(v))))
    three16 = meta([c_bytes(), c_conditional([c_gzip(), c_zstd(), c_crc32c()],
                                             header_bits=16)], shape=(8,))
    out.append(refuse("cond-reserved-bit-15-set", ENCODING, RESERVED,
                      "Three codecs, header_bits 16, header bytes 00 80: bit 15 set.", three16,
                      "bit 15 (byte 1, bit 7) is reserved and is 1",
                      objects=one_chunk(b"\x00\x80", _raw(v))))
    nine = meta([c_bytes(), c_conditional([c_crc32c()] * 9)], shape=(8,))
    out.append(refuse("cond-reserved-bit-9-of-nine-codecs", ENCODING, RESERVED,
                      "Nine codecs (16-bit header), header bytes 00 02: bit 9 set.", nine,
                      "bit 9 is reserved (codecs are bits 0-8) and is 1",
                      objects=one_chunk(b"\x00\x02", _raw(v))))
    out.append(refuse("cond-header-bits-not-multiple-of-8", CONFIG, MULTIPLE_OF_8,
                      "header_bits 12.",
                      meta([c_bytes(), c_conditional([c_gzip()], header_bits=12)], shape=(8,)),
                      "header_bits 12 is not a multiple of 8",
                      objects=one_chunk(b"\x00\x00", _raw(v))))
    out.append(refuse("cond-header-bits-below-codec-count", CONFIG, AT_LEAST,
                      "Nine codecs with header_bits 8.",
                      meta([c_bytes(), c_conditional([c_crc32c()] * 9, header_bits=8)],
                           shape=(8,)),
                      "header_bits 8 is less than len(codecs) = 9",
                      objects=one_chunk(b"\x00", _raw(v))))
    out.append(refuse("cond-codecs-missing", CONFIG, CODECS_REQUIRED,
                      "A configuration without `codecs`.",
                      meta([c_bytes(), {"name": "conditional", "configuration":
                                        {"header_bits": 8}}], shape=(8,)),
                      "the required `codecs` parameter is absent",
                      objects=one_chunk(b"\x00", _raw(v))))
    out.append(refuse("cond-nested-array-to-bytes-codec", ENCODING, BYTE_STREAM,
                      "A nested `bytes` codec (array -> bytes) inside the conditional codec.",
                      meta([c_bytes(), c_conditional([c_bytes()])], shape=(8,)),
                      "the nested codecs process a byte stream; `bytes` takes an array",
                      objects=one_chunk(b"\x00", _raw(v))))
    h16 = meta([c_bytes(), c_conditional([c_gzip()], header_bits=16)], shape=(8,))
    out.append(refuse("cond-chunk-shorter-than-header", DECODING, READ_HEADER,
                      "header_bits 16; the stored chunk is 1 byte.", h16,
                      "the chunk cannot hold its 2-byte header",
                      objects={"c/0": b"\x00"}))
    out.append(refuse("cond-empty-chunk-object", DECODING, READ_HEADER,
                      "header_bits 8; the stored chunk is 0 bytes.", one,
                      "the chunk cannot hold its 1-byte header", objects={"c/0": b""}))
    out.append(refuse("cond-mask-says-gzip-payload-is-raw", PHASE1, DECODE_ONLY_IF,
                      "Header 0x01 (gzip applied) over a raw payload.", one,
                      "bit 0 says gzip was applied; the payload is not a gzip stream",
                      objects=one_chunk(b"\x01", _raw(v))))
    crc = meta([c_bytes(), c_conditional([c_crc32c()])], shape=(8,))
    bad = bytearray(crc32c(_raw(v)))
    bad[-1] ^= 0x01
    out.append(refuse("cond-crc32c-mismatch", PHASE1, DECODE_ONLY_IF,
                      "Header 0x01 with crc32c applied, checksum off by one bit.", crc,
                      "the nested crc32c codec's checksum does not match",
                      objects=one_chunk(b"\x01", bytes(bad))))
    out.append(refuse("cond-mask-0-payload-truncated", PHASE1, DECODE_ONLY_IF,
                      "Header 0x00 and a raw payload one byte short of the chunk.", one,
                      "with no codec applied the payload must be the 16-byte raw chunk; it is "
                      "15 bytes", objects=one_chunk(b"\x00", _raw(v)[:-1])))
    return out


def write_cases() -> list[Case]:
    out: list[Case] = []
    masks_writer = lambda masks, grid="chunks": {  # noqa: E731
        "conditional_masks": {"grid": grid, "masks": np.asarray(masks).tolist()}}

    v = u16_ramp("cond-write-no-mask-defaults-to-zero", (16,))
    out.append(write("cond-write-no-mask-defaults-to-zero", PHASE1, DEFAULT_MASK,
                     "A writer given no mask writes header 0x00 and the raw chunk.",
                     meta([c_bytes(), c_conditional([c_zstd()])]), v))

    v = u16_ramp("cond-write-masks-per-chunk", (32,))
    masks = np.arange(4)
    out.append(write("cond-write-masks-per-chunk", ENCODING, BIT_ORDER,
                     "Codecs [shuffle(2), crc32c]; the writer is told masks 0, 1, 2, 3 for "
                     "chunks 0-3.",
                     meta([c_bytes(), c_conditional([c_shuffle(2), c_crc32c()])], shape=(32,)),
                     v, runtime=masks_runtime(masks), writer=masks_writer(masks)))

    v = u16_ramp("cond-write-codec-order", (16,))
    masks = np.array([3, 3])
    out.append(write("cond-write-codec-order", ENCODING, APPLY,
                     "Codecs [crc32c, shuffle(2)], mask 0b11: shuffle(crc32c(raw)), the "
                     "checksum bytes shuffled with the rest.",
                     meta([c_bytes(), c_conditional([c_crc32c(), c_shuffle(2)])]), v,
                     runtime=masks_runtime(masks), writer=masks_writer(masks)))

    v = u16_ramp("cond-write-header-bits-16", (16,))
    masks = np.array([1, 0])
    out.append(write("cond-write-header-bits-16", ENCODING, PREPEND,
                     "header_bits 16 with one codec: header bytes 01 00 and 00 00.",
                     meta([c_bytes(), c_conditional([c_crc32c()], header_bits=16)]), v,
                     runtime=masks_runtime(masks), writer=masks_writer(masks)))

    v = u16_ramp("cond-write-nine-codecs-bit-8", (16,))
    masks = np.array([0x100, 0x101])
    out.append(write("cond-write-nine-codecs-bit-8", ENCODING, BIT_ORDER,
                     "Nine codecs [shuffle(2), crc32c x8]; masks 0x100 (header 00 01) and "
                     "0x101 (header 01 01).",
                     meta([c_bytes(), c_conditional([c_shuffle(2)] + [c_crc32c()] * 8)]), v,
                     runtime=masks_runtime(masks), writer=masks_writer(masks)))

    v = u16_ramp("cond-write-first-name-optional", (16,))
    masks = np.array([1, 0])
    out.append(write("cond-write-first-name-optional", CONFIG,
                     "The `configuration` object for the `optional` codec contains the "
                     "following parameters:",
                     "The seed's name `optional` (with `codecs`): the same bytes as "
                     "`conditional`.",
                     meta([c_bytes(), c_conditional([c_crc32c()], name="optional")]), v,
                     runtime=masks_runtime(masks), writer=masks_writer(masks)))

    v = u16_ramp("cond-write-inside-shard", (4, 8))
    masks = np.array([[0, 1, 2, 3], [3, 2, 1, 0]])
    m = array_metadata((4, 8), (4, 8), "uint16", 0, [c_sharding(
        (2, 2), [c_bytes(), c_conditional([c_shuffle(2), c_crc32c()])])])
    out.append(write("cond-write-inside-shard", PHASE2,
                     "Set the final, computed bitmask as the **runtime bitmask** on the "
                     "`optional` codec instance.",
                     "Conditional inside sharding_indexed; masks given per inner chunk (the "
                     "array-wide 2x4 grid of inner chunks); shard written in C order, dense.",
                     m, v, runtime=masks_runtime(masks),
                     writer=masks_writer(masks, "inner chunks")))

    v = u16_ramp("cond-write-always-apply", (16,))
    m = meta([c_bytes(), c_conditional([c_shuffle(2), c_crc32c()])])
    out.append(write("cond-write-always-apply", PHASE3, HEURISTICS,
                     "The built-in 'always_apply': every chunk 0b11.", m, v,
                     runtime=Runtime(mask=lambda c: 3), writer={"decision": "always_apply"},
                     level="SHOULD"))
    out.append(write("cond-write-never-apply", PHASE3, HEURISTICS,
                     "The built-in 'never_apply': every chunk 0b00.", m,
                     u16_ramp("cond-write-never-apply", (16,)),
                     writer={"decision": "never_apply"}, level="SHOULD"))

    out.extend(_decision_deviation_cases())
    return out




def _decision_deviation_cases() -> list[Case]:
    """compress_if_smaller as the text decides it: each trial on the original chunk.

    zarrext decides along a chain (each nested codec tried on the previous codec's
    output) and stores other masks: its outcome is recorded as its deviation.
    """
    out = []
    v = u16_ramp("cond-write-compress-if-smaller-chain", (2048,))
    raw = _raw(v[:1024])
    first = zstd(raw)
    assert len(first) < len(raw)
    assert len(zstd(first)) >= len(first)  # zarrext's chained trial of codec 1
    assert len(zstd(raw)) < len(raw)  # the spec's trial of codec 1 on the raw chunk
    m = array_metadata((2048,), (1024,), "uint16", 0,
                       [c_bytes(), c_conditional([c_zstd(), c_zstd()])])
    expected = encode_array(m, v, runtime=Runtime(mask=lambda c: 0b11))
    out.append(write_case(
        SPEC, "cond-write-compress-if-smaller-chain", PHASE2, TRIAL,
        "Codecs [zstd, zstd] under compress_if_smaller. The text tries codec 1 on the "
        "original chunk, which shrinks, and stores mask 0b11 (zstd twice). The header "
        "byte is compared and the chunk must read back.", m, v,
        expected_objects=expected, writer={"decision": "compress_if_smaller"},
        compare={"mode": "prefix", "nbytes": 1, "roundtrip": True},
        deviation={"reason": CHAIN_DEVIATION, "zarrext_outcome": "bytes differ",
                   "zarrext_masks": [1, 1]}))

    f = np.tile(np.linspace(0, 1, 256, dtype="<f4"), 4)
    raw = f[:512].tobytes()
    assert len(zstd(shuffle(raw, 4))) < len(zstd(raw)) < len(raw)
    m = array_metadata((1024,), (512,), "float32", 0.0,
                       [c_bytes(), c_conditional([c_shuffle(4), c_zstd()])])
    expected = encode_array(m, f, runtime=Runtime(mask=lambda c: 0b10))
    out.append(write_case(
        SPEC, "cond-write-compress-if-smaller-shuffle", PHASE3, COMPRESS_IF_SMALLER,
        "Codecs [shuffle(4), zstd] under compress_if_smaller on a float32 ramp. The "
        "text's rule `len(trial_encoded_chunk) < len(unencoded_chunk)` never applies "
        "shuffle (its trial is as long as the chunk) and applies zstd: mask 0b10. Header "
        "byte compared, chunk read back.", m, f,
        expected_objects=expected, writer={"decision": "compress_if_smaller"},
        compare={"mode": "prefix", "nbytes": 1, "roundtrip": True},
        deviation={"reason": CHAIN_DEVIATION, "zarrext_outcome": "bytes differ",
                   "zarrext_masks": [3, 3]}, level="SHOULD"))
    return out


def cases() -> list[Case]:
    return read_cases() + refuse_cases() + write_cases()

