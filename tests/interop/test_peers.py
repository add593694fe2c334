"""zarrext against its peers: zarrs-python (strict) and tensorstore, both directions.

For every zarrext codec and data type: a peer reads what zarrext writes, and
zarrext reads what the peer writes. What a peer cannot do today is listed as
``xfail(strict=True)`` with the reason, so a peer release that adds support fails
here (XPASS) and the README's interop table gets updated.

zarrs-python is a codec pipeline for zarr-python: zarr-python (with zarrext's
entry points) parses ``zarr.json``, zarrs encodes and decodes every chunk. Strict
mode makes it refuse what zarrs cannot do instead of falling back to zarr-python.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, CastValue, ShardingCodec

import zarrext
from zarrext import quantize

zarrs = pytest.importorskip("zarrs")
ts = pytest.importorskip("tensorstore")

ZARRS_STRICT = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}
SHAPE, CHUNKS = (10, 13), (4, 5)  # partial edge chunks in both dimensions


def _ints(dtype: str, bits: int, shift: int = 0) -> Callable[[np.random.Generator], np.ndarray]:
    """Values of ``dtype`` that fit ``bits`` bits, shifted left by ``shift``."""
    def make(rng: np.random.Generator) -> np.ndarray:
        signed = np.dtype(dtype).kind == "i"
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        values = rng.integers(low, high, size=SHAPE, endpoint=True, dtype=dtype)
        return values << np.array(shift, dtype)
    return make


def _floats(dtype: str) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: (rng.standard_normal(SHAPE) * 100).astype(dtype)


def _complex(dtype: str) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: (rng.standard_normal(SHAPE) + 1j * rng.standard_normal(SHAPE)).astype(dtype)


def _bools(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 2, size=SHAPE).astype(bool)


@dataclass(frozen=True)
class Case:
    dtype: Any
    values: Callable[[np.random.Generator], np.ndarray]
    serializer: Callable[[], Any] = BytesCodec
    compressors: Callable[[], Any] = lambda: None
    filters: Callable[[], Any] = lambda: None
    fill_value: Any = 0
    # why each peer cannot, per direction: {"zarrs-read": reason, ...}
    fails: dict[str, str] = field(default_factory=dict)


def _optional(inner: str, depth: int = 1) -> Callable[[np.random.Generator], np.ndarray]:
    """Optional values: present where a random mask says, zeros where missing."""
    leaf = {"bool": _bools, "float32": _floats("float32")}.get(inner) or _ints(inner, 7)

    def make(rng: np.random.Generator) -> np.ndarray:
        dtype = np.dtype(inner)
        for _ in range(depth):
            dtype = np.dtype([("value", dtype), ("valid", "?")])
        out = np.zeros(SHAPE, dtype)
        level, valid = out, np.ones(SHAPE, bool)
        for _ in range(depth):
            valid = valid & (rng.random(SHAPE) < 0.7)
            level["valid"] = valid
            level = level["value"]
        level[...] = np.where(valid, leaf(rng), 0)
        return out

    return make


def _lacks(codec: str, *peers: str) -> dict[str, str]:
    directions = {"zarrs": ("zarrs-read", "zarrs-write"), "tensorstore": ("ts-read", "ts-write")}
    return {d: f"{p} lacks codec {codec}" for p in peers for d in directions[p]}


ZARRS_NAME = "zarrs 0.23.8 knows the nullable type only as zarrs.optional"
ZARRS_VOID = ("zarrs-python 0.2.3 refuses arrays whose in-memory dtype is structured "
              "(UnsupportedDataTypeError), which every optional array's is")
TS_OPTIONAL = {d: "tensorstore lacks data type optional" for d in ("ts-read", "ts-write")}
ZARRS_FIRST_BIT = "zarrs 0.23.8 mis-decodes packbits with first_bit > 0 (a zarrs bug)"
ZARRS_SIGN = ("zarrs 0.23.8 sign-extends narrowed signed packbits values only to the next "
              "whole byte (int32 bits 0-20: to 24 bits; int64 bits 0-39: not at all): negative "
              "values read as large positive ones (a zarrs bug)")

CASES: dict[str, Case] = {
    "packbits-u8-all": Case("uint8", _ints("uint8", 8), zarrext.PackBitsCodec,
                            fails=_lacks("packbits", "tensorstore")),
    "packbits-bool": Case("bool", _bools, zarrext.PackBitsCodec, fill_value=False,
                          fails=_lacks("packbits", "tensorstore")),
    "packbits-u32-0-11": Case(
        "uint32", _ints("uint32", 12), lambda: zarrext.PackBitsCodec(first_bit=0, last_bit=11),
        fails=_lacks("packbits", "tensorstore")),
    "packbits-i16-0-9-first_byte": Case(
        "int16", _ints("int16", 10),
        lambda: zarrext.PackBitsCodec(padding_encoding="first_byte", first_bit=0, last_bit=9),
        fails=_lacks("packbits", "tensorstore")),
    "packbits-i32-0-20-last_byte": Case(
        "int32", _ints("int32", 21),
        lambda: zarrext.PackBitsCodec(padding_encoding="last_byte", last_bit=20),
        fails={**_lacks("packbits", "tensorstore"), "zarrs-read": ZARRS_SIGN}),
    "packbits-u32-3-12": Case(
        "uint32", _ints("uint32", 10, shift=3),
        lambda: zarrext.PackBitsCodec(first_bit=3, last_bit=12),
        fails={**_lacks("packbits", "tensorstore"), "zarrs-read": ZARRS_FIRST_BIT}),
    "packbits-f32": Case("float32", _floats("float32"), zarrext.PackBitsCodec,
                         fails=_lacks("packbits", "tensorstore")),
    "packbits-i8-all": Case("int8", _ints("int8", 8), zarrext.PackBitsCodec,
                            fails=_lacks("packbits", "tensorstore")),
    "packbits-u16-0-4": Case("uint16", _ints("uint16", 5),
                             lambda: zarrext.PackBitsCodec(first_bit=0, last_bit=4),
                             fails=_lacks("packbits", "tensorstore")),
    "packbits-i64-0-39": Case(
        "int64", _ints("int64", 40), lambda: zarrext.PackBitsCodec(last_bit=39),
        fails={**_lacks("packbits", "tensorstore"), "zarrs-read": ZARRS_SIGN}),
    "packbits-u64-all": Case("uint64", _ints("uint64", 64), zarrext.PackBitsCodec,
                             fails=_lacks("packbits", "tensorstore")),
    "packbits-f16": Case("float16", _floats("float16"), zarrext.PackBitsCodec,
                         fails=_lacks("packbits", "tensorstore")),
    "packbits-f64": Case("float64", _floats("float64"), zarrext.PackBitsCodec,
                         fails=_lacks("packbits", "tensorstore")),
    "packbits-c64": Case("complex64", _complex("complex64"), zarrext.PackBitsCodec,
                         fails=_lacks("packbits", "tensorstore")),
    "packbits-c128": Case("complex128", _complex("complex128"), zarrext.PackBitsCodec,
                          fails=_lacks("packbits", "tensorstore")),
    "packbits-in-shard": Case(
        "uint16", _ints("uint16", 11),
        lambda: ShardingCodec(chunk_shape=(2, 5), codecs=[zarrext.PackBitsCodec(last_bit=10)]),
        fails=_lacks("packbits", "tensorstore")),
    "scale_offset-cast_value": Case(
        "float32", _floats("float32"), BytesCodec, fill_value=np.nan,
        filters=lambda: quantize.plan(_expected("scale_offset-cast_value"), max_abs_error=0.01),
        fails=_lacks("scale_offset", "zarrs", "tensorstore")),
    # zarrext quantize's layout for a sharded source: the filters inside the shards
    "scale_offset-cast_value-in-shard": Case(
        "float32", _floats("float32"), fill_value=np.nan,
        serializer=lambda: ShardingCodec(chunk_shape=(2, 5), codecs=[
            *quantize.plan(_expected("scale_offset-cast_value-in-shard"), max_abs_error=0.01,
                           cover_zero=True), BytesCodec()]),
        fails=_lacks("scale_offset", "zarrs", "tensorstore")),
    "cast_value": Case(
        "float64", lambda rng: _ints("int16", 16)(rng).astype("float64"), BytesCodec,
        filters=lambda: [CastValue(data_type="int16")],
        fails=_lacks("cast_value", "zarrs", "tensorstore")),
    "shuffle": Case("int32", _ints("int32", 20), BytesCodec,
                    lambda: [zarrext.ShuffleCodec(element_size=4)],
                    fails=_lacks("shuffle", "zarrs", "tensorstore")),
    "conditional": Case(
        "float64", _floats("float64"), BytesCodec,
        lambda: [zarrext.ConditionalCodec([{"name": "zstd", "configuration": {"level": 1}}])],
        fails=_lacks("conditional", "zarrs", "tensorstore")),
    "pad": Case("uint16", _ints("uint16", 16), BytesCodec,
                lambda: [zarrext.PadCodec(location="start", nbytes=7)],
                fails=_lacks("pad", "zarrs", "tensorstore")),
    "n5_default": Case(
        "int32", _ints("int32", 30),
        lambda: zarrext.N5DefaultCodec([{"name": "transpose", "configuration": {"order": [1, 0]}},
                                        {"name": "bytes", "configuration": {"endian": "big"}}]),
        fails=_lacks("n5_default", "zarrs", "tensorstore")),
}


def _failure(direction: str, reason: str) -> type[BaseException]:
    """How each expected failure shows: a refusal, or (a peer's bug) wrong values."""
    if "bug" in reason:
        return AssertionError
    if direction.startswith("zarrs"):
        from zarrs.pipeline import UnsupportedDataTypeError, UnsupportedMetadataError

        return UnsupportedDataTypeError if reason == ZARRS_VOID else UnsupportedMetadataError
    return ValueError  # tensorstore refuses the metadata


for _inner, _depth in (("uint8", 1), ("float32", 1), ("int16", 1), ("bool", 1), ("uint8", 2)):
    for _name in ("optional", "zarrs.optional"):
        _dtype: Any = _inner
        for _ in range(_depth):
            _dtype = zarrext.OptionalDType(_dtype, name=_name)
        _reason = ZARRS_VOID if _name == "zarrs.optional" else ZARRS_NAME
        CASES[f"{_name}-{'nested-' * (_depth - 1)}{_inner}"] = Case(
            _dtype, _optional(_inner, _depth), serializer=lambda: "auto",
            compressors=lambda: "auto", fill_value=None,
            fails={"zarrs-read": _reason, "zarrs-write": _reason, **TS_OPTIONAL})


def _params(direction: str) -> list[Any]:
    out = []
    for name, case in CASES.items():
        reason = case.fails.get(direction)
        marks = [pytest.mark.xfail(strict=True, reason=reason, raises=_failure(direction, reason))
                 ] if reason else []
        out.append(pytest.param(name, id=name, marks=marks))
    return out


def _expected(name: str) -> np.ndarray:
    seed = sorted(CASES).index(name)  # deterministic per case
    return CASES[name].values(np.random.default_rng(seed))


def _create(path: Path, name: str) -> zarr.Array:
    case = CASES[name]
    return zarr.create_array(path, shape=SHAPE, chunks=CHUNKS, dtype=case.dtype,
                             fill_value=case.fill_value, serializer=case.serializer(),
                             compressors=case.compressors(), filters=case.filters())


def _zarrext_write(path: Path, name: str) -> np.ndarray:
    values = _expected(name)
    _create(path, name)[...] = values
    return values


def _assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# -- zarrs ---------------------------------------------------------------------


@pytest.mark.parametrize("name", _params("zarrs-read"))
def test_zarrs_reads_zarrext(tmp_path: Path, name: str) -> None:
    expected = _zarrext_write(tmp_path / "a", name)
    with zarr.config.set(ZARRS_STRICT):
        z = zarr.open_array(tmp_path / "a", mode="r")
        assert type(z.async_array.codec_pipeline).__module__.startswith("zarrs")
        got = z[...]
    _assert_same(got, expected)


@pytest.mark.parametrize("name", _params("zarrs-write"))
def test_zarrext_reads_zarrs(tmp_path: Path, name: str) -> None:
    _create(tmp_path / "a", name)  # zarr.json only; zarrs encodes every chunk
    expected = _expected(name)
    with zarr.config.set(ZARRS_STRICT):
        z = zarr.open_array(tmp_path / "a", mode="r+")
        assert type(z.async_array.codec_pipeline).__module__.startswith("zarrs")
        z[...] = expected
    assert any((tmp_path / "a" / "c").rglob("*"))
    _assert_same(zarrext.open_array(str(tmp_path / "a"), mode="r")[...], expected)


# -- tensorstore ---------------------------------------------------------------


def _ts_spec(path: Path) -> dict[str, Any]:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}


