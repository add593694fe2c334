"""Tests for reading N5 in place (zarrext.formats.n5, ``zarrext n5``)."""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
import math
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numcodecs
import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

import zarrext
from tests.conftest import DATA, Run, raises_chunk_error, tree_digest
from zarrext.cli import app
from zarrext.codecs.n5_default import N5DefaultCodec, N5DefaultCodecError
from zarrext.formats import n5

COMPRESSORS: dict[str, tuple[dict, Callable[[bytes], bytes] | None]] = {
    "raw": ({"type": "raw"}, None),
    "gzip": ({"type": "gzip", "level": -1, "useZlib": False}, gzip.compress),
    "zlib": ({"type": "gzip", "level": 6, "useZlib": True}, zlib.compress),
    "zstd": ({"type": "zstd", "level": 3}, numcodecs.Zstd(level=3).encode),
    "bzip2": ({"type": "bzip2", "blockSize": 9}, bz2.compress),
    "xz": ({"type": "xz", "preset": 6}, lzma.compress),
}


def block_bytes(block: np.ndarray, compress: Callable[[bytes], bytes] | None = None) -> bytes:
    """An N5 default-mode block: u16 BE mode 0, u16 BE ndim, u32 BE sizes, BE F-order data."""
    header = struct.pack(f">HH{block.ndim}I", 0, block.ndim, *block.shape)
    payload = block.astype(block.dtype.newbyteorder(">")).tobytes(order="F")
    return header + (compress(payload) if compress else payload)


def write_n5(
    root: Path,
    data: np.ndarray,
    block_size: tuple[int, ...],
    compression: str = "raw",
    *,
    truncate: bool = True,
    attributes: dict | None = None,
) -> Path:
    """Write an N5 dataset as the Java N5 library does (truncated edge blocks by default)."""
    config, compress = COMPRESSORS[compression]
    root.mkdir(parents=True, exist_ok=True)
    (root / "attributes.json").write_text(
        json.dumps(
            {
                "dimensions": list(data.shape),
                "blockSize": list(block_size),
                "dataType": str(data.dtype),
                "compression": config,
                **(attributes or {}),
            }
        )
    )
    grid = [math.ceil(s / b) for s, b in zip(data.shape, block_size, strict=True)]
    for index in itertools.product(*map(range, grid)):
        sel = tuple(slice(i * b, (i + 1) * b) for i, b in zip(index, block_size, strict=True))
        block = data[sel]
        if not truncate and block.shape != block_size:
            full = np.zeros(block_size, data.dtype)
            full[tuple(slice(0, s) for s in block.shape)] = block
            block = full
        path = root.joinpath(*map(str, index))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(block_bytes(block, compress))
    return root


