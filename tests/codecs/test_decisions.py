"""Tests for writer-side decisions (zarrext.codecs.decisions) and the spec's three examples."""

from __future__ import annotations

import copy
import itertools
import json
import zlib
from dataclasses import dataclass
from typing import Any

import crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.common import parse_named_configuration
from zarr.core.dtype import UInt8
from zarr.registry import register_codec

import zarrext
from tests.conftest import Where
from zarrext import ConditionalCodec, ShuffleCodec
from zarrext.codecs.decisions import (
    BUILTIN_DECISIONS,
    MAX_SMALLEST_CODECS,
    CompressIfSmaller,
    DecisionError,
    FixedMask,
    FunctionDecision,
    Plan,
    Undecided,
    from_function,
    resolve_decision,
    zarrext_record,
)
from zarrext.pipeline.scratch import ScratchZstdCodec

# encodings of gzip made at different moments are compared
pytestmark = pytest.mark.usefixtures("gzip_without_a_clock")

PROTO = default_buffer_prototype()
SPEC = ArraySpec(
    shape=(1,), dtype=UInt8(), fill_value=0, config=ArrayConfig.from_dict({}), prototype=PROTO
)

# -- a counting bytes->bytes codec -------------------------------------------------------

CALLS: list[tuple[str, bytes]] = []  # (tag, input) of every nested encode


@dataclass(frozen=True)
class CountingCodec(BytesBytesCodec):
    """Records every encode. ``kind="compress"`` is zlib; ``"filter"`` reverses the bytes."""

    is_fixed_size = False
    tag: str = "c"
    kind: str = "compress"

    def __init__(self, *, tag: str = "c", kind: str = "compress") -> None:
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "kind", kind)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CountingCodec:
        _, configuration = parse_named_configuration(data, "zarrext_test_counting")
        return cls(**configuration)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": "zarrext_test_counting",
            "configuration": {"tag": self.tag, "kind": self.kind},
        }

    def transform(self, raw: bytes) -> bytes:
        return zlib.compress(raw, 1) if self.kind == "compress" else raw[::-1]

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        raw = chunk_bytes.to_bytes()
        CALLS.append((self.tag, raw))
        return chunk_spec.prototype.buffer.from_bytes(self.transform(raw))

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        raw = chunk_bytes.to_bytes()
        out = zlib.decompress(raw) if self.kind == "compress" else raw[::-1]
        return chunk_spec.prototype.buffer.from_bytes(out)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._encode_sync(chunk_bytes, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError


register_codec("zarrext_test_counting", CountingCodec)


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


def tags() -> list[str]:
    return [tag for tag, _ in CALLS]


def encode(codec: ConditionalCodec, data: bytes) -> bytes:
    return codec._encode_sync(PROTO.buffer.from_bytes(data), SPEC).to_bytes()


def decode(codec: ConditionalCodec, data: bytes) -> bytes:
    return codec._decode_sync(PROTO.buffer.from_bytes(data), SPEC).to_bytes()


RANDOM = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
SMOOTH = (np.arange(1024, dtype="<f4") / 7).tobytes()
ZEROS = bytes(4096)


def chunk_files(where: Where, name: str) -> dict[tuple[int, ...], bytes]:
    """The stored chunks of the array ``name``, by chunk index."""
    return {
        tuple(int(p) for p in key.split("/")[1:]): stored
        for key, stored in where.stored(name).items()
        if key.startswith("c/")
    }


# -- the spec's three signatures ---------------------------------------------------------


def two_chunk_array(
    where: Where, codecs: list[Any], decision: Any, trial_encode: bool | None = None
) -> zarr.Array:
    return zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(2, 8),
        chunks=(1, 8),
        dtype="<u4",
        fill_value=0,
        compressors=[ConditionalCodec(codecs=codecs)],
        decision=decision,
        trial_encode=trial_encode,
    )


DATA = np.array([np.arange(8) % 2, np.arange(8) * 1000003], dtype="<u4")  # row 0 compressible


