"""write_dask: one task per group of inner chunks, threads or a distributed cluster."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import zarrext
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.sharding import ShardLayoutError


def _target(path: Path) -> zarr.Array:
    return zarrext.create_array(
        str(path), shape=(64, 80), chunks=(32, 40), dtype="f4", fill_value=0.0, compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8),
            codecs=[BytesCodec(), ConditionalCodec(codecs=[ZstdCodec()]), Crc32cCodec()],
        ),
        shard_layout="fixed-slot",
        decision="compress_if_smaller",
    )


def _source() -> da.Array:
    data = np.random.default_rng(0).random((64, 80)).astype("f4")
    data[:16] = 1.0  # compressible part
    return da.from_array(data, chunks=(8, 16))


def test_write_dask_threads(tmp_path: Path) -> None:
    target = _target(tmp_path / "a")
    source = _source()
    written = zarrext.write_dask(source, target)
    assert written == 64 * 80 * 4
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], source.compute())
    assert zarrext.check(target) == []
    from zarrext.jobs.shards.inspect import shard_report

    assert {i.layout for i in shard_report(target)} == {"fixed-slot"}


def test_write_dask_distributed_processes(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    target = _target(tmp_path / "a")
    source = _source()
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        zarrext.write_dask(source, target, client=client)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], source.compute())
    assert zarrext.check(target) == []


def test_write_dask_refuses_misaligned(tmp_path: Path) -> None:
    target = _target(tmp_path / "a")
    with pytest.raises(ShardLayoutError, match="inner-chunk boundaries"):
        zarrext.write_dask(da.zeros((64, 80), chunks=(12, 16), dtype="f4"), target)
    with pytest.raises(ShardLayoutError, match="shape"):
        zarrext.write_dask(da.zeros((8, 8), dtype="f4"), target)


def test_write_dask_opens_the_target_once_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zarrext.jobs.shards.dask as dask_module

    target = _target(tmp_path / "a")
    source = _source()  # 8 x 5 = 40 tasks
    opens = []
    real = dask_module.zarr.open_array

    def counting(*args: object, **kwargs: object) -> zarr.Array:
        opens.append(kwargs.get("path"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dask_module.zarr, "open_array", counting)
    zarrext.write_dask(source, target)
    assert len(opens) == 1  # not once per task
    zarrext.write_dask(source * 2, target)  # a new call reopens: metadata may have changed
    assert len(opens) == 2
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], source.compute() * 2)


def test_write_dask_processes_scheduler(tmp_path: Path) -> None:
    target = _target(tmp_path / "a")
    source = _source()
    assert zarrext.write_dask(source, target, scheduler="processes") == 64 * 80 * 4
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], source.compute())
    assert zarrext.check(target) == []
