"""zarrext.convert: any array or group zarr-python opens, into the encoding named (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec

import zarrext
from tests.conftest import Where
from zarrext.codecs.decisions import zarrext_record
from zarrext.jobs.convert.reports import ConversionError
from zarrext.jobs.outputs import OutputConflictError

SHAPE = (40, 30)


def _values(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=SHAPE).astype(dtype)
    return (rng.integers(0, 50, size=SHAPE)).astype(dtype)


def _source(where: Where, name: str, form: str, dtype: str = "f4") -> np.ndarray:
    """A source array: format 2, format 3, or format 3 sharded; partial edge chunks."""
    data = _values(dtype)
    if form == "v2":
        array = zarr.create_array(where.location(name), storage_options=where.options,
                                  shape=SHAPE, chunks=(16, 16), dtype=dtype, zarr_format=2,
                                  fill_value=3, attributes={"_ARRAY_DIMENSIONS": ["y", "x"],
                                                            "units": "K"})
    else:
        array = zarr.create_array(where.location(name), storage_options=where.options,
                                  shape=SHAPE, chunks=(8, 8), dtype=dtype, fill_value=3,
                                  shards=(16, 16) if form == "v3-sharded" else None,
                                  dimension_names=("y", "x"), attributes={"units": "K"})
    array[:] = data
    return data


def _opened(where: Where, name: str) -> Any:
    return zarr.open(where.location(name), mode="r", storage_options=where.options)


TARGETS: dict[str, dict[str, Any]] = {
    "default": {},
    "codecs-json": {"codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                      {"name": "gzip", "configuration":
                                                   {"level": 1}}]},
    "rechunked": {"chunks": (4, 8)},
    "resharded": {"chunks": (5, 6), "shards": (20, 30)},
    "unsharded": {"shards": False, "chunks": (7, 9)},
    "fixed-slot": {"chunks": (4, 5), "shards": (20, 10), "shard_layout": "fixed-slot"},
    "append": {"chunks": (4, 5), "shards": (20, 10), "shard_layout": "append"},
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("form", ["v2", "v3", "v3-sharded"])
def test_array_converts_exactly(where: Where, form: str, target: str) -> None:
    options = TARGETS[target]
    if "shard_layout" in options and not where.local:
        pytest.skip("shard layouts write in place: local directories only (refusal tested)")
    data = _source(where, "src.zarr", form)
    before = {k: v for k, v in where.stored("src.zarr").items()}
    reports = zarrext.convert(where.location("src.zarr"), where.location("out.zarr"),
                              storage_options=where.options, **options)
    out = _opened(where, "out.zarr")
    np.testing.assert_array_equal(out[:], data)
    assert out.metadata.zarr_format == 3
    assert out.metadata.dimension_names == ("y", "x")
    assert out.attrs["units"] == "K"
    assert "_ARRAY_DIMENSIONS" not in out.attrs
    assert out.fill_value == 3
    if "chunks" in options:
        assert out.chunks == options["chunks"]
    if options.get("shards"):
        assert out.shards == options["shards"]
    names = [c["name"] for c in json.loads(where.stored("out.zarr")["zarr.json"])["codecs"]]
    if target == "default":
        assert names[-1] == "conditional" or "sharding_indexed" in names
        assert zarrext_record(out.attrs) == {"decision": "compress_if_smaller"}
    if target == "codecs-json":
        assert "gzip" in json.dumps(out.metadata.to_dict()["codecs"])
    assert where.stored("src.zarr") == before  # the source is never written
    [report] = reports
    assert report.source_bytes == sum(
        len(v) for k, v in before.items() if k not in ("zarr.json", ".zarray", ".zattrs")
    ) or form == "v3-sharded"  # a shard's index is not counted
    assert report.output_bytes > 0
    assert report.total_units == report.units


@pytest.mark.parametrize("form", ["v2", "v3", "v3-sharded"])
def test_quantized_conversion_within_bound(where: Where, form: str) -> None:
    data = _source(where, "src.zarr", form)
    [report] = zarrext.convert(where.location("src.zarr"), where.location("out.zarr"),
                               storage_options=where.options, max_abs_error=0.01)
    out = _opened(where, "out.zarr")
    assert np.max(np.abs(out[:] - data)) <= 0.01
    assert report.worst_error is not None
    assert report.worst_error <= 0.01
    names = [c["name"] for c in out.metadata.to_dict()["codecs"]]
    assert "scale_offset" in json.dumps(out.metadata.to_dict())
    assert names  # planned filters, then zarrext's default chain
    assert "conditional" in json.dumps(out.metadata.to_dict())


def test_like_takes_another_arrays_encoding(tmp_path: Path) -> None:
    model = zarrext.create_array(
        tmp_path / "model.zarr", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="u2",
        compressors=[zarrext.ConditionalCodec([ZstdCodec()])], decision="always_apply",
    )
    data = _source(Where("local", str(tmp_path)), "src.zarr", "v3", dtype="u2")
    # 2x2 chunks, each with its header: 3x the source's bytes, asked for
    zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", like=model, allow_larger=True)
    out = zarr.open_array(tmp_path / "out.zarr")
    np.testing.assert_array_equal(out[:], data)
    assert (out.chunks, out.shards) == ((2, 2), (4, 4))
    assert zarrext_record(out.attrs) == {"decision": "always_apply"}
    assert "zstd" in json.dumps(out.metadata.to_dict())


@pytest.mark.parametrize("fmt", [2, 3])
def test_group_converts_whole(where: Where, fmt: int) -> None:
    root = zarr.open_group(where.location("g.zarr"), mode="w", zarr_format=fmt,
                           storage_options=where.options)
    root.attrs["multiscales"] = [{"version": "0.4", "datasets": [{"path": "0"}]}]
    level = root.create_array("0", shape=(20, 20), chunks=(8, 8), dtype="u2")
    level[:] = np.arange(400, dtype="u2").reshape(20, 20)
    sub = root.create_group("labels")
    sub.attrs["cf"] = {"standard_name": "x"}
    deeper = sub.create_group("deeper")
    kept = deeper.create_array("kept", shape=(9,), chunks=(4,), dtype="f8", fill_value=-1.0)
    kept[:] = np.linspace(0, 1, 9)
    zarr.consolidate_metadata(root.store, zarr_format=fmt)
    source_objects = where.stored("g.zarr")
    reports = zarrext.convert(where.location("g.zarr"), where.location("out.zarr"),
                              arrays=["0"], storage_options=where.options)
    assert [r.path for r in reports] == ["0"]
    assert where.stored("g.zarr") == source_objects
    out = zarr.open_group(where.location("out.zarr"), mode="r", storage_options=where.options)
    assert out.metadata.zarr_format == 3
    assert out.metadata.consolidated_metadata is not None  # written again
    assert sorted(out.metadata.consolidated_metadata.flattened_metadata) == [
        "0", "labels", "labels/deeper", "labels/deeper/kept"]
    if fmt == 2:  # OME-Zarr 0.4 lives in format 2 only: upgraded to 0.5 (tests/jobs/convert/
        # test_ome.py)
        assert out.attrs.asdict() == {
            "ome": {"version": "0.5", "multiscales": [{"datasets": [{"path": "0"}]}]}}
    else:
        assert out.attrs["multiscales"] == root.attrs["multiscales"]
    assert out["labels"].attrs["cf"] == {"standard_name": "x"}
    np.testing.assert_array_equal(out["0"][:], level[:])
    np.testing.assert_array_equal(out["labels/deeper/kept"][:], kept[:])
    assert out["labels/deeper/kept"].fill_value == -1.0
    assert "conditional" in json.dumps(out["0"].metadata.to_dict())
    assert "conditional" not in json.dumps(out["labels/deeper/kept"].metadata.to_dict())
    if fmt == 3:  # not selected: copied object for object
        stored = where.stored("out.zarr")
        assert stored["labels/deeper/kept/zarr.json"] == source_objects[
            "labels/deeper/kept/zarr.json"]
    # a reader trusting the consolidated metadata sees the new array
    trusted = zarr.open_group(where.location("out.zarr"), mode="r", use_consolidated=True,
                              storage_options=where.options)
    assert "conditional" in json.dumps(trusted["0"].metadata.to_dict())


def test_refusal_names_the_array_before_writing(where: Where) -> None:
    root = zarr.open_group(where.location("g.zarr"), mode="w", storage_options=where.options)
    root.create_array("a", shape=(10,), chunks=(5,), dtype="f4")[:] = 1
    root.create_array("b", shape=(10,), chunks=(5,), dtype="i4")[:] = 1
    # named, an integer array is refused (unnamed, it is converted without quantizing:
    # tests/jobs/convert/test_format2_sources.py)
    with pytest.raises(ConversionError, match="cannot convert b: max_abs_error"):
        zarrext.convert(where.location("g.zarr"), where.location("out.zarr"),
                        max_abs_error=0.1, arrays=["a", "b"], storage_options=where.options)
    with pytest.raises(ConversionError, match=r"cannot convert a: .*not a multiple"):
        zarrext.convert(where.location("g.zarr"), where.location("out.zarr"),
                        chunks=(3,), shards=(4,), storage_options=where.options)
    with pytest.raises(ConversionError, match=r"cannot convert a: .*no name"):
        zarrext.convert(where.location("g.zarr"), where.location("out.zarr"),
                        codecs=[{"configuration": {}}], storage_options=where.options)
    assert where.stored("out.zarr") == {}
    if where.local:
        assert not list(Path(where.root).glob(".out.zarr*"))
    else:
        with pytest.raises(ConversionError, match="only a local directory"):
            zarrext.convert(where.location("g.zarr"), where.location("out.zarr"),
                            chunks=(5,), shards=(10,), shard_layout="append",
                            storage_options=where.options)


def test_existing_output_refused_and_overwrite_replaces(where: Where) -> None:
    _source(where, "src.zarr", "v3")
    zarr.create_array(where.location("out.zarr"), shape=(3,), dtype="i1",
                      storage_options=where.options)
    old = where.stored("out.zarr")
    with pytest.raises(OutputConflictError, match=r"exists"):
        zarrext.convert(where.location("src.zarr"), where.location("out.zarr"),
                        storage_options=where.options)
    assert where.stored("out.zarr") == old
    if where.local:
        zarrext.convert(where.location("src.zarr"), where.location("out.zarr"),
                        overwrite=True)
        assert zarr.open_array(where.location("out.zarr")).shape == SHAPE
    else:  # never replaced on an object store
        with pytest.raises(OutputConflictError):
            zarrext.convert(where.location("src.zarr"), where.location("out.zarr"),
                            overwrite=True, storage_options=where.options)
        assert where.stored("out.zarr") == old


@pytest.mark.parametrize("occupant", ["array", "a killed runs leftovers"])
def test_an_existing_output_is_refused_before_a_quantized_array_is_scanned(
    where: Where, occupant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning a quantized array reads every value (hours, for terabytes): an output
    that is taken is refused before that; a killed run's own leftovers are not."""
    from zarrext.jobs.convert import scanning
    from zarrext.jobs.outputs import UNFINISHED

    _source(where, "src.zarr", "v3")
    if occupant == "array":
        zarr.create_array(where.location("out.zarr"), shape=(3,), dtype="i1",
                          storage_options=where.options)
    elif where.local:  # a killed local run leaves a staging directory beside the output
        pytest.skip("a killed local run leaves nothing at the output (tested in test_outputs)")
    else:
        where.put("out.zarr", UNFINISHED, b"a killed run's marker")
        where.put("out.zarr", "c/0/0", b"a killed run's chunk")
    old = where.stored("out.zarr")
    real_scan = scanning.scan
    scans: list[str] = []

    def counted_scan(*args: Any, **kwargs: Any) -> Any:
        scans.append("scan")
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(scanning, "scan", counted_scan)
    convert = lambda: zarrext.convert(  # noqa: E731
        where.location("src.zarr"), where.location("out.zarr"), storage_options=where.options,
        max_abs_error=0.01)
    if occupant == "array":
        with pytest.raises(OutputConflictError, match=r"exists"):
            convert()
        assert scans == []
        assert where.stored("out.zarr") == old
    else:
        [report] = convert()
        assert scans == ["scan"]
        assert report.worst_error is not None
        assert UNFINISHED not in where.stored("out.zarr")