def sample(shape: tuple[int, ...], dtype: str = "uint16", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


# -- metadata -------------------------------------------------------------------


def test_pad_metadata_has_the_full_transpose_and_v2_keys() -> None:
    attrs = {
        "dimensions": [1024, 512, 3],
        "blockSize": [64, 32, 3],
        "dataType": "uint16",
        "compression": {"type": "zstd", "level": 3},
        "pixelResolution": [4, 4, 40],
    }
    meta = n5.array_metadata(attrs, "pad")
    assert meta["shape"] == [1024, 512, 3]
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [64, 32, 3]
    assert meta["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "/"}}
    assert meta["codecs"] == [
        {"name": "transpose", "configuration": {"order": [2, 1, 0]}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
        {"name": "pad", "configuration": {"location": "start", "nbytes": 16}},
    ]
    assert meta["attributes"] == {"pixelResolution": [4, 4, 40]}
    schema = json.loads((DATA / "pad.schema.json").read_text())
    jsonschema.validate(meta["codecs"][-1], schema)


@pytest.mark.parametrize(
    ("compression", "codec"),
    [
        ({"type": "raw"}, None),
        ({"type": "gzip", "level": -1}, {"name": "gzip", "configuration": {"level": 6}}),
        (
            {"type": "gzip", "level": 2, "useZlib": True},
            {"name": "numcodecs.zlib", "configuration": {"level": 2}},
        ),
        (
            {"type": "blosc", "cname": "zstd", "clevel": 4, "shuffle": 2, "blocksize": 0},
            {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 4,
                    "shuffle": "bitshuffle",
                    "typesize": 4,
                    "blocksize": 0,
                },
            },
        ),
        (
            {"type": "bzip2", "blockSize": 5},
            {"name": "numcodecs.bz2", "configuration": {"level": 5}},
        ),
    ],
)
def test_compression_mapping(compression: dict, codec: dict | None) -> None:
    assert n5.compression_codec(compression, "float32") == codec


@pytest.mark.parametrize("compression", [{"type": "lz4"}, {"type": "jpeg"}])
def test_compressors_without_an_equivalent_are_refused(tmp_path: Path, compression) -> None:
    root = write_n5(tmp_path / "d", sample((4, 4)), (2, 2))
    attrs = json.loads((root / "attributes.json").read_text())
    attrs["compression"] = compression
    (root / "attributes.json").write_text(json.dumps(attrs))
    with pytest.raises(n5.N5ConversionError, match=compression["type"]):
        n5.write_zarr_metadata(root)
    assert not (root / "zarr.json").exists()


# -- reading in place -------------------------------------------------------------


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
@pytest.mark.parametrize(
    ("shape", "block", "dtype"),
    [((13, 7), (4, 3), "uint16"), ((5, 9, 6), (2, 4, 3), "float32"), ((11,), (4,), "int64")],
)
def test_truncated_edge_blocks_choose_n5_default(
    tmp_path: Path, compression: str, shape, block, dtype: str
) -> None:
    data = sample(shape, dtype)
    root = write_n5(tmp_path / "d", data, block, compression, truncate=True)
    (result,) = n5.write_zarr_metadata(root)
    assert result.codec == "n5_default"
    assert "truncated" in result.reason
    assert result.scan is not None
    assert result.scan.truncated
    np.testing.assert_array_equal(zarr.open_array(root, mode="r")[:], data)


@pytest.mark.parametrize("compression", ["raw", "gzip"])
def test_padded_edge_blocks_choose_pad(tmp_path: Path, compression: str) -> None:
    data = sample((9, 5, 4), "int32")
    root = write_n5(tmp_path / "d", data, (4, 2, 3), compression, truncate=False)
    (result,) = n5.write_zarr_metadata(root)
    assert result.codec == "pad"
    assert "full-size" in result.reason
    assert result.metadata["codecs"][-1]["name"] == "pad"
    np.testing.assert_array_equal(zarr.open_array(root, mode="r")[:], data)


def test_no_edge_blocks_choose_pad(tmp_path: Path) -> None:
    data = sample((8, 6))
    root = write_n5(tmp_path / "d", data, (4, 3))
    (result,) = n5.write_zarr_metadata(root)
    assert result.codec == "pad"
    assert "no edge blocks" in result.reason
    np.testing.assert_array_equal(zarr.open_array(root)[:], data)


def test_pad_cannot_read_truncated_blocks_but_n5_default_can(tmp_path: Path) -> None:
    data = sample((5, 3), "uint8")
    root = write_n5(tmp_path / "d", data, (2, 2))
    n5.write_zarr_metadata(root, codec="pad")
    with pytest.raises(ValueError, match=r"reshape|size"):
        zarr.open_array(root)[:]
    n5.write_zarr_metadata(root, codec="n5_default", overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(root)[:], data)


def test_non_square_values_land_in_place(tmp_path: Path) -> None:
    # One 2x3 block holding 0..5 in N5 (column-major) order: element (i, j) = i + 2 j.
    root = tmp_path / "d"
    root.mkdir()
    (root / "attributes.json").write_text(
        json.dumps(
            {
                "dimensions": [2, 3],
                "blockSize": [2, 3],
                "dataType": "uint8",
                "compression": {"type": "raw"},
            }
        )
    )
    (root / "0").mkdir()
    (root / "0" / "0").write_bytes(struct.pack(">HHII", 0, 2, 2, 3) + bytes(range(6)))
    n5.write_zarr_metadata(root)
    assert zarr.open_array(root)[:].tolist() == [[0, 2, 4], [1, 3, 5]]


def test_absent_blocks_read_as_zero_and_unknown_edges_choose_n5_default(tmp_path: Path) -> None:
    data = sample((6, 5))
    root = write_n5(tmp_path / "d", data, (4, 4))
    for key in ("1/0", "0/1", "1/1"):  # every edge block
        (root / key).unlink()
    (result,) = n5.write_zarr_metadata(root)
    assert result.codec == "n5_default"
    expected = np.zeros_like(data)
    expected[:4, :4] = data[:4, :4]
    np.testing.assert_array_equal(zarr.open_array(root)[:], expected)


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        (struct.pack(">HHII", 1, 2, 2, 2) + b"\0" * 8, r"block 1/1 .*mode is 1"),
        (struct.pack(">HHI", 0, 1, 2) + b"\0" * 4, r"block 1/1 .*1 dimensions, the array has 2"),
    ],
)
def test_bad_edge_block_header_fails_conversion_naming_it(tmp_path: Path, stored, message):
    root = write_n5(tmp_path / "d", sample((3, 3), "uint8"), (2, 2))
    (root / "1" / "1").write_bytes(stored)
    with pytest.raises(n5.N5ConversionError, match=message):
        n5.write_zarr_metadata(root)
    assert not (root / "zarr.json").exists()


