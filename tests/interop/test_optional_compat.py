"""The optional type among other writers: both names, the registry's codec layout,
and plain structured dtypes left to zarr-python's ``struct``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec
from zarr.core.dtype import Struct

import zarrext
from tests.conftest import DATA
from zarrext import OptionalCodec, OptionalDType

ZARRS_FLAT = DATA / "zarrs-optional" / "array_optional.zarr" / "array"
ZARRS_NESTED = DATA / "zarrs-optional" / "array_optional_nested.zarr" / "array"


def _names(node: object) -> list[str]:
    """Every "name" whose value is optional or zarrs.optional, depth first."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("name") in ("optional", "zarrs.optional"):
            found.append(node["name"])
        for value in node.values():
            found.extend(_names(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_names(value))
    return found


def test_plain_structured_dtype_stays_struct(tmp_path: Path) -> None:
    values = np.zeros(4, dtype=[("value", "<f4"), ("valid", "?")])
    values["value"] = [1.5, 2, 3, 4]
    values["valid"] = [True, False, True, False]
    z = zarr.create_array(tmp_path / "s", shape=(4,), chunks=(2,),
                          dtype=[("value", "<f4"), ("valid", "?")])
    assert isinstance(z.metadata.data_type, Struct)
    z[:] = values
    assert json.loads((tmp_path / "s" / "zarr.json").read_text())["data_type"]["name"] == "struct"
    back = zarr.open_array(tmp_path / "s", mode="r")[:]
    np.testing.assert_array_equal(back, values)  # both fields as written: no mask applied
    assert back["value"][1] == 2


@pytest.mark.parametrize("name", ["optional", "zarrs.optional"])
def test_writer_chooses_the_name_of_type_and_codecs(tmp_path: Path, name: str) -> None:
    dtype = OptionalDType(OptionalDType("int16"), name=name)
    z = zarr.create_array(tmp_path / "a", shape=(5,), chunks=(5,), dtype=dtype, fill_value=None)
    values = np.zeros(5, dtype.to_native_dtype())
    values["valid"] = [False, True, True, True, False]
    values["value"]["valid"] = [False, False, True, True, False]
    values["value"]["value"] = [0, 0, 3, -4, 0]
    z[:] = values
    written = json.loads((tmp_path / "a" / "zarr.json").read_text())
    # data type, its nested level, the codec and its nested codec: one name throughout
    assert _names(written["data_type"]) == [name, name]
    assert _names(written["codecs"]) == [name, name]
    back = zarr.open_array(tmp_path / "a", mode="r")
    assert back.metadata.data_type.name == name
    assert back.metadata.data_type == OptionalDType(OptionalDType("int16"))  # same type
    np.testing.assert_array_equal(back[:], z[:])
    assert back[:]["valid"].tolist() == [False, True, True, True, False]
    assert back[:]["value"]["value"].tolist() == [0, 0, 3, -4, 0]


@pytest.mark.parametrize("source", [ZARRS_FLAT, ZARRS_NESTED], ids=["flat", "nested"])
def test_zarrs_named_metadata_reads_like_the_registry_name(tmp_path: Path, source: Path) -> None:
    """zarrs' arrays with every optional renamed zarrs.optional (as zarrs 0.23.8 writes)."""
    renamed = tmp_path / "a"
    shutil.copytree(source, renamed)
    text = (renamed / "zarr.json").read_text()
    assert '"optional"' in text
    (renamed / "zarr.json").write_text(text.replace('"optional"', '"zarrs.optional"'))
    got = zarr.open_array(renamed, mode="r")
    assert got.metadata.data_type.name == "zarrs.optional"
    assert got.metadata.codecs[0].name == "zarrs.optional"
    np.testing.assert_array_equal(got[:], zarr.open_array(source, mode="r")[:])


def test_default_codecs_follow_the_registry(tmp_path: Path) -> None:
    z = zarr.create_array(tmp_path / "a", shape=(8,), chunks=(4,), fill_value=None,
                          dtype=OptionalDType("float32"))
    codecs = json.loads((tmp_path / "a" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs] == ["optional"]  # no top-level compressor
    config = codecs[0]["configuration"]
    assert [c["name"] for c in config["mask_codecs"]] == ["packbits", "zstd"]
    assert [c["name"] for c in config["data_codecs"]] == ["bytes", "zstd"]
    z[:] = np.ma.MaskedArray(np.arange(8, dtype="f4"), mask=[0, 1] * 4)
    assert zarrext.to_masked(zarr.open_array(tmp_path / "a")[:]).sum() == 0 + 2 + 4 + 6


def test_user_codecs_are_kept(tmp_path: Path) -> None:
    serializer = OptionalCodec(data_codecs=[BytesCodec()])
    zarr.create_array(tmp_path / "a", shape=(8,), chunks=(4,), dtype=OptionalDType("uint8"),
                      fill_value=None, serializer=serializer, compressors=[GzipCodec()])
    codecs = json.loads((tmp_path / "a" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs] == ["optional", "gzip"]
    assert [c["name"] for c in codecs[0]["configuration"]["data_codecs"]] == ["bytes"]
    zarr.create_array(tmp_path / "b", shape=(8,), chunks=(4,), dtype=OptionalDType("uint8"),
                      fill_value=None, compressors=[ZstdCodec(level=3)])
    codecs = json.loads((tmp_path / "b" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs] == ["optional", "zstd"]


def test_nan_in_plain_floats_is_missing(tmp_path: Path) -> None:
    z = zarr.create_array(tmp_path / "a", shape=(4,), chunks=(4,), fill_value=None,
                          dtype=OptionalDType("float64"))
    z[:] = np.array([1.0, np.nan, 3.0, np.nan])
    assert z[:]["valid"].tolist() == [True, False, True, False]
    z[2] = np.nan
    assert z[:]["valid"].tolist() == [True, False, False, False]
    # a present NaN needs a mask that says so
    z[:] = np.ma.MaskedArray([np.nan, 1, 2, 3], mask=[0, 0, 0, 1])
    assert z[:]["valid"].tolist() == [True, True, True, False]
    assert np.isnan(z[:]["value"][0])


def test_optional_codec_with_inner_type_as_serializer_makes_an_optional_array(
    tmp_path: Path,
) -> None:
    """How xarray's encoding={"v": {"serializer": ...}} asks for the optional type."""
    z = zarr.create_array(tmp_path / "a", shape=(4,), chunks=(4,), dtype="float64",
                          fill_value=np.nan, serializer=OptionalCodec(inner="int16"))
    assert z.metadata.data_type == OptionalDType("int16")
    assert z.metadata.to_dict()["fill_value"] is None
    z[:] = np.array([1.0, np.nan, -3.0, 4.0])
    back = zarr.open_array(tmp_path / "a", mode="r")[:]
    assert back["valid"].tolist() == [True, False, True, True]
    assert back["value"].tolist() == [1, 0, -3, 4]
