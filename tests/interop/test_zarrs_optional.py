"""zarrs-written optional arrays: exact values, byte-identical rewrites, schemas."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize("path", [FLAT, NESTED])
def test_rewrite_is_byte_identical(path: str, tmp_path: Path) -> None:
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
        assert ours[key] == data, key


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