def test_bad_interior_block_fails_reading_naming_it(tmp_path: Path) -> None:
    root = write_n5(tmp_path / "d", sample((6, 6), "uint16"), (3, 3), "gzip")
    n5.write_zarr_metadata(root, codec="n5_default")
    short_block = struct.pack(">HHII", 0, 2, 3, 3) + gzip.compress(b"\0" * 17, mtime=0)
    (root / "0" / "1").write_bytes(short_block)
    with raises_chunk_error(N5DefaultCodecError, match=r"block of chunk \(0, 1\).*17 bytes"):
        zarrext.open_array(root, mode="r")[:]


# -- containers and the CLI --------------------------------------------------------------


def make_container(root: Path) -> dict[str, np.ndarray]:
    root.mkdir()
    (root / "attributes.json").write_text(json.dumps({"n5": "4.0.0", "title": "demo"}))
    arrays = {
        "raw/volume": sample((10, 6, 4), "uint8"),
        "raw/image": sample((7, 3), "float64"),
        "labels/s0": sample((8, 8), "uint64"),
    }
    write_n5(root / "raw" / "volume", arrays["raw/volume"], (4, 4, 4), "gzip", truncate=False)
    write_n5(root / "raw" / "image", arrays["raw/image"], (3, 3), "zstd", attributes={"unit": "nm"})
    write_n5(root / "labels" / "s0", arrays["labels/s0"], (4, 4), "raw")
    (root / "raw" / "attributes.json").write_text(json.dumps({"kind": "raw data"}))
    return arrays


