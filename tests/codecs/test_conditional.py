"""Tests for the ``conditional`` meta-codec (zarrext.codecs.conditional).

Stored bytes are checked against independent decoders (python's gzip, numcodecs'
Zstd, the crc32c package, int.from_bytes of the header), not only by round trips.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.dtype import Float32
from zarr.registry import get_codec_class, register_codec

import zarrext
from zarrext import ConditionalCodec, ShuffleCodec
from zarrext.codecs.conditional import MAX_HEADER_BITS, ConditionalCodecError

PROTO = default_buffer_prototype()
SPEC = ArraySpec(
    shape=(64,),
    dtype=Float32(),
    fill_value=0.0,
    config=ArrayConfig.from_dict({}),
    prototype=PROTO,
)
RAW = np.linspace(0, 1, 64, dtype="<f4").tobytes()


def ready(codec: ConditionalCodec) -> ConditionalCodec:
    return codec.evolve_from_array_spec(SPEC)


def encode(codec: ConditionalCodec, data: bytes, *, use_async: bool = False) -> bytes:
    codec = ready(codec)
    buf = PROTO.buffer.from_bytes(data)
    if use_async:
        out = asyncio.run(codec._encode_single(buf, SPEC))
        assert out is not None
        return out.to_bytes()
    return codec._encode_sync(buf, SPEC).to_bytes()


def decode(codec: ConditionalCodec, data: bytes, *, use_async: bool = False) -> bytes:
    codec = ready(codec)
    buf = PROTO.buffer.from_bytes(data)
    if use_async:
        out = asyncio.run(codec._decode_single(buf, SPEC))
        assert out is not None
        return out.to_bytes()
    return codec._decode_sync(buf, SPEC).to_bytes()


def header_mask(chunk: bytes, nbytes: int) -> int:
    return int.from_bytes(chunk[:nbytes], "little")


# -- encoding: header and payload ----------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
def test_no_decision_sets_no_bits(use_async: bool) -> None:
    codec = ConditionalCodec(codecs=[ZstdCodec(), GzipCodec()])
    out = encode(codec, RAW, use_async=use_async)
    assert out[0] == 0
    assert out[1:] == RAW


def independent_decode(payload: bytes, mask: int) -> bytes:
    """Undo [gzip, zstd, crc32c] (bit 0, 1, 2) with libraries other than zarr's codecs."""
    if mask & 0b100:
        body, stored = payload[:-4], payload[-4:]
        assert int.from_bytes(stored, "little") == crc32c.crc32c(body)
        payload = body
    if mask & 0b010:
        payload = bytes(numcodecs.Zstd().decode(payload))
    if mask & 0b001:
        payload = gzip.decompress(payload)
    return payload


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("mask", range(8))
def test_header_bits_say_which_codecs_were_applied(mask: int, use_async: bool) -> None:
    codec = ConditionalCodec(
        codecs=[GzipCodec(level=5), ZstdCodec(level=3), Crc32cCodec()], decision=mask
    )
    out = encode(codec, RAW, use_async=use_async)
    assert codec.header_bits == 8
    assert header_mask(out, 1) == mask
    assert independent_decode(out[1:], mask) == RAW
    assert decode(codec, out, use_async=use_async) == RAW


def test_checksum_only_payload_is_raw_plus_crc() -> None:
    out = encode(ConditionalCodec(codecs=[ZstdCodec(), Crc32cCodec()], decision=0b10), RAW)
    assert out == bytes([0b10]) + RAW + crc32c.crc32c(RAW).to_bytes(4, "little")


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("mask", range(4))
def test_decode_applies_marked_codecs_in_reverse(mask: int, use_async: bool) -> None:
    """A chunk built by hand (gzip first, then zstd) decodes to the raw bytes."""
    payload = RAW
    if mask & 1:
        payload = gzip.compress(payload)
    if mask & 2:
        payload = bytes(numcodecs.Zstd(level=1).encode(payload))
    chunk = bytes([mask]) + payload
    assert (
        decode(ConditionalCodec(codecs=[GzipCodec(), ZstdCodec()]), chunk, use_async=use_async)
        == RAW
    )