def test_dry_run_writes_nothing_and_expects_a_size(tmp_path: Path) -> None:
    _source(Where("local", str(tmp_path)), "src.zarr", "v3")
    before = sorted(p.name for p in tmp_path.iterdir())
    [report] = zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", dry_run=True,
                               chunks=(4, 4))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert report.dry_run
    assert report.units < report.total_units == 80
    assert report.output_bytes > 0
    assert "conditional" in report.becomes
    assert "chunks 4x4" in report.becomes


def test_a_quantized_dry_run_reads_only_its_sample(tmp_path: Path) -> None:
    """A dry run is quick whatever the array's size: a quantized array is scanned in
    the write units the dry run encodes, not whole, and the report says so."""
    from zarr.storage import MemoryStore

    reads: list[str] = []

    class CountingStore(MemoryStore):  # every chunk read goes through get here
        async def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
            if key.startswith("c/"):
                reads.append(key)
            return await super().get(key, *args, **kwargs)

        async def getsize(self, key: str) -> int:  # sizes are no values read
            from zarr.core.buffer import default_buffer_prototype

            value = await super().get(key, default_buffer_prototype())
            return 0 if value is None else len(value)

    store = CountingStore()
    src = zarr.create_array(store, shape=(64, 64), chunks=(8, 8), dtype="f4",
                            fill_value=np.nan)
    src[:] = 280 + np.arange(64 * 64, dtype="f4").reshape(64, 64) / 100
    [report] = zarrext.convert(store, tmp_path / "out.zarr", dry_run=True,
                               max_abs_error=0.01, sample=3)
    assert list(tmp_path.iterdir()) == []
    assert (report.units, report.total_units) == (3, 64)
    assert "(range of the sample)" in report.becomes
    # the 3 chunks sampled (scanned, and read again to encode): not 64 of them
    assert len(set(reads)) == 3, sorted(reads)