def test_whole_container_converts_to_a_zarr_hierarchy(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    arrays = make_container(root)
    results = n5.write_zarr_metadata(root)
    kinds = {str(r.path.relative_to(root)): (r.node_type, r.codec) for r in results}
    assert kinds == {
        ".": ("group", None),
        "labels": ("group", None),
        "raw": ("group", None),
        "labels/s0": ("array", "pad"),
        "raw/image": ("array", "n5_default"),
        "raw/volume": ("array", "pad"),
    }
    group = zarr.open_group(root, mode="r")
    assert group.attrs["title"] == "demo"
    assert "n5" not in group.attrs
    assert group["raw"].attrs["kind"] == "raw data"
    assert group["raw/image"].attrs["unit"] == "nm"
    for name, data in arrays.items():
        np.testing.assert_array_equal(group[name][:], data)
    assert sorted(group["raw"].array_keys()) == ["image", "volume"]


def test_existing_zarr_json_is_kept_unless_overwrite(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    make_container(root)
    n5.write_zarr_metadata(root)
    before = tree_digest(root)
    with pytest.raises(n5.N5ConversionError, match="already exists"):
        n5.write_zarr_metadata(root, codec="n5_default")
    assert tree_digest(root) == before  # nothing half-written
    assert len(n5.write_zarr_metadata(root, codec="n5_default", overwrite=True)) == 6
    assert zarr.open_array(root / "labels" / "s0").shape == (8, 8)
    assert isinstance(zarr.open_array(root / "labels" / "s0").metadata.codecs[0], N5DefaultCodec)


def test_zarr_json_not_written_by_n5_is_never_replaced(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    make_container(root)
    foreign = zarr.create_array(tmp_path / "other.zarr", shape=(3,), dtype="i1")
    (root / "labels" / "s0" / "zarr.json").write_bytes(
        (tmp_path / "other.zarr" / "zarr.json").read_bytes()
    )
    assert foreign.shape == (3,)
    before = tree_digest(root)
    for overwrite in (False, True):
        with pytest.raises(n5.N5ConversionError, match="not written by zarrext n5"):
            n5.write_zarr_metadata(root, overwrite=overwrite)
        assert tree_digest(root) == before


def test_zarr_v3_group_is_refused_untouched(tmp_path: Path) -> None:
    group = zarr.create_group(tmp_path / "big.zarr")
    group.create_array("a", shape=(4, 4), chunks=(2, 2), dtype="i4")[:] = 7
    before = tree_digest(tmp_path / "big.zarr")
    for args in ([], ["--overwrite"]):
        result = CliRunner().invoke(app, ["n5", str(tmp_path / "big.zarr"), *args])
        assert result.exit_code == 1
        assert "no N5 dataset" in result.output
        assert tree_digest(tmp_path / "big.zarr") == before
    assert (zarr.open_array(tmp_path / "big.zarr" / "a")[:] == 7).all()


def test_directory_without_n5_metadata_is_refused_untouched(tmp_path: Path) -> None:
    (tmp_path / "d" / "x" / "y").mkdir(parents=True)
    (tmp_path / "d" / "x" / "data.bin").write_bytes(b"1234")
    before = tree_digest(tmp_path / "d")
    result = CliRunner().invoke(app, ["n5", str(tmp_path / "d")])
    assert result.exit_code == 1
    assert "no N5 dataset" in result.output
    assert tree_digest(tmp_path / "d") == before
    assert not list((tmp_path / "d").rglob("zarr.json"))


def test_block_directory_is_refused_untouched(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    make_container(root)
    before = tree_digest(root)
    block_dir = root / "raw" / "volume" / "0"
    assert block_dir.is_dir()
    result = CliRunner().invoke(app, ["n5", str(block_dir)])
    assert result.exit_code == 1
    assert "block directory of the N5 dataset" in result.output
    assert tree_digest(root) == before


def test_directories_off_the_way_to_a_dataset_get_no_zarr_json(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    make_container(root)
    (root / "notes" / "drafts").mkdir(parents=True)
    n5.write_zarr_metadata(root)
    assert not (root / "notes" / "zarr.json").exists()
    assert not (root / "notes" / "drafts" / "zarr.json").exists()


def test_cli_converts_and_explains(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    arrays = make_container(root)
    result = CliRunner().invoke(app, ["n5", str(root)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "truncated edge block" in result.output  # raw/image: why n5_default
    assert "full-size (padded)" in result.output  # raw/volume: why pad
    assert "wrote 6 zarr.json" in result.output
    np.testing.assert_array_equal(zarr.open_array(root / "raw" / "image")[:], arrays["raw/image"])


def test_cli_dry_run_writes_nothing_and_errors_exit_1(tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    make_container(root)
    result = CliRunner().invoke(app, ["n5", str(root), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert not (root / "zarr.json").exists()
    (root / "raw" / "image" / "2" / "0").write_bytes(b"\0\2")
    result = CliRunner().invoke(app, ["n5", str(root)], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert "block 2/0" in result.output


def test_cli_quiet_prints_nothing_but_errors(run: Run, tmp_path: Path) -> None:
    root = tmp_path / "c.n5"
    arrays = make_container(root)
    code, out, err = run("n5", root, "-q")
    assert code == 0, err
    assert (out, err) == ("", "")
    np.testing.assert_array_equal(zarr.open_array(root / "raw" / "image")[:], arrays["raw/image"])
    code, out, err = run("n5", root, "--quiet")  # zarr.json exists now: an error, still said
    assert code == 1
    assert out == ""
    assert "already exists" in err


# -- dimension names ------------------------------------------------------------------

# Non-square, so that names given in the wrong order would not fit the data.
VOLUME_SHAPE, VOLUME_BLOCKS = (9, 5, 4), (4, 2, 3)


def test_n5_axes_become_dimension_names_in_n5_order(tmp_path: Path) -> None:
    data = sample(VOLUME_SHAPE, "int32")
    root = write_n5(
        tmp_path / "c.n5" / "vol", data, VOLUME_BLOCKS, attributes={"axes": ["x", "y", "z"]}
    )
    (group, result) = n5.write_zarr_metadata(tmp_path / "c.n5")
    assert group.node_type == "group"
    assert result.metadata["dimension_names"] == ["x", "y", "z"]
    array = zarr.open_array(root)
    assert array.metadata.dimension_names == ("x", "y", "z")
    assert array.attrs["axes"] == ["x", "y", "z"]  # the N5 attribute stays
    np.testing.assert_array_equal(array[:], data)


def test_xarray_opens_a_converted_tensorstore_volume(tmp_path: Path) -> None:
    ts = pytest.importorskip("tensorstore")
    xr = pytest.importorskip("xarray")
    data = sample(VOLUME_SHAPE, "uint16", seed=3)
    spec = {
        "driver": "n5",
        "kvstore": {"driver": "file", "path": str(tmp_path / "c.n5" / "vol")},
        "metadata": {"dimensions": list(VOLUME_SHAPE), "blockSize": list(VOLUME_BLOCKS),
                     "dataType": "uint16", "compression": {"type": "gzip"},
                     "axes": ["x", "y", "z"]},
    }
    volume = ts.open(spec, create=True).result()
    volume[...] = data
    n5.write_zarr_metadata(tmp_path / "c.n5")
    ds = xr.open_zarr(tmp_path / "c.n5", consolidated=False)
    assert ds["vol"].dims == ("x", "y", "z")
    assert dict(ds.sizes) == dict(zip("xyz", VOLUME_SHAPE, strict=True))
    # A plane picked by name is tensorstore's plane of the same label.
    plane = volume[ts.d["z"][2]].read().result()
    np.testing.assert_array_equal(ds["vol"].sel(z=2).values, plane)
    np.testing.assert_array_equal(ds["vol"].values, data)


def test_caller_dimension_names_replace_axes(tmp_path: Path) -> None:
    data = sample(VOLUME_SHAPE, "uint8")
    root = write_n5(tmp_path / "d", data, VOLUME_BLOCKS, attributes={"axes": ["x", "y", "z"]})
    (result,) = n5.write_zarr_metadata(root, dimension_names=("c", "row", "col"))
    assert zarr.open_array(root).metadata.dimension_names == ("c", "row", "col")
    assert result.metadata["attributes"] == {"axes": ["x", "y", "z"]}


@pytest.mark.parametrize(
    ("axes", "written"),
    [(None, None), (["x", "y"], None), (["x", "x", "z"], None), ([1, 2, 3], None),
     (["x", "y", "z"], ("x", "y", "z"))],
    ids=["absent", "too-few", "repeated", "not-strings", "good"],
)
def test_axes_that_cannot_name_every_dimension_write_no_names(
    tmp_path: Path, axes: list | None, written: tuple | None
) -> None:
    data = sample(VOLUME_SHAPE, "uint8")
    root = write_n5(tmp_path / "d", data, VOLUME_BLOCKS,
                    attributes={} if axes is None else {"axes": axes})
    (result,) = n5.write_zarr_metadata(root)
    assert zarr.open_array(root).metadata.dimension_names == written
    said = "no dimension_names" in result.reason
    assert said == (axes is not None and written is None)  # why, when axes were there
    np.testing.assert_array_equal(zarr.open_array(root)[:], data)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["z", "y"], r"raw/volume has 3 dimensions, but dimension names \['z', 'y'\]"),
        (["z", "y", "z"], "repeat a name"),
        ("zyx", "not the string"),
        (["z", "", "x"], "non-empty"),
    ],
    ids=["count", "repeated", "string", "empty"],
)
def test_bad_dimension_names_fail_before_anything_is_written(
    tmp_path: Path, names, message: str
) -> None:
    root = tmp_path / "c.n5"
    make_container(root)
    (root / "labels").rename(tmp_path / "labels")  # only the 3-D dataset left
    (root / "raw" / "image").rename(tmp_path / "image")
    before = tree_digest(root)
    with pytest.raises(n5.N5ConversionError, match=message):
        n5.write_zarr_metadata(root, dimension_names=names)
    assert tree_digest(root) == before


def test_cli_dimension_names(run: Run, tmp_path: Path) -> None:
    data = sample(VOLUME_SHAPE, "uint16")
    root = write_n5(tmp_path / "d", data, VOLUME_BLOCKS)
    code, out, err = run("n5", root, "--dimension-names", "z,y,x")
    assert code == 0, err
    assert "z,y,x" in out  # the table's dims column
    assert zarr.open_array(root).metadata.dimension_names == ("z", "y", "x")
    before = tree_digest(root)
    code, _, err = run("n5", root, "--overwrite", "--dimension-names", "z,y")
    assert code == 1
    assert "3 dimensions" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run("n5", root, "--overwrite", "--dimension-names", "z,,x")
    assert code == 2
    assert "--dimension-names" in err
    assert tree_digest(root) == before
