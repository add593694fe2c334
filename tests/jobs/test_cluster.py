"""Whole-store jobs on object stores and on a Dask cluster (``zarrext.jobs.cluster``).

Against a real S3-compatible server on loopback (``s3`` fixture) and a 2-process
``dask.distributed.LocalCluster``, started once for the module.
"""

from __future__ import annotations

import os
import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import Buffer

import zarrext
from tests.conftest import CountingStore
from zarrext.codecs.decisions import ChunkEncoding, CompressIfSmaller
from zarrext.jobs.store_refs import array_ref, store_ref

distributed = pytest.importorskip("dask.distributed")


def mixed_data(shape: tuple[int, int]) -> np.ndarray:
    """Smooth float32 rows, with a band of random bits (stays raw when compressed)."""
    rng = np.random.default_rng(7)
    data = np.tile(np.linspace(0, 1, shape[1], dtype=np.float32), (shape[0], 1))
    data[: shape[0] // 4] = rng.integers(0, 2**32, (shape[0] // 4, shape[1]),
                                         dtype=np.uint32).view(np.float32)
    return data


def layout_kwargs(sharded: bool) -> dict[str, Any]:
    """A conditional(zstd) array: 8x8 chunks of 16x16 each, or 4 shards of 4x4 of them."""
    conditional = zarrext.ConditionalCodec([ZstdCodec(level=1)])
    if sharded:
        return {
            "chunks": (64, 64), "compressors": None,
            "serializer": ShardingCodec(chunk_shape=(16, 16),
                                        codecs=[BytesCodec(), conditional]),
        }
    return {"chunks": (16, 16), "compressors": [conditional]}