def test_plain_signature(where: Where) -> None:
    seen: list[tuple[Any, ...]] = []

    def decide(chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        seen.append(
            (
                chunk_index,
                codec.index,
                codec.name,
                codec.configuration["tag"],
                unencoded_chunk.copy(),
            )
        )
        return chunk_index == (0, 0) or codec.index == 1

    codecs = [CountingCodec(tag="a"), CountingCodec(tag="b", kind="filter")]
    z = two_chunk_array(where, codecs, decide)
    z[:] = DATA
    by_key = {(s[0], s[1]): s for s in seen}
    assert sorted(by_key) == [((0, 0), 0), ((0, 0), 1), ((1, 0), 0), ((1, 0), 1)]
    assert len(seen) == 4
    for (chunk_index, i), (_, _, name, tag, unencoded) in by_key.items():
        assert name == "zarrext_test_counting"
        assert tag == "ab"[i]
        assert unencoded.dtype == np.uint8
        assert unencoded.ndim == 1
        raw = DATA[chunk_index[0]].tobytes()
        # Cascaded: codec 1 sees the bytes after codec 0 if codec 0 was applied.
        expected = zlib.compress(raw, 1) if (i == 1 and chunk_index == (0, 0)) else raw
        assert unencoded.tobytes() == expected
    # Without trial encoding only accepted codecs are encoded, once each.
    assert sorted(tags()) == ["a", "b", "b"]
    files = chunk_files(where, "a")
    assert files[(0, 0)][0] == 0b11
    assert files[(1, 0)][0] == 0b10
    assert files[(1, 0)][1:] == DATA[1].tobytes()[::-1]
    reopened = zarr.open_array(where.location("a"), storage_options=where.options)
    np.testing.assert_array_equal(reopened[:], DATA)


def test_trial_signature(where: Where) -> None:
    seen: list[tuple[Any, ...]] = []

    def decide(chunk_index, codec, unencoded_chunk, trial_encoded_chunk):  # type: ignore[no-untyped-def]
        seen.append(
            (chunk_index, codec.index, unencoded_chunk.tobytes(), trial_encoded_chunk.tobytes())
        )
        return len(trial_encoded_chunk) < len(unencoded_chunk)

    z = two_chunk_array(where, [CountingCodec(tag="a"), Crc32cCodec()], decide)
    z[:] = DATA
    assert len(seen) == 4
    for chunk_index, i, unencoded, trial in seen:
        if i == 0:
            assert unencoded == DATA[chunk_index[0]].tobytes()
            assert zlib.decompress(trial) == unencoded
        else:
            assert trial[:-4] == unencoded  # crc32c appends 4 bytes
    # One trial per chunk for the counting codec; the accepted trial is reused.
    assert tags() == ["a", "a"]
    files = chunk_files(where, "a")
    assert files[(0, 0)] == bytes([0b01]) + zlib.compress(DATA[0].tobytes(), 1)
    assert files[(1, 0)] == bytes([0b00]) + DATA[1].tobytes()


def test_indexed_signature(where: Where) -> None:
    seen: list[tuple[Any, ...]] = []

    def decide(chunk_index, codec_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        seen.append((chunk_index, codec_index, codec.index, codec.name, unencoded_chunk.tobytes()))
        return codec_index == chunk_index[0]

    z = two_chunk_array(where, [ZstdCodec(level=1), GzipCodec(level=1)], decide)
    z[:] = DATA
    assert sorted((s[0], s[1]) for s in seen) == [
        ((0, 0), 0),
        ((0, 0), 1),
        ((1, 0), 0),
        ((1, 0), 1),
    ]
    assert all(s[1] == s[2] and s[3] == ("zstd", "gzip")[s[1]] for s in seen)
    files = chunk_files(where, "a")
    assert files[(0, 0)][0] == 0b01
    assert files[(1, 0)][0] == 0b10
    assert bytes(numcodecs.Zstd().decode(files[(0, 0)][1:])) == DATA[0].tobytes()
    assert zlib.decompress(files[(1, 0)][1:], 31) == DATA[1].tobytes()


def test_spec_constructor_form_with_trial(where: Where) -> None:
    """``ConditionalCodec(configuration=..., decision_function=f, trial_encode=True)``."""
    seen: list[int] = []

    def decide(chunk_index, codec, unencoded_chunk, trial_encoded_chunk):  # type: ignore[no-untyped-def]
        seen.append(len(trial_encoded_chunk))
        return True

    codec = ConditionalCodec(
        configuration={"codecs": [CountingCodec(tag="a").to_dict()], "header_bits": 16},
        decision_function=decide,
        trial_encode=True,
    )
    z = zarr.create_array(where.location("a"), storage_options=where.options, shape=(8,),
                          chunks=(8,), dtype="<u4", compressors=[codec])
    z[:] = np.arange(8, dtype="<u4")
    assert seen == [len(zlib.compress(np.arange(8, dtype="<u4").tobytes(), 1))]
    assert tags() == ["a"]
    assert where.stored("a")["c/0"][:2] == b"\x01\x00"


def test_plain_signature_with_trial_encode_trials_every_codec_once() -> None:
    """trial_encode=True with a 3-parameter function: one encode per codec, reused."""
    codec = ConditionalCodec(
        codecs=[CountingCodec(tag="a"), CountingCodec(tag="b")],
        decision=lambda chunk_index, codec, unencoded_chunk: True,
        trial_encode=True,
    )
    out = encode(codec, ZEROS)
    assert tags() == ["a", "b"]
    assert out == b"\x03" + zlib.compress(zlib.compress(ZEROS, 1), 1)


def test_four_parameter_function_forms() -> None:
    with pytest.raises(DecisionError, match="fits two of the spec's signatures"):
        from_function(lambda a, b, c, d: True)
    assert from_function(lambda a, b, c, d: True, trial_encode=False).kind == "indexed"  # type: ignore[attr-defined]
    assert from_function(lambda a, b, c, d: True, trial_encode=True).kind == "trial"  # type: ignore[attr-defined]
    assert from_function(lambda a, codec_index, c, d: True, trial_encode=True).kind == "indexed"  # type: ignore[attr-defined]
    assert from_function(lambda a, b, c, trial: True).trial_encode


@pytest.mark.parametrize(
    ("decision", "kwargs", "match"),
    [
        ("fastest", {}, "unknown decision 'fastest'"),
        (True, {}, "cannot be a bool"),
        (-1, {}, ">= 0"),
        (3.5, {}, "not a decision"),
        (lambda a, b: True, {}, "takes 2 positional parameters"),
        (lambda a, b, c, d, e: True, {}, "takes 5 positional parameters"),
        (
            lambda chunk_index, codec, unencoded_chunk, trial_encoded_chunk: True,
            {"trial_encode": False},
            "takes a trial-encoded chunk, but trial_encode=False",
        ),
        ("compress_if_smaller", {"trial_encode": False}, "works by trial encoding"),
        ("smallest", {"trial_encode": False}, "works by trial encoding"),
    ],
)
def test_bad_decisions(decision: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(DecisionError, match=match):
        resolve_decision(decision, **kwargs)
    with pytest.raises(ValueError, match=match):
        ConditionalCodec(codecs=[ZstdCodec()], decision=decision, **kwargs)


def test_fixed_mask_beyond_codecs_fails_naming_bit() -> None:
    with pytest.raises(ValueError, match="sets bit 1"):
        encode(ConditionalCodec(codecs=[ZstdCodec()], decision=0b10), ZEROS)


# -- built-ins --------------------------------------------------------------------------


def test_never_apply_encodes_nothing() -> None:
    codec = ConditionalCodec(
        codecs=[CountingCodec(tag="a"), CountingCodec(tag="b")], decision="never_apply"
    )
    assert encode(codec, ZEROS) == b"\x00" + ZEROS
    assert CALLS == []


def test_always_apply_encodes_each_codec_once() -> None:
    codec = ConditionalCodec(
        codecs=[CountingCodec(tag="a"), CountingCodec(tag="b", kind="filter")],
        decision="always_apply",
    )
    out = encode(codec, RANDOM)  # grows, applied anyway
    assert tags() == ["a", "b"]
    assert out == b"\x03" + zlib.compress(RANDOM, 1)[::-1]


def test_compress_if_smaller_reuses_accepted_trial() -> None:
    codec = ConditionalCodec(codecs=[CountingCodec(tag="a")], decision="compress_if_smaller")
    assert encode(codec, ZEROS) == b"\x01" + zlib.compress(ZEROS, 1)
    assert tags() == ["a"]
    CALLS.clear()
    assert encode(codec, RANDOM) == b"\x00" + RANDOM
    assert tags() == ["a"]


def test_compress_if_smaller_cascades_through_filter() -> None:
    codec = ConditionalCodec(
        codecs=[CountingCodec(tag="f", kind="filter"), CountingCodec(tag="z")],
        decision="compress_if_smaller",
    )
    out = encode(codec, ZEROS)
    assert out == b"\x03" + zlib.compress(ZEROS[::-1], 1)
    assert [("f", ZEROS), ("z", ZEROS[::-1])] == CALLS  # compressor tried on the filtered bytes
    CALLS.clear()
    # Random data: the filter's compressor does not help, nor does the compressor alone.
    assert encode(codec, RANDOM) == b"\x00" + RANDOM
    assert [("f", RANDOM), ("z", RANDOM[::-1]), ("z", RANDOM)] == CALLS


def test_compress_if_smaller_skips_trailing_filter_and_checksum() -> None:
    codec = ConditionalCodec(
        codecs=[ZstdCodec(level=1), ShuffleCodec(element_size=4), Crc32cCodec()],
        decision="compress_if_smaller",
    )
    out = encode(codec, ZEROS)
    assert out[0] == 0b001
    assert bytes(numcodecs.Zstd().decode(out[1:])) == ZEROS


NESTED = {
    "shuffle": lambda: ShuffleCodec(element_size=4),
    "zstd": lambda: ZstdCodec(level=1),
    "gzip": lambda: GzipCodec(level=1),
    "blosc": lambda: BloscCodec(cname="lz4", clevel=5, typesize=4, shuffle="shuffle"),
    "crc32c": lambda: Crc32cCodec(),
}


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "runs", "smooth", "tiny"]))
    n = draw(st.integers(0, 2000))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.bytes(n)
    if kind == "runs":
        return np.repeat(rng.integers(0, 4, n // 16 + 1, dtype=np.uint8), 16)[:n].tobytes()
    if kind == "smooth":
        return np.cumsum(rng.normal(size=n // 4)).astype("<f4").tobytes()
    return rng.bytes(n % 8)


@given(
    names=st.lists(st.sampled_from(sorted(NESTED)), min_size=1, max_size=5),
    data=payloads(),
    header_bits=st.sampled_from([None, 16, 32]),
)
def test_compress_if_smaller_never_inflates(
    names: list[str], data: bytes, header_bits: int | None
) -> None:
    codec = ConditionalCodec(
        codecs=[NESTED[n]() for n in names], header_bits=header_bits, decision="compress_if_smaller"
    )
    out = encode(codec, data)
    assert len(out) <= len(data) + codec.header_nbytes
    assert decode(codec, out) == data
    mask = int.from_bytes(out[: codec.header_nbytes], "little")
    assert all(not mask >> i & 1 for i, n in enumerate(names) if n == "crc32c")


def test_ratio_at_most_applies_every_codec_where_they_reach_the_ratio() -> None:
    codecs = [CountingCodec(tag="f", kind="filter"), CountingCodec(tag="z")]
    stored = zlib.compress(SMOOTH[::-1], 1)
    ratio = len(stored) / len(SMOOTH)
    assert 0.1 < ratio < 0.99
    at = ConditionalCodec(codecs=codecs, decision=f"ratio_at_most({ratio!r})")
    assert encode(at, SMOOTH) == b"\x03" + stored  # exactly the ratio: applied
    assert tags() == ["f", "z"]  # each codec once, the trial kept
    below = ConditionalCodec(codecs=codecs, decision=f"ratio_at_most(r={ratio - 0.01!r})")
    assert encode(below, SMOOTH) == b"\x00" + SMOOTH
    assert encode(at, RANDOM) == b"\x00" + RANDOM  # the codecs grow it
    assert decode(at, encode(at, ZEROS)) == ZEROS
    assert at.decision.spelling() == f"ratio_at_most(r={ratio!r})"
    assert resolve_decision("ratio_at_most(1)").spelling() == "ratio_at_most(r=1.0)"
    for bad in ("ratio_at_most(0)", "ratio_at_most(1.5)", "ratio_at_most('a')",
                "ratio_at_most(True)"):
        with pytest.raises(DecisionError, match=r"'ratio_at_most': r must be a number in \(0, 1\]"):
            resolve_decision(bad)
    with pytest.raises(DecisionError, match="missing a required argument: 'r'"):
        resolve_decision("ratio_at_most")


@settings(deadline=None, max_examples=25)
@given(
    names=st.lists(st.sampled_from(sorted(NESTED)), min_size=1, max_size=4),
    data=payloads(),
    r=st.floats(min_value=0.01, max_value=1.0),
)
def test_ratio_at_most_never_inflates_and_keeps_its_bound(
    names: list[str], data: bytes, r: float
) -> None:
    codec = ConditionalCodec(codecs=[NESTED[n]() for n in names], decision=f"ratio_at_most({r!r})")
    out = encode(codec, data)
    assert decode(codec, out) == data
    mask = int.from_bytes(out[: codec.header_nbytes], "little")
    assert mask in (0, (1 << len(names)) - 1)
    payload = len(out) - codec.header_nbytes
    assert payload / len(data) <= r if mask else payload == len(data)


def all_mask_sizes(codecs: list[Any], data: bytes) -> dict[int, int]:
    """Stored size of every mask, each encoded on its own with a fixed-mask codec."""
    n = len(codecs)
    return {
        m: len(encode(ConditionalCodec(codecs=codecs, decision=m), data)) for m in range(1 << n)
    }


@given(names=st.lists(st.sampled_from(sorted(NESTED)), min_size=1, max_size=4), data=payloads())
def test_smallest_matches_brute_force(names: list[str], data: bytes) -> None:
    codecs = [NESTED[n]() for n in names]
    out = encode(ConditionalCodec(codecs=codecs, decision="smallest"), data)
    mask = out[0]
    sizes = all_mask_sizes(codecs, data)
    best = min(sizes.values())
    assert len(out) == best
    fewest = min(m.bit_count() for m, s in sizes.items() if s == best)
    assert mask.bit_count() == fewest  # ties go to fewer codecs
    assert sizes[mask] == best
    assert decode(ConditionalCodec(codecs=codecs), out) == data


def test_smallest_tries_every_mask_sharing_prefixes() -> None:
    codecs = [CountingCodec(tag=t, kind="filter") for t in "abc"]
    out = encode(ConditionalCodec(codecs=codecs, decision="smallest"), RANDOM)
    assert out == b"\x00" + RANDOM  # all masks tie; fewest codecs wins
    assert len(CALLS) == 2**3 - 1
    # every mask was produced: the inputs cover each non-empty prefix combination
    assert {t for t, _ in CALLS} == {"a", "b", "c"}
    assert (tags().count("a"), tags().count("b"), tags().count("c")) == (1, 2, 4)


def test_smallest_refuses_too_many_codecs() -> None:
    codecs = [Crc32cCodec()] * (MAX_SMALLEST_CODECS + 1)
    with pytest.raises(
        ValueError, match=rf"refuses more than {MAX_SMALLEST_CODECS} nested codecs.*has 9"
    ):
        ConditionalCodec(codecs=codecs, header_bits=16, decision="smallest")
    with pytest.raises(ValueError, match="refuses more than"):
        ConditionalCodec(codecs=codecs, header_bits=16).with_decision("smallest")
    # eight is fine
    assert ConditionalCodec(codecs=codecs[:8], decision="smallest").decision.name == "smallest"


# -- from_plan ------------------------------------------------------------------------------


def test_from_plan_sets_exactly_the_planned_masks(where: Where) -> None:
    plan = np.random.default_rng(3).integers(0, 8, size=(3, 4), dtype=np.uint8)
    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(6, 8),
        chunks=(2, 2),
        dtype="<i4",
        compressors=[
            ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(), Crc32cCodec()])
        ],
        decision=zarrext.from_plan(plan),
    )
    data = np.arange(48, dtype="<i4").reshape(6, 8)
    z[:] = data
    headers = np.zeros_like(plan)
    for (i, j), stored in chunk_files(where, "a").items():
        headers[i, j] = stored[0]
    np.testing.assert_array_equal(headers, plan)
    reopened = zarr.open_array(where.location("a"), storage_options=where.options)
    np.testing.assert_array_equal(reopened[:], data)


def test_plan_errors(where: Where) -> None:
    with pytest.raises(ValueError, match="integer array"):
        zarrext.from_plan(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=">= 0"):
        zarrext.from_plan(np.array([[-1]]))
    codec = ConditionalCodec(
        codecs=[ZstdCodec()], decision=zarrext.from_plan(np.zeros((1,), dtype=int))
    )
    with pytest.raises(ValueError, match="needs the chunk index"):
        encode(codec, ZEROS)
    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(4,),
        chunks=(2,),
        dtype="u1",
        compressors=[ConditionalCodec(codecs=[ZstdCodec()])],
        decision=zarrext.from_plan([1]),
    )
    with pytest.raises(ValueError, match=r"chunk \(1,\) is outside the plan"):
        z[:] = 1
    # A plan that names a codec the array does not have is refused on open.
    with pytest.raises(ValueError, match=r"from_plan: mask 0b10 sets bit 1"):
        zarrext.open_array(where.location("a"), storage_options=where.options,
                           decision=zarrext.from_plan([1, 2]))


