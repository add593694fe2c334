"""A format 2 source's numcodecs filters in its converted copy, and a larger copy refused
(issue 42 item 4).

The sources are written by zarr-python in format 2 with numcodecs' filters; what the
copy must read is what numcodecs itself decodes from the source's chunk objects
(:func:`numcodecs_read`), never what zarrext reads. ``FixedScaleOffset`` of floats is
spec 002's ``scale_offset`` + ``cast_value``: the copy stores the source's integers
(:func:`stored_codes` reads both as integers, their filters taken out of their metadata).
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

import zarrext
from tests.conftest import Run
from zarrext.errors import LargerOutputError
from zarrext.jobs.larger import is_larger

SHAPE = (40, 30)  # edge chunks in both dimensions
CHUNKS = (16, 16)


def v2_source(path: Path, values: np.ndarray, filters: list[Any], compressor: Any,
              fill_value: Any) -> zarr.Array:
    """A format 2 array zarr-python writes with numcodecs' ``filters`` and ``compressor``;
    its last chunk row left unwritten (missing chunks read the fill value)."""
    src = zarr.create_array(str(path), shape=values.shape, chunks=CHUNKS, dtype=values.dtype,
                            zarr_format=2, filters=filters, compressors=compressor,
                            fill_value=fill_value)
    src[:32] = values[:32]
    return src


def numcodecs_read(path: Path) -> np.ndarray:
    """The array at ``path`` (format 2) as numcodecs decodes its chunk objects: the
    compressor, then the filters in reverse; a missing chunk is the fill value."""
    meta = json.loads((path / ".zarray").read_text())
    dtype = np.dtype(meta["dtype"])
    compressor = numcodecs.get_codec(meta["compressor"]) if meta["compressor"] else None
    filters = [numcodecs.get_codec(f) for f in meta["filters"] or []]
    shape, chunks = tuple(meta["shape"]), tuple(meta["chunks"])
    out = np.full(shape, meta["fill_value"], dtype=dtype)
    grid = [range(-(-s // c)) for s, c in zip(shape, chunks, strict=True)]
    for coords in itertools.product(*grid):
        key = path / ".".join(map(str, coords))
        if not key.exists():
            continue
        data: Any = key.read_bytes()
        if compressor is not None:
            data = compressor.decode(data)
        for f in reversed(filters):
            data = f.decode(data)
        block = np.frombuffer(np.asarray(data).tobytes(), dtype=dtype).reshape(chunks)
        where = tuple(slice(i * c, min((i + 1) * c, s))
                      for i, c, s in zip(coords, chunks, shape, strict=True))
        out[where] = block[tuple(slice(0, w.stop - w.start) for w in where)]
    return out


def stored_codes(path: Path, scratch: Path, fill: int) -> np.ndarray:
    """The integers an array stores behind its scale/offset filters: a copy of it whose
    metadata names the integer type and no filters, read by zarr-python."""
    copy = scratch / path.name
    shutil.copytree(path, copy)
    if (copy / ".zarray").exists():
        meta = json.loads((copy / ".zarray").read_text())
        (fso,) = meta["filters"]
        meta.update(dtype=fso["astype"], filters=None, fill_value=fill)
        (copy / ".zarray").write_text(json.dumps(meta))
    else:
        meta = json.loads((copy / "zarr.json").read_text())
        scale_offset, cast_value, *rest = meta["codecs"]
        assert (scale_offset["name"], cast_value["name"]) == ("scale_offset", "cast_value")
        meta.update(data_type=cast_value["configuration"]["data_type"], codecs=rest,
                    fill_value=fill)
        (copy / "zarr.json").write_text(json.dumps(meta))
    return zarr.open_array(str(copy), mode="r")[...]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


# offset, scale, astype, fill value, values
FIXED_SCALE_OFFSET = [
    pytest.param(1000.0, 10.0, "<i2", 0.0, lambda rng: rng.normal(1013.0, 20.0, SHAPE),
                 id="pressure-int16"),
    # ties of np.around (half to even): x * 2 = k + 0.5
    pytest.param(0.0, 2.0, "|u1", 0.5,
                 lambda rng: rng.integers(0, 200, SHAPE) / 4 + np.where(
                     rng.random(SHAPE) < 0.5, 0.0, 0.01), id="ties-uint8"),
    pytest.param(273.15, 100.0, "<i4", 273.15, lambda rng: rng.normal(290.0, 15.0, SHAPE),
                 id="kelvin-int32"),
    pytest.param(-5.0, 0.3, ">u2", -5.0, lambda rng: rng.uniform(-5, 20000, SHAPE),
                 id="big-endian-uint16"),
]


@pytest.mark.parametrize(("offset", "scale", "astype", "fill", "make"), FIXED_SCALE_OFFSET)
def test_fixed_scale_offset_becomes_scale_offset_and_cast_value(
    tmp_path: Path, offset: float, scale: float, astype: str, fill: float, make: Any
) -> None:
    values = make(np.random.default_rng(7)).astype("<f8")
    fso = numcodecs.FixedScaleOffset(offset=offset, scale=scale, dtype="<f8", astype=astype)
    v2_source(tmp_path / "src", values, [fso], numcodecs.Zstd(level=3), fill)
    expected = numcodecs_read(tmp_path / "src")
    assert not same_bits(expected[:32], values[:32])  # the source's filters are lossy
    # (the default chain may take a few bytes more than zstd alone on noise: allowed)
    (report,) = zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"),
                                allow_larger=True)

    out = zarr.open_array(str(tmp_path / "out"), mode="r")
    names = [c["name"] for c in out.metadata.to_dict()["codecs"]]
    assert names[:2] == ["scale_offset", "cast_value"]
    cast = out.metadata.to_dict()["codecs"][1]["configuration"]
    assert cast["data_type"] == np.dtype(astype).name
    assert cast.get("rounding", "nearest-even") == "nearest-even"
    assert same_bits(out[...], expected)  # numcodecs' values, bit for bit
    assert same_bits(np.asarray(out.fill_value, dtype="<f8"), np.asarray(fill, dtype="<f8"))

    encoded_fill = int(np.around((fill - offset) * scale))
    source_codes = stored_codes(tmp_path / "src", tmp_path / "codes", encoded_fill)
    output_codes = stored_codes(tmp_path / "out", tmp_path / "codes", encoded_fill)
    np.testing.assert_array_equal(output_codes, source_codes)
    # the integers, compressed: about the source's size (a float64 copy is 2-4x it)
    assert report.output_bytes < 1.25 * report.source_bytes


def test_fixed_scale_offset_of_float32_is_kept_as_numcodecs_codec(tmp_path: Path) -> None:
    """numcodecs decodes float32 codes in float64 and rounds once; scale_offset in float32
    rounds twice (code 7 of scale 10, offset 1000 reads 1000.7 vs 1000.69995): kept."""
    values = np.random.default_rng(3).normal(1013.0, 20.0, SHAPE).astype("<f4")
    fso = numcodecs.FixedScaleOffset(offset=1000, scale=10, dtype="<f4", astype="<i2")
    v2_source(tmp_path / "src", values, [fso], numcodecs.Zstd(level=3), 0.0)
    zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"), allow_larger=True)
    out = zarr.open_array(str(tmp_path / "out"), mode="r")
    assert out.metadata.to_dict()["codecs"][0]["name"] == "numcodecs.fixedscaleoffset"
    assert same_bits(out[...], numcodecs_read(tmp_path / "src"))


@pytest.mark.parametrize(
    ("dtype", "filters", "make"),
    [
        ("<i4", [numcodecs.Delta(dtype="<i4")],
         lambda rng: np.cumsum(rng.integers(0, 5, SHAPE), axis=1) + 10_000),
        ("<f4", [numcodecs.BitRound(keepbits=8)], lambda rng: rng.normal(0, 1, SHAPE)),
        ("<f8", [numcodecs.Quantize(digits=2, dtype="<f8")],
         lambda rng: rng.normal(50, 5, SHAPE)),
        ("<f8", [numcodecs.Delta(dtype="<f8"), numcodecs.Quantize(digits=3, dtype="<f8")],
         lambda rng: np.cumsum(rng.normal(0, 1, SHAPE), axis=1)),
    ],
    ids=["delta", "bitround", "quantize", "delta-quantize"],
)
def test_other_filters_are_kept(tmp_path: Path, dtype: str, filters: list[Any],
                                make: Any) -> None:
    values = make(np.random.default_rng(11)).astype(dtype)
    v2_source(tmp_path / "src", values, filters, numcodecs.Zlib(level=5), 0)
    (report,) = zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"))
    out = zarr.open_array(str(tmp_path / "out"), mode="r")
    names = [c["name"] for c in out.metadata.to_dict()["codecs"]]
    assert names[: len(filters)] == [f"numcodecs.{f.codec_id}" for f in filters]
    assert same_bits(out[...], numcodecs_read(tmp_path / "src"))
    assert report.output_bytes <= report.source_bytes


# --- a copy larger than its source ------------------------------------------------------


def _compressible(path: Path) -> None:
    src = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f8",
                            compressors=numcodecs.Zstd(level=3), zarr_format=2)
    src[...] = np.round(np.linspace(0, 10, SHAPE[0] * SHAPE[1]).reshape(SHAPE), 1)


def _output_traces(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name != "src")


def test_a_larger_copy_is_refused_and_nothing_is_published(tmp_path: Path) -> None:
    _compressible(tmp_path / "src")
    with pytest.raises(LargerOutputError) as refused:
        zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"),
                        codecs=[{"name": "bytes"}])
    message = str(refused.value)
    assert "\n" not in message
    assert f"the copy of {tmp_path / 'src'} would be " in message
    assert "x larger than its source" in message
    assert "--allow-larger" in message
    assert _output_traces(tmp_path) == []  # no output, no staged copy left

    (report,) = zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"),
                                codecs=[{"name": "bytes"}], allow_larger=True)
    assert report.output_bytes > report.source_bytes
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out"))[...],
                                  zarr.open_array(str(tmp_path / "src"))[...])


def test_filters_that_lose_the_fill_value_are_dropped_and_the_larger_copy_refused(
    tmp_path: Path,
) -> None:
    """Fill value 1000.005 reads back as 1000.0 through FixedScaleOffset(1000, 100): the
    copy cannot keep the filter (its missing chunks must read 1000.005), stores float64,
    and is refused as larger, as the issue's 2.66x copy is."""
    values = np.random.default_rng(2).normal(1013.0, 20.0, SHAPE)
    fso = numcodecs.FixedScaleOffset(offset=1000, scale=100, dtype="<f8", astype="<i2")
    v2_source(tmp_path / "src", values, [fso], numcodecs.Zstd(level=3), 1000.005)
    with pytest.raises(LargerOutputError, match=r"would be \d\.\d\dx larger than its source"):
        zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"))
    assert _output_traces(tmp_path) == []
    zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"), allow_larger=True)
    out = zarr.open_array(str(tmp_path / "out"), mode="r")
    assert out.metadata.to_dict()["codecs"][0]["name"] == "bytes"
    assert same_bits(out[...], numcodecs_read(tmp_path / "src"))  # 1000.005 where missing


