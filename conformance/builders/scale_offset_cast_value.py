"""Spec 002: ``scale_offset`` and ``cast_value`` (array -> array).

Stored chunks are the codes after the array -> array codecs, serialized by
``bytes`` (little-endian); the expected values and expected codes come from
:mod:`conformance.builders.numeric`, which follows the spec's rules element by element.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from conformance.builders import numeric
from conformance.builders.common import (
    Case,
    array_metadata,
    bytes_codec,
    c_bytes,
    c_cast_value,
    c_scale_offset,
    read_case,
    refuse_case,
    write_case,
)

SPEC = "002"
read = partial(read_case, SPEC)
refuse = partial(refuse_case, SPEC)
write = partial(write_case, SPEC)

# zarrext's writers refuse a finite value that would be stored as a code the decode map
# reads back as NaN or an infinity (the value would change, silently); the spec's encoder
# stores the code. Plain zarr-python with zarrext installed writes what the spec says.
RESERVED_CODE_DEVIATION = {
    "reason": "zarrext.open_array (and every writer zarrext runs: its codec pipeline, "
              "xarray, write_dask, the CLI jobs) refuses a finite value that would be "
              "stored as a code the decode map reads back as NaN or an infinity, with "
              "UnstorableValueError, before anything is stored: a value is never changed "
              "silently. The spec's encoder stores the code.",
    "zarrext_outcome": "refused",
}

SO = "scale_offset"
SO_RULES = "scale_offset / Rules"
CV = "cast_value / Configuration"
CV_ALGO = "cast_value / Algorithm"
CV_SPECIAL = "cast_value / Special values"
CV_FILL_SECTION = "cast_value / Fill value"
EXAMPLE = "Worked example (scale_offset + cast_value)"

SO_ENCODE = "Encode: out = (in - offset) * scale"
SO_DECODE = "Decode: out = (in / scale) + offset"
SO_NO_PROMOTION = ("Arithmetic MUST use the input array's own data type semantics (no implicit "
                   "promotion).")
SO_UNREPRESENTABLE = "If any intermediate or final value is unrepresentable in that dtype, error."
SO_NOOP = ("If neither scale nor offset is given, configurationmay be omitted (codec is a "
           "no-op).")
SO_FILL = "Fill value MUST be transformed through the codec (encode direction)."
SO_REAL = "Only valid for real-number data types (int/uint/float families)."
SO_OFFSET = ("offset(optional): scalar subtracted during encoding. Default: 0 (additive "
             "identity). Serialized in JSON using the zarr v3 fill-value encoding for the "
             "array's dtype.")
SO_SCALE = ("scale(optional): scalar multiplied during encoding (after offset subtraction). "
            "Default: 1 (multiplicative identity). Same JSON encoding as offset.")
SO_EXAMPLE = '{"name": "scale_offset", "configuration": {"offset": 5, "scale": 0.1}}'
CV_PURPOSE = ("Purpose: Value-convert (not binary-reinterpret) array elements to a new data "
              "type.")
CV_DATA_TYPE = "data_type(required): target zarr v3 data type."
CV_ROUNDING = ('rounding(optional): how to round when exact representation is impossible. '
               'Values:"nearest-even"(default),"towards-zero","towards-positive",'
               '"towards-negative","nearest-away".')
CV_OUT_OF_RANGE = ("out_of_range(optional): what to do when a value is outside the target's "
                   'range. Values:"clamp","wrap". If absent, out-of-range MUST error.')
CV_WRAP = "\"wrap\"only valid for integral two's-complement types."
CV_SCALAR_MAP = ('scalar_map(optional): explicit value overrides.{"encode": [[input, output], '
                 '...], "decode": [[input, output], ...]}. Evaluated BEFORE '
                 "rounding/out_of_range.")
CV_EXACT = "Check exact representability \u2014 if yes, use directly."
CV_APPLY = "Apply rounding and out_of_range rules."
CV_NAN = "NaN propagates between IEEE 754 types unless scalar_map overrides."
CV_ZERO = "Signed zero preserved between IEEE 754 types."
CV_NO_NAN = ("If target doesn't support NaN/infinity and input has them, MUST error unless "
             "scalar_map provides a mapping.")
CV_FILL = "MUST be cast using same semantics as elements."
SPEC_EXAMPLE = '"encode": [["NaN", 0], ["+Infinity", 0], ["-Infinity", 0]],'
WORKED = '{"name": "scale_offset", "configuration": {"offset": -10, "scale": 0.1}},'


def _meta(dtype: str, filters: list, *, shape=(8,), chunks=(4,), fill: Any = 0,
          endian: str = "little") -> dict:
    return array_metadata(shape, chunks, dtype, fill, [*filters, c_bytes(endian)])


def _stored(codes: np.ndarray, chunks: int = 4) -> dict[str, bytes]:
    """1-D codes in chunks of ``chunks``, serialized little-endian: the stored objects."""
    assert codes.size % chunks == 0
    return {f"c/{i}": bytes_codec(codes[i * chunks:(i + 1) * chunks])
            for i in range(codes.size // chunks)}


def _rules(config: dict, direction: str) -> dict[str, Any]:
    return {"rounding": config.get("rounding", "nearest-even"),
            "out_of_range": config.get("out_of_range"),
            "scalar_map": [tuple(p) for p in config.get("scalar_map", {}).get(direction, [])]}


def _cv(data_type: str, **config: Any) -> dict:
    return c_cast_value(data_type, **config)


def _f32_arithmetic_differs() -> tuple[np.ndarray, np.ndarray]:
    """float32 inputs whose scale_offset encode in float32 differs from float64-then-round.

    Offset 0.1 and scale 3 (both as float32): ``(x - o) * s`` rounded at each float32
    step, against the exact float64 result rounded once.
    """
    o, s = np.float32(0.1), np.float32(3)
    found = []
    for k in range(1, 4000):
        x = np.float32(k) / np.float32(7)
        in_f32 = (x - o) * s
        via_f64 = np.float32((np.float64(x) - np.float64(o)) * np.float64(s))
        if in_f32 != via_f64:
            found.append(x)
        if len(found) == 8:
            break
    assert len(found) == 8
    return np.array(found, "<f4"), np.array([o, s], "<f4")


def scale_offset_cases() -> list[Case]:
    out: list[Case] = []

    stored = np.array([0, 1, -1, 2.5, 10, -10, 0.25, 100], "<f8")
    m = _meta("float64", [c_scale_offset(5, 0.1)])
    out.append(read("so-decode-spec-example", SO, SO_EXAMPLE,
                    "The spec's configuration {offset 5, scale 0.1} on float64: stored s "
                    "reads (s / 0.1) + 5, computed in float64.", m,
                    numeric.scale_offset_decode(stored, 5, 0.1), objects=_stored(stored)))

    stored = np.array([3, -7, 1 / 3, 2.0 ** -20, 65504, -0.5, 9, 1e-3], "<f4")
    m = _meta("float32", [c_scale_offset(0.1, 3)])
    expected = numeric.scale_offset_decode(stored, np.float32(0.1), np.float32(3))
    out.append(read("so-decode-float32-no-promotion", SO_RULES, SO_NO_PROMOTION,
                    "float32 with offset 0.1 and scale 3: (s / 3) + 0.1 in float32 steps.", m,
                    expected, objects=_stored(stored)))

    stored = np.array([0, 2, -2, 100, -100, 2000, -2000, 64], "<i2")
    m = _meta("int16", [c_scale_offset(100, 2)])
    out.append(read("so-decode-int16", SO, SO_DECODE,
                    "int16 with offset 100 and scale 2: stored even codes s read s / 2 + 100.",
                    m, numeric.scale_offset_decode(stored, 100, 2), objects=_stored(stored)))

    stored = np.array([1.5, -2.25, 0, 7, 8, 9, 10, 11], "<f8")
    out.append(read("so-no-configuration", SO_RULES, SO_NOOP,
                    "{\"name\": \"scale_offset\"} without configuration: a no-op.",
                    _meta("float64", [c_scale_offset()]), stored.copy(),
                    objects=_stored(stored)))

    stored = np.array([1.5, -2.25, 0, 7, 8, 9, 10, 11], "<f8")
    out.append(read("so-offset-only", SO, SO_SCALE,
                    "offset 1.5 and no scale: scale defaults to 1.",
                    _meta("float64", [c_scale_offset(offset=1.5)]),
                    numeric.scale_offset_decode(stored, 1.5, 1), objects=_stored(stored)))

    out.append(read("so-scale-only", SO, SO_OFFSET,
                    "scale 4 and no offset: offset defaults to 0.",
                    _meta("float64", [c_scale_offset(scale=4)]),
                    numeric.scale_offset_decode(stored, 0, 4), objects=_stored(stored)))

    out.append(read("so-offset-hex-fill-value-encoding", SO, SO_OFFSET,
                    "offset given as \"0x4014000000000000\" (5.0), the fill-value encoding's "
                    "hexadecimal form for float64.",
                    _meta("float64", [c_scale_offset(offset="0x4014000000000000", scale=2)]),
                    numeric.scale_offset_decode(stored, 5.0, 2), objects=_stored(stored)))

    stored = np.array([100, 0, -100, 27], "i1")
    out.append(refuse("so-decode-int8-overflow", SO_RULES, SO_UNREPRESENTABLE,
                      "int8 with offset 100, scale 1: the stored 100 reads 200.",
                      _meta("int8", [c_scale_offset(100, 1)], shape=(4,)),
                      "100 / 1 + 100 = 200 is not an int8", objects=_stored(stored)))

    out.append(refuse("so-refuse-complex", SO_RULES, SO_REAL,
                      "scale_offset on complex64.",
                      array_metadata((4,), (4,), "complex64", [0.0, 0.0],
                                     [c_scale_offset(1, 2), c_bytes()]),
                      "complex64 is not a real-number data type",
                      objects={"c/0": np.zeros(4, "<c8").tobytes()}))

    out.append(refuse("so-refuse-bool", SO_RULES, SO_REAL,
                      "scale_offset on bool.",
                      array_metadata((4,), (4,), "bool", False,
                                     [c_scale_offset(1, 2), c_bytes()]),
                      "bool is not an int/uint/float data type",
                      objects={"c/0": bytes(4)}))

    # -- writes
    values = np.array([5, 5.1, 4.9, 15, -5, 1e6, 0.3, 100], "<f8")
    m = _meta("float64", [c_scale_offset(5, 0.1)])
    out.append(write("so-write-spec-example", SO, SO_ENCODE,
                     "The spec's {offset 5, scale 0.1} on float64: (x - 5) * 0.1 in float64.",
                     m, values))

    values, (o, s) = _f32_arithmetic_differs()
    m = _meta("float32", [c_scale_offset(float(o), float(s))])
    out.append(write("so-write-float32-no-promotion", SO_RULES, SO_NO_PROMOTION,
                     "float32, offset 0.1, scale 3: eight inputs whose (x - o) * s in float32 "
                     "steps differs from the float64 result rounded to float32.", m, values))

    values = np.array([100, 102, 98, 0, 1000, -1000, 16483, -16283], "<i2")
    out.append(write("so-write-int16", SO, SO_ENCODE,
                     "int16, offset 100, scale 2: (x - 100) * 2 exactly.",
                     _meta("int16", [c_scale_offset(100, 2)]), values))

    m = _meta("float64", [c_scale_offset(0.5, 2)], fill=1.5)
    out.append(write("so-write-fill-value-encoded", SO_RULES, SO_FILL,
                     "Fill 1.5, offset 0.5, scale 2: the unwritten elements of written chunks "
                     "are stored as (1.5 - 0.5) * 2 = 2.0.", m,
                     np.array([3.0, -1.0, 0.5, 7.25], "<f8"), selection=[[2, 6]]))

    out.append(refuse("so-write-float32-overflow", SO_RULES, SO_UNREPRESENTABLE,
                      "float32, offset -3e38, scale 1: (3e38 - (-3e38)) * 1 overflows.",
                      _meta("float32", [c_scale_offset(-3e38, 1)], shape=(4,)),
                      "6e38 is not a float32 (it would be stored as inf)",
                      operation="write", input=np.array([3e38, 0, 1, 2], "<f4")))

    out.append(refuse("so-write-int8-overflow", SO_RULES, SO_UNREPRESENTABLE,
                      "int8, offset -100, scale 1: 100 - (-100) = 200.",
                      _meta("int8", [c_scale_offset(-100, 1)], shape=(4,)),
                      "200 is not an int8", operation="write",
                      input=np.array([100, 0, 1, 2], "i1")))

    out.append(refuse("so-write-int16-scale-overflow", SO_RULES, SO_UNREPRESENTABLE,
                      "int16, offset 0, scale 4: 10000 * 4 = 40000.",
                      _meta("int16", [c_scale_offset(0, 4)], shape=(4,)),
                      "40000 is not an int16", operation="write",
                      input=np.array([10000, 0, 1, 2], "<i2")))
    return out


def cast_value_cases() -> list[Case]:
    out: list[Case] = []

    codes = np.array([0, 1, 127, 128, 200, 255, 3, 9], "u1")
    m = _meta("float64", [_cv("uint8")])
    out.append(read("cv-decode-uint8-to-float64", CV, CV_PURPOSE,
                    "float64 stored as uint8 codes: each code reads as the same number.", m,
                    codes.astype("<f8"), objects=_stored(codes)))

    ties = np.array([2.5, -2.5, 0.5, -0.5, 1.5, 2.7, -2.7, 7.0], "<f4")
    for mode in numeric.ROUNDING_MODES:
        config: dict[str, Any] = {"rounding": mode}
        m = _meta("int16", [_cv("float32", **config)])
        out.append(read(f"cv-decode-rounding-{mode}", CV, CV_ROUNDING,
                        f"int16 stored as float32; rounding {mode!r} applies when the stored "
                        "floats are read back into int16.", m,
                        numeric.cast_array(ties, "<i2", **_rules(config, "decode")),
                        objects=_stored(ties)))

    wide = np.array([300, -5, 7, 255, 256, 0, 1000, -1], "<i2")
    out.append(refuse("cv-decode-out-of-range-absent", CV, CV_OUT_OF_RANGE,
                      "uint8 stored as int16 without out_of_range; a stored 300 is read.",
                      _meta("uint8", [_cv("int16")]),
                      "300 is outside uint8 and out_of_range is absent",
                      objects=_stored(wide)))
    for rule in ("clamp", "wrap"):
        config = {"out_of_range": rule}
        out.append(read(f"cv-decode-out-of-range-{rule}", CV, CV_OUT_OF_RANGE,
                        f"uint8 stored as int16 with out_of_range {rule!r}: stored codes "
                        "outside 0-255 read back through the rule.",
                        _meta("uint8", [_cv("int16", **config)]),
                        numeric.cast_array(wide, "u1", **_rules(config, "decode")),
                        objects=_stored(wide)))

    config = {"scalar_map": {"decode": [[0, "NaN"], [255, "Infinity"], [254, "-Infinity"]]}}
    codes = np.array([0, 1, 255, 254, 3, 0, 128, 9], "u1")
    out.append(read("cv-decode-scalar-map", CV, CV_SCALAR_MAP,
                    "float32 stored as uint8; decode map 0 -> NaN, 255 -> +Inf, 254 -> -Inf.",
                    _meta("float32", [_cv("uint8", **config)]),
                    numeric.cast_array(codes, "<f4", **_rules(config, "decode")),
                    objects=_stored(codes)))

    special = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0, 0.0, 2.0 ** -149, -3.25], "<f4")
    out.append(read("cv-decode-nan-inf-propagate", CV_SPECIAL, CV_NAN,
                    "float64 stored as float32: NaN and infinities read as themselves.",
                    _meta("float64", [_cv("float32")]), special.astype("<f8"),
                    objects=_stored(special)))
    out.append(read("cv-decode-signed-zero", CV_SPECIAL, CV_ZERO,
                    "float64 stored as float32: -0.0 reads as -0.0 (sign bit kept).",
                    _meta("float64", [_cv("float32")]),
                    np.array([-0.0, 0.0, -0.0, 1, -1, -0.0, 0.0, 2], "<f8"),
                    objects=_stored(np.array([-0.0, 0.0, -0.0, 1, -1, -0.0, 0.0, 2], "<f4"))))

    nan_codes = np.array([np.nan, 1, 2, 3], "<f4")
    out.append(refuse("cv-decode-nan-to-integer", CV_SPECIAL, CV_NO_NAN,
                      "int16 stored as float32; a stored NaN is read with no decode map.",
                      _meta("int16", [_cv("float32")], shape=(4,)),
                      "int16 has no NaN and scalar_map maps none",
                      objects=_stored(nan_codes)))
    out.append(refuse("cv-decode-infinity-to-integer-with-clamp", CV_SPECIAL, CV_NO_NAN,
                      "int16 stored as float32 with out_of_range clamp; a stored +Inf is "
                      "read. Clamping does not excuse it: only scalar_map does.",
                      _meta("int16", [_cv("float32", out_of_range="clamp")], shape=(4,)),
                      "int16 has no infinity and scalar_map maps none",
                      objects=_stored(np.array([np.inf, 1, 2, 3], "<f4"))))
    config = {"scalar_map": {"decode": [["NaN", -1]]}}
    out.append(read("cv-decode-nan-mapped-to-integer", CV_SPECIAL, CV_NO_NAN,
                    "int16 stored as float32 with decode map NaN -> -1.",
                    _meta("int16", [_cv("float32", **config)], shape=(4,)),
                    np.array([-1, 1, 2, 3], "<i2"), objects=_stored(nan_codes)))

    out.append(refuse("cv-refuse-wrap-to-float", CV, CV_WRAP,
                      "out_of_range wrap with data_type float32.",
                      _meta("float64", [_cv("float32", out_of_range="wrap")], shape=(4,)),
                      "wrap is only valid for integral two's-complement targets",
                      objects=_stored(np.zeros(4, "<f4"))))
    out.append(refuse("cv-refuse-unknown-rounding", CV, CV_ROUNDING,
                      "rounding \"nearest\" (not one of the five values).",
                      _meta("float64", [_cv("int16", rounding="nearest")], shape=(4,)),
                      "\"nearest\" is not a rounding mode",
                      objects=_stored(np.zeros(4, "<i2"))))
    out.append(refuse("cv-refuse-data-type-missing", CV, CV_DATA_TYPE,
                      "A cast_value configuration without data_type.",
                      array_metadata((4,), (4,), "float64", 0,
                                     [{"name": "cast_value", "configuration": {}}, c_bytes()]),
                      "data_type is required", objects={"c/0": bytes(32)}))

    # -- writes: rounding, float -> int and float -> float and int -> float
    values = np.array([2.5, -2.5, 0.5, -0.5, 1.5, 2.7, -2.7, 1.2], "<f8")
    for mode in numeric.ROUNDING_MODES:
        out.append(write(f"cv-write-rounding-{mode}", CV, CV_ROUNDING,
                         f"float64 to int8 with rounding {mode!r}: ties and non-ties.",
                         _meta("float64", [_cv("int8", rounding=mode)]), values))

    near = np.array([0.1, -0.1, 1 + 2.0 ** -24, -(1 + 2.0 ** -24), 1 + 3 * 2.0 ** -24, 1 / 3,
                     -1 / 3, 3.0], "<f8")
    for mode in numeric.ROUNDING_MODES:
        out.append(write(f"cv-write-float64-to-float32-{mode}", CV, CV_ROUNDING,
                         f"float64 to float32 with rounding {mode!r}: 0.1, 1/3 and values "
                         "exactly halfway between two float32s.",
                         _meta("float64", [_cv("float32", rounding=mode)]), near))

    big = np.array([2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24 + 1), 7, 2 ** 25 + 2, 2 ** 25 + 6,
                    -(2 ** 24 + 3), 0], "<i8")
    for mode in ("nearest-even", "towards-zero", "towards-positive"):
        out.append(write(f"cv-write-int64-to-float32-{mode}", CV_ALGO, CV_APPLY,
                         f"int64 to float32 with rounding {mode!r}: integers float32 cannot "
                         "hold exactly.", _meta("int64", [_cv("float32", rounding=mode)]), big))

    out.append(refuse("cv-write-out-of-range-absent", CV, CV_OUT_OF_RANGE,
                      "float64 300.0 written to a uint8-coded array without out_of_range.",
                      _meta("float64", [_cv("uint8")], shape=(4,)),
                      "300 is outside uint8 and out_of_range is absent", operation="write",
                      input=np.array([300, 1, 2, 3], "<f8")))
    out.append(refuse("cv-write-int-out-of-range-absent", CV, CV_OUT_OF_RANGE,
                      "int32 40000 written to an int16-coded array without out_of_range.",
                      _meta("int32", [_cv("int16")], shape=(4,)),
                      "40000 is outside int16", operation="write",
                      input=np.array([40000, 1, 2, 3], "<i4")))
    out.append(write("cv-write-clamp", CV, CV_OUT_OF_RANGE,
                     "float64 to uint8 with clamp: 300, -5, 1e300, 255.6 and -0.4 clamp or "
                     "round into 0-255.", _meta("float64", [_cv("uint8", out_of_range="clamp")]),
                     np.array([300, -5, 1e300, 7, 255.4, 255.6, -0.4, -1e300], "<f8")))
    out.append(write("cv-write-clamp-to-float32", CV, CV_OUT_OF_RANGE,
                     "float64 to float32 with clamp: beyond float32's range is its largest "
                     "finite value, not infinity.",
                     _meta("float64", [_cv("float32", out_of_range="clamp")], shape=(4,)),
                     np.array([1e300, -1e300, 1.5, 3.5e38], "<f8")))
    out.append(write("cv-write-wrap", CV, CV_OUT_OF_RANGE,
                     "int32 to uint8 with wrap: modulo 256.",
                     _meta("int32", [_cv("uint8", out_of_range="wrap")]),
                     np.array([300, -1, 256, 7, 65535, -256, 511, 1000], "<i4")))
    out.append(write("cv-write-wrap-signed", CV, CV_WRAP,
                     "int16 to int8 with wrap: two's complement.",
                     _meta("int16", [_cv("int8", out_of_range="wrap")], shape=(4,)),
                     np.array([200, -200, 127, 128], "<i2")))
    out.append(write("cv-write-wrap-after-rounding", CV_ALGO, CV_APPLY,
                     "float64 to uint8, nearest-even then wrap: 300.7 -> 301 -> 45, 255.5 -> "
                     "256 -> 0.",
                     _meta("float64", [_cv("uint8", out_of_range="wrap")], shape=(4,)),
                     np.array([300.7, -0.6, 255.5, 256.5], "<f8")))
    config = {"scalar_map": {"encode": [[2.5, 100], [1000.0, 200]]}}
    out.append(write("cv-write-scalar-map-before-rounding", CV, CV_SCALAR_MAP,
                     "float64 to uint8, encode map 2.5 -> 100 and 1000.0 -> 200: the map wins "
                     "over rounding (2.5 would round to 2) and over out-of-range (1000).",
                     _meta("float64", [_cv("uint8", **config)], shape=(4,)),
                     np.array([2.5, 3.5, 2.4, 1000.0], "<f8")))
    config = {"scalar_map": {"encode": [["NaN", 0], ["Infinity", 255], ["-Infinity", 254]]}}
    out.append(write("cv-write-scalar-map-special-values", CV_SPECIAL, CV_NO_NAN,
                     "float64 to uint8, encode map NaN -> 0, Infinity -> 255, -Infinity -> "
                     "254 (keys in the fill-value encoding).",
                     _meta("float64", [_cv("uint8", **config)], shape=(4,)),
                     np.array([np.nan, np.inf, -np.inf, 1], "<f8")))
    example = {"rounding": "nearest-even", "out_of_range": "clamp",
               "scalar_map": {"encode": [["NaN", 0], ["+Infinity", 0], ["-Infinity", 0]],
                              "decode": [[0, "NaN"]]}}
    out.append(write("cv-write-spec-example-configuration", CV, SPEC_EXAMPLE,
                     "The spec's cast_value example (uint8, nearest-even, clamp, NaN and "
                     "\"+Infinity\"/\"-Infinity\" to 0) on float64: its keys as the example "
                     "spells them.", _meta("float64", [_cv("uint8", **example)]),
                     np.array([np.nan, np.inf, -np.inf, 300, -5, 2.5, 3.5, 7], "<f8"),
                     deviation=RESERVED_CODE_DEVIATION))
    out.append(refuse("cv-write-nan-to-integer", CV_SPECIAL, CV_NO_NAN,
                      "float64 NaN written to a uint8-coded array without a map.",
                      _meta("float64", [_cv("uint8", out_of_range="clamp")], shape=(4,)),
                      "uint8 has no NaN and scalar_map maps none", operation="write",
                      input=np.array([np.nan, 1, 2, 3], "<f8")))
    out.append(refuse("cv-write-infinity-to-integer-with-clamp", CV_SPECIAL, CV_NO_NAN,
                      "float64 +Inf written to a uint8-coded array with clamp and no map.",
                      _meta("float64", [_cv("uint8", out_of_range="clamp")], shape=(4,)),
                      "uint8 has no infinity; clamp does not apply to it", operation="write",
                      input=np.array([np.inf, 1, 2, 3], "<f8")))
    out.append(write("cv-write-nan-inf-propagate", CV_SPECIAL, CV_NAN,
                     "float64 to float32: NaN (the quiet NaN 0x7fc00000) and infinities.",
                     _meta("float64", [_cv("float32")], shape=(4,)),
                     np.array([np.nan, np.inf, -np.inf, 2.0], "<f8")))
    out.append(write("cv-write-signed-zero", CV_SPECIAL, CV_ZERO,
                     "float64 to float32: -0.0 is stored as 0x80000000.",
                     _meta("float64", [_cv("float32")], shape=(4,)),
                     np.array([-0.0, 0.0, -1.0, 1.0], "<f8")))
    out.append(write("cv-write-exact-int", CV_ALGO, CV_EXACT,
                     "int32 to int16, every value representable: used directly.",
                     _meta("int32", [_cv("int16")], shape=(4,)),
                     np.array([-32768, 32767, 0, 5], "<i4")))
    return out


def worked_example_cases() -> list[Case]:
    out: list[Case] = []
    filters = [c_scale_offset(-10, 0.1),
               _cv("uint8", rounding="nearest-even",
                   scalar_map={"encode": [["NaN", 0]], "decode": [[0, "NaN"]]})]
    m = array_metadata((8,), (4,), "float64", "NaN", [*filters, c_bytes()])
    codes = np.array([0, 1, 2, 50, 100, 200, 255, 25], "u1")
    decoded = numeric.cast_array(codes, "<f8", scalar_map=[(0, "NaN")])
    expected = numeric.scale_offset_decode(decoded, -10, 0.1)
    out.append(read("cv-worked-example-read", EXAMPLE, WORKED,
                    "The worked example (float64, fill NaN, scale_offset(-10, 0.1), "
                    "cast_value(uint8, nearest-even, NaN <-> 0)): code 0 reads NaN, code c "
                    "reads c / 0.1 - 10.", m, expected, objects=_stored(codes)))
    expected = np.concatenate([expected[:4], np.full(4, np.nan)])
    out.append(read("cv-worked-example-missing-chunk", EXAMPLE, CV_FILL,
                    "The worked example with its second chunk not stored: the fill value NaN.",
                    m, expected, objects={"c/0": bytes_codec(codes[:4])}))
    values = np.array([15.0, 0.0, np.nan, 3.2, 5.0, 2400.0, 14.95, 2.3], "<f8")
    out.append(write("cv-worked-example-write", EXAMPLE, WORKED,
                     "The worked example's encoder: (x + 10) * 0.1 in float64, then uint8 "
                     "nearest-even; NaN through the map to 0.", m, values))
    out.append(write("cv-worked-example-write-lands-on-nan-code", EXAMPLE, CV_SCALAR_MAP,
                     "-10.0 encodes to (-10 + 10) * 0.1 = 0, code 0, which the decode map "
                     "reads as NaN. The spec's encoder stores code 0: scalar_map applies to "
                     "inputs matching its keys only.", m,
                     np.array([-10.0, -9.96, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "<f8"),
                     deviation=RESERVED_CODE_DEVIATION))
    out.append(write("cv-worked-example-fill-value-cast", CV_FILL_SECTION, CV_FILL,
                     "The worked example written in elements 2-5 only: the unwritten elements "
                     "of both chunks hold the fill value NaN, cast like an element (code 0).",
                     m, np.array([1.0, 2.0, 3.0, 4.0], "<f8"), selection=[[2, 6]]))
    return out


def cases() -> list[Case]:
    return scale_offset_cases() + cast_value_cases() + worked_example_cases()