# -- failing decisions leave stored chunks untouched ---------------------------------------


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (
            ZeroDivisionError("nope"),
            r"raised ZeroDivisionError for chunk \(1, 0\), nested codec 0 \('zstd'\): nope",
        ),
        (1, r"returned 1 \(int\) for chunk \(1, 0\)"),
        (None, r"returned None .*for chunk \(1, 0\)"),
        ("yes", r"returned 'yes' .*for chunk \(1, 0\)"),
        (np.int64(1), r"for chunk \(1, 0\).*expected True or False"),
    ],
)
def test_bad_decision_fails_write_and_keeps_chunk(where: Where, answer: Any, match: str) -> None:
    data = np.arange(64, dtype="<f4").reshape(8, 8)
    zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(8, 8),
        chunks=(4, 8),
        dtype="<f4",
        compressors=[ConditionalCodec(codecs=[ZstdCodec()])],
        decision="always_apply",
    )[:] = data
    before = chunk_files(where, "a")
    metadata = where.stored("a")["zarr.json"]

    def decide(chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        if chunk_index != (1, 0):
            return False
        if isinstance(answer, Exception):
            raise answer
        return answer

    z = zarrext.open_array(where.location("a"), storage_options=where.options, decision=decide)
    with pytest.raises(ValueError, match=match):
        z[4:, :] = -data[4:]
    assert chunk_files(where, "a")[(1, 0)] == before[(1, 0)]
    assert where.stored("a")["zarr.json"] == metadata
    reopened = zarr.open_array(where.location("a"), storage_options=where.options)
    np.testing.assert_array_equal(reopened[:], data)


def test_numpy_bool_answer_accepted(where: Where) -> None:
    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(4,),
        chunks=(4,),
        dtype="u1",
        compressors=[ConditionalCodec(codecs=[ZstdCodec()])],
        decision=lambda chunk_index, codec, unencoded_chunk: np.bool_(True),
    )
    z[:] = 7
    assert where.stored("a")["c/0"][0] == 1