def test_data_no_codec_compresses_converts_within_the_margin(tmp_path: Path) -> None:
    """Random floats: the default chain stores them raw plus a header per chunk, a little
    more than the source's zstd frames; within the margin, not refused."""
    src = zarr.create_array(str(tmp_path / "src"), shape=SHAPE, chunks=(8, 8), dtype="<f8",
                            compressors=numcodecs.Zstd(level=3), zarr_format=2)
    src[...] = np.random.default_rng(5).normal(size=SHAPE)
    (report,) = zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"))
    assert report.source_bytes < report.output_bytes  # larger, by a header per chunk
    assert not is_larger(report.source_bytes, report.output_bytes)
    assert is_larger(report.source_bytes, report.source_bytes + 1025)
    assert is_larger(100_000, 105_001)
    assert not is_larger(100_000, 105_000)


def test_a_group_with_one_larger_copy_is_refused_whole(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "src"), mode="w", zarr_format=2)
    group.create_array("small", shape=(64,), chunks=(16,), dtype="<i8", fill_value=0)[...] = 1
    _compressible(tmp_path / "src" / "big")
    with pytest.raises(LargerOutputError, match=r"^the copy of big would be "):
        zarrext.convert(str(tmp_path / "src"), str(tmp_path / "out"),
                        codecs=[{"name": "bytes"}])
    assert _output_traces(tmp_path) == []


