"""Clauses of spec 002 (``scale_offset``, ``cast_value``) that zarr-python 3.4.2 breaks.

The failures are inside zarr-python's codecs (``cast_value`` runs on the
``cast-value-rs`` package), not in zarrext: each test asserts what the spec says as a
strict expected failure, so that a release that fixes one fails here (XPASS) and the
README's interoperability section gets updated.
:func:`test_the_failures_are_zarr_pythons_own` shows that they are the same with
zarrext's entry points hidden and zarrext not importable.

This module imports nothing of zarrext, so that test can run its reproductions alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import CastValue, ScaleOffset
from zarr.storage import MemoryStore

FLOAT32_MAX = float(np.finfo(np.float32).max)
HEX_NAN = "0x7ff8000000000000"  # float64 NaN in Zarr v3's hexadecimal float encoding


def _array(dtype: str, filters: list[Any]) -> zarr.Array:
    return zarr.create_array(MemoryStore(), shape=(2,), chunks=(2,), dtype=dtype, fill_value=0,
                             filters=filters)


# --- the reproductions: plain zarr-python, an array in memory -------------------------


def float32_offset_overflow() -> list[float]:
    """Store 3e38 in float32 through ``scale_offset(offset=-3e38, scale=1)``."""
    z = _array("float32", [ScaleOffset(offset=-3e38, scale=1)])
    with np.errstate(over="ignore"):  # numpy's RuntimeWarning: the only sign of it
        z[:] = np.array([3e38, 0], dtype=np.float32)
    return [float(v) for v in z[:]]


def clamp_to_float32() -> list[float]:
    """Store ±1e300 through ``cast_value(float32, out_of_range="clamp")``."""
    z = _array("float64", [CastValue(data_type="float32", out_of_range="clamp")])
    z[:] = [1e300, -1e300]
    return [float(v) for v in z[:]]


def hex_nan_key(position: str) -> list[float]:
    """Write ``[1, NaN]`` where a ``scalar_map`` key is NaN in hexadecimal form.

    ``encode``: float64 stored as uint8, NaN <-> 255 (the key is the encode map's);
    ``decode``: float32 stored as float64, a stored NaN decoded as 0.0 (the decode
    map's key is a float64 value).
    """
    if position == "encode":
        z = _array("float64", [CastValue(data_type="uint8", scalar_map={
            "encode": [[HEX_NAN, 255]], "decode": [[255, "NaN"]]})])
    else:
        z = _array("float32", [CastValue(data_type="float64", scalar_map={
            "decode": [[HEX_NAN, 0.0]]})])
    z[:] = [1.0, np.nan]
    return [float(v) for v in z[:]]


# scale_offset + cast_value(uint8) for values from 250 to 262.7, NaN <-> 255: 0.0 has no code
_NO_ZERO = [
    {"name": "scale_offset", "configuration": {"offset": 250, "scale": 20}},
    {"name": "cast_value", "configuration": {
        "data_type": "uint8", "scalar_map": {"encode": [["NaN", 255]], "decode": [[255, "NaN"]]}}},
]


def inner_filters_without_zero(how: str) -> list[float]:
    """Write ``[255, NaN]`` to a NaN-filled float64 array whose shards hold ``_NO_ZERO``
    in their inner chain: made with ``shards=`` (``"create"``), or opened from a
    ``zarr.json`` written by hand (``"open"``, as another implementation writes it)."""
    from zarr.core.buffer import cpu

    if how == "create":
        z = zarr.create_array(
            MemoryStore(), shape=(2,), chunks=(1,), shards=(2,), dtype="float64",
            fill_value=np.nan, filters=[ScaleOffset.from_dict(c) if c["name"] == "scale_offset"
                                        else CastValue.from_dict(c) for c in _NO_ZERO])
    else:
        document = {
            "zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "float64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "NaN", "attributes": {},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [1], "codecs": [*_NO_ZERO, {"name": "bytes"}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}],
                "index_location": "end"}}],
        }
        store = MemoryStore({"zarr.json": cpu.Buffer.from_bytes(json.dumps(document).encode())})
        z = zarr.open_array(store, mode="r+")
    z[:] = [255.0, np.nan]
    return [float(v) for v in z[:]]


# --- what the spec says --------------------------------------------------------------


@pytest.mark.xfail(
    strict=True, raises=pytest.fail.Exception,
    reason="zarr 3.4.2's scale_offset keeps a float overflow as inf: in float32, "
    "(3e38 - (-3e38)) * 1 is stored as inf with no error (spec 002: an intermediate or "
    "final value unrepresentable in the data type is an error)",
)
def test_scale_offset_float32_overflow_is_an_error() -> None:
    # the spec's arithmetic, in the array's own type, overflows
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(3e38) - np.float32(-3e38))
    with pytest.raises(ValueError, match=r"(?i)range|represent|overflow"):
        float32_offset_overflow()


@pytest.mark.xfail(
    strict=True, raises=AssertionError,
    reason="zarr 3.4.2's cast_value (cast-value-rs) clamps 1e300 to float32 as inf, not "
    "as float32's largest finite value (spec 002: out_of_range='clamp' clamps a value "
    "outside the target's range to it)",
)
def test_cast_value_clamp_to_float32_gives_its_largest_value() -> None:
    assert clamp_to_float32() == [FLOAT32_MAX, -FLOAT32_MAX]


@pytest.mark.parametrize("how", ["create", "open"])
@pytest.mark.xfail(
    strict=True, raises=ValueError,
    reason="zarr 3.4.2's ShardingCodec checks its inner codecs with the data type's default "
    "fill value (0.0), not the array's (spec 001: inner chunks are the array's, an empty "
    "one filled with its fill value): cast_value refuses 0.0, which has no code in a plan "
    "for values far from 0, so such an array can be neither made nor opened",
)
def test_sharding_checks_inner_codecs_with_the_arrays_fill_value(how: str) -> None:
    back = inner_filters_without_zero(how)
    assert back[0] == 255.0
    assert np.isnan(back[1])


@pytest.mark.parametrize("position", ["encode", "decode"])
@pytest.mark.xfail(
    strict=True, raises=ValueError,
    reason="zarr 3.4.2's cast_value validates a scalar_map key in Zarr v3's hexadecimal "
    "float form ('0x7ff8000000000000', NaN) but converts it with float(): 'could not "
    "convert string to float'. As an encode key, making or opening the array fails; as a "
    "decode key, the array is made and written and every read fails",
)
def test_cast_value_scalar_map_key_in_hex_form(position: str) -> None:
    back = hex_nan_key(position)
    assert back[0] == 1.0
    if position == "encode":
        assert np.isnan(back[1])
    else:
        assert back[1] == 0.0


def test_scalar_map_keys_spelled_nan_work() -> None:
    """The maps above with ``"NaN"`` for the hexadecimal key: the expectation holds."""
    z = _array("float64", [CastValue(data_type="uint8", scalar_map={
        "encode": [["NaN", 255]], "decode": [[255, "NaN"]]})])
    z[:] = [1.0, np.nan]
    assert z[0] == 1.0
    assert np.isnan(z[1])
    z = _array("float32", [CastValue(data_type="float64", scalar_map={"decode": [["NaN", 0.0]]})])
    z[:] = [1.0, np.nan]
    assert z[:].tolist() == [1.0, 0.0]


# --- zarr-python's, not zarrext's -----------------------------------------------------

REPRODUCTIONS: dict[str, Callable[[], Any]] = {
    "float32_offset_overflow": float32_offset_overflow,
    "clamp_to_float32": clamp_to_float32,
    "hex_nan_key:encode": lambda: hex_nan_key("encode"),
    "hex_nan_key:decode": lambda: hex_nan_key("decode"),
    "inner_filters_without_zero:create": lambda: inner_filters_without_zero("create"),
    "inner_filters_without_zero:open": lambda: inner_filters_without_zero("open"),
}


def outcomes() -> dict[str, str]:
    """What each reproduction gives: the values read back, or the error."""
    found = {}
    for name, reproduce in REPRODUCTIONS.items():
        try:
            found[name] = repr(reproduce())
        except Exception as e:  # the error is the outcome
            found[name] = f"{type(e).__name__}: {e}"
    return found


# zarr-python with no zarrext: its entry points hidden (zarr loads codecs, data types
# and pipelines from them), its package unimportable.
WITHOUT_ZARREXT = """
import importlib.metadata as metadata, json, sys
sys.modules["zarrext"] = None
everything = metadata.entry_points
metadata.entry_points = lambda **kw: metadata.EntryPoints(
    e for e in everything(**kw) if not e.value.startswith("zarrext"))
sys.path.insert(0, sys.argv[1])
from tests.interop import test_zarr_cast_value_upstream as here
print(json.dumps(here.outcomes()))
"""


def test_the_failures_are_zarr_pythons_own() -> None:
    """Each reproduction gives the same without zarrext: with the expected failures
    above, plain zarr-python fails each clause the same way."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", WITHOUT_ZARREXT, str(root)],
                          capture_output=True, text=True, check=True, cwd=root)
    plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain == outcomes()