@pytest.mark.parametrize("n_codecs", [0, 1, 7, 8, 9, 16, 17])
def test_default_header_bits(n_codecs: int) -> None:
    codec = ConditionalCodec(codecs=[Crc32cCodec()] * n_codecs, decision="always_apply")
    expected_bits = math.ceil(n_codecs / 8) * 8
    assert codec.header_bits == expected_bits
    assert codec.to_dict()["configuration"]["header_bits"] == expected_bits  # type: ignore[index]
    out = encode(codec, RAW)
    nbytes = expected_bits // 8
    assert header_mask(out, nbytes) == (1 << n_codecs) - 1
    assert len(out) == nbytes + len(RAW) + 4 * n_codecs


@pytest.mark.parametrize("header_bits", [16, 24, 64])
def test_explicit_header_bits_honoured(header_bits: int) -> None:
    codec = ConditionalCodec(
        codecs=[ZstdCodec(), Crc32cCodec()], header_bits=header_bits, decision=0b10
    )
    out = encode(codec, RAW)
    nbytes = header_bits // 8
    assert out[:nbytes] == bytes([0b10]) + bytes(nbytes - 1)  # reserved bits all zero
    assert out[nbytes:] == RAW + crc32c.crc32c(RAW).to_bytes(4, "little")
    assert decode(codec, out) == RAW


def test_bit_order_crosses_byte_boundary() -> None:
    """Bit 8 (the ninth codec) is bit 0 of the header's second byte."""
    codecs: list[Any] = [ShuffleCodec(element_size=2)] * 8 + [Crc32cCodec()]
    codec = ConditionalCodec(codecs=codecs, header_bits=24, decision=1 << 8)
    out = encode(codec, RAW)
    assert out[:3] == bytes([0, 1, 0])
    assert out[3:] == RAW + crc32c.crc32c(RAW).to_bytes(4, "little")
    assert decode(codec, out) == RAW


def test_chunk_written_with_fewer_codecs_reads_with_more() -> None:
    """Reserved zero bits are how old chunks survive codecs appended to the metadata."""
    old = ConditionalCodec(codecs=[ZstdCodec()], header_bits=16, decision="always_apply")
    chunk = encode(old, RAW)
    new = ConditionalCodec(codecs=[ZstdCodec(), GzipCodec()], header_bits=16)
    assert decode(new, chunk) == RAW


# -- decoding: malformed chunks ---------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize(("header_bits", "length"), [(8, 0), (16, 0), (16, 1), (24, 2)])
def test_truncated_chunk(header_bits: int, length: int, use_async: bool) -> None:
    codec = ConditionalCodec(codecs=[ZstdCodec()], header_bits=header_bits)
    with pytest.raises(
        ConditionalCodecError,
        match=rf"{length} bytes is shorter than the {header_bits // 8}-byte header",
    ):
        decode(codec, bytes(length), use_async=use_async)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("bit", [2, 7, 9, 15])
def test_header_bit_beyond_codecs(bit: int, use_async: bool) -> None:
    codec = ConditionalCodec(codecs=[ZstdCodec(), GzipCodec()], header_bits=16)
    chunk = (1 << bit).to_bytes(2, "little") + RAW
    with pytest.raises(ConditionalCodecError, match=rf"sets bit {bit}\b.*2 nested codecs"):
        decode(codec, chunk, use_async=use_async)


def test_header_names_lowest_bad_bit() -> None:
    codec = ConditionalCodec(codecs=[ZstdCodec()], header_bits=16)
    chunk = ((1 << 3) | (1 << 12) | 1).to_bytes(2, "little") + RAW
    with pytest.raises(ConditionalCodecError, match=r"sets bit 3\b"):
        decode(codec, chunk)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize(
    ("codecs", "name"),
    [
        ([ZstdCodec()], "zstd"),
        ([GzipCodec()], "gzip"),
        ([BloscCodec(typesize=4, shuffle="noshuffle")], "blosc"),
        ([Crc32cCodec()], "crc32c"),
    ],
)
def test_corrupted_payload(codecs: list[Any], name: str, use_async: bool) -> None:
    chunk = b"\x01" + b"this is not what the header claims"
    with pytest.raises(ConditionalCodecError, match=rf"nested codec 0 \('{name}'\).*decode"):
        decode(ConditionalCodec(codecs=codecs), chunk, use_async=use_async)


