"""zarrs-written optional arrays: exact values, byte-identical rewrites, schemas."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import zarr

import zarrext
from tests.conftest import DATA

ZARRS_ARRAYS = DATA / "zarrs-optional"
FLAT = "array_optional.zarr/array"
NESTED = "array_optional_nested.zarr/array"

# The README's tables. N = missing; S = outer present, inner missing.
N, S = "N", "S"
FLAT_VALUES = [
    [0, N, 2, 3],
    [N, 5, N, 7],
    [8, 9, N, N],
    [12, N, N, N],
]
NESTED_VALUES = [
    [N, S, 2, 3],
    [N, 5, N, 7],
    [S, S, N, N],
    [S, S, N, N],
]


def _expected(table: list[list[object]], nested: bool) -> np.ndarray:
    """The README table as the in-memory optional array (built independently of zarrext)."""
    inner = np.dtype([("value", "u1"), ("valid", "?")])
    dtype = np.dtype([("value", inner if nested else "u1"), ("valid", "?")])
    out = np.zeros((4, 4), dtype=dtype)
    for (i, j), cell in np.ndenumerate(np.array(table, dtype=object)):
        if cell == N:
            continue
        out["valid"][i, j] = True
        if not nested:
            out["value"][i, j] = cell
        elif cell != S:
            out["value"]["value"][i, j] = cell
            out["value"]["valid"][i, j] = True
        else:
            out["value"]["valid"][i, j] = False
    return out


def _schema(name: str) -> dict[str, object]:
    return json.loads((DATA / name).read_text())


def _codec_dicts(codecs: list[dict[str, object]]) -> list[dict[str, object]]:
    """Every optional codec dict in a codec list, nested ones included."""
    found = []
    for codec in codecs:
        if codec["name"] == "optional":
            found.append(codec)
            found.extend(_codec_dicts(codec["configuration"]["data_codecs"]))  # type: ignore[index]
    return found


@pytest.mark.parametrize(("path", "table", "nested"), [(FLAT, FLAT_VALUES, False),
                                                        (NESTED, NESTED_VALUES, True)])
def test_zarrs_arrays_read_as_readme_says(path: str, table: list[list[object]], nested: bool
                                          ) -> None:
    z = zarr.open_array(ZARRS_ARRAYS / path, mode="r")
    got = z[...]
    expected = _expected(table, nested)
    np.testing.assert_array_equal(got["valid"], expected["valid"])
    np.testing.assert_array_equal(got, expected)
    masked = zarrext.to_masked(got)
    # a nested level keeps a per-field mask; recordmask is the per-element one
    assert masked.recordmask.tolist() == [[c == N for c in row] for row in table]


def test_nested_fill_value_is_present_null() -> None:
    z = zarr.open_array(ZARRS_ARRAYS / NESTED, mode="r")
    fill = z.metadata.fill_value
    assert bool(fill["valid"])
    assert not bool(fill["value"]["valid"])
    assert z.metadata.to_dict()["fill_value"] == [None]
    # chunk (1, 0) is absent: it reads as the fill value
    block = z[2:4, 0:2]
    assert block["valid"].all()
    assert not block["value"]["valid"].any()


# Spec 003: a chunk with no element present holds the data codecs applied to nothing;
# zarrs writes no data bytes there. For [bytes] the two are the same; for the nested
# array's data chain (an optional of packbits and bytes) it is that level's header, with
# both lengths 0 (packbits and bytes of nothing are empty).
OF_NOTHING = {FLAT: b"", NESTED: struct.pack("<QQ", 0, 0)}


def _as_the_spec_writes(path: str, chunk: bytes) -> bytes:
    """A zarrs chunk as spec 003 writes it: a zero-length data section becomes the
    data codecs' encoding of nothing."""
    mask_len, data_len = struct.unpack("<QQ", chunk[:16])
    if data_len:
        return chunk
    nothing = OF_NOTHING[path]
    return struct.pack("<QQ", mask_len, len(nothing)) + chunk[16:16 + mask_len] + nothing


@pytest.mark.parametrize("path", [FLAT, NESTED])
def test_rewrite_is_byte_identical(path: str, tmp_path: Path) -> None:
    """Byte for byte what zarrs wrote, but where no element is present (see above)."""
    src = ZARRS_ARRAYS / path
    values = zarr.open_array(src, mode="r")[...]
    dst = tmp_path / "array"
    dst.mkdir()
    shutil.copy(src / "zarr.json", dst / "zarr.json")
    zarr.open_array(dst, mode="r+")[...] = values
    ours = {p.relative_to(dst): p.read_bytes() for p in dst.rglob("c/**/*") if p.is_file()}
    theirs = {p.relative_to(src): p.read_bytes() for p in src.rglob("c/**/*") if p.is_file()}
    assert ours.keys() == theirs.keys()
    for key, data in theirs.items():
        assert ours[key] == _as_the_spec_writes(path, data), key
    if path == NESTED:  # zarrs' chunk c/1/1 has no element present
        assert ours[Path("c/1/1")] != theirs[Path("c/1/1")]


@pytest.mark.parametrize("path", [FLAT, NESTED])
def test_rewrite_with_masked_array_and_create_array(path: str, tmp_path: Path) -> None:
    """Same metadata through zarr.create_array, values written as a MaskedArray."""
    src = zarr.open_array(ZARRS_ARRAYS / path, mode="r")
    values = src[...]
    meta = src.metadata
    z = zarr.create_array(
        tmp_path / "a", shape=meta.shape, chunks=(2, 2), dtype=meta.data_type,
        fill_value=meta.fill_value, serializer=meta.codecs[0], compressors=None,
    )
    z[...] = zarrext.to_masked(values)
    for key in ("c/0/0", "c/0/1"):
        assert (tmp_path / "a" / key).read_bytes() == (ZARRS_ARRAYS / path / key).read_bytes()