def test_cli_refuses_a_larger_copy_in_one_line(tmp_path: Path, run: Run) -> None:
    _compressible(tmp_path / "src")
    plain = json.dumps([{"name": "bytes"}])
    code, _, err = run("convert", str(tmp_path / "src"), "--out", str(tmp_path / "out"),
                       "--codecs", plain)
    assert code == 1
    (line,) = err.strip().splitlines()
    assert "src would be" in line
    assert "larger than its source" in line
    assert "--allow-larger" in line
    assert _output_traces(tmp_path) == []

    code, _, err = run("convert", str(tmp_path / "src"), "--out", str(tmp_path / "out"),
                       "--codecs", plain, "--allow-larger", "--quiet")
    assert code == 0, err
    assert (tmp_path / "out" / "zarr.json").exists()


def test_quantize_refuses_with_the_same_check(tmp_path: Path) -> None:
    """Quantize's refusal is the same check, error and wording as convert's."""
    y, x = np.mgrid[0:64, 0:128]
    src = zarr.create_array(str(tmp_path / "src"), shape=(64, 128), chunks=(32, 64),
                            dtype="<f4", fill_value=np.nan)
    # float32 values near 1000 within 1e-6: uint32 codes that compress worse than floats
    src[...] = (1000 + 50 * np.sin(x / 13) + 20 * np.cos(y / 7)).astype("<f4")
    with pytest.raises(LargerOutputError, match=r"^the quantized copy of / would be .* "
                       r"larger than its source .*--allow-larger \(allow_larger=True\)"):
        zarrext.quantize.copy_quantized(str(tmp_path / "src"), str(tmp_path / "out"),
                                        max_abs_error=1e-6)
    assert _output_traces(tmp_path) == []


def test_a_quantized_copy_is_refused_when_larger_by_any_byte() -> None:
    """quantize exists to make arrays smaller: no margin for its copies (convert's is
    for the header a chunk of incompressible data gains)."""
    assert not is_larger(100_000, 100_000, margin=False)
    assert is_larger(100_000, 100_001, margin=False)
    assert not is_larger(100_000, 100_001)