# -- configuration --------------------------------------------------------------------


def cfg(**configuration: Any) -> dict[str, Any]:
    return {"name": "conditional", "configuration": configuration}


ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            cfg(codecs=[{"name": "bytes", "configuration": {"endian": "little"}}]),
            r"'bytes'.*not a bytes->bytes",
        ),
        (
            cfg(codecs=[ZSTD, {"name": "transpose", "configuration": {"order": [0]}}]),
            r"nested codec 1 \('transpose'\).*not a bytes->bytes",
        ),
        (
            cfg(
                codecs=[
                    {
                        "name": "sharding_indexed",
                        "configuration": {"chunk_shape": [2], "codecs": [{"name": "bytes"}]},
                    }
                ]
            ),
            r"'sharding_indexed'.*not a bytes->bytes",
        ),
        (
            cfg(codecs=[{"name": "zstd", "configuration": {"level": "high"}}]),
            r"nested codec 0 \('zstd'\).*invalid configuration",
        ),
        (cfg(codecs=[42]), "not a bytes->bytes"),
        (cfg(codecs=[{"name": "no_such_codec_xyz"}]), "no_such_codec_xyz"),
        (cfg(codecs="zstd"), "must be a list"),
        (cfg(codecs={"name": "zstd"}), "must be a list"),
        (cfg(codecs=[ZSTD], header_bits=12), "multiple of 8"),
        (cfg(codecs=[ZSTD], header_bits=1), "multiple of 8"),
        (
            cfg(codecs=[ZSTD] * 9, header_bits=8),
            r"header_bits \(8\) must be >= the number of nested codecs \(9\)",
        ),
        (cfg(codecs=[ZSTD], header_bits=0), r"must be >= the number of nested codecs \(1\)"),
        (cfg(codecs=[ZSTD], header_bits=-8), "must be >= the number"),
        (cfg(codecs=[ZSTD], header_bits="8"), "header_bits must be an integer"),
        (cfg(codecs=[ZSTD], header_bits=8.0), "header_bits must be an integer"),
        (cfg(codecs=[ZSTD], header_bits=True), "header_bits must be an integer"),
        (cfg(codecs=[ZSTD], header_bits=1 << 40), "exceeds the supported maximum"),
        (cfg(codecs=[ZSTD], header_bits=MAX_HEADER_BITS + 8), "exceeds the supported maximum"),
        (cfg(codecs=[ZSTD], level=5), r"unknown configuration keys \['level'\]"),
        (cfg(header_bits=8), "needs 'codecs'"),
        ({"name": "conditional"}, "configuration must be an object"),
        ({"name": "conditional", "configuration": [ZSTD]}, "configuration must be an object"),
        ({"name": "zstd", "configuration": {"codecs": [ZSTD]}}, "expected name"),
    ],
)
def test_bad_configuration(data: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ConditionalCodec.from_dict(data)


def test_header_bits_at_maximum_accepted() -> None:
    assert (
        ConditionalCodec(codecs=[ZstdCodec()], header_bits=MAX_HEADER_BITS).header_nbytes
        == MAX_HEADER_BITS // 8
    )


def test_constructor_argument_conflicts() -> None:
    with pytest.raises(ValueError, match="either configuration= or codecs="):
        ConditionalCodec(codecs=[ZstdCodec()], configuration={"codecs": [ZSTD]})
    with pytest.raises(ValueError, match="either decision= or decision_function="):
        ConditionalCodec(
            codecs=[ZstdCodec()], decision="always_apply", decision_function="never_apply"
        )
    with pytest.raises(ValueError, match="'codecs' is required"):
        ConditionalCodec()
    with pytest.raises(ValueError, match="name must be one of"):
        ConditionalCodec(codecs=[ZstdCodec()], name="maybe")


def test_metadata_round_trip() -> None:
    data = cfg(
        codecs=[{"name": "shuffle", "configuration": {"element_size": 4}}, ZSTD], header_bits=16
    )
    codec = ConditionalCodec.from_dict(data)
    assert codec.to_dict() == data
    assert codec.codecs == (ShuffleCodec(element_size=4), ZstdCodec(level=1))
    assert get_codec_class("conditional") is ConditionalCodec


def test_optional_name_is_read_and_written_back() -> None:
    data = {"name": "optional", "configuration": {"codecs": [ZSTD], "header_bits": 8}}
    codec = get_codec_class("optional").from_dict(data)
    assert isinstance(codec, ConditionalCodec)
    assert codec.name == "optional"
    assert codec.to_dict() == data
    assert codec != ConditionalCodec.from_dict(cfg(codecs=[ZSTD]))  # different metadata


def test_optional_name_without_codecs_key_is_refused() -> None:
    with pytest.raises(ValueError, match="'codecs'"):
        get_codec_class("optional").from_dict({"name": "optional", "configuration": {"foo": []}})


def test_runtime_settings_do_not_affect_equality_or_metadata() -> None:
    plain = ConditionalCodec(codecs=[ZstdCodec()])
    decided = ConditionalCodec(codecs=[ZstdCodec()], decision="compress_if_smaller")
    spec_form = ConditionalCodec(
        configuration={"codecs": [ZstdCodec().to_dict()]},
        decision_function=lambda chunk_index, codec, unencoded_chunk, trial_encoded_chunk: True,
        trial_encode=True,
    )
    assert plain == decided == spec_form
    assert hash(plain) == hash(decided) == hash(spec_form)
    assert plain.to_dict() == decided.to_dict() == spec_form.to_dict()
    assert plain.with_decision("always_apply") == plain
    assert "decision" not in json.dumps(spec_form.to_dict())


def test_with_decision_changes_encoding_only() -> None:
    plain = ConditionalCodec(codecs=[ZstdCodec()])
    always = plain.with_decision("always_apply")
    assert encode(plain, RAW)[0] == 0
    assert encode(always, RAW)[0] == 1
    assert plain.decision is not always.decision


def test_not_fixed_size() -> None:
    assert ConditionalCodec(codecs=[Crc32cCodec()]).is_fixed_size is False


def test_max_encoded_size_follows_decision() -> None:
    assert (
        ConditionalCodec(codecs=[ZstdCodec()], decision="compress_if_smaller").max_encoded_size(100)
        == 101
    )
    assert (
        ConditionalCodec(codecs=[ZstdCodec()], header_bits=16).max_encoded_size(100) == 102
    )  # never_apply
    assert (
        ConditionalCodec(codecs=[ZstdCodec()], decision="always_apply").max_encoded_size(100)
        is None
    )


# -- through real arrays ----------------------------------------------------------------

CONDITIONAL_SHUFFLE_ZSTD = [{"name": "shuffle", "configuration": {"element_size": 4}}, ZSTD]


def make_array(path: Path, name: str = "conditional", header_bits: int = 8) -> np.ndarray:
    """A 4x4 float32 array, chunks 2x2, codecs [bytes, <name>(shuffle, zstd)], all written raw."""
    data = np.arange(16, dtype="<f4").reshape(4, 4)
    z = zarrext.create_array(
        path,
        shape=(4, 4),
        chunks=(2, 2),
        dtype="<f4",
        compressors=[
            ConditionalCodec(codecs=CONDITIONAL_SHUFFLE_ZSTD, header_bits=header_bits, name=name)
        ],
    )
    z[:] = data
    return data


@pytest.mark.parametrize(
    ("chunk", "match"),
    [
        (b"", r"0 bytes is shorter than the 1-byte header"),
        (bytes([0b100]) + bytes(16), r"sets bit 2\b"),
        (bytes([0b10]) + b"garbage, not zstd", r"nested codec 1 \('zstd'\) failed to decode"),
    ],
    ids=["truncated", "reserved-bit", "corrupted"],
)
def test_bad_chunk_in_real_array(tmp_path: Path, chunk: bytes, match: str) -> None:
    data = make_array(tmp_path)
    (tmp_path / "c" / "0" / "1").write_bytes(chunk)
    # Other chunks still read.
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[2:, :], data[2:, :])
    with pytest.raises(ValueError, match=match):
        zarr.open_array(tmp_path)[:]
    # zarrext's pipeline knows which chunk failed.
    with pytest.raises(ValueError, match=rf"conditional codec, chunk \(0, 1\).*{match}"):
        zarrext.open_array(tmp_path, mode="r")[:]