def test_zip_output(tmp_path: Path) -> None:
    data = _source(Where("local", str(tmp_path)), "src.zarr", "v3-sharded")
    zarrext.convert(tmp_path / "src.zarr", str(tmp_path / "out.zip"))
    from zarr.storage import ZipStore

    np.testing.assert_array_equal(
        zarr.open_array(ZipStore(tmp_path / "out.zip", mode="r"), mode="r")[:], data)


def test_ome_zarr_pyramid_read_back_by_ome_zarr_py(tmp_path: Path) -> None:
    pytest.importorskip("ome_zarr")
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader
    from ome_zarr.writer import write_image

    image = (np.arange(4 * 64 * 64, dtype="u2").reshape(4, 64, 64) % 1000).astype("u2")
    root = zarr.open_group(tmp_path / "image.zarr", mode="w")
    write_image(image, root, axes="zyx", scale_factors=[{"y": 2, "x": 2}, {"y": 4, "x": 4}])
    zarrext.convert(tmp_path / "image.zarr", tmp_path / "out.zarr", shards=False)

    def levels(path: Path) -> list[np.ndarray]:
        [node] = list(Reader(parse_url(str(path)))())[:1]
        return [np.asarray(level) for level in node.data]

    source_levels, converted = levels(tmp_path / "image.zarr"), levels(tmp_path / "out.zarr")
    assert len(converted) == len(source_levels) > 1
    for a, b in zip(source_levels, converted, strict=True):
        np.testing.assert_array_equal(a, b)
    out = zarr.open_group(tmp_path / "out.zarr", mode="r")
    assert out.attrs.asdict().keys() == root.attrs.asdict().keys()
    assert all("conditional" in json.dumps(a.metadata.to_dict()) for _, a in out.arrays())


