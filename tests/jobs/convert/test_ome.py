"""OME-Zarr through convert: a format 2 (OME-Zarr 0.4) group becomes valid OME-Zarr 0.5,
and one shard shape given for a pyramid suits each of its levels."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import zarrext
from tests.conftest import Run

pytest.importorskip("ome_zarr")
pytest.importorskip("ome_zarr_models")

PLAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]
LEVELS = [{"y": 2, "x": 2}, {"y": 4, "x": 4}]


def _image(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4000, size=(2, 256, 192), dtype="u2")


def _write_04_image(group: Any, seed: int) -> None:
    """An OME-Zarr 0.4 image (3 levels, 64x64 chunks) with one label image."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    image = _image(seed)
    write_image(image, group, axes="cyx", fmt=FormatV04(), scale_factors=LEVELS,
                storage_options={"chunks": (1, 64, 64)})
    # as bioformats2raw writes it (ome-zarr-py's write_image leaves omero out)
    group.attrs["omero"] = {"version": "0.4", "channels": [
        {"label": name, "color": "FF0000", "active": True,
         "window": {"start": 0, "end": 4000, "min": 0, "max": 4000}} for name in ("a", "b")]}
    write_labels((image[:1] // 500).astype("u1"), group, name="cells", axes="cyx",
                 fmt=FormatV04(), scale_factors=LEVELS,
                 storage_options={"chunks": (1, 64, 64)},
                 label_metadata={"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]})


def _write_04_plate(group: Any) -> None:
    """An OME-Zarr 0.4 plate: one row, two wells, one field each."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    write_plate_metadata(group, ["A"], ["1", "2"], ["A/1", "A/2"], fmt=FormatV04(),
                         name="plate")
    for i, column in enumerate(("1", "2")):
        well = group.require_group(f"A/{column}")
        write_well_metadata(well, [{"path": "0"}], fmt=FormatV04())
        field = well.require_group("0")
        write_image(_image(i + 10)[:, :64, :64], field, axes="cyx", fmt=FormatV04(),
                    scale_factors=[{"y": 2, "x": 2}])


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("ome")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ome-zarr-py's deprecation notes
        _write_04_image(zarr.open_group(where / "image.zarr", mode="w", zarr_format=2), 1)
        _write_04_plate(zarr.open_group(where / "plate.zarr", mode="w", zarr_format=2))
    return where


def _arrays(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(path, mode="r")
    return {name: node[...] for name, node in group.members(max_depth=None)
            if isinstance(node, zarr.Array)}


def _attributes(path: Path) -> dict[str, Any]:
    group = zarr.open_group(path, mode="r", use_consolidated=False)
    nodes = {"": group, **dict(group.members(max_depth=None))}
    return {name: node.attrs.asdict() for name, node in nodes.items()}


def _spec_check(attributes: dict[str, Any], schema: str) -> None:
    """Validate group attributes against the OME-NGFF 0.5 JSON schema named (the
    specification's own, as ngff-zarr ships them)."""
    from importlib.resources import files

    import jsonschema
    import referencing
    from referencing.jsonschema import DRAFT202012

    folder = files("ngff_zarr") / "spec" / "0.5" / "schemas"
    documents = {f.name: json.loads(f.read_text()) for f in folder.iterdir()
                 if f.name.endswith(".schema")}
    registry = referencing.Registry().with_resources(
        (d["$id"], DRAFT202012.create_resource(d)) for d in documents.values())
    jsonschema.Draft202012Validator(documents[schema], registry=registry).validate(attributes)


def _validated_05(path: Path, where: str, kind: str, schemas: tuple[str, ...] = ()) -> Any:
    """The ome-zarr-models model of the group at ``where``, validated as OME-Zarr 0.5
    (and its attributes against the specification's ``schemas``)."""
    from ome_zarr_models import open_ome_zarr

    group = zarr.open_group(path, mode="r", path=where)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ome-zarr-models warns of what it fills in
        model = open_ome_zarr(group, version="0.5")
    assert type(model).__name__ == kind, (where, type(model))
    assert model.ome_zarr_version == "0.5"
    for schema in schemas:
        _spec_check(group.attrs.asdict(), schema)
    return model


def _levels_by_ome_zarr_py(path: Path) -> list[np.ndarray]:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    node = next(iter(Reader(parse_url(str(path)))()))
    return [np.asarray(level) for level in node.data]


def _levels_by_bioio(path: Path) -> list[np.ndarray]:
    from bioio_ome_zarr import Reader

    reader = Reader(str(path))
    levels = []
    for level in reader.resolution_levels:
        reader.set_resolution_level(level)
        levels.append(np.asarray(reader.data))
    return levels


def _levels_by_ngff_zarr(path: Path) -> list[np.ndarray]:
    import ngff_zarr

    return [np.asarray(image.data) for image in ngff_zarr.from_ngff_zarr(str(path)).images]


def test_an_ome_zarr_04_image_with_labels_converts_to_valid_05(
    sources: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.zarr"
    reports = zarrext.convert(sources / "image.zarr", out)
    _validated_05(out, "", "Image", ("image.schema",))
    _validated_05(out, "labels", "Labels")
    _validated_05(out, "labels/cells", "ImageLabel", ("label.schema", "image.schema"))
    source, converted = _attributes(sources / "image.zarr"), _attributes(out)
    ome = converted[""]["ome"]
    assert ome["version"] == "0.5"
    assert "multiscales" not in converted[""]
    assert "version" not in ome["multiscales"][0]
    assert ome["multiscales"][0]["axes"] == source[""]["multiscales"][0]["axes"]
    assert ome["omero"] == {k: v for k, v in source[""]["omero"].items() if k != "version"}
    assert converted["labels"] == {"ome": {"version": "0.5", "labels": ["cells"]}}
    label = converted["labels/cells"]["ome"]["image-label"]
    assert label["colors"] == source["labels/cells"]["image-label"]["colors"]
    group = zarr.open_group(out, mode="r")
    arrays = _arrays(out)
    assert len(arrays) == 6
    for name in arrays:
        assert group[name].metadata.dimension_names == ("c", "y", "x"), name
    # the report says so, the same upgrade in every array's report
    [upgrade] = {id(r.ome_upgrade): r.ome_upgrade for r in reports}.values()
    assert upgrade is not None
    assert sorted(upgrade.groups) == ["", "labels", "labels/cells"]
    assert len(upgrade.dimension_names) == 6
    assert "upgraded from 0.4 to 0.5" in upgrade.describe()
    # each level reads the same through ome-zarr-py and bioio-ome-zarr
    expected = _arrays(sources / "image.zarr")
    for name, values in expected.items():
        np.testing.assert_array_equal(arrays[name], values)
    by_ome_zarr = _levels_by_ome_zarr_py(out)
    assert len(by_ome_zarr) == 3
    for level, values in zip(by_ome_zarr, _levels_by_ome_zarr_py(sources / "image.zarr"),
                             strict=True):
        np.testing.assert_array_equal(level, values)
    for i, level in enumerate(_levels_by_bioio(out)):
        np.testing.assert_array_equal(level, expected[f"s{i}"])


def test_an_ome_zarr_04_plate_converts_to_valid_05(sources: Path, tmp_path: Path) -> None:
    out = tmp_path / "plate.zarr"
    zarrext.convert(sources / "plate.zarr", out)
    plate = _validated_05(out, "", "HCS", ("plate.schema", "strict_plate.schema"))
    assert [w.path for w in plate.ome_attributes.plate.wells] == ["A/1", "A/2"]
    _validated_05(out, "A/1", "Well", ("well.schema", "strict_well.schema"))
    _validated_05(out, "A/2/0", "Image", ("image.schema",))
    converted = _attributes(out)
    assert converted[""]["ome"]["plate"]["version"] == "0.5"
    assert converted["A/1"] == {"ome": {"version": "0.5", "well": {"images": [{"path": "0"}]}}}
    assert converted["A"] == {}
    arrays, expected = _arrays(out), _arrays(sources / "plate.zarr")
    assert arrays.keys() == expected.keys()
    for name, values in expected.items():
        np.testing.assert_array_equal(arrays[name], values)
    for column in ("1", "2"):
        field = zarr.open_group(out, mode="r", path=f"A/{column}/0")
        assert field["s0"].metadata.dimension_names == ("c", "y", "x")


def test_a_bioformats2raw_container_converts_to_valid_05(tmp_path: Path) -> None:
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image
    from ome_zarr_models.v05.bioformats2raw import BioFormats2Raw

    root = zarr.open_group(tmp_path / "b2r.zarr", mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    root.create_group("OME").attrs["series"] = ["0"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(_image(3)[:, :64, :64], root.create_group("0"), axes="cyx",
                    fmt=FormatV04(), scale_factors=[{"y": 2, "x": 2}])
    out = tmp_path / "out.zarr"
    zarrext.convert(tmp_path / "b2r.zarr", out)
    converted = _attributes(out)
    assert converted[""] == {"ome": {"version": "0.5", "bioformats2raw.layout": 3}}
    assert converted["OME"] == {"ome": {"version": "0.5", "series": ["0"]}}
    _spec_check(converted[""], "bf2raw.schema")
    _spec_check(converted["OME"], "ome.schema")
    container = BioFormats2Raw.from_zarr(zarr.open_group(out, mode="r"))
    assert list(container.images) == ["0"]
    _validated_05(out, "0", "Image", ("image.schema",))
    arrays, expected = _arrays(out), _arrays(tmp_path / "b2r.zarr")
    for name, values in expected.items():
        np.testing.assert_array_equal(arrays[name], values)


def test_arrays_not_selected_and_consolidated_metadata_are_upgraded_too(
    sources: Path, tmp_path: Path
) -> None:
    import shutil

    shutil.copytree(sources / "image.zarr", tmp_path / "image.zarr")
    zarr.consolidate_metadata(str(tmp_path / "image.zarr"), zarr_format=2)
    out = tmp_path / "out.zarr"
    [report] = zarrext.convert(tmp_path / "image.zarr", out, arrays=["s0"])
    assert report.ome_upgrade is not None
    _validated_05(out, "", "Image", ("image.schema",))
    consolidated = zarr.open_group(out, mode="r", use_consolidated=True)
    assert consolidated.metadata.consolidated_metadata is not None
    assert consolidated.attrs["ome"]["version"] == "0.5"
    for name in ("s0", "s1", "labels/cells/s2"):
        assert consolidated[name].metadata.dimension_names == ("c", "y", "x"), name
    assert "conditional" not in json.dumps(consolidated["s1"].metadata.to_dict())


def test_plain_codecs_and_auto_shards_read_by_ngff_zarr(sources: Path, tmp_path: Path) -> None:
    pytest.importorskip("ngff_zarr")
    out = tmp_path / "plain.zarr"
    zarrext.convert(sources / "image.zarr", out, codecs=PLAIN, shards="auto")
    _validated_05(out, "", "Image")
    levels = _levels_by_ngff_zarr(out)
    expected = _arrays(sources / "image.zarr")
    assert len(levels) == 3
    for i, level in enumerate(levels):
        np.testing.assert_array_equal(level, expected[f"s{i}"])
    for i, level in enumerate(_levels_by_bioio(out)):
        np.testing.assert_array_equal(level, expected[f"s{i}"])


def test_keep_attributes_leaves_the_04_metadata_as_it_was(sources: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.zarr"
    reports = zarrext.convert(sources / "image.zarr", out, ome_upgrade=False)
    assert all(r.ome_upgrade is None for r in reports)
    source, converted = _attributes(sources / "image.zarr"), _attributes(out)
    assert source.keys() == converted.keys()
    for name, attributes in source.items():
        # arrays gain zarrext's decision record alone
        assert {k: v for k, v in converted[name].items() if k != "zarrext"} == attributes, name
    group = zarr.open_group(out, mode="r")
    assert all(group[name].metadata.dimension_names is None for name in _arrays(out))


def test_a_dry_run_reports_the_upgrade(sources: Path) -> None:
    reports = zarrext.convert(sources / "image.zarr", "", dry_run=True)
    assert reports
    assert all(r.ome_upgrade is not None for r in reports)
    assert "labels/cells" in reports[0].ome_upgrade.describe()  # type: ignore[union-attr]


def test_format_3_and_non_ome_groups_are_not_upgraded(tmp_path: Path) -> None:
    source = zarr.open_group(tmp_path / "plain.zarr", mode="w", zarr_format=2)
    source.attrs["labels"] = ["not-a-group"]  # a key OME uses, meaning something else
    source.attrs["title"] = "x"
    source.create_array("not-a-group", shape=(4,), dtype="i1")[:] = 1
    [report] = zarrext.convert(tmp_path / "plain.zarr", tmp_path / "out.zarr")
    assert report.ome_upgrade is None
    assert zarr.open_group(tmp_path / "out.zarr").attrs.asdict() == {
        "labels": ["not-a-group"], "title": "x"}


def test_another_ome_version_is_kept_and_said(tmp_path: Path) -> None:
    source = zarr.open_group(tmp_path / "old.zarr", mode="w", zarr_format=2)
    multiscales = [{"version": "0.3", "axes": ["y", "x"], "datasets": [{"path": "0"}]}]
    source.attrs["multiscales"] = multiscales
    source.create_array("0", shape=(4, 4), dtype="u1")[:] = 3
    [report] = zarrext.convert(tmp_path / "old.zarr", tmp_path / "out.zarr")
    assert report.ome_upgrade is not None
    assert not report.ome_upgrade.groups
    assert "kept as it is: / (0.3)" in report.ome_upgrade.describe()
    assert zarr.open_group(tmp_path / "out.zarr").attrs["multiscales"] == multiscales


def test_cli_says_so_and_keep_attributes(run: Run, sources: Path, tmp_path: Path) -> None:
    code, out, err = run("convert", sources / "image.zarr", "--out", tmp_path / "a.zarr")
    assert (code, err) == (0, "")
    assert "OME-Zarr metadata upgraded from 0.4 to 0.5" in " ".join(out.split())
    assert "--keep-attributes" in out
    code, out, err = run("convert", sources / "image.zarr", "--out", tmp_path / "b.zarr",
                         "--json")
    assert (code, err) == (0, "")
    assert "upgraded from 0.4 to 0.5" in json.loads(out)["ome_upgrade"]
    code, out, err = run("convert", sources / "image.zarr", "--out", tmp_path / "c.zarr",
                         "--keep-attributes")
    assert (code, err) == (0, "")
    assert "OME-Zarr" not in out
    assert zarr.open_group(tmp_path / "c.zarr").attrs["multiscales"][0]["version"] == "0.4"


def test_quantize_group_upgrades_an_ome_zarr_04_image_too(run: Run, tmp_path: Path) -> None:
    """``zarrext quantize GROUP`` copies a format 2 group into format 3 as convert does:
    a float OME-Zarr 0.4 image becomes valid OME-Zarr 0.5, and the command says so."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    image = (_image(3) / 7).astype("f4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ome-zarr-py's deprecation notes
        write_image(image, zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=2),
                    axes="cyx", fmt=FormatV04(), scale_factors=LEVELS,
                    storage_options={"chunks": (1, 64, 64)})
    code, out, err = run("quantize", tmp_path / "f.zarr", "--max-abs-error", "0.01",
                         "--out", tmp_path / "q.zarr", "--allow-larger")
    assert (code, err) == (0, "")
    assert "OME-Zarr metadata upgraded from 0.4 to 0.5" in " ".join(out.split())
    _validated_05(tmp_path / "q.zarr", "", "Image")
    levels = _levels_by_ome_zarr_py(tmp_path / "q.zarr")
    assert np.abs(levels[0] - image).max() <= 0.01


# --- shards across a pyramid -------------------------------------------------------


def _pyramid(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(path, mode="w", zarr_format=2)
    levels = {}
    for i, size in enumerate((512, 256, 128, 40)):
        values = np.arange(size * size, dtype="u2").reshape(size, size)
        group.create_array(f"s{i}", shape=values.shape, chunks=(64, 64), dtype="u2")[:] = values
        levels[f"s{i}"] = values
    return levels


def test_one_shard_shape_is_clipped_to_each_level(tmp_path: Path) -> None:
    levels = _pyramid(tmp_path / "src.zarr")
    reports = zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", shards=(256, 256))
    out = zarr.open_group(tmp_path / "out.zarr", mode="r")
    assert {name: out[name].shards for name in levels} == {
        "s0": (256, 256), "s1": (256, 256), "s2": (128, 128), "s3": (64, 64)}
    assert "in shards 128x128" in next(r for r in reports if r.path == "s2").becomes
    for name, values in levels.items():
        np.testing.assert_array_equal(out[name][:], values)


def test_auto_shards_suit_each_level(tmp_path: Path) -> None:
    levels = _pyramid(tmp_path / "src.zarr")
    zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", shards="auto")
    out = zarr.open_group(tmp_path / "out.zarr", mode="r")
    # each level small: one shard holds it whole, in whole chunks
    assert {name: out[name].shards for name in levels} == {
        "s0": (512, 512), "s1": (256, 256), "s2": (128, 128), "s3": (64, 64)}
    for name, values in levels.items():
        np.testing.assert_array_equal(out[name][:], values)


def test_cli_shards_auto(run: Run, tmp_path: Path) -> None:
    _pyramid(tmp_path / "src.zarr")
    code, out, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "out.zarr",
                         "--shards", "auto")
    assert (code, err) == (0, ""), out
    assert zarr.open_group(tmp_path / "out.zarr", mode="r")["s2"].shards == (128, 128)


def test_auto_shards_stop_at_the_target_size() -> None:
    from zarrext.jobs.shard_shapes import auto_shards

    # 4096 x 4096 x 8 bytes = 128 MiB: half of it fits 64 MiB
    assert auto_shards((4096, 4096), (256, 256), 8) == (2048, 4096)
    assert auto_shards((4096, 4096), (256, 256), 8, target_bytes=2**20) == (256, 512)


@settings(deadline=None, max_examples=30)
@given(st.data())
def test_fitted_shards_are_whole_chunks_within_the_level(data: st.DataObject) -> None:
    from zarrext.jobs.shard_shapes import AUTO_SHARD_BYTES, fitted_shards

    ndim = data.draw(st.integers(1, 4))
    chunks = data.draw(st.lists(st.integers(1, 50), min_size=ndim, max_size=ndim))
    shape = data.draw(st.lists(st.integers(0, 400), min_size=ndim, max_size=ndim))
    given_shards = [c * data.draw(st.integers(1, 8)) for c in chunks]
    itemsize = data.draw(st.sampled_from([1, 2, 4, 8]))
    for requested in (tuple(given_shards), "auto"):
        shards = fitted_shards(requested, shape, chunks, itemsize)
        for s, c, n in zip(shards, chunks, shape, strict=True):
            assert s % c == 0
            assert s >= c
            assert s <= max(c, -(-n // c) * c)  # no larger than the level in whole chunks
        if requested != "auto":
            assert all(s <= g for s, g in zip(shards, given_shards, strict=True))
            assert all(s == g or s >= n for s, g, n in zip(shards, given_shards, shape,
                                                            strict=True))
        else:
            grown = [s for s, c in zip(shards, chunks, strict=True) if s > c]
            assert not grown or np.prod(shards) * itemsize <= max(
                AUTO_SHARD_BYTES, np.prod(chunks) * itemsize)