# -- the spec's examples --------------------------------------------------------------------

SPEC_CODECS = [
    {"name": "shuffle", "configuration": {"element_size": 4}},
    {"name": "zstd", "configuration": {"level": 5}},
]


def decide_based_on_size(chunk_index, codec, unencoded_chunk, trial_encoded_chunk):  # type: ignore[no-untyped-def]
    """Spec example 1, verbatim."""
    if codec.name == "shuffle":
        return True
    return len(trial_encoded_chunk) < len(unencoded_chunk)


def random_and_smooth(shape: tuple[int, int], chunk: int) -> np.ndarray:
    """Left half: random float32 bits; right half: a smooth field."""
    rng = np.random.default_rng(42)
    data = np.empty(shape, dtype="<f4")
    half = shape[1] // 2
    data[:, :half] = rng.integers(0, 2**32, size=(shape[0], half), dtype=np.uint32).view(np.float32)
    y, x = np.mgrid[0 : shape[0], 0 : shape[1] - half]
    data[:, half:] = np.round(np.sin(y / 20) * np.cos(x / 30) * 256) / 256
    return data


def shuffled(block: np.ndarray) -> bytes:
    return bytes(
        numcodecs.Shuffle(elementsize=4).encode(np.ascontiguousarray(block).view(np.uint8))
    )