@pytest.mark.slow
def test_killed_conversion_leaves_old_or_nothing_and_rerun_completes(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    data = np.arange(256 * 256, dtype="f8").reshape(256, 256)
    zarr.create_array(tmp_path / "src.zarr", shape=data.shape, chunks=(8, 8),
                      dtype="f8")[:] = data
    # each write unit done is said on stdout (and slowed down): the kill lands after a
    # counted share of the conversion, not after a time
    script = (
        "import sys, time, zarrext\n"
        "def progress(path, done, total):\n"
        "    print(done, flush=True)\n"
        "    time.sleep(0.005)\n"
        "zarrext.convert(sys.argv[1], sys.argv[2], chunks=(8, 8), overwrite=True,\n"
        "                progress=progress)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(zarrext.__file__).parents[1])}
    for units, old in ((100, False), (300, True)):
        if old:  # an old output to replace: the kill leaves it whole
            zarr.create_array(tmp_path / "out.zarr", shape=(2,), dtype="i1", overwrite=True)
        process = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "src.zarr"), str(tmp_path / "out.zarr")],
            env=env, stdout=subprocess.PIPE, text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            if int(line) >= units:
                break
        else:
            raise AssertionError(f"the conversion ended before {units} write units")
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        if old:
            assert zarr.open_array(tmp_path / "out.zarr").shape == (2,)
        else:
            assert not (tmp_path / "out.zarr").exists()
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", overwrite=True)
        np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr")[:], data)
        if not old:
            import shutil

            shutil.rmtree(tmp_path / "out.zarr")