@pytest.mark.parametrize("name", _params("ts-read"))
def test_tensorstore_reads_zarrext(tmp_path: Path, name: str) -> None:
    expected = _zarrext_write(tmp_path / "a", name)
    store = ts.open(_ts_spec(tmp_path / "a"), open=True).result()
    _assert_same(np.asarray(store.read().result()), expected)


@pytest.mark.parametrize("name", _params("ts-write"))
def test_zarrext_reads_tensorstore(tmp_path: Path, name: str) -> None:
    # tensorstore creates the array from the metadata zarrext writes, then encodes.
    _create(tmp_path / "meta", name)
    metadata = json.loads((tmp_path / "meta" / "zarr.json").read_text())
    expected = _expected(name)
    store = ts.open({**_ts_spec(tmp_path / "a"), "metadata": metadata}, create=True).result()
    store.write(expected).result()
    _assert_same(zarrext.open_array(str(tmp_path / "a"), mode="r")[...], expected)


@pytest.mark.parametrize("name", [
    "zarrs.optional",
    pytest.param("optional", marks=pytest.mark.xfail(strict=True, reason=ZARRS_NAME)),
])
def test_zarrs_accepts_optional_metadata(tmp_path: Path, name: str) -> None:
    """zarrs parses the metadata (data type, codecs) of an optional array zarrext writes.

    Only opening is checked: the codec pipeline is built from ``zarr.json`` then,
    and zarrs-python refuses the structured in-memory dtype only when reading.
    """
    _zarrext_write(tmp_path / "a", f"{name}-nested-uint8")
    written = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert written["data_type"]["name"] == written["codecs"][0]["name"] == name
    assert len(written["codecs"]) == 1  # the registry's layout: compression inside
    from zarrs.pipeline import UnsupportedMetadataError

    with zarr.config.set(ZARRS_STRICT):
        try:
            z = zarr.open_array(tmp_path / "a", mode="r")
        except UnsupportedMetadataError as e:
            raise AssertionError(f"zarrs refuses {name}") from e
    assert type(z.async_array.codec_pipeline).__module__.startswith("zarrs")