@pytest.mark.parametrize("path", [FLAT, NESTED])
def test_metadata_validates_against_registry_schemas(path: str, tmp_path: Path) -> None:
    dtype_schema = _schema("optional-dtype.schema.json")
    codec_schema = _schema("optional-codec.schema.json")
    packbits_schema = _schema("packbits.schema.json")
    src = zarr.open_array(ZARRS_ARRAYS / path, mode="r")
    # what we write back for the same array
    z = zarr.create_array(
        tmp_path / "a", shape=(4, 4), chunks=(2, 2), dtype=src.metadata.data_type,
        fill_value=src.metadata.fill_value, serializer=src.metadata.codecs[0], compressors=None,
    )
    written = json.loads((tmp_path / "a" / "zarr.json").read_text())
    jsonschema.validate(written["data_type"], dtype_schema)
    if written["data_type"]["configuration"]["name"] == "optional":
        jsonschema.validate(written["data_type"]["configuration"], dtype_schema)
    optional_codecs = _codec_dicts(written["codecs"])
    assert len(optional_codecs) == (2 if path == NESTED else 1)
    for codec in optional_codecs:
        jsonschema.validate(codec, codec_schema)
        for mask_codec in codec["configuration"]["mask_codecs"]:
            jsonschema.validate(mask_codec, packbits_schema)
    assert z.metadata.data_type == src.metadata.data_type
    assert written["fill_value"] == json.loads((ZARRS_ARRAYS / path / "zarr.json").read_text())[
        "fill_value"]


def test_fresh_process_reads_through_entry_points() -> None:
    """No `import zarrext`: the data type and codecs come from entry points."""
    code = (
        "import zarr, sys\n"
        f"z = zarr.open_array({str(ZARRS_ARRAYS / FLAT)!r}, mode='r')\n"
        "a = z[...]\n"
        "print(a['valid'].astype(int).tolist(), a['value'][a['valid']].tolist())\n"
        "print(type(z.metadata.codecs[0]).__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    valid_line, module_line = out.stdout.strip().splitlines()
    expected = _expected(FLAT_VALUES, nested=False)
    assert valid_line == f"{expected['valid'].astype(int).tolist()} " \
        f"{expected['value'][expected['valid']].tolist()}"
    assert module_line == "zarrext.codecs.optional"


# -- zarrs reads a chunk with no element present in either form ---------------------


def _zarrs_decode(tmp_path: Path, chunk: bytes) -> str:
    """What zarrs (through zarrs-python's Rust pipeline, called directly) makes of one
    hand-built chunk of optional<uint8> (4 elements; mask packbits, data [bytes, gzip]).

    zarrs-python 0.2.3 cannot hand an optional array to Python (its pipeline refuses
    the structured dtype first): called directly, zarrs decodes the chunk, then stops
    at copying the optional result out with "Expected fixed length array bytes". That
    error therefore says the chunk itself was decoded; a codec's error says it was not.
    """
    from zarrs._internal import ChunkItem, CodecPipelineImpl

    codec = {"name": "zarrs.optional", "configuration": {
        "mask_codecs": [{"name": "packbits"}],
        "data_codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}}]}}
    metadata: dict[str, Any] = {
        "zarr_format": 3, "node_type": "array", "shape": [4],
        "data_type": {"name": "zarrs.optional",
                      "configuration": {"name": "uint8", "configuration": {}}},
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": None, "codecs": [codec],
    }
    (tmp_path / "c").mkdir(parents=True)
    (tmp_path / "zarr.json").write_text(json.dumps(metadata))
    (tmp_path / "c" / "0").write_bytes(chunk)
    store = zarr.storage.LocalStore(tmp_path, read_only=True)
    pipeline = CodecPipelineImpl(json.dumps(metadata), store_config=store)
    whole = [slice(0, 4)]
    try:
        pipeline.retrieve_chunks_and_apply_index(
            [ChunkItem("c/0", whole, [4], whole, [4])], np.zeros(4, np.uint8))
    except Exception as e:  # zarrs' errors reach Python as RuntimeError or OSError
        return f"{type(e).__name__}: {e}"
    return "read"


DECODED = "RuntimeError: Expected fixed length array bytes"


def _chunk(mask: int, data: bytes) -> bytes:
    return struct.pack("<QQ", 1, len(data)) + bytes([mask]) + data


@pytest.mark.parametrize(("mask", "data", "outcome"), [
    pytest.param(0b0000, b"", DECODED, id="none present, no data bytes (zarrs)"),
    pytest.param(0b0000, gzip.compress(b"", mtime=0), DECODED,
                 id="none present, gzip of nothing (spec)"),
    pytest.param(0b0011, gzip.compress(b"\1\2", mtime=0), DECODED, id="two present"),
    pytest.param(0b0000, b"not gzip", DECODED, id="none present, data section not read"),
    # the probe reaches zarrs' codecs: a data section they cannot decode fails there
    pytest.param(0b0011, b"not gzip", "OSError", id="two present, data not gzip"),
])
def test_zarrs_decodes_chunks_with_no_element_present_in_either_form(
    tmp_path: Path, mask: int, data: bytes, outcome: str
) -> None:
    """zarrs 0.23.8 does not look at the data section when no element is present, so
    the spec's form (which zarrext writes) and zarrs' own both decode."""
    pytest.importorskip("zarrs")
    assert _zarrs_decode(tmp_path, _chunk(mask, data)).startswith(outcome)