def ingest(store: Any, data: np.ndarray, sharded: bool, **kwargs: Any) -> zarr.Array:
    """``data`` stored raw (decision never_apply), to be recompressed later."""
    array = zarrext.create_array(
        store, shape=data.shape, dtype=data.dtype, decision="never_apply",
        **layout_kwargs(sharded), **kwargs,
    )
    array[:] = data
    return array


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A Dask client of 2 worker processes, 1 thread each (the machine has 2 cores)."""
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def chunk_keys(counter: Counter[str]) -> Counter[str]:
    return Counter({k: n for k, n in counter.items() if k.startswith("c/")})


# -- descriptions ---------------------------------------------------------------


def test_store_ref_reopens_an_s3_store_from_plain_data(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/a.zarr"
    data = mixed_data((32, 32))
    array = ingest(url, data, sharded=False, storage_options=s3["options"])
    ref = array_ref(array)
    # no live store or client in the description: it pickles to plain data
    text = pickle.dumps(ref)
    assert b"S3FileSystem" not in text
    assert b"aiobotocore" not in text
    reopened = pickle.loads(text).open()
    np.testing.assert_array_equal(reopened[:], data)
    if ref.store.obstore is None:  # an fsspec store: its options, without live ones
        assert ref.store.storage_options is not None
        assert "asynchronous" not in ref.store.storage_options
    else:  # zarr's ObjectStore (obstore): its class and configuration, as plain data
        assert pickle.loads(pickle.dumps(ref.store.obstore)) == ref.store.obstore
        assert b"obstore._store" not in text


def test_store_ref_refuses_a_memory_store() -> None:
    from zarr.storage import MemoryStore

    from zarrext.stores import StoreOpenError

    with pytest.raises(StoreOpenError, match="cannot be described"):
        store_ref(MemoryStore())


# -- recompress -------------------------------------------------------------------


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_recompress_on_s3_reads_and_writes_each_object_once(
    s3: dict[str, Any], sharded: bool
) -> None:
    from zarrext.stores import open_store

    url = f"{s3['url']}/a.zarr"
    data = mixed_data((128, 128))
    ingest(url, data, sharded, storage_options=s3["options"])
    store = CountingStore(open_store(url, mode="r+", storage_options=s3["options"]))
    calls: list[tuple[int, int]] = []
    report = zarrext.recompress(
        zarr.open_array(store, mode="r+"), progress=lambda d, t: calls.append((d, t))
    )

    objects = 4 if sharded else 64
    gets, sets = chunk_keys(store.gets), chunk_keys(store.sets)
    assert len(gets) == objects
    assert set(gets.values()) == {1}
    assert gets.keys() == sets.keys()
    assert set(sets.values()) == {1}
    assert store.most_in_flight > 2  # objects overlap: latency is not paid one by one
    assert calls[0] == (0, objects)
    assert calls[-1] == (objects, objects)
    np.testing.assert_array_equal(zarrext.open_array(url, mode="r",
                                  storage_options=s3["options"])[:], data)
    assert report.chunks == 64
    assert report.objects == objects
    assert report.masks_before == Counter({0: 64})
    assert report.masks_after == Counter({0: 16, 1: 48})  # the noise band stays raw
    assert report.bytes_after < report.bytes_before
    after = zarrext.inventory(zarrext.open_array(url, mode="r", storage_options=s3["options"]))
    # the report counts the chunks' bytes (a shard's index is not a chunk's), as the
    # inventory's stored_bytes does; its object_bytes are the objects whole
    assert report.bytes_after == after.chunk_bytes == after.stored_bytes
    assert after.object_bytes >= after.stored_bytes  # equal when not sharded
    assert report.masks_after == after.mask_counts


def test_recompress_given_a_url_takes_storage_options(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/a.zarr"
    data = mixed_data((64, 64))
    ingest(url, data, sharded=False, storage_options=s3["options"])
    report = zarrext.recompress(url, storage_options=s3["options"])
    assert report.masks_after == Counter({0: 4, 1: 12})


def test_recompress_on_a_cluster_against_s3(s3: dict[str, Any], client: Any) -> None:
    url = f"{s3['url']}/a.zarr"
    data = mixed_data((128, 128))
    array = ingest(url, data, sharded=True, storage_options=s3["options"])
    calls: list[tuple[int, int]] = []
    report = zarrext.recompress(array, client=client, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(n, 4) for n in range(5)]  # one task per shard here, from first to last
    back = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], data)
    assert report.masks_after == Counter({0: 16, 1: 48})
    assert report.masks_after == zarrext.inventory(back).mask_counts


class DiesOnce(CompressIfSmaller):
    """compress_if_smaller whose first worker process to reach its 6th chunk dies
    there (``os._exit``), once: the marker file says it happened. With 4 chunks per
    task that is in its second task, whose first chunk is rewritten already."""

    seen = 0  # chunks this process has encoded (each task unpickles its own copy)

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        DiesOnce.seen += 1
        if DiesOnce.seen == 6:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os._exit(1)  # the worker process dies mid-task, chunks half rewritten
        return super().choose(chunk)


def test_recompress_survives_a_killed_worker(
    s3: dict[str, Any], client: Any, tmp_path: Path
) -> None:
    url = f"{s3['url']}/a.zarr"
    data = mixed_data((256, 256))
    array = ingest(url, data, sharded=False, storage_options=s3["options"])
    marker = tmp_path / "died"
    report = zarrext.recompress(array, DiesOnce(str(marker)), client=client)
    assert marker.exists()  # a worker did die mid-job
    back = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], data)
    assert report.chunks == report.objects == 256
    assert report.masks_after == Counter({0: 64, 1: 192})
    assert report.masks_after == zarrext.inventory(back).mask_counts
    client.wait_for_workers(2, timeout=60)  # the nanny restarted it for the next tests


# -- write_dask, compact, check ---------------------------------------------------


def test_write_dask_on_a_cluster_writes_each_shard_in_one_task(
    s3: dict[str, Any], client: Any
) -> None:
    import dask.array as da

    from zarrext.sharding.geometry import ShardLayoutError

    url = f"{s3['url']}/a.zarr"
    data = mixed_data((128, 128))
    target = zarrext.create_array(
        url, storage_options=s3["options"], shape=data.shape, dtype=data.dtype,
        decision="compress_if_smaller", **layout_kwargs(sharded=True),
    )
    with pytest.raises(ShardLayoutError, match="shard boundaries"):
        zarrext.write_dask(da.from_array(data, chunks=32), target, client=client)
    with distributed.get_task_stream(client) as stream:
        written = zarrext.write_dask(da.from_array(data, chunks=64), target, client=client)
    writes = [t for t in stream.data if "_write_block" in str(t["key"])]
    assert len(writes) == 4  # one task per shard object
    assert written == data.nbytes
    back = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], data)
    assert zarrext.inventory(back).mask_counts == Counter({0: 16, 1: 48})


@pytest.mark.parametrize("where", ["local", "s3"])
def test_write_dask_on_a_cluster_refuses_a_read_only_array(
    where: str, request: pytest.FixtureRequest, client: Any, tmp_path: Path
) -> None:
    # The workers reopen the target from its path or URL: opened read-only, it was
    # written through all the same (issue 26.3). Now refused before any task runs.
    import dask.array as da

    from tests.conftest import tree_digest
    from tests.stores.test_read_only import s3_digest
    from zarrext.stores import ReadOnlyError

    if where == "local":
        url, options = str(tmp_path / "a.zarr"), None
    else:
        s3 = request.getfixturevalue("s3")
        url, options = f"{s3['url']}/a.zarr", s3["options"]
    data = mixed_data((128, 128))
    ingest(url, data, sharded=True, storage_options=options)

    def digest() -> dict[str, bytes]:
        return tree_digest(tmp_path / "a.zarr") if options is None else s3_digest(url, options)

    before = digest()
    read_only = zarrext.open_array(url, mode="r", storage_options=options)
    with (
        distributed.get_task_stream(client) as stream,
        pytest.raises(ReadOnlyError, match="read-only mode: write_dask writes into it"),
    ):
        zarrext.write_dask(da.from_array(data[::-1].copy(), chunks=64), read_only,
                           client=client)
    assert not [t for t in stream.data if "_write_block" in str(t["key"])]
    assert digest() == before


def test_compact_on_a_cluster_against_s3(
    s3: dict[str, Any], client: Any, tmp_path: Path
) -> None:
    import s3fs

    local = tmp_path / "a.zarr"
    data = mixed_data((128, 128))
    ingest(str(local), data, sharded=True, shard_layout="fixed-slot")
    zarrext.open_array(str(local), shard_layout="fixed-slot")[:16, :16] = 5  # a spare slot
    url = f"{s3['url']}/a.zarr"
    s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True).put(
        str(local), url, recursive=True
    )
    expected = zarr.open_array(str(local), mode="r")[:]
    calls: list[tuple[int, int]] = []
    report = zarrext.compact(
        zarrext.open_array(url, storage_options=s3["options"]), client=client,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert report.shards == 4
    assert report.bytes_after < report.bytes_before  # the slots' spare bytes are gone
    assert calls[0] == (0, 4)
    assert calls[-1] == (4, 4)
    back = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], expected)
    assert zarrext.check(back, deep=True) == []
    writable = zarrext.open_array(url, storage_options=s3["options"])
    again = zarrext.compact(writable, client=client)  # idempotent: dense stays dense
    assert again.bytes_before == again.bytes_after == report.bytes_after
    assert again.unchanged == 4  # and is not written again


def test_check_deep_on_a_cluster_names_the_damaged_object(
    s3: dict[str, Any], client: Any
) -> None:
    import s3fs
    from zarr.codecs import Crc32cCodec

    url = f"{s3['url']}/a.zarr"
    array = zarrext.create_array(
        url, storage_options=s3["options"], shape=(128, 128), dtype="f4", chunks=(64, 64),
        compressors=None,
        serializer=ShardingCodec(chunk_shape=(16, 16), codecs=[BytesCodec(), Crc32cCodec()]),
    )
    array[:] = mixed_data((128, 128))
    assert zarrext.check(array, deep=True, client=client) == []
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    damaged = bytearray(fs.cat(f"{url}/c/0/1"))
    damaged[10] ^= 0xFF  # inside the first inner chunk: its crc32c no longer matches
    fs.pipe(f"{url}/c/0/1", bytes(damaged))
    calls: list[tuple[int, int]] = []
    found = zarrext.check(array, deep=True, client=client,
                          progress=lambda d, t: calls.append((d, t)))
    assert [f.key for f in found] == ["c/0/1"]
    assert [p.kind for p in found[0].details] == ["undecodable_chunk"]
    assert calls[-1] == (4, 4)


# -- the CLI's --scheduler ----------------------------------------------------------


def test_cli_jobs_on_a_scheduler_against_s3(
    s3: dict[str, Any], client: Any, run: Any
) -> None:
    import json

    from zarrext.codecs.decisions import format_mask

    url = f"{s3['url']}/a.zarr"
    options = json.dumps(s3["options"])
    data = mixed_data((128, 128))
    ingest(url, data, sharded=True, storage_options=s3["options"])
    address = client.scheduler.address
    with distributed.get_task_stream(client) as stream:
        code, out, err = run("recompress", url, "--storage-options", options,
                             "--scheduler", address, "--json", "--quiet")
        assert (code, err) == (0, "")
        code, _, err = run("compact", url, "--storage-options", options,
                           "--scheduler", address, "--quiet")
        assert (code, err) == (0, "")
        code, checked, err = run("check", url, "--deep", "--json", "--storage-options", options,
                                 "--scheduler", address)
        assert (code, err) == (0, "")
    ran = {str(t["key"]).split("-")[0] for t in stream.data}
    # the work ran on the cluster
    assert {"_rewrite_on_worker", "_compact_on_worker", "_check_on_worker"} <= ran
    report = json.loads(out)["arrays"][0]
    assert report["chunks"] == 64
    assert report["masks_after"] == {format_mask(0, 1): 16, format_mask(1, 1): 48}
    assert json.loads(checked)["ok"] is True
    back = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], data)
    assert zarrext.inventory(back).mask_counts == Counter({0: 16, 1: 48})


def test_cli_expand_refuses_a_scheduler(tmp_path: Path, run: Any) -> None:
    ingest(str(tmp_path / "a.zarr"), mixed_data((64, 64)), sharded=True)
    code, _, err = run("compact", "--expand", str(tmp_path / "a.zarr"),
                       "--scheduler", "tcp://127.0.0.1:1")
    assert code == 2
    assert err.count("\n") == 1
    assert "expand runs on this machine" in err


# -- quantize --out ---------------------------------------------------------------------


def smooth(shape: tuple[int, int]) -> np.ndarray:
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    return (280 + 20 * np.sin(x / 9) * np.cos(y / 11)).astype("f4")


def test_quantize_on_a_cluster_against_s3(s3: dict[str, Any], client: Any) -> None:
    from zarrext.quantize import copy_quantized
    from zarrext.stores import list_keys, open_store

    url, out = f"{s3['url']}/t.zarr", f"{s3['url']}/q.zarr"
    data = smooth((128, 128))
    zarr.create_array(url, shape=data.shape, dtype="f4", chunks=(32, 32), shards=(64, 64),
                      storage_options=s3["options"])[:] = data
    calls: list[tuple[str, int, int]] = []
    with distributed.get_task_stream(client) as stream:
        report = copy_quantized(url, out, max_abs_error=0.01, client=client,
                                storage_options=s3["options"], progress=lambda *a: calls.append(a))
    ran = Counter(str(t["key"]).split("-")[0] for t in stream.data)
    assert ran["scan_on_worker"] == ran["copy_units_on_worker"] == 4  # one task per shard here
    assert calls[-1] == ("copy", 4, 4)
    back = zarr.open_array(out, mode="r", storage_options=s3["options"])[:]
    worst = float(np.abs(back.astype("f8") - data.astype("f8")).max())
    assert report.worst_error == worst <= 0.01  # measured on the workers, on what they wrote
    keys = list_keys(open_store(out, storage_options=s3["options"]))
    assert keys == ["c/0/0", "c/0/1", "c/1/0", "c/1/1", "zarr.json"]  # no marker left


def test_cli_quantize_a_group_on_a_scheduler_against_s3(
    s3: dict[str, Any], client: Any, run: Any
) -> None:
    import json

    source, out = f"{s3['url']}/g.zarr", f"{s3['url']}/q.zarr"
    data = smooth((64, 64))
    group = zarr.open_group(source, mode="w", storage_options=s3["options"])
    group.create_array("t", shape=data.shape, chunks=(32, 32), dtype="f4")[:] = data
    group.create_array("n", shape=(4,), dtype="i4")[:] = np.arange(4)
    with distributed.get_task_stream(client) as stream:
        code, printed, err = run("quantize", source, "--max-abs-error", "0.01", "--out", out,
                                 "--storage-options", json.dumps(s3["options"]),
                                 "--scheduler", client.scheduler.address, "--json")
    assert (code, err) == (0, "")
    assert "copy_units_on_worker" in {str(t["key"]).split("-")[0] for t in stream.data}
    report = json.loads(printed)["arrays"]
    assert [a["path"] for a in report] == ["t"]
    copy = zarr.open_group(out, mode="r", storage_options=s3["options"])
    assert float(np.abs(copy["t"][:] - data).max()) <= report[0]["worst_error"] <= 0.01
    np.testing.assert_array_equal(copy["n"][:], np.arange(4))


# -- zarrext's pipeline on the workers -------------------------------------------------


def record_pipeline_reads() -> None:
    """Run on each worker: note the pipeline class and process of every array read."""
    import zarrext.pipeline.codec_pipeline

    if getattr(zarrext.pipeline.ZarrextCodecPipeline.read, "recording", False):
        return
    real = zarrext.pipeline.ZarrextCodecPipeline.read
    seen: list[tuple[str, int]] = []

    async def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((type(self).__name__, os.getpid()))
        return await real(self, *args, **kwargs)

    read.recording = True  # type: ignore[attr-defined]
    read.seen = seen  # type: ignore[attr-defined]
    zarrext.pipeline.ZarrextCodecPipeline.read = read  # type: ignore[method-assign]


def pipeline_reads() -> list[tuple[str, int]]:
    """Run on each worker: the reads :func:`record_pipeline_reads` noted, forgotten after."""
    import zarrext.pipeline.codec_pipeline

    seen = getattr(zarrext.pipeline.ZarrextCodecPipeline.read, "seen", [])
    noted = list(seen)
    seen.clear()
    return noted


class RecordsWhere(CompressIfSmaller):
    """compress_if_smaller that leaves a file named after the process that decided."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        Path(self.folder, str(os.getpid())).touch()
        return super().choose(chunk)


