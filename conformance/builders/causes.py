"""The cause every refuse case expects (the vocabulary is PROTOCOL.md's).

One table, so that the cause of each refusal reads in one place: what the stored
array breaks, its metadata, a stored object's layout, or a value's range.
"""

from __future__ import annotations

INVALID_METADATA = "invalid_metadata"
MALFORMED_CHUNK = "malformed_chunk"
VALUE_NOT_REPRESENTABLE = "value_not_representable"
VOCABULARY = (INVALID_METADATA, MALFORMED_CHUNK, VALUE_NOT_REPRESENTABLE)

_M, _C, _V = INVALID_METADATA, MALFORMED_CHUNK, VALUE_NOT_REPRESENTABLE

CAUSES: dict[str, str] = {
    # 000 conditional
    "cond-chunk-shorter-than-header": _C,
    "cond-codecs-missing": _M,
    "cond-crc32c-mismatch": _C,
    "cond-empty-chunk-object": _C,
    "cond-header-bits-below-codec-count": _M,
    "cond-header-bits-not-multiple-of-8": _M,
    "cond-mask-0-payload-truncated": _C,
    "cond-mask-says-gzip-payload-is-raw": _C,
    "cond-nested-array-to-bytes-codec": _M,
    "cond-reserved-bit-1-set": _C,
    "cond-reserved-bit-15-set": _C,
    "cond-reserved-bit-7-set": _C,
    "cond-reserved-bit-9-of-nine-codecs": _C,
    "cond-write-mask-sets-reserved-bit": _V,  # a mask no header may store
    # 001 sharding_indexed
    "shard-chunk-past-end-of-shard": _C,
    "shard-chunk-shape-does-not-divide": _M,
    "shard-chunk-shape-wrong-rank": _M,
    "shard-codecs-missing": _M,
    "shard-codecs-not-a-list": _M,
    "shard-codecs-two-array-to-bytes": _M,
    "shard-codecs-without-array-to-bytes": _M,
    "shard-half-empty-entry-nbytes": _C,
    "shard-half-empty-entry-offset": _C,
    "shard-index-codecs-compressed": _M,
    "shard-index-codecs-missing": _M,
    "shard-index-codecs-without-array-to-bytes": _M,
    "shard-index-crc32c-mismatch": _C,
    "shard-index-location-invalid": _M,
    "shard-inner-chunk-too-short": _C,
    "shard-inner-chunk-zero-bytes": _C,
    "shard-name-not-sharding-indexed": _M,
    "shard-shorter-than-index": _C,
    # 002 scale_offset, cast_value
    "cv-decode-infinity-to-integer-with-clamp": _V,
    "cv-decode-nan-to-integer": _V,
    "cv-decode-out-of-range-absent": _V,
    "cv-fill-value-does-not-round-trip": _M,
    "cv-refuse-data-type-missing": _M,
    "cv-refuse-unknown-rounding": _M,
    "cv-refuse-wrap-to-float": _M,
    "cv-write-infinity-to-integer-with-clamp": _V,
    "cv-write-int-out-of-range-absent": _V,
    "cv-write-nan-to-integer": _V,
    "cv-write-none-apply": _V,
    "cv-write-out-of-range-absent": _V,
    "so-decode-int8-overflow": _V,
    "so-refuse-bool": _M,
    "so-refuse-complex": _M,
    "so-write-float32-overflow": _V,
    "so-write-int16-scale-overflow": _V,
    "so-write-int8-overflow": _V,
    # 003 optional
    "opt-all-missing-data-not-empty": _C,
    "opt-codec-on-plain-data-type": _M,
    "opt-data-count-differs-from-mask": _C,
    "opt-data-crc32c-mismatch": _C,
    "opt-data-length-overruns": _C,
    "opt-header-truncated": _C,
    "opt-mask-length-overruns": _C,
    "opt-mask-too-short": _C,
    "opt-trailing-bytes": _C,
    # 004 pad
    "pad-chunk-one-byte-short": _C,
    "pad-chunk-shorter-than-padding": _C,
    "pad-location-invalid": _M,
    "pad-location-missing": _M,
    "pad-nbytes-missing": _M,
    "pad-nbytes-negative": _M,
    "pad-padding-length-differs": _M,
    "pad-padding-not-base64": _M,
}
