"""Cases for normative statements the per-spec modules leave without one.

Each case quotes the statement of ``conformance/statements.json`` it tests (COVERAGE.md
maps them). Stored chunks are assembled here by hand from the specs' byte layouts:
a conditional chunk is its header byte then the payload, an optional chunk its two
u64 little-endian lengths then the encoded mask and data, a shard its inner chunks
then the index.
"""

from __future__ import annotations

import struct

import numpy as np

from conformance.builders.common import (
    SHARD_COMPARE,
    Case,
    Coords,
    array_metadata,
    assemble_shard,
    bytes_codec,
    c_bytes,
    c_cast_value,
    c_conditional,
    c_crc32c,
    c_gzip,
    c_optional,
    c_packbits,
    c_shuffle,
    c_zstd,
    crc32c,
    gzip,
    optional_numpy,
    optional_type,
    packbits,
    read_case,
    refuse_case,
    rng_for,
    shuffle,
    write_case,
    zstd,
)
from conformance.builders.conditional import CHAIN_DEVIATION

PHASE1 = "Implementation / Phase 1: Core Codec Logic (Required)"
PHASE2 = "Implementation / Phase 2: Writer-Side Automation (Required)"
PHASE3 = "Implementation / Phase 3: Built-in Heuristics (Recommended)"
SPEC_LITERAL_DECISION = (
    "zarrext's compress_if_smaller trial-encodes each nested codec on the bytes as they "
    "stand after the codecs already enabled before it, not on the original chunk, and so "
    "stores another mask here (its reading is pinned by cond-write-compress-if-smaller-*).")


def _u16(values: np.ndarray) -> bytes:
    return values.astype("<u2").tobytes()