def test_an_array_opened_through_zarrext_reads_with_its_pipeline_on_the_workers(
    s3: dict[str, Any], client: Any
) -> None:
    import dask.array

    url = f"{s3['url']}/a.zarr"
    data = mixed_data((128, 128))
    ingest(url, data, sharded=False, storage_options=s3["options"])
    array = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    client.run(record_pipeline_reads)
    client.run(pipeline_reads)  # nothing noted before this read
    back = dask.array.from_zarr(array).compute()  # decoded on the workers
    np.testing.assert_array_equal(back.view("u4"), data.view("u4"))  # random bits: NaNs
    reads = [r for noted in client.run(pipeline_reads).values() for r in noted]
    assert len(reads) == 64  # one per chunk (the dask chunks are the array's)
    assert {name for name, _ in reads} == {"ZarrextCodecPipeline"}
    assert os.getpid() not in {pid for _, pid in reads}


def test_writes_on_the_workers_use_the_decision_the_array_was_opened_with(
    tmp_path: Path, client: Any
) -> None:
    import dask.array

    data = mixed_data((128, 128))
    ingest(tmp_path / "a.zarr", np.zeros_like(data), sharded=False)
    decided = tmp_path / "decided"
    decided.mkdir()
    array = zarrext.open_array(tmp_path / "a.zarr", decision=RecordsWhere(str(decided)))
    dask.array.from_array(data, chunks=(16, 16)).store(array, lock=False)
    pids = {int(p.name) for p in decided.iterdir()}
    assert pids
    assert os.getpid() not in pids  # the workers decided
    back = zarrext.open_array(tmp_path / "a.zarr", mode="r")
    np.testing.assert_array_equal(back[:], data)
    assert zarrext.inventory(back).mask_counts == Counter({0: 16, 1: 48})


