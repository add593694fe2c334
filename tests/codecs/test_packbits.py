"""packbits codec: bit layout against a bit-by-bit reference, padding, errors, zarr round trips."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import parse_dtype

from tests.conftest import DATA, Where
from zarrext.codecs.packbits import PackBitsCodec, PackBitsCodecError

# name -> (bits per component, components, signed)
LAYOUT = {
    "bool": (1, 1, False),
    "int8": (8, 1, True), "int16": (16, 1, True), "int32": (32, 1, True), "int64": (64, 1, True),
    "uint8": (8, 1, False), "uint16": (16, 1, False), "uint32": (32, 1, False),
    "uint64": (64, 1, False),
    "float16": (16, 1, False), "float32": (32, 1, False), "float64": (64, 1, False),
    "complex64": (32, 2, False), "complex128": (64, 2, False),
}


def _spec(name: str, shape: tuple[int, ...]) -> ArraySpec:
    dtype = parse_dtype(name, zarr_format=3)
    return ArraySpec(shape=shape, dtype=dtype, fill_value=dtype.default_scalar(),
                     config=ArrayConfig.from_dict({}), prototype=default_buffer_prototype())


def _components(values: np.ndarray, name: str) -> list[int]:
    """Each component's N-bit little-endian pattern as a Python int."""
    n_bits = LAYOUT[name][0]
    if name == "bool":
        return [int(v) for v in values.ravel()]
    raw = values.ravel().astype(values.dtype.newbyteorder("<")).tobytes()
    width = n_bits // 8
    return [int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width)]


def reference_encode(values: np.ndarray, name: str, first: int, last: int, padding: str) -> bytes:
    """The spec's algorithm, one bit at a time."""
    bits: list[int] = []
    for comp in _components(values, name):
        bits.extend((comp >> j) & 1 for j in range(first, last + 1))
    n_pad = -len(bits) % 8
    bits.extend([0] * n_pad)
    stream = bytes(sum(bits[i + j] << j for j in range(8)) for i in range(0, len(bits), 8))
    if padding == "first_byte":
        return bytes([n_pad]) + stream
    if padding == "last_byte":
        return stream + bytes([n_pad])
    return stream


def reference_decoded(values: np.ndarray, name: str, first: int, last: int) -> np.ndarray:
    """What decoding must give: kept bits in place, sign- or zero-extended."""
    n_bits, _, signed = LAYOUT[name]
    if name == "bool":
        return values.copy()
    out = []
    for comp in _components(values, name):
        kept = (comp >> first) & ((1 << (last - first + 1)) - 1)
        v = kept << first
        if signed and (kept >> (last - first)) & 1:
            v |= ((1 << n_bits) - 1) & ~((1 << (last + 1)) - 1)
        out.append(v.to_bytes(n_bits // 8, "little"))
    return np.frombuffer(b"".join(out), dtype=values.dtype.newbyteorder("<")).astype(
        values.dtype).reshape(values.shape)


def _roundtrip(codec: PackBitsCodec, values: np.ndarray, name: str) -> tuple[bytes, np.ndarray]:
    spec = _spec(name, values.shape)
    nd = spec.prototype.nd_buffer.from_numpy_array(values)
    encoded = codec._encode_sync(nd, spec)
    assert encoded is not None
    decoded = codec._decode_sync(encoded, spec).as_numpy_array()
    return encoded.to_bytes(), decoded


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, int, int, str, np.ndarray]:
    name = draw(st.sampled_from(sorted(LAYOUT)))
    n_bits = LAYOUT[name][0]
    first = draw(st.integers(0, n_bits - 1))
    last = draw(st.integers(first, n_bits - 1))
    if draw(st.booleans()):
        first, last = 0, n_bits - 1
    padding = draw(st.sampled_from(["none", "first_byte", "last_byte"]))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=7))
    dtype = np.dtype(name)
    values = draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(
        dtype, allow_nan=False) if dtype.kind in "fc" else None))
    return name, first, last, padding, values