def test_hand_written_chunk_reads(tmp_path: Path) -> None:
    """A chunk produced outside zarr (numpy shuffle + numcodecs zstd) reads back."""
    data = make_array(tmp_path)
    block = (np.arange(4, dtype="<f4") * 10).reshape(2, 2)
    shuffled = block.view(np.uint8).reshape(-1, 4).T.tobytes()
    (tmp_path / "c" / "1" / "0").write_bytes(
        bytes([0b11]) + bytes(numcodecs.Zstd().encode(shuffled))
    )
    expected = data.copy()
    expected[2:, :2] = block
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], expected)


def test_optional_metadata_read_and_written_back(tmp_path: Path) -> None:
    """An array whose zarr.json names the codec ``optional`` keeps that name."""
    metadata = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [8],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "optional", "configuration": {"codecs": CONDITIONAL_SHUFFLE_ZSTD}},
        ],
        "attributes": {},
    }
    (tmp_path / "zarr.json").write_text(json.dumps(metadata))
    z = zarr.open_array(tmp_path, mode="r+")
    (codec,) = z.metadata.codecs[1:]  # type: ignore[union-attr]
    assert isinstance(codec, ConditionalCodec)
    assert codec.name == "optional"
    assert codec.header_bits == 8
    zx = zarrext.open_array(tmp_path, decision="always_apply")
    data = np.arange(8, dtype="<f4")
    zx[:] = data
    assert (tmp_path / "c" / "0").read_bytes()[0] == 0b11
    z.attrs["touched"] = True  # rewrites zarr.json
    written = json.loads((tmp_path / "zarr.json").read_text())
    assert written["codecs"][1]["name"] == "optional"
    assert written["codecs"][1]["configuration"]["codecs"] == CONDITIONAL_SHUFFLE_ZSTD
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