def runtime_on_worker(ref: Any) -> tuple[str, str | None, int]:
    """A task: reopen ``ref``; its pipeline, its conditional decision and the process."""
    array = ref.open()
    pipeline = type(array.async_array.codec_pipeline).__name__
    conditional = array.metadata.codecs[-1]
    return pipeline, getattr(conditional.decision, "name", None), os.getpid()


def test_job_tasks_reopen_an_array_with_the_runtime_it_was_opened_with(
    tmp_path: Path, client: Any
) -> None:
    ingest(tmp_path / "a.zarr", mixed_data((64, 64)), sharded=False)
    through_zarrext = zarrext.open_array(tmp_path / "a.zarr", decision="compress_if_smaller")
    pipeline, decision, pid = client.submit(
        runtime_on_worker, array_ref(through_zarrext), pure=False
    ).result()
    assert (pipeline, decision) == ("ZarrextCodecPipeline", "compress_if_smaller")
    assert pid != os.getpid()
    plain = zarr.open_array(tmp_path / "a.zarr")
    assert array_ref(plain).codecs is None
    pipeline, _, _ = client.submit(runtime_on_worker, array_ref(plain), pure=False).result()
    assert pipeline == type(plain.async_array.codec_pipeline).__name__ != "ZarrextCodecPipeline"


def test_a_described_array_whose_codecs_changed_is_refused(tmp_path: Path) -> None:
    ingest(tmp_path / "a.zarr", mixed_data((64, 64)), sharded=False)
    ref = array_ref(zarrext.open_array(tmp_path / "a.zarr"))
    zarrext.create_array(tmp_path / "a.zarr", shape=(64, 64), dtype="f4", chunks=(16, 16),
                         overwrite=True)
    with pytest.raises(ValueError, match="codecs changed since the job described it"):
        ref.open()
