"""Levels and citations re-read: what each case's quoted clause binds.

A case's level is what its clause binds: ``MUST`` (a requirement, or the format's
own definition a reader cannot read otherwise), ``SHOULD`` (recommended),
``implied`` (the outcome follows from the text, but the clause quoted is a
description, an example, a motivation or an encoder's rule a decoder need not
check), ``interop`` (met in the wild, beyond the text). Where a case quoted a
motivation or an example although a normative clause states what it tests, it
quotes that clause instead. Applied by :func:`relevel` to the builders' cases.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.builders.common import Case

C000_DECODE = ("Detailed Description / Decoding Process",
               "For each codec, it checks the corresponding bit in the mask to determine "
               "whether to apply that codec's `decode` method or to pass the data through "
               "unchanged.")
C000_PHASE1 = ("Implementation / Phase 1: Core Codec Logic (Required)",
               "The decoding procedure for each nested codec is applied only if the "
               "corresponding bit in the *header's bitmask* is `1`.")
C000_CONFIG = ("Detailed Description / Codec Configuration",
               "The `configuration` object for the `optional` codec contains the following "
               "parameters:")
C003_MASK = ("Format and algorithm / Encoded format",
             "N bytes: encoded mask - the result of applying the mask codec chain to the "
             "boolean mask.")
C003_FORMAT = ("Format and algorithm / Encoded format", "The encoded format consists of:")
C004_DECODE = ("Description",
               "When decoding, it removes a specified number of bytes from the chunk data.")
C004_NBYTES = ("Configuration Parameters",
               "`nbytes`: An integer specifying the number of bytes of padding.")
C002_DECODE = ("scale_offset", "Decode: out = (in / scale) + offset")

#: id -> (section, clause) quoted instead of a motivation or an example.
RECITED: dict[str, tuple[str, str]] = {
    "cond-masks-differ-per-chunk": C000_PHASE1,
    "cond-codecs-appended-later": C000_DECODE,
    "cond-codecs-appended-within-reserved-header": C000_DECODE,
    "cond-example-1-configuration": C000_CONFIG,
    "cond-example-3-plan": C000_PHASE1,
    "cond-inside-shard": C000_PHASE1,
    "cond-fixed-slots-in-shard": C000_PHASE1,
    "opt-mask-packbits-gzip": C003_MASK,
    "pad-n5-blocks-transposed": C004_DECODE,
    "pad-n5-three-dimensions-raw": C004_DECODE,
    "so-decode-spec-example": C002_DECODE,
    "opt-trailing-bytes": C003_FORMAT,
    "pad-padding-length-differs": C004_NBYTES,
}

#: id -> level, where the clause quoted binds otherwise than ``MUST``.
LEVELS: dict[str, str] = {
    # the data section is "the result of applying the data codec chain": a compressor or
    # checksum applied to no bytes gives bytes; zarrs writes zero bytes instead
    "opt-all-missing-gzip-zero-length": "interop",
    "opt-all-missing-crc32c-zero-length": "interop",
    "opt-all-missing-zstd-zero-length": "interop",
    "opt-all-missing-gzip-crc32c-zero-length": "interop",
    "opt-nested-outer-all-missing-zero-length": "interop",
    # an encoder's rule; the decoding procedure reads only the configured bits
    "cond-reserved-bit-1-set": "implied",
    "cond-reserved-bit-7-set": "implied",
    "cond-reserved-bit-15-set": "implied",
    "cond-reserved-bit-9-of-nine-codecs": "implied",
    # no clause states it: the format lists its sections, nothing after them
    "opt-trailing-bytes": "implied",
    # no clause states it: padding holds nbytes bytes, nothing says which wins
    "pad-padding-length-differs": "implied",
    # recommended, or an example's or an implementation note's text
    "shard-recommended-index-codecs": "SHOULD",
    "opt-registry-example": "implied",
    "pad-computed-headers": "implied",
    "pad-example-1-tiff-chunk": "implied",
    "pad-write-example-1-tiff": "implied",
    "pad-example-2-custom-header": "implied",
    "pad-write-example-2-custom-header": "implied",
    "pad-example-3-n5-configuration": "implied",
    "pad-write-n5-header-template": "implied",
    "cv-write-spec-example-configuration": "implied",
    "cv-worked-example-read": "implied",
    "cv-worked-example-write": "implied",
    "cv-worked-example-write-lands-on-nan-code": "implied",
}


def relevel(cases: list[Case]) -> list[Case]:
    """``cases`` with the levels and citations above."""
    out = []
    for case in cases:
        changes: dict[str, Any] = {}
        if case.id in RECITED:
            changes["section"], changes["clause"] = RECITED[case.id]
        if case.id in LEVELS:
            changes["level"] = LEVELS[case.id]
        out.append(dataclasses.replace(case, **changes) if changes else case)
    return out