def test_created_with_optional_name(tmp_path: Path) -> None:
    data = make_array(tmp_path, name="optional", header_bits=16)
    written = json.loads((tmp_path / "zarr.json").read_text())
    assert written["codecs"][1] == {
        "name": "optional",
        "configuration": {"codecs": CONDITIONAL_SHUFFLE_ZSTD, "header_bits": 16},
    }
    assert (tmp_path / "c" / "1" / "1").read_bytes() == bytes(2) + data[2:, 2:].tobytes()


def test_fused_pipeline_reads(tmp_path: Path) -> None:
    """The synchronous path (FusedCodecPipeline) decodes what the async path wrote."""
    z = zarrext.create_array(
        tmp_path,
        shape=(6, 6),
        chunks=(3, 3),
        dtype="<f4",
        decision="always_apply",
        compressors=[ConditionalCodec(codecs=CONDITIONAL_SHUFFLE_ZSTD), Crc32cCodec()],
    )
    data = np.random.default_rng(1).random((6, 6), dtype=np.float32)
    z[:] = data
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}):
        np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


# -- hypothesis: random nested codec lists through real arrays ----------------------------

NESTED = {
    "shuffle": lambda es: ShuffleCodec(element_size=es),
    "zstd": lambda es: ZstdCodec(level=1),
    "gzip": lambda es: GzipCodec(level=1),
    "blosc": lambda es: BloscCodec(cname="lz4", clevel=1, typesize=es, shuffle="shuffle"),
    "crc32c": lambda es: Crc32cCodec(),
}
DTYPES = ["u1", "<i2", "<u4", "<f4", "<f8", "<c8"]