def test_filters_of_an_unsharded_source_are_kept_once(tmp_path: Path) -> None:
    from zarr.codecs import TransposeCodec

    data = np.arange(6 * 4, dtype="i2").reshape(6, 4)
    zarr.create_array(tmp_path / "src.zarr", shape=data.shape, chunks=(3, 2), dtype="i2",
                      filters=[TransposeCodec(order=(1, 0))])[:] = data
    zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr")
    out = zarr.open_array(tmp_path / "out.zarr")
    names = [c["name"] for c in json.loads(json.dumps(out.metadata.to_dict()["codecs"]))]
    assert names.count("transpose") == 1
    np.testing.assert_array_equal(out[:], data)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 30)),
    dtype=st.sampled_from(["f4", "f8"]),
    fill=st.sampled_from([float("nan"), 3.0, 0.0]),
    source_shards=st.booleans(),
    target=st.sampled_from(["as-source", "unsharded", "resharded"]),
    specials=st.sampled_from(["none", "nan", "nan-inf"]),
    bound=st.sampled_from([0.5, 0.01, 1e-4]),
)
def test_property_quantized_conversion_stays_within_the_bound(
    where: Where, shape: tuple[int, int], dtype: str, fill: float, source_shards: bool,
    target: str, specials: str, bound: float,
) -> None:
    """Every float array (any fill, NaN and infinities among the values, sharded or
    not, partial edges) converts quantized: finite values within the bound, the
    special values where they were. A NaN fill in a sharded target once failed
    (zarr checks the inner codecs with 0.0 as the fill value)."""
    import uuid

    rng = np.random.default_rng(len(shape) + shape[0] * 31 + shape[1])
    data = (280 + 15 * rng.standard_normal(shape)).astype(dtype)
    if specials != "none":
        data[rng.random(shape) < 0.1] = np.nan
    if specials == "nan-inf":
        data.flat[0] = np.inf
        data.flat[-1] = -np.inf
    name = uuid.uuid4().hex[:8]
    src = zarr.create_array(where.location(f"{name}.zarr"), storage_options=where.options,
                            shape=shape, dtype=dtype, chunks=(8, 8), fill_value=fill,
                            shards=(16, 16) if source_shards else None)
    src[:] = data
    encoding: dict[str, Any] = {
        "as-source": {}, "unsharded": {"shards": False, "chunks": (7, 9)},
        "resharded": {"chunks": (5, 6), "shards": (10, 12)},
    }[target]
    [report] = zarrext.convert(where.location(f"{name}.zarr"), where.location(f"{name}-q.zarr"),
                               storage_options=where.options, max_abs_error=bound, **encoding)
    back = _opened(where, f"{name}-q.zarr")[:]
    finite = np.isfinite(data)
    np.testing.assert_array_equal(np.isnan(back), np.isnan(data))
    np.testing.assert_array_equal(back[~finite & ~np.isnan(data)], data[~finite & ~np.isnan(data)])
    worst = float(np.max(np.abs(back[finite].astype("f8") - data[finite]), initial=0.0))
    assert worst <= bound
    assert report.worst_error is not None
    assert worst <= report.worst_error <= bound