@pytest.mark.parametrize("decision", ["compress_if_smaller", "spec_function"])
def test_spec_example_1_prevents_inflation(where: Where, decision: str) -> None:
    shape, chunk = (128, 128), 32
    data = random_and_smooth(shape, chunk)
    codec = ConditionalCodec(
        configuration={"codecs": SPEC_CODECS},
        decision_function=decide_based_on_size if decision == "spec_function" else decision,
        trial_encode=True,
    )
    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=shape,
        chunks=(chunk, chunk),
        dtype="<f4",
        compressors=[codec, Crc32cCodec()],
    )
    z[:] = data
    raw_size = chunk * chunk * 4
    files = chunk_files(where, "a")
    assert len(files) == 16
    for (i, j), stored in files.items():
        body = stored[:-4]
        assert int.from_bytes(stored[-4:], "little") == crc32c.crc32c(body)
        block = data[i * chunk : (i + 1) * chunk, j * chunk : (j + 1) * chunk]
        mask, payload = body[0], body[1:]
        if j < 2:  # random bits: stored uncompressed, never larger than raw + header
            assert len(body) == raw_size + 1
            if decision == "compress_if_smaller":
                assert mask == 0b00
                assert payload == block.tobytes()
            else:  # the spec's function always applies shuffle
                assert mask == 0b01
                assert payload == shuffled(block)
        else:  # smooth: shuffled and compressed
            assert mask == 0b11
            assert len(body) < raw_size // 2
            assert bytes(numcodecs.Zstd().decode(payload)) == shuffled(block)
    back = zarr.open_array(where.location("a"), storage_options=where.options)[:]
    np.testing.assert_array_equal(back.view(np.uint32), data.view(np.uint32))


def test_spec_example_1_raw_chunk_is_the_data(where: Where) -> None:
    data = random_and_smooth((32, 64), 32)
    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(32, 64),
        chunks=(32, 32),
        dtype="<f4",
        compressors=[
            ConditionalCodec(configuration={"codecs": SPEC_CODECS}, decision="compress_if_smaller")
        ],
    )
    z[:] = data
    files = chunk_files(where, "a")
    assert files[(0, 0)] == b"\x00" + data[:, :32].tobytes()
    assert files[(0, 1)][0] == 0b11