@st.composite
def array_cases(draw: st.DrawFn) -> dict[str, Any]:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    names = draw(st.lists(st.sampled_from(sorted(NESTED)), min_size=0, max_size=5))
    n = len(names)
    header_bits = draw(st.sampled_from([None, 8 * max(1, math.ceil(n / 8)) + 8]))
    decision: Any = draw(
        st.one_of(
            st.integers(0, (1 << n) - 1),
            st.sampled_from(["compress_if_smaller", "always_apply", "never_apply", "smallest"]),
        )
    )
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=2)))
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    kind = draw(st.sampled_from(["random", "smooth", "constant"]))
    seed = draw(st.integers(0, 2**16))
    return {
        "dtype": dtype,
        "names": names,
        "header_bits": header_bits,
        "decision": decision,
        "shape": shape,
        "chunks": chunks,
        "kind": kind,
        "seed": seed,
    }


def make_data(shape: tuple[int, ...], dtype: np.dtype, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    if kind == "random":
        return np.frombuffer(rng.bytes(n * dtype.itemsize), dtype=dtype).reshape(shape).copy()
    if kind == "constant":
        return np.full(shape, 3, dtype=dtype)
    return (np.arange(n) % 7).astype(dtype).reshape(shape)


@given(case=array_cases())
def test_random_pipelines_round_trip_through_arrays(case: dict[str, Any]) -> None:
    dtype, names = case["dtype"], case["names"]
    nested = [NESTED[name](dtype.itemsize) for name in names]
    codec = ConditionalCodec(codecs=nested, header_bits=case["header_bits"])
    data = make_data(case["shape"], dtype, case["kind"], case["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        z = zarrext.create_array(
            path,
            shape=data.shape,
            chunks=case["chunks"],
            dtype=dtype,
            fill_value=0,
            compressors=[codec],
            decision=case["decision"],
            config={"write_empty_chunks": True},
        )
        z[...] = data
        np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data)
        nbytes = codec.header_bits // 8
        chunk_files = [p for p in (path / "c").rglob("*") if p.is_file()]
        assert len(chunk_files) == math.prod(z.cdata_shape)
        for chunk_file in chunk_files:
            stored = chunk_file.read_bytes()
            mask = header_mask(stored, nbytes)
            assert mask >> len(names) == 0
            if isinstance(case["decision"], int):
                assert mask == case["decision"]
            elif case["decision"] == "always_apply":
                assert mask == (1 << len(names)) - 1
            elif case["decision"] == "never_apply":
                assert mask == 0
            if mask == 0:  # raw: the payload is the chunk's bytes, C order
                coords = tuple(int(p) for p in chunk_file.relative_to(path / "c").parts)
                region = tuple(
                    slice(c * k, (c + 1) * k) for c, k in zip(coords, case["chunks"], strict=True)
                )
                block = np.zeros(case["chunks"], dtype=dtype)
                part = data[region]
                block[tuple(slice(0, s) for s in part.shape)] = part
                assert stored[nbytes:] == block.tobytes()


@pytest.mark.parametrize("codec_form", ["object", "dict"])
def test_bytes_codec_kept_outside(tmp_path: Path, codec_form: str) -> None:
    """serializer + compressors spelled as dicts yield the same metadata as objects."""
    compressor: Any = (
        ConditionalCodec(codecs=[ZstdCodec(level=1)])
        if codec_form == "object"
        else {"name": "conditional", "configuration": {"codecs": [ZSTD]}}
    )
    z = zarr.create_array(
        tmp_path,
        shape=(4,),
        chunks=(4,),
        dtype="u1",
        serializer=BytesCodec(),
        compressors=[compressor],
    )
    assert z.metadata.codecs[1] == ConditionalCodec(codecs=[ZstdCodec(level=1)])  # type: ignore[union-attr]


# -- nested codecs without a synchronous implementation --------------------------------------


class AsyncOnlyReverse(BytesBytesCodec):
    """A bytes->bytes codec with only the async API: reverses the bytes."""

    is_fixed_size = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AsyncOnlyReverse:
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return {"name": "zarrext_test_async_reverse"}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AsyncOnlyReverse)

    def __hash__(self) -> int:
        return hash("zarrext_test_async_reverse")

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return chunk_spec.prototype.buffer.from_bytes(chunk_bytes.to_bytes()[::-1])

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return chunk_spec.prototype.buffer.from_bytes(chunk_bytes.to_bytes()[::-1])

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length