@pytest.mark.parametrize("fill", [float("nan"), 3.0])
@pytest.mark.parametrize("form", ["v3", "v3-sharded"])
def test_quantize_is_converts_quantizing_form(where: Where, form: str, fill: float) -> None:
    """``zarrext quantize`` is ``convert --max-abs-error`` with quantize's defaults (the
    source's chunks and shards, plain zstd): the two store the same objects, byte for
    byte, metadata included."""
    from zarrext.quantize import copy_quantized

    data = _values("f4") * 10
    data[::7, ::5] = np.nan
    src = zarr.create_array(where.location("src.zarr"), storage_options=where.options,
                            shape=SHAPE, chunks=(8, 8), dtype="f4", fill_value=fill,
                            shards=(16, 16) if form == "v3-sharded" else None,
                            dimension_names=("y", "x"), attributes={"units": "K"})
    src[:] = data
    copied = copy_quantized(where.location("src.zarr"), where.location("q.zarr"),
                            max_abs_error=0.01, storage_options=where.options)
    [converted] = zarrext.convert(
        where.location("src.zarr"), where.location("c.zarr"), storage_options=where.options,
        max_abs_error=0.01, codecs=[{"name": "bytes"}, {"name": "zstd"}],
    )
    assert where.stored("q.zarr") == where.stored("c.zarr")
    assert (copied.worst_error, copied.blocks) == (converted.worst_error, converted.units)
    assert (copied.source_bytes, copied.output_bytes) == (
        converted.source_bytes, converted.output_bytes)


@pytest.mark.parametrize("selected", [["t"], ["n"], None])
def test_an_xarray_format_2_dataset_converts_with_the_rest_as_it_is(
    where: Where, selected: list[str] | None
) -> None:
    """xarray's format 2 stores: integers with a null fill value, dimension names in
    ``_ARRAY_DIMENSIONS``, consolidated metadata. Whatever arrays are converted,
    the others migrated as they are, xarray reads the copy back equal."""
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {"t": (("time", "y", "x"), (280 + 10 * rng.random((3, 20, 12))).astype("f4")),
         "n": (("y",), np.arange(20))},
        coords={"x": np.arange(12.0), "y": np.arange(20.0)},
        attrs={"title": "a format 2 dataset"},
    )
    ds.to_zarr(where.location("ds.zarr"), zarr_format=2, consolidated=True,
               storage_options=where.options)
    assert zarr.open_group(where.location("ds.zarr"), storage_options=where.options,
                           mode="r")["n"].metadata.fill_value is None
    reports = zarrext.convert(where.location("ds.zarr"), where.location("out.zarr"),
                              arrays=selected, storage_options=where.options)
    assert sorted(r.path for r in reports) == sorted(selected or ["n", "t", "x", "y"])
    back = xr.open_zarr(where.location("out.zarr"), storage_options=where.options).load()
    xr.testing.assert_equal(back, ds)
    assert back.attrs == ds.attrs
    for name in ds.variables:  # the decision convert records aside
        assert {k: v for k, v in back[name].attrs.items() if k != "zarrext"} == ds[name].attrs
    for name in ("n", "t", "x", "y"):
        array = zarr.open_array(where.location(f"out.zarr/{name}"), mode="r",
                                storage_options=where.options)
        assert array.metadata.zarr_format == 3
        assert array.metadata.dimension_names == tuple(ds[name].dims)
        assert "_ARRAY_DIMENSIONS" not in array.attrs