@given(cases())
def test_encode_matches_bit_by_bit_reference(case: tuple[str, int, int, str, np.ndarray]) -> None:
    name, first, last, padding, values = case
    codec = PackBitsCodec(padding_encoding=padding, first_bit=first, last_bit=last)
    encoded, decoded = _roundtrip(codec, values, name)
    assert encoded == reference_encode(values, name, first, last, padding)
    expected = reference_decoded(values, name, first, last)
    np.testing.assert_array_equal(decoded.view(np.uint8), expected.view(np.uint8))
    spec = _spec(name, values.shape)
    assert codec.compute_encoded_size(values.nbytes, spec) == len(encoded)


def test_known_vectors() -> None:
    bools = np.array([True, False, False, True, True])
    assert _roundtrip(PackBitsCodec(), bools, "bool")[0] == bytes([0b11001])
    assert _roundtrip(PackBitsCodec(padding_encoding="first_byte"), bools, "bool")[0] == bytes(
        [3, 0b11001])
    assert _roundtrip(PackBitsCodec(padding_encoding="last_byte"), bools, "bool")[0] == bytes(
        [0b11001, 3])
    # int8 -1, 1 kept as 2 bits each: 0b11, 0b01 -> 0b0111; decoding sign-extends
    encoded, decoded = _roundtrip(PackBitsCodec(first_bit=0, last_bit=1),
                                  np.array([-1, 1, -2], dtype="i1"), "int8")
    assert encoded == bytes([0b100111])
    assert decoded.tolist() == [-1, 1, -2]
    # uint16 bits 4..11 of 0xABCD are 0xBC; decoding puts them back at bit 4
    encoded, decoded = _roundtrip(PackBitsCodec(first_bit=4, last_bit=11),
                                  np.array([0xABCD], dtype="u2"), "uint16")
    assert encoded == bytes([0xBC])
    assert decoded.tolist() == [0x0BC0]