register_codec("zarrext_test_async_reverse", AsyncOnlyReverse)


def test_async_only_nested_codec(tmp_path: Path) -> None:
    codec = ConditionalCodec(codecs=[AsyncOnlyReverse(), ZstdCodec(level=1)])
    assert codec._sync_capable is False
    assert ConditionalCodec(codecs=[ZstdCodec()])._sync_capable is True
    data = np.arange(16, dtype="u1")
    z = zarrext.create_array(
        tmp_path, shape=(16,), chunks=(16,), dtype="u1", compressors=[codec], decision=0b01
    )
    z[:] = data
    assert (tmp_path / "c" / "0").read_bytes() == b"\x01" + data[::-1].tobytes()
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)
    with pytest.raises(ConditionalCodecError, match="nested codec 0 has no synchronous encoder"):
        encode(codec.with_decision("always_apply"), RAW)


@pytest.mark.parametrize("name", [5, None, ["zstd"]], ids=["int", "none", "list"])
def test_nested_codec_name_must_be_a_string(name: Any) -> None:
    with pytest.raises(ConditionalCodecError, match="needs a string 'name'"):
        ConditionalCodec.from_dict(
            {"name": "conditional", "configuration": {"codecs": [{"name": name}]}}
        )


def test_nesting_depth_is_capped_at_parse_time() -> None:
    def nest(depth: int) -> dict[str, Any]:
        codec: dict[str, Any] = {"name": "zstd", "configuration": {"level": 1}}
        for _ in range(depth):
            codec = {"name": "conditional", "configuration": {"codecs": [codec]}}
        return codec

    assert ConditionalCodec.from_dict(nest(32)) is not None
    with pytest.raises(ValueError, match="more than 32 levels deep"):
        ConditionalCodec.from_dict(nest(33))
    with pytest.raises(ValueError, match="more than 32 levels deep"):
        ConditionalCodec.from_dict(nest(400))


@pytest.mark.parametrize("route", ["shards", "chunks"])
def test_raw_payload_behind_the_header_decodes_aligned_for_cast_value(route) -> None:
    """A chunk stored raw (mask 0) is a view one header byte into the chunk: the
    quantized array's int16 reached cast_value misaligned, and its Rust core panicked."""
    from zarr.storage import MemoryStore

    import zarrext

    filters = zarrext.quantize.plan(value_range=(-60.0, 60.0), max_abs_error=0.01,
                                    dtype="float32", fill_value=0.0)
    values = np.linspace(-50, 50, 64, dtype="float32").reshape(8, 8)
    sharding = {"shards": (8, 8)} if route == "shards" else {}
    z = zarrext.create_array(MemoryStore(), shape=(8, 8), chunks=(4, 4), dtype="float32",
                             fill_value=0.0, filters=filters, decision="never_apply",
                             compressors=[ConditionalCodec([ZstdCodec(level=1)])], **sharding)
    z[...] = values
    np.testing.assert_allclose(zarr.open_array(z.store)[...], values, atol=0.01)


def test_aligned_copies_only_a_misaligned_payload() -> None:
    from zarr.core.buffer import default_buffer_prototype

    from zarrext.codecs._alignment import ALIGNMENT, aligned

    whole = default_buffer_prototype().buffer.from_array_like(np.arange(64, dtype=np.uint8))
    assert whole.as_numpy_array().ctypes.data % ALIGNMENT == 0
    assert aligned(whole) is whole
    moved = aligned(whole[1:])
    assert moved.as_numpy_array().ctypes.data % ALIGNMENT == 0
    assert moved.to_bytes() == whole[1:].to_bytes()