def test_a_quantized_arrays_scan_reports_its_progress_before_any_write(tmp_path: Path) -> None:
    """The first pass over a quantized array reads all of it before anything is
    written (hours, for terabytes): it has its own progress, path by path."""
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    data = _values("f4")
    group.create_array("t", shape=SHAPE, chunks=(8, 8), shards=(16, 16), dtype="f4")[:] = data
    group.create_array("n", shape=(4,), dtype="i4")[:] = np.arange(4)
    calls: list[tuple[str, str, int, int]] = []
    zarrext.convert(
        tmp_path / "g.zarr", tmp_path / "out.zarr", arrays=["t"], max_abs_error=0.01,
        progress=lambda path, done, total: calls.append(("write", path, done, total)),
        scan_progress=lambda path, done, total: calls.append(("scan", path, done, total)),
    )
    blocks = 3 * 2  # 40x30 in 16x16 shards
    scans = [c for c in calls if c[0] == "scan"]
    assert scans[-1] == ("scan", "t", blocks, blocks)
    assert [c[2] for c in scans] == list(range(1, blocks + 1))
    assert calls.index(scans[-1]) < min(i for i, c in enumerate(calls) if c[0] == "write")
    assert calls[-1] == ("write", "t", blocks, blocks)


@pytest.mark.parametrize("separator", [".", "/"])
def test_a_format_2_sources_bytes_are_its_chunk_objects(where: Where, separator: str) -> None:
    """The report's bytes before, of a format 2 source: its chunk objects' sizes, in
    nested directories too (``/``-separated keys), not its metadata, nor the size a
    directory takes on disk."""
    array = zarr.create_array(where.location("v2.zarr"), storage_options=where.options,
                              shape=SHAPE, chunks=(16, 16), dtype="f4", zarr_format=2,
                              chunk_key_encoding={"name": "v2", "separator": separator})
    array[:] = _values("f4")
    chunks = {k: v for k, v in where.stored("v2.zarr").items()
              if k.rsplit("/", 1)[-1] not in (".zarray", ".zattrs")}
    assert len(chunks) == 3 * 2
    [report] = zarrext.convert(where.location("v2.zarr"), where.location("out.zarr"),
                               storage_options=where.options)
    assert report.source_bytes == sum(len(v) for v in chunks.values())


def test_a_format_2_source_in_a_store_that_cannot_list_sizes() -> None:
    """A store that lists no sizes (memory): each chunk object's size asked of it."""
    from zarr.storage import MemoryStore

    store = MemoryStore()
    array = zarr.create_array(store, shape=SHAPE, chunks=(16, 16), dtype="f4", zarr_format=2,
                              chunk_key_encoding={"name": "v2", "separator": "/"})
    array[:] = _values("f4")
    from zarr.core.sync import sync

    from zarrext.stores import list_keys

    sizes = [sync(store.getsize(k)) for k in list_keys(store) if not k.startswith(".z")]
    assert len(sizes) == 3 * 2
    [report] = zarrext.convert(store, MemoryStore())
    assert report.source_bytes == sum(sizes) > 0