@pytest.mark.parametrize("rewrite", ["spec_loop", "recompress"])
def test_spec_example_2_write_fast_compress_later(where: Where, rewrite: str) -> None:
    def disable_all_codecs(chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        return False

    ingest = ConditionalCodec(
        configuration={"codecs": SPEC_CODECS},
        decision_function=disable_all_codecs,
        trial_encode=False,
    )
    shape, chunk = (96, 96), 32
    data = random_and_smooth(shape, chunk)
    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=shape,
        chunks=(chunk, chunk),
        dtype="<f4",
        compressors=[ingest, Crc32cCodec()],
    )
    for row in range(0, shape[0], 16):  # data arrives in batches
        z[row : row + 16] = data[row : row + 16]
    metadata = where.stored("a")["zarr.json"]
    ingested = chunk_files(where, "a")
    assert all(stored[0] == 0 for stored in ingested.values())
    assert all(len(stored) == 1 + chunk * chunk * 4 + 4 for stored in ingested.values())

    # Offline optimization: re-open with the optimizing decision and rewrite chunk by chunk.
    if rewrite == "spec_loop":
        z = zarrext.open_array(
            where.location("a"), storage_options=where.options, mode="r+",
            decision=decide_based_on_size, trial_encode=True,
        )
        for idx in np.ndindex(*z.cdata_shape):
            s = tuple(slice(i * chunk, (i + 1) * chunk) for i in idx)
            z[s] = z[s]
    else:
        zarrext.recompress(
            where.location("a"), decide_based_on_size, trial_encode=True,
            storage_options=where.options,
        )

    assert where.stored("a")["zarr.json"] == metadata
    optimized = chunk_files(where, "a")
    assert optimized.keys() == ingested.keys()
    assert sum(map(len, optimized.values())) < 0.8 * sum(map(len, ingested.values()))
    for (_, j), stored in optimized.items():
        assert stored[0] == (0b01 if j == 0 else 0b11)  # random column: shuffle only
    back = zarr.open_array(where.location("a"), storage_options=where.options)[:]
    np.testing.assert_array_equal(back.view(np.uint32), data.view(np.uint32))