def test_large_chunk_crosses_blocks() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(-(2**11), 2**11, size=200_003, dtype="i2")
    encoded, decoded = _roundtrip(PackBitsCodec(first_bit=0, last_bit=11), values, "int16")
    assert len(encoded) == -(-200_003 * 12 // 8)
    np.testing.assert_array_equal(decoded, values)


@pytest.mark.parametrize("padding", ["none", "first_byte", "last_byte"])
def test_truncated_streams_are_rejected(padding: str) -> None:
    codec = PackBitsCodec(padding_encoding=padding, first_bit=0, last_bit=2)
    spec = _spec("uint8", (20,))
    good = codec._encode_sync(spec.prototype.nd_buffer.from_numpy_array(
        np.arange(20, dtype="u1") % 8), spec)
    assert good is not None
    for cut in (good[:-1], good[:0], good + spec.prototype.buffer.from_bytes(b"\0")):
        with pytest.raises(PackBitsCodecError, match=r"packbits codec, chunk .*bytes, expected"):
            codec._decode_sync(cut, spec)


def test_wrong_padding_byte_is_rejected() -> None:
    codec = PackBitsCodec(padding_encoding="first_byte")
    spec = _spec("bool", (5,))
    bad = spec.prototype.buffer.from_bytes(bytes([7, 0b11001]))
    with pytest.raises(PackBitsCodecError, match="padding byte says 7"):
        codec._decode_sync(bad, spec)


def test_configuration_errors() -> None:
    with pytest.raises(PackBitsCodecError, match="must not be less"):
        PackBitsCodec(first_bit=3, last_bit=2)
    with pytest.raises(PackBitsCodecError, match="padding_encoding"):
        PackBitsCodec(padding_encoding="middle")
    with pytest.raises(PackBitsCodecError, match="non-negative"):
        PackBitsCodec(first_bit=-1)
    with pytest.raises(PackBitsCodecError, match="outside the 8 bits"):
        PackBitsCodec(last_bit=8).bit_range(parse_dtype("uint8", zarr_format=3))
    with pytest.raises(PackBitsCodecError, match="not supported"):
        PackBitsCodec().bit_range(parse_dtype("string", zarr_format=3))
    with pytest.raises(PackBitsCodecError, match="mixes"):
        PackBitsCodec.from_dict({"name": "packbits",
                                 "configuration": {"first_bit": 1, "end_bit": 3}})
    with pytest.raises(PackBitsCodecError, match="unknown configuration keys"):
        PackBitsCodec.from_dict({"name": "packbits", "configuration": {"bits": 3}})


@pytest.mark.parametrize(
    ("configuration", "padding", "bits", "spelling"),
    [
        ({"padding_encoding": "first_byte", "first_bit": 1, "last_bit": 5},
         "first_byte", (1, 5), "first_last"),
        ({"padding_encoding": "start_byte", "start_bit": 1, "end_bit": 5},
         "first_byte", (1, 5), "start_end"),
        ({"padding_encoding": "last_byte"}, "last_byte", (None, None), "first_last"),
        ({"padding_encoding": "end_byte", "start_bit": None, "end_bit": 5},
         "last_byte", (None, 5), "start_end"),
    ],
)
def test_both_spellings_read_and_written_back(
    configuration: dict[str, object], padding: str, bits: tuple[int | None, int | None],
    spelling: str,
) -> None:
    codec = PackBitsCodec.from_dict({"name": "packbits", "configuration": configuration})
    assert (codec.padding_encoding, (codec.first_bit, codec.last_bit)) == (padding, bits)
    assert codec.spelling == spelling
    written = codec.to_dict()
    assert written["configuration"] == {k: v for k, v in configuration.items() if v is not None}


def test_python_built_codecs_write_the_readme_spelling() -> None:
    """The registry README's first_*/last_* keys (what zarrs reads), by default."""
    codec = PackBitsCodec(padding_encoding="last_byte", first_bit=2, last_bit=9)
    assert codec.to_dict()["configuration"] == {
        "padding_encoding": "last_byte", "first_bit": 2, "last_bit": 9}
    assert PackBitsCodec.from_dict({"name": "packbits"}).spelling == "first_last"


def test_schema_spelling_validates_against_schema() -> None:
    """The registry's JSON schema knows only start_*/end_*; that spelling stays writable."""
    schema = json.loads((DATA / "packbits.schema.json").read_text())
    for codec in (PackBitsCodec(), PackBitsCodec(padding_encoding="first_byte"),
                  PackBitsCodec(padding_encoding="last_byte", first_bit=2, last_bit=9)):
        written = PackBitsCodec(padding_encoding=codec.padding_encoding,
                                first_bit=codec.first_bit, last_bit=codec.last_bit,
                                spelling="start_end").to_dict()
        jsonschema.validate(written, schema)
        assert PackBitsCodec.from_dict(written) == codec


@pytest.mark.parametrize(("dtype", "first", "last"), [("int16", 0, 9), ("bool", None, None),
                                                       ("float32", None, None)])
def test_zarr_array_roundtrip_and_fresh_process(where: Where, dtype: str,
                                                first: int | None, last: int | None) -> None:
    rng = np.random.default_rng(1)
    values = (rng.integers(-500, 500, size=(9, 13)) if dtype != "bool"
              else rng.integers(0, 2, size=(9, 13))).astype(dtype)
    z = zarr.create_array(where.location("a"), storage_options=where.options,
                          shape=values.shape, chunks=(4, 5), dtype=dtype,
                          serializer=PackBitsCodec(padding_encoding="last_byte",
                                                   first_bit=first, last_bit=last),
                          compressors=None)
    z[...] = values
    np.testing.assert_array_equal(
        zarr.open_array(where.location("a"), storage_options=where.options, mode="r")[...],
        values)
    code = ("import json, sys, zarr; a = zarr.open_array(sys.argv[1], mode='r', "
            "storage_options=json.loads(sys.argv[2]))[...]; print(a.astype('f8').sum())")
    out = subprocess.run([sys.executable, "-c", code, where.location("a"),
                          json.dumps(where.options)], capture_output=True, text=True, check=True)
    assert float(out.stdout) == pytest.approx(float(values.astype("f8").sum()))
