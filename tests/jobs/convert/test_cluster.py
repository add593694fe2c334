"""zarrext.convert on a Dask cluster (issue 37): the write units run on the workers.

A 2-process ``dask.distributed.LocalCluster`` (tests/jobs/test_cluster.py's fixture),
against local directories and the loopback S3 server.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
import zarr

import zarrext
from tests.conftest import Run, Where
from tests.jobs.test_cluster import client  # noqa: F401  (the module's 2-worker cluster)
from zarrext.jobs.convert.plans import Encoding
from zarrext.stores import StoreOpenError

distributed = pytest.importorskip("dask.distributed")


def _tasks(stream: Any) -> Counter[str]:
    return Counter(str(t["key"]).split("-")[0] for t in stream.data)


def _workers(stream: Any) -> set[str]:
    return {t["worker"] for t in stream.data if str(t["key"]).startswith("copy_units")}


@pytest.mark.parametrize("form", ["v2", "v3-sharded"])
def test_array_converts_on_the_workers(where: Where, client: Any, form: str) -> None:  # noqa: F811
    rng = np.random.default_rng(3)
    data = rng.integers(0, 300, size=(96, 80)).astype("u2")
    if form == "v2":
        zarr.create_array(where.location("src.zarr"), storage_options=where.options,
                          shape=data.shape, chunks=(16, 16), dtype="u2", zarr_format=2,
                          fill_value=7)[:] = data
    else:
        zarr.create_array(where.location("src.zarr"), storage_options=where.options,
                          shape=data.shape, chunks=(16, 16), shards=(32, 32), dtype="u2",
                          fill_value=7, dimension_names=("y", "x"))[:] = data
    before = where.stored("src.zarr")
    calls: list[tuple[str, int, int]] = []
    with distributed.get_task_stream(client) as stream:
        [report] = zarrext.convert(
            where.location("src.zarr"), where.location("out.zarr"), chunks=(8, 8),
            shards=(32, 40), storage_options=where.options, client=client,
            progress=lambda *a: calls.append(a),
        )
    units = 3 * 2  # 96/32 x 80/40 shards
    assert _tasks(stream)["copy_units_on_worker"] == units  # one task per unit here
    assert calls[-1] == ("", units, units)
    assert report.units == report.total_units == units
    out = zarr.open_array(where.location("out.zarr"), mode="r", storage_options=where.options)
    np.testing.assert_array_equal(out[:], data)
    assert (out.chunks, out.shards, out.fill_value) == ((8, 8), (32, 40), 7)
    assert "conditional" in json.dumps(out.metadata.to_dict())
    assert where.stored("src.zarr") == before
    if not where.local:  # published as on one process: no marker left
        assert not [k for k in where.stored("out.zarr") if "zarrext" in k]


def test_group_converts_on_the_workers(where: Where, client: Any) -> None:  # noqa: F811
    root = zarr.open_group(where.location("g.zarr"), mode="w", storage_options=where.options)
    root.attrs["multiscales"] = [{"datasets": [{"path": "0"}, {"path": "1"}]}]
    level0 = np.arange(64 * 64, dtype="i4").reshape(64, 64) % 97
    root.create_array("0", shape=(64, 64), chunks=(16, 16), dtype="i4")[:] = level0
    root.create_array("1", shape=(32, 32), chunks=(16, 16), dtype="i4")[:] = level0[::2, ::2]
    temps = np.linspace(-3, 40, 50 * 30).reshape(50, 30).astype("f4")
    root.create_group("cf").create_array("t", shape=(50, 30), chunks=(25, 10),
                                         dtype="f4")[:] = temps
    zarr.consolidate_metadata(root.store)
    with distributed.get_task_stream(client) as stream:
        reports = zarrext.convert(where.location("g.zarr"), where.location("out.zarr"),
                                  shards=False, storage_options=where.options,
                                  encodings={"cf/t": Encoding(max_abs_error=0.01)},
                                  client=client)
    assert sorted(r.path for r in reports) == ["0", "1", "cf/t"]
    ran = _tasks(stream)
    assert ran["copy_units_on_worker"] >= 3
    assert ran["scan_on_worker"] >= 1  # the quantized array's scan, on the cluster too
    assert len(_workers(stream)) == 2  # both workers wrote
    out = zarr.open_group(where.location("out.zarr"), mode="r", storage_options=where.options)
    assert out.attrs["multiscales"] == root.attrs["multiscales"]
    np.testing.assert_array_equal(out["0"][:], level0)
    np.testing.assert_array_equal(out["1"][:], level0[::2, ::2])
    assert float(np.abs(out["cf/t"][:] - temps).max()) <= 0.01
    [quantized] = [r for r in reports if r.path == "cf/t"]
    assert quantized.worst_error is not None
    assert quantized.worst_error <= 0.01
    assert out.metadata.consolidated_metadata is not None
    assert "conditional" in json.dumps(out["0"].metadata.to_dict())


def test_a_zip_is_refused_before_writing(tmp_path: Any, client: Any) -> None:  # noqa: F811
    zarr.create_array(tmp_path / "src.zarr", shape=(8,), dtype="u1")[:] = 1
    with pytest.raises(StoreOpenError, match="zip archive"):
        zarrext.convert(tmp_path / "src.zarr", str(tmp_path / "out.zip"), client=client)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_cli_scheduler(where: Where, client: Any, run: Run) -> None:  # noqa: F811
    data = np.arange(48 * 48, dtype="f8").reshape(48, 48)
    zarr.create_array(where.location("src.zarr"), storage_options=where.options,
                      shape=data.shape, chunks=(16, 16), dtype="f8")[:] = data
    options = ["--storage-options", json.dumps(where.options)] if where.options else []
    with distributed.get_task_stream(client) as stream:
        code, printed, err = run("convert", where.location("src.zarr"), "--out",
                                 where.location("out.zarr"), *options,
                                 "--scheduler", client.scheduler.address, "--json")
    assert (code, err) == (0, "")
    assert _tasks(stream)["copy_units_on_worker"] == 9
    [report] = json.loads(printed)["arrays"]
    assert report["write_units"] == 9
    np.testing.assert_array_equal(
        zarr.open_array(where.location("out.zarr"), mode="r", storage_options=where.options)[:],
        data)


def test_a_damaged_format_2_chunk_is_named_from_a_worker(tmp_path: Any, client: Any) -> None:  # noqa: F811
    from zarrext.errors import ChunkDecodeError

    zarr.create_array(tmp_path / "src.zarr", shape=(40,), chunks=(10,), dtype="f8",
                      zarr_format=2)[:] = np.arange(40.0)
    (tmp_path / "src.zarr" / "2").write_bytes(b"\x01" * 9)  # issue 42, item 7
    with pytest.raises(ChunkDecodeError) as raised:
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", client=client)
    assert raised.value.key == "2"
    assert not (tmp_path / "out.zarr").exists()