def test_spec_example_3_precomputed_plan(where: Where) -> None:
    shape, chunk = (80, 80), 16
    data = random_and_smooth(shape, chunk)
    grid = (shape[0] // chunk, shape[1] // chunk)

    def has_high_entropy(raw: np.ndarray) -> bool:
        return len(zlib.compress(raw.tobytes(), 1)) > 0.9 * raw.nbytes

    precomputed_bitmasks = np.empty(grid, dtype=np.uint8)
    for i, j in itertools.product(range(grid[0]), range(grid[1])):
        block = data[i * chunk : (i + 1) * chunk, j * chunk : (j + 1) * chunk]
        precomputed_bitmasks[i, j] = 0b00 if has_high_entropy(block) else 0b11
    assert 0 < precomputed_bitmasks.sum() < 3 * precomputed_bitmasks.size  # both kinds present

    def apply_precomputed_mask(chunk_index, codec_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        mask_for_chunk = precomputed_bitmasks[chunk_index]
        return bool((mask_for_chunk >> codec_index) & 1)

    for decision in (apply_precomputed_mask, zarrext.from_plan(precomputed_bitmasks)):
        name = getattr(decision, "__name__", "from_plan")
        lookup_codec = ConditionalCodec(
            configuration={"codecs": SPEC_CODECS}, decision_function=decision, trial_encode=False
        )
        z = zarrext.create_array(
            where.location(name), storage_options=where.options, shape=shape,
            chunks=(chunk, chunk), dtype="<f4", compressors=[lookup_codec],
        )
        for i, j in itertools.product(range(grid[0]), range(grid[1])):
            chunk_slice = np.s_[i * chunk : (i + 1) * chunk, j * chunk : (j + 1) * chunk]
            z[chunk_slice] = data[chunk_slice]
        headers = np.zeros(grid, dtype=np.uint8)
        for (i, j), stored in chunk_files(where, name).items():
            headers[i, j] = stored[0]
        np.testing.assert_array_equal(headers, precomputed_bitmasks)
        assert json.loads(where.stored(name)["zarr.json"])["codecs"][1]["configuration"][
            "codecs"
        ] == [
            {"name": "shuffle", "configuration": {"element_size": 4}},
            {"name": "zstd", "configuration": {"level": 5, "checksum": False}},
        ]
        back = zarr.open_array(where.location(name), storage_options=where.options)[:]
        np.testing.assert_array_equal(back.view(np.uint32), data.view(np.uint32))


def test_decision_cannot_alter_stored_bytes(where: Where) -> None:
    """The arrays a decision sees are read-only: mutating them must not corrupt the chunk."""
    flags: list[tuple[bool, bool]] = []

    def decide(chunk_index, codec, unencoded_chunk, trial_encoded_chunk):  # type: ignore[no-untyped-def]
        flags.append((unencoded_chunk.flags.writeable, trial_encoded_chunk.flags.writeable))
        return True

    z = zarrext.create_array(
        where.location("a"),
        storage_options=where.options,
        shape=(8,),
        chunks=(8,),
        dtype="u1",
        compressors=[ConditionalCodec(codecs=[ZstdCodec(level=1)])],
        decision=decide,
    )
    z[:] = np.arange(8, dtype="u1")
    assert flags == [(False, False)]

    def vandal(chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        unencoded_chunk[:] = 0
        return False

    before = where.stored("a")["c/0"]
    with pytest.raises(ValueError, match=r"decision 'vandal' raised ValueError for chunk \(0,\)"):
        zarrext.open_array(
            where.location("a"), storage_options=where.options, decision=vandal
        )[:] = np.arange(8, 16, dtype="u1")
    assert where.stored("a")["c/0"] == before


def test_random_function_decisions_through_arrays(where: Where) -> None:
    """A decision drawn per (chunk, codec): every stored header matches it."""
    examples = itertools.count()

    @given(
        names=st.lists(st.sampled_from(sorted(NESTED)), min_size=1, max_size=4),
        shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
        seed=st.integers(0, 2**16),
        sharded=st.booleans(),
    )
    def check(names: list[str], shape: list[int], seed: int, sharded: bool) -> None:
        rng = np.random.default_rng(seed)
        chunks = tuple(int(rng.integers(1, s + 1)) for s in shape)
        grid_shape = tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))
        table = rng.integers(0, 2, size=(*grid_shape, len(names))).astype(bool)

        def decide(chunk_index, codec_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
            return bool(table[(*chunk_index, codec_index)])

        data = rng.integers(0, 4, size=shape).astype("<f4")
        codecs = [NESTED[n]() for n in names]
        name = f"a{next(examples)}.zarr"  # a fresh array for every example
        shards = tuple(c * g for c, g in zip(chunks, grid_shape, strict=True)) if sharded else None
        z = zarrext.create_array(
            where.location(name),
            storage_options=where.options,
            shape=tuple(shape),
            chunks=chunks,
            shards=shards,
            dtype="<f4",
            compressors=[ConditionalCodec(codecs=codecs)],
            decision=decide,
            config={"write_empty_chunks": True},
        )
        z[...] = data
        np.testing.assert_array_equal(
            zarr.open_array(where.location(name), storage_options=where.options, mode="r")[...],
            data,
        )
        masks = np.zeros(grid_shape, dtype=np.int64)
        if sharded:  # a single shard holding every inner chunk, index at the end
            shard = where.stored(name)["c/" + "/".join("0" * len(shape))]
            n = int(np.prod(grid_shape))
            index = np.frombuffer(shard[-(16 * n + 4) : -4], "<u8").reshape(*grid_shape, 2)
            for idx in np.ndindex(*grid_shape):
                masks[idx] = shard[int(index[idx][0])]
        else:
            for idx, stored in chunk_files(where, name).items():
                masks[idx] = stored[0]
        expected = (table * (1 << np.arange(len(names)))).sum(axis=-1)
        np.testing.assert_array_equal(masks, expected)

    if not where.local:  # about 0.2 s an example over HTTP: fewer of them there
        check = settings(max_examples=10)(check)
    check()


@pytest.mark.parametrize(
    ("decision", "match"),
    [
        (0b100, r"mask 0b100 sets bit 2"),
        (lambda: zarrext.from_plan(np.array([[1, 0b1000]])), r"sets bit 3"),
    ],
)
def test_masks_beyond_the_codecs_are_refused_at_construction(decision: Any, match: str) -> None:
    decision = decision() if callable(decision) else decision
    with pytest.raises(DecisionError, match=match):
        ConditionalCodec([ZstdCodec(), GzipCodec()], decision=decision)


# -- issue 34.8: the spec's "original, unencoded chunk", read literally --------------


def _alone(codec: Any, data: bytes) -> bytes:
    """``codec`` applied to ``data`` by zarr's own codec, outside any conditional codec."""
    return codec._encode_sync(PROTO.buffer.from_bytes(data), SPEC).to_bytes()  # type: ignore[no-any-return]


@given(names=st.lists(st.sampled_from(sorted(NESTED)), min_size=1, max_size=4), data=payloads())
@settings(max_examples=40)
def test_spec_literal_judges_every_codec_on_the_original_chunk(
    names: list[str], data: bytes
) -> None:
    """Spec 000's rule ``len(trial) < len(unencoded)`` with both of the original
    chunk: codec ``i`` is enabled when it alone shrinks the raw bytes; the enabled
    codecs are then applied in order. The expected bytes come from zarr's codecs."""
    codecs = [NESTED[n]() for n in names]
    mask = sum(1 << i for i, c in enumerate(codecs) if len(_alone(c, data)) < len(data))
    payload = data
    for i, c in enumerate(codecs):
        if mask >> i & 1:
            payload = _alone(c, payload)
    out = encode(ConditionalCodec(codecs=codecs, decision="spec_literal"), data)
    assert out == bytes([mask]) + payload
    assert decode(ConditionalCodec(codecs=codecs), out) == data
    # a decision function read literally (cascade=False) is shown the same chunk
    seen: list[tuple[bytes, bytes]] = []

    def rule(chunk_index, codec, unencoded_chunk, trial_encoded_chunk):  # type: ignore[no-untyped-def]
        seen.append((unencoded_chunk.tobytes(), trial_encoded_chunk.tobytes()))
        return len(trial_encoded_chunk) < len(unencoded_chunk)

    literal = ConditionalCodec(codecs=codecs, decision=from_function(rule, cascade=False))
    assert encode(literal, data) == out
    assert seen == [(data, _alone(c, data)) for c in codecs]


def test_spec_literal_never_enables_shuffle_where_compress_if_smaller_does() -> None:
    """The interpretation's reason, on a smooth float32 chunk: shuffle keeps the size,
    so the literal rule never enables it (mask 0b10: zstd alone); zarrext's cascaded
    rule keeps it because zstd after it ends smaller (mask 0b11)."""
    codecs = [ShuffleCodec(element_size=4), ZstdCodec(level=5)]
    literal = encode(ConditionalCodec(codecs=codecs, decision="spec_literal"), SMOOTH)
    assert literal == b"\x02" + bytes(numcodecs.Zstd(level=5).encode(SMOOTH))
    cascaded = encode(ConditionalCodec(codecs=codecs, decision="compress_if_smaller"), SMOOTH)
    shuffled = bytes(numcodecs.Shuffle(elementsize=4).encode(np.frombuffer(SMOOTH, np.uint8)))
    assert cascaded == b"\x03" + bytes(numcodecs.Zstd(level=5).encode(shuffled))
    assert len(cascaded) < len(literal)


def test_cascade_shows_each_codec_the_bytes_it_would_receive() -> None:
    """zarrext's reading (cascade, the default): codec 1 is shown codec 0's output
    once codec 0 is enabled; the literal reading shows it the original chunk."""
    codecs = [CountingCodec(tag="f", kind="filter"), CountingCodec(tag="z")]
    shown: dict[bool, list[bytes]] = {}
    seen: list[bytes] = []

    def rule(chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        seen.append(unencoded_chunk.tobytes())
        return True

    for cascade in (True, False):
        encode(ConditionalCodec(codecs=codecs, decision=from_function(rule, cascade=cascade)),
               SMOOTH)
        shown[cascade] = seen[:]
        seen.clear()
    assert shown[True] == [SMOOTH, SMOOTH[::-1]]
    assert shown[False] == [SMOOTH, SMOOTH]


def test_spec_literal_through_arrays_is_recorded_and_reused(where: Where) -> None:
    """A built-in like the others: zarrext.create_array records it, zarrext.open_array
    writes with it again; the stored chunks are zstd of the raw values alone."""
    codecs = [{"name": "shuffle", "configuration": {"element_size": 4}},
              {"name": "zstd", "configuration": {"level": 3}}]
    data = np.tile(np.linspace(0, 1, 64, dtype="<f4"), (4, 1))
    z = zarrext.create_array(where.location("a"), storage_options=where.options, shape=(4, 64),
                             chunks=(2, 64), dtype="<f4", compressors=[ConditionalCodec(codecs)],
                             decision="spec_literal")
    z[:2] = data[:2]
    assert zarrext_record(z.attrs) == {"decision": "spec_literal"}
    zarrext.open_array(where.location("a"), storage_options=where.options)[2:] = data[2:]
    for (i, _), stored in chunk_files(where, "a").items():
        raw = data[2 * i : 2 * i + 2].tobytes()
        assert stored == b"\x02" + bytes(numcodecs.Zstd(level=3).encode(raw))


def test_never_apply_on_the_codec_is_a_decision_and_none_is_not(where: Where) -> None:
    """``ConditionalCodec(..., decision="never_apply")`` stores raw on purpose: no
    NoDecisionWarning; the same codec with no decision warns once."""
    import warnings

    from zarrext.codecs.decisions import NoDecisionWarning

    for decision, warns in (("never_apply", False), (None, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            z = zarrext.create_array(
                where.location(f"a{warns}"), storage_options=where.options, shape=(8,),
                chunks=(4,), dtype="<u4",
                compressors=[ConditionalCodec([ZstdCodec()], decision=decision)])
            z[:] = 1
        assert sum(issubclass(w.category, NoDecisionWarning) for w in caught) == warns
        assert {k: v[0] for k, v in chunk_files(where, f"a{warns}").items()} == {
            (0,): 0, (1,): 0}


# -- what a built-in is given: the chunk's raw bytes, not zarr Buffers -------------------


def given_buffers(decision: Any) -> Any:
    """``decision`` as an instance of a subclass that does not say ``opaque_bytes``:
    the codec gives it zarr Buffers, as before decisions could take raw bytes."""
    twin = copy.copy(decision)
    twin.__class__ = type(f"Buffered{type(decision).__name__}", (type(decision),), {})
    return twin


# nested codecs with their own raw-bytes encoder (shuffle, the pipeline's zstd) and
# without (zarr's codecs, through its Buffer API), in any order
RAW_NESTED = NESTED | {"pipeline zstd": lambda: ScratchZstdCodec(level=1)}


@given(
    names=st.lists(st.sampled_from(sorted(RAW_NESTED)), min_size=1, max_size=4),
    data=payloads(),
    spelling=st.sampled_from(
        [cls.example_spelling() for cls in BUILTIN_DECISIONS.values()] + ["0b101", "3"]
    ),
)
def test_a_builtin_given_raw_bytes_stores_what_it_stores_given_buffers(
    names: list[str], data: bytes, spelling: str
) -> None:
    decision = resolve_decision(int(spelling, 0) if spelling[0].isdigit() else spelling, None)
    codecs = [RAW_NESTED[n]() for n in names]
    if isinstance(decision, FixedMask) and decision.mask is not None:
        decision = resolve_decision(decision.mask & (1 << len(codecs)) - 1, None)
    raw = ConditionalCodec(codecs=codecs, decision=decision)
    buffered = ConditionalCodec(codecs=codecs, decision=given_buffers(decision))
    assert raw.decision.opaque_bytes
    assert not buffered.decision.opaque_bytes
    stored = encode(raw, data)
    assert stored == encode(buffered, data)
    if data:  # zarr's zstd and blosc cannot decode their own frames of nothing
        assert decode(raw, stored) == data


def test_only_a_class_that_says_so_is_given_raw_bytes() -> None:
    """A subclass of a built-in may look into the bytes its parent only measured: it is
    given zarr Buffers unless its own body says ``opaque_bytes``."""
    seen: list[type] = []

    class Looking(CompressIfSmaller):
        def choose(self, chunk: Any) -> Any:
            seen.append(type(chunk.data))
            assert chunk.data.as_numpy_array().tobytes() == SMOOTH  # a Buffer's method
            return super().choose(chunk)

    class Declared(CompressIfSmaller):
        opaque_bytes = True

    assert all(cls.opaque_bytes for cls in BUILTIN_DECISIONS.values())
    assert all(cls.opaque_bytes for cls in (FixedMask, Plan, Undecided))
    assert not Looking.opaque_bytes
    assert Declared.opaque_bytes
    assert not FunctionDecision.opaque_bytes  # a user's function sees Buffers
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=1)],
                             decision=Looking())
    stored = encode(codec, SMOOTH)
    assert len(seen) == 1
    assert issubclass(seen[0], Buffer)
    assert stored[0] == 0b11
    assert decode(codec, stored) == SMOOTH