def _ramp(case_id: str, n: int) -> np.ndarray:
    """A slowly rising uint16 ramp with a little noise: compressible, never all zero."""
    rng = rng_for(case_id)
    return (np.arange(n) // 4 + 1 + rng.integers(0, 2, n)).astype("<u2")


def _masks(masks: list[int]) -> dict:
    return {"conditional_masks": {"grid": "chunks", "masks": masks}}


def conditional_cases() -> list[Case]:
    out = []
    m = array_metadata((16,), (8,), "uint16", 0, [c_bytes(), c_conditional([c_crc32c()])])
    v = _ramp("cond-write-runtime-mask-given", 16)
    out.append(write_case(
        "000", "cond-write-runtime-mask-given", PHASE1,
        "The implementation must provide a mechanism to set this bitmask.",
        "A writer told mask 1 for chunk 0 and mask 0 for chunk 1 (one nested codec, "
        "crc32c): chunk 0 is 0x01 then the raw chunk and its CRC-32C, chunk 1 is 0x00 then "
        "the raw chunk.", m, v, writer=_masks([1, 0]),
        expected_objects={"c/0": b"\x01" + crc32c(_u16(v[:8])), "c/1": b"\x00" + _u16(v[8:])}))

    m = array_metadata((16,), (8,), "uint16", 0, [c_bytes(), c_conditional(
        [c_shuffle(2), c_crc32c(), c_crc32c()])])
    v = _ramp("cond-write-decision-sets-each-bit", 16)
    out.append(write_case(
        "000", "cond-write-decision-sets-each-bit", PHASE2,
        "If the function returns `True`, set the corresponding bit in the bitmask: "
        "`mask |= 1 << i`.",
        "The decision 'always_apply' says True for each of three nested codecs (shuffle, "
        "crc32c, crc32c): every chunk's header is 0b111 and its payload the three applied "
        "in order.", m, v, writer={"decision": "always_apply"},
        expected_objects={f"c/{i}": b"\x07" + crc32c(crc32c(shuffle(_u16(v[i * 8:i * 8 + 8]),
                                                                   2)))
                          for i in range(2)}))

    m = array_metadata((2048,), (1024,), "uint16", 0, [c_bytes(), c_conditional([c_zstd()])])
    v = np.concatenate([np.full(1024, 5, "<u2"),
                        rng_for("cond-write-decision-by-name").integers(
                            0, 65536, 1024).astype("<u2")])
    raw = [_u16(v[:1024]), _u16(v[1024:])]
    assert len(zstd(raw[0])) < len(raw[0]) <= len(zstd(raw[1]))
    out.append(write_case(
        "000", "cond-write-decision-by-name", PHASE3,
        "To simplify common use cases, libraries should provide pre-packaged decision "
        "functions that can be selected by name.",
        "The decision named 'compress_if_smaller' with one nested codec (zstd): chunk 0 "
        "(one value repeated) shrinks and is stored 0x01 then zstd; chunk 1 (random) does "
        "not and is stored 0x00 then raw. The header byte is compared (zstd streams differ "
        "between libraries) and the chunks must read back.",
        m, v, writer={"decision": "compress_if_smaller"}, level="SHOULD",
        compare={"mode": "prefix", "nbytes": 1, "roundtrip": True},
        expected_objects={"c/0": b"\x01" + zstd(raw[0]), "c/1": b"\x00" + raw[1]}))

    m = array_metadata((1024,), (512,), "uint16", 0, [c_bytes(), c_conditional(
        [c_gzip(1), c_zstd()])])
    v = _ramp("cond-write-trial-on-original-chunk", 1024)
    raw = [_u16(v[:512]), _u16(v[512:])]
    for r in raw:  # the spec's trials shrink; zarrext's chained trial of zstd does not
        assert len(gzip(r)) < len(r)
        assert len(zstd(r)) < len(r)
        assert len(zstd(gzip(r))) >= len(gzip(r))
    out.append(write_case(
        "000", "cond-write-trial-on-original-chunk", PHASE2,
        "If trial encoding is enabled, perform an in-memory trial encode of the original, "
        "unencoded chunk using the current nested `codec`.",
        "Nested codecs [gzip, zstd] under 'compress_if_smaller'. Each is trial-encoded on the "
        "original chunk: both shrink it, so the mask is 0b11 and the payload zstd of gzip. "
        "(Tried on gzip's output instead, zstd would not shrink it: 0b01.) The header byte "
        "is compared and the chunks must read back.",
        m, v, writer={"decision": "compress_if_smaller"},
        compare={"mode": "prefix", "nbytes": 1, "roundtrip": True},
        expected_objects={f"c/{i}": b"\x03" + zstd(gzip(r)) for i, r in enumerate(raw)},
        notes=SPEC_LITERAL_DECISION,
        deviation={"reason": CHAIN_DEVIATION, "zarrext_outcome": "bytes differ",
                   "zarrext_masks": [1, 1]}))

    m = array_metadata((1024,), (512,), "uint16", 0, [c_bytes(), c_conditional(
        [c_shuffle(2), c_gzip(1)])])
    v = _ramp("cond-write-compress-if-smaller-rule", 1024)
    raw = [_u16(v[:512]), _u16(v[512:])]
    for r in raw:
        assert len(shuffle(r, 2)) == len(r)
        assert len(gzip(r)) < len(r)
    out.append(write_case(
        "000", "cond-write-compress-if-smaller-rule", PHASE3,
        "A critical one is `'compress_if_smaller'`, which requires trial encoding and "
        "implements the logic: `len(trial_encoded_chunk) < len(unencoded_chunk)`.",
        "Nested codecs [shuffle(2), gzip] under 'compress_if_smaller'. shuffle's trial is as "
        "long as the chunk, never shorter, so it is skipped; gzip's is shorter: mask 0b10, "
        "payload gzip of the raw chunk. The header byte is compared and the chunks must read "
        "back.", m, v, writer={"decision": "compress_if_smaller"}, level="SHOULD",
        compare={"mode": "prefix", "nbytes": 1, "roundtrip": True},
        expected_objects={f"c/{i}": b"\x02" + gzip(r) for i, r in enumerate(raw)},
        notes=SPEC_LITERAL_DECISION,
        deviation={"reason": CHAIN_DEVIATION, "zarrext_outcome": "bytes differ",
                   "zarrext_masks": [3, 3]}))

    m = array_metadata((16,), (8,), "uint16", 0, [c_bytes(), c_conditional([c_crc32c()])])
    out.append(refuse_case(
        "000", "cond-write-mask-sets-reserved-bit", "Detailed Description / Encoding Process",
        "Any reserved bits (i.e., from index `len(codecs)` up to `header_bits - 1`) **must** "
        "be set to `0`.",
        "A writer is given mask 0b10 for every chunk with one nested codec: bit 1 is "
        "reserved, and no header it may write says what was asked. The write must be "
        "refused (storing the chunk with bit 1 set would break the rule; dropping the bit "
        "would apply another mask than the one given).", m,
        "the mask sets a reserved bit", operation="write", input=_ramp("cond-reserved", 16),
        writer=_masks([2, 2])))
    return out


def sharding_cases() -> list[Case]:
    out = []
    index = [c_bytes(), c_crc32c()]
    v = rng_for("shard-statements").integers(100, 60000, (8, 8)).astype("<u2")

    def shards(values: np.ndarray, order=None) -> dict[str, bytes]:
        """Shards (4, 8) of (2, 2) inner chunks, codecs [bytes], index [bytes, crc32c]."""
        objects = {}
        for s in range(2):
            encoded: dict[Coords, bytes] = {
                (i, j): _u16(values[s * 4 + i * 2:s * 4 + i * 2 + 2, j * 2:j * 2 + 2])
                for i in range(2) for j in range(4)}
            objects[f"c/{s}/0"] = assemble_shard(
                encoded, (2, 4), index_codecs=index,
                order=order(sorted(encoded)) if order else None)
        return objects

    def meta(configuration: dict) -> dict:
        return array_metadata((8, 8), (4, 8), "uint16", 7, [
            {"name": "sharding_indexed", "configuration": configuration}])

    good = {"chunk_shape": [2, 2], "codecs": [c_bytes()], "index_codecs": index,
            "index_location": "end"}
    m = meta(good)
    m["codecs"][0]["name"] = "sharding"
    out.append(refuse_case(
        "001", "shard-name-not-sharding-indexed", "Codec name",
        "The value of the ``name`` member in the codec object MUST be ``sharding_indexed``.",
        "The codec is named `sharding`; its configuration and shards are valid "
        "sharding_indexed ones.", m, "no codec is named `sharding`", objects=shards(v)))
    out.append(refuse_case(
        "001", "shard-codecs-missing", "Configuration parameters",
        "The ``codecs`` member is required and needs to contain exactly one "
        "``array -> bytes`` codec.",
        "The configuration has no `codecs`; the shards' inner chunks are the bytes codec's "
        "output, which a reader assuming a default would read.",
        meta({k: x for k, x in good.items() if k != "codecs"}),
        "`codecs` is missing from the sharding configuration", objects=shards(v)))
    out.append(refuse_case(
        "001", "shard-index-codecs-missing", "Configuration parameters",
        "The ``index_codecs`` member is required and needs to contain exactly one "
        "``array -> bytes`` codec.",
        "The configuration has no `index_codecs`; the shards' indexes are [bytes little, "
        "crc32c], which a reader assuming a default would read.",
        meta({k: x for k, x in good.items() if k != "index_codecs"}),
        "`index_codecs` is missing from the sharding configuration", objects=shards(v)))
    out.append(refuse_case(
        "001", "shard-codecs-not-a-list", "Configuration parameters (``codecs``)",
        "The value must be an array of objects, as specified in the :ref:`array-metadata`.",
        "`codecs` is one codec object, not an array of them.",
        meta({**good, "codecs": c_bytes()}), "`codecs` is not an array", objects=shards(v)))

    before = v.copy()
    after = v.copy()
    after[0:2, 2:4] = rng_for("shard-write-into-reversed-shard").integers(
        100, 60000, (2, 2)).astype("<u2")
    out.append(write_case(
        "001", "shard-write-into-reversed-shard", "Binary shard format",
        "When writing partial inner chunks into an existing shard, no specific order of the "
        "existing inner chunks may be expected.",
        "The store holds both shards with their inner chunks in reverse C order; the writer "
        "replaces inner chunk (0, 1) of shard (0, 0). Every inner chunk must then hold the "
        "array's values, the untouched ones included (compared as shards: any order).",
        meta(good), after[0:2, 2:4], selection=[[0, 2], [2, 4]],
        objects=shards(before, order=lambda cs: cs[::-1]),
        expected_objects=shards(after), compare=SHARD_COMPARE))
    out.append(write_case(
        "001", "shard-write-metadata-unchanged", "Binary shard format",
        "Any configuration parameters for the write strategy must not be part of the "
        "metadata document; instead they need to be configured at runtime, as this is "
        "implementation specific.",
        "A whole sharded array written (index at the start). Besides the shards, `zarr.json` "
        "must be as it was: the runner compares it, as for every write case.",
        meta({**good, "index_location": "start"}), v,
        expected_objects={k: _start_index(x, index) for k, x in shards(v).items()},
        compare=SHARD_COMPARE))
    return out


def _start_index(shard: bytes, index_codecs: list) -> bytes:
    """The same inner chunks (C order, dense) with the index first."""
    n = 16 * 8 + 4
    body = shard[:-n]
    index = np.frombuffer(shard[-n:-4], "<u8").reshape(2, 4, 2).copy()
    index[..., 0] += n
    return crc32c(index.astype("<u8").tobytes()) + body


def cast_value_cases() -> list[Case]:
    out = []
    m = array_metadata((8,), (8,), "float64", 0, [c_cast_value(
        "uint8", rounding="towards-zero", scalar_map={"encode": [["NaN", 0]]}), c_bytes()])
    out.append(refuse_case(
        "002", "cv-write-none-apply", "cast_value / Algorithm", "If none apply, MUST error.",
        "float64 -> uint8, rounding towards-zero, no out_of_range, a scalar_map for NaN "
        "only: 300.0 is no key of the map, not representable, and out of range with no rule "
        "for it.", m, "300.0 is out of uint8's range and no rule applies", operation="write",
        input=np.array([1.0, 2.5, 300.0, 4.0, 5.0, 6.0, 7.0, 8.0])))
    m = array_metadata((8,), (4,), "float64", 0.5, [c_cast_value("uint8"), c_bytes()])
    out.append(refuse_case(
        "002", "cv-fill-value-does-not-round-trip", "cast_value / Fill value",
        "Implementations SHOULD validate fill value survives round-trip at metadata "
        "construction time.",
        "fill_value 0.5 through cast_value to uint8 (nearest-even) is stored as 0, which "
        "decodes to 0.0: the fill value does not survive the round trip. No chunk is stored.",
        m, "the fill value 0.5 does not survive cast_value's round trip", level="SHOULD"))
    return out


def optional_cases() -> list[Case]:
    out = []
    dtype = optional_numpy(np.dtype("uint16"))
    rng = rng_for("opt-codec-chains")
    v = np.zeros((4, 4), dtype)
    v["valid"] = rng.random((4, 4)) < 0.6
    v["valid"][0, 0] = True
    v["value"] = np.where(v["valid"], rng.integers(0, 65536, (4, 4)), 0)

    def chunk(mask: bytes, data: bytes) -> bytes:
        return struct.pack("<QQ", len(mask), len(data)) + mask + data

    present = v["value"][v["valid"]]
    codec = c_optional([c_packbits(), c_crc32c()], [c_bytes()])
    out.append(read_case(
        "003", "opt-mask-chain-two-codecs", "Configuration parameters",
        "The mask codecs are applied in sequence as a codec chain.",
        "mask_codecs [packbits, crc32c]: the encoded mask is the packed mask then its "
        "CRC-32C; data_codecs [bytes].",
        array_metadata((4, 4), (4, 4), optional_type("uint16"), None, [codec]), v,
        objects={"c/0/0": chunk(crc32c(packbits(v["valid"])), bytes_codec(present))}))
    codec = c_optional([c_packbits()], [c_bytes("big"), c_gzip(1), c_crc32c()])
    out.append(read_case(
        "003", "opt-data-chain-three-codecs", "Configuration parameters",
        "The data codecs are applied in sequence as a codec chain.",
        "data_codecs [bytes big, gzip, crc32c]: the present values big-endian, gzipped, "
        "then the CRC-32C of the gzip stream.",
        array_metadata((4, 4), (4, 4), optional_type("uint16"), None, [codec]), v,
        objects={"c/0/0": chunk(packbits(v["valid"]),
                                crc32c(gzip(bytes_codec(present, "big"))))}))
    return out


def cases() -> list[Case]:
    return conditional_cases() + sharding_cases() + cast_value_cases() + optional_cases()
