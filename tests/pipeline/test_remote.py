"""zarrext's paths for object stores (:mod:`zarrext.pipeline.remote`), on the loopback S3 server:
whole shards fetched with one request each and decoded in the codec threads into
the output, the same values as the local path."""

from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.buffer import Buffer
from zarr.core.dtype import Float32
from zarr.storage import FsspecStore, WrapperStore

import zarrext
import zarrext.pipeline.codec_pipeline
import zarrext.pipeline.whole_shards
from zarrext import quantize
from zarrext.errors import ChunkDecodeError
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline
from zarrext.sharding.codec import RuntimeShardingCodec

SHAPE, SHARD, INNER = (96, 128), (32, 64), (16, 16)


def _data() -> np.ndarray:
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]].astype("float32")
    return (np.sin(x / 7) * np.cos(y / 5) * 100).astype("float32")


def _create(location: str, **kwargs: Any) -> Any:
    return zarrext.create_array(
        location, shape=SHAPE, chunks=INNER, shards=SHARD, dtype="float32", fill_value=0,
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
        decision="compress_if_smaller", **kwargs,
    )


def _spy_decode_jobs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    threads: list[str] = []
    real = RuntimeShardingCodec.decode_jobs

    def decode_jobs(self: Any, *args: Any, **kwargs: Any) -> Any:
        jobs = real(self, *args, **kwargs)

        def named(job: Any) -> Any:
            def run() -> None:
                threads.append(threading.current_thread().name)
                job()
            return run

        return [named(job) for job in jobs]

    monkeypatch.setattr(RuntimeShardingCodec, "decode_jobs", decode_jobs)
    return threads


@pytest.mark.parametrize(
    "selection",
    [np.s_[:], np.s_[32:96, :], np.s_[5:70, 3:100], np.s_[7, :], np.s_[:, 64:128:3]],
    ids=["all", "whole-shards", "parts", "row", "step"],
)
def test_remote_shard_reads_match_local(
    s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, selection: Any
) -> None:
    data = _data()
    data[32:64, 64:128] = 0  # a shard of fill values: not stored
    url = f"{s3['url']}/a.zarr"
    for location, options in ((url, s3["options"]), (str(tmp_path / "a.zarr"), None)):
        _create(location, storage_options=options)[:] = data
    assert not s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True).exists(
        f"{url}/c/1/1"
    )
    threads = _spy_decode_jobs(monkeypatch)
    remote = zarrext.open_array(url, storage_options=s3["options"], mode="r")[selection]
    local = zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")[selection]
    np.testing.assert_array_equal(remote, data[selection])
    np.testing.assert_array_equal(remote, local)
    if selection == np.s_[:] or selection == np.s_[32:96, :]:
        # whole shards: decoded by zarrext's jobs, in the codec threads
        assert threads
        assert all(t.startswith("zarrext-codec") for t in threads)


def test_remote_shard_decode_error_names_the_shard(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/bad.zarr"
    _create(url, storage_options=s3["options"])[:] = _data()
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    blob = bytearray(fs.cat(f"{url}/c/0/1"))
    blob[0] = 0x7F  # the first inner chunk's conditional header: no such codec
    blob[1:40] = b"\xff" * 39
    fs.pipe(f"{url}/c/0/1", bytes(blob))
    array = zarrext.open_array(url, storage_options=s3["options"], mode="r")
    with pytest.raises(ChunkDecodeError) as raised:
        array[:]
    assert "c/0/1" in str(raised.value)
    np.testing.assert_array_equal(array[32:, :], _data()[32:, :])  # other shards read



@pytest.mark.parametrize(
    "selection", [np.s_[:], np.s_[32:96, :], np.s_[5:70, 3:100]],
    ids=["all", "whole-shards", "parts"],
)
def test_remote_optional_reads_take_the_shard_jobs(
    s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, selection: Any
) -> None:
    # nullable float32 in shards: each inner chunk's mask and present values
    # decoded in the codec threads straight into the structured output
    data = _data()
    missing = (np.arange(data.size).reshape(SHAPE) % 7 == 0) | (data > 90)
    missing[32:48, 64:80] = True  # an inner chunk of missing values only
    url = f"{s3['url']}/opt.zarr"
    for location, options in ((url, s3["options"]), (str(tmp_path / "opt.zarr"), None)):
        zarrext.create_array(
            location, storage_options=options, shape=SHAPE, chunks=INNER, shards=SHARD,
            dtype=zarrext.OptionalDType(Float32()), fill_value=None, compressors=None,
        )[:] = np.ma.MaskedArray(data, mask=missing)
    threads = _spy_decode_jobs(monkeypatch)
    remote = zarrext.open_array(url, storage_options=s3["options"], mode="r")[selection]
    local = zarrext.open_array(str(tmp_path / "opt.zarr"), mode="r")[selection]
    np.testing.assert_array_equal(remote["valid"], ~missing[selection])
    np.testing.assert_array_equal(remote["value"][remote["valid"]],
                                  data[selection][~missing[selection]])
    assert remote.tobytes() == local.tobytes()  # missing values alike (zero) too
    if selection != np.s_[5:70, 3:100]:  # whole shards: zarrext's jobs, codec threads
        assert threads
        assert all(t.startswith("zarrext-codec") for t in threads)

# -- writes: encoded in the codec threads, uploaded with requests in flight -------------


def _stored(root: Any) -> dict[str, bytes]:
    return {k: v for k, v in root.items() if not k.endswith("zarr.json")}


WRITE_CASES: dict[str, dict[str, Any]] = {
    "conditional": dict(dtype="float32", serializer=BytesCodec(),
                        compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
                        decision="compress_if_smaller"),
    "packbits": dict(dtype="bool", serializer=zarrext.PackBitsCodec(), compressors=None),
    "pad": dict(dtype="uint16", serializer=BytesCodec(),
                compressors=[zarrext.PadCodec(
                    location="start", nbytes=4,
                    # the chunk's index as the pad's bytes: the same index on both paths
                    padding=lambda d, i, s: str(i).encode()[:4].ljust(4, b"-"))]),
    # nullable values: a mask and the present values, each its own chain
    "optional": dict(dtype=zarrext.OptionalDType(Float32()), fill_value=None,
                     serializer=zarrext.OptionalCodec.default_for(
                         zarrext.OptionalDType(Float32())),
                     compressors=None),
    # quantized: scale_offset and cast_value filters before the conditional compressor
    "quantized": dict(dtype="float32", fill_value=0,
                      filters=quantize.plan(value_range=(-100.0, 100.0), max_abs_error=0.05),
                      serializer=BytesCodec(),
                      compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
                      decision="compress_if_smaller"),
    # whole shards: encoded in a codec thread each, one request each; the partial
    # write below keeps zarr-python's path (the stored shard read and merged)
    "sharded": dict(dtype="float32", shards=SHARD, serializer=BytesCodec(),
                    compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
                    decision="compress_if_smaller"),
    # the inner chunks' array-wide indices as pad bytes: set alike on both paths
    "sharded-pad": dict(dtype="uint16", shards=SHARD, serializer=BytesCodec(),
                        compressors=[zarrext.PadCodec(
                            location="start", nbytes=6,
                            padding=lambda d, i, s: str(i).encode()[:6].ljust(6, b"-"))]),
    "sharded-optional": dict(dtype=zarrext.OptionalDType(Float32()), fill_value=None,
                             shards=SHARD, compressors=None),
}


def _values(name: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    field = _data()
    field[:16, :16] = 0  # a chunk of fill values: not stored by either path
    if name == "packbits":
        return field > 10
    if name.endswith("pad"):
        return np.abs(field).astype("uint16")
    if name.endswith("optional"):
        # every third value missing; the fill chunk is all missing (not stored)
        missing = (np.arange(field.size).reshape(SHAPE) % 3 == 0) | (field == 0)
        return np.ma.MaskedArray(field, mask=missing)
    if name in ("conditional", "quantized", "sharded"):
        field[16:32, :] = rng.random((16, SHAPE[1]))  # incompressible: stored raw
    return field


@pytest.mark.parametrize("name", list(WRITE_CASES))
def test_remote_writes_store_the_local_bytes(
    s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    values = _values(name)
    threads: list[str] = []
    real = ZarrextCodecPipeline._encode_merged

    def encode_merged(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ZarrextCodecPipeline, "_encode_merged", encode_merged)
    real_shard = zarrext.pipeline.whole_shards.plan_shard

    def plan_shard(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_shard(*args, **kwargs)

    monkeypatch.setattr(zarrext.pipeline.whole_shards, "plan_shard", plan_shard)
    # shards of any size encoded by all the codec threads
    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "PARALLEL_WRITE_MIN_BYTES", 0)
    shard_threads = _spy_encode_jobs(monkeypatch)
    url = f"{s3['url']}/{name}.zarr"
    workers = 2
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        for location, options in ((url, s3["options"]), (str(tmp_path / "a.zarr"), None)):
            array = zarrext.create_array(location, storage_options=options, shape=SHAPE,
                                         chunks=INNER, **WRITE_CASES[name])
            array[:] = values
            array[3:20, 5:40] = values[:17, :35]  # partial chunks: merged with what is stored
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    remote = {p[len(url) - 5 + 1:]: fs.cat(p) for p in fs.find(url)
              if not p.endswith("zarr.json")}
    local = {str(p.relative_to(tmp_path / "a.zarr")): p.read_bytes()
             for p in (tmp_path / "a.zarr").rglob("*") if p.is_file() and p.name != "zarr.json"}
    # the S3 writes' chunks, and every whole shard, encoded in the codec threads
    assert len(threads) >= len(local)
    assert all(t.startswith("zarrext-codec") for t in threads)
    assert remote.keys() == local.keys()
    grid = WRITE_CASES[name].get("shards", INNER)
    assert len(local) >= (SHAPE[0] // grid[0]) * (SHAPE[1] // grid[1]) - 1
    for key in local:
        assert remote[key] == local[key], key
    if "shards" in WRITE_CASES[name]:
        # each whole shard (8 inner chunks) of the S3 write encoded by both codec
        # threads, not one; the shard of fill values is planned, not encoded
        assert len(shard_threads) >= len(local)
        for names in shard_threads:
            assert len(names) == workers, names
            assert all(t.startswith("zarrext-codec") for t in names)


def _spy_encode_jobs(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The codec threads that ran each shard's encoding jobs (one set per shard). A
    shard's jobs wait for each other: they pass only if they run at once, each in
    a thread of its own. The barrier's timeout is a hang guard, not a bound on the
    jobs: jobs run one after another would wait for each other without end; it
    breaks the write then (after 120 s, far beyond what starting a few threads
    takes on a loaded machine)."""
    shards: list[set[str]] = []
    real = RuntimeShardingCodec.encode_jobs

    def encode_jobs(self: Any, *args: Any, **kwargs: Any) -> Any:
        jobs, lay_out = real(self, *args, **kwargs)
        names: set[str] = set()
        shards.append(names)
        together = threading.Barrier(len(jobs), timeout=120)

        def named(job: Any) -> Any:
            def run() -> None:
                names.add(threading.current_thread().name)
                together.wait()
                job()
            return run

        return [named(job) for job in jobs], lay_out

    monkeypatch.setattr(RuntimeShardingCodec, "encode_jobs", encode_jobs)
    return shards


class _HeldBytes(WrapperStore[Any]):
    """A store that counts the bytes held by its ``set`` calls in flight (the encoded
    objects waiting for their upload), and the most at once."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.held = self.most_held = self.sets = 0

    async def set(self, key: str, value: Buffer) -> None:
        self.sets += 1
        self.held += len(value)
        self.most_held = max(self.most_held, self.held)
        try:
            await self._store.set(key, value)
        finally:
            self.held -= len(value)


def test_remote_write_memory_stays_within_the_in_flight_bound(s3: dict[str, Any]) -> None:
    # 64 incompressible chunks of 256 KiB (16 MiB) with 2 objects in flight. The
    # bound (write_chunks' docstring): per object in flight its decoded and encoded
    # bytes, and the store's copy of what it uploads; beside it 1 MiB for the
    # interpreter's, zarr's and the HTTP client's own objects. 1/6 of the array.
    chunk, n, concurrency = (256, 256), 64, 2
    chunk_bytes = chunk[0] * chunk[1] * 4
    encoded_max = chunk_bytes + 64  # stored raw at worst: + the conditional header
    values = np.random.default_rng(3).random((chunk[0] * 8, chunk[1] * 8)).astype("float32")
    store = _HeldBytes(FsspecStore.from_url(f"{s3['url']}/big.zarr",
                                            storage_options=s3["options"]))
    array = zarrext.create_array(store, shape=values.shape, chunks=chunk, dtype="float32",
                                 fill_value=0, serializer=BytesCodec(),
                                 compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
                                 decision="compress_if_smaller")
    bound = concurrency * (chunk_bytes + 2 * encoded_max) + 2**20
    store.sets = store.most_held = 0  # the metadata written
    with zarr.config.set({"async.concurrency": concurrency}):
        tracemalloc.start()
        try:
            array[:] = values
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert store.sets == n
    assert 0 < store.most_held <= concurrency * encoded_max  # objects in flight at once
    assert values.nbytes >= 6 * bound
    assert peak <= bound, (peak, bound)


class _SlowSetter:
    """A byte setter whose upload takes a while: records when each upload starts."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.path, self.events = name, events

    async def set(self, value: Any) -> None:
        import asyncio

        self.events.append(f"upload {self.path}")
        await asyncio.sleep(0.02)

    async def delete(self) -> None:  # pragma: no cover - no shard here is empty
        raise AssertionError("nothing to delete")


@pytest.mark.parametrize("path", ["shards", "chunks"])
def test_remote_writes_upload_each_object_as_its_encoding_ends(path: str) -> None:
    # 12 objects, 10 in flight: encoding is limited to 2 shards (or the codec
    # threads' number of chunks) at once, in order, so that the first uploads go
    # out while later objects still encode (all 10 encoding at once would queue
    # each shard's layout behind the others' inner chunks).
    import asyncio
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from zarr.core.buffer import default_buffer_prototype

    from zarrext.pipeline import remote

    events: list[str] = []
    lock = threading.Lock()
    busy = {"now": 0, "most": 0}  # encoding jobs running
    shards = {"now": 0, "most": 0}  # shards between their planning and their layout

    def encoding(name: str) -> Buffer:
        with lock:
            busy["now"] += 1
            busy["most"] = max(busy["most"], busy["now"])
            events.append(f"encode {name}")
        threading.Event().wait(0.01)
        with lock:
            busy["now"] -= 1
        return default_buffer_prototype().buffer.from_bytes(b"x")

    batch = [(_SlowSetter(f"o{k}", events), None, None, None, True) for k in range(12)]
    contexts = [contextvars.copy_context() for _ in batch]

    async def run(pool: ThreadPoolExecutor) -> None:
        if path == "shards":
            def plan(item: Any) -> Any:  # a shard is being encoded from here ...
                name = item[0].path
                with lock:
                    shards["now"] += 1
                    shards["most"] = max(shards["most"], shards["now"])

                def lay_out(keep: Any) -> Buffer:  # ... to here
                    with lock:
                        shards["now"] -= 1
                    return keep([default_buffer_prototype().buffer.from_bytes(b"s")])

                return [lambda: encoding(name)] * 2, lay_out

            await remote.write_shards(batch, contexts, plan, pool)
        else:
            await remote.write_chunks(
                batch, contexts, lambda item, _: encoding(item[0].path), pool, encoders=2
            )

    with zarr.config.set({"async.concurrency": 10}), ThreadPoolExecutor(4) as pool:
        asyncio.run(run(pool))
    assert sorted(e for e in events if e.startswith("upload")) == sorted(
        f"upload o{k}" for k in range(12)
    )
    if path == "shards":
        assert shards["most"] == 2
    else:
        assert busy["most"] == 2
    first_upload = events.index(next(e for e in events if e.startswith("upload")))
    last_encode = max(i for i, e in enumerate(events) if e.startswith("encode"))
    assert first_upload < last_encode, events


@pytest.mark.parametrize("shape", [(1024, 1024), (1000, 900)], ids=["whole", "partial-edges"])
@pytest.mark.parametrize("name", ["sharded", "sharded-pad", "sharded-optional"])
def test_staged_inner_chunks_store_the_local_bytes(
    s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
    shape: tuple[int, int],
) -> None:
    # Inner chunks of 256 KiB (float32) are encoded in the codec threads' arenas and
    # kept in staging segments until their shard is laid out (scratch.Staging).
    # Segments of 600 KiB: two inner chunks each at most, some chunks compress
    # and some do not, so shards span several segments, and the segments go back
    # to the pool and serve the next shards (4 shards, 2 encoded at once).
    from zarrext.pipeline import scratch

    monkeypatch.setattr(scratch, "SEGMENT_BYTES", 600 << 10)
    kept: list[int] = []
    in_place: list[bool] = []  # the codec wrote the chunk's bytes there: no copy
    real_keep = scratch.Staging.keep

    def keep(self: Any, data: np.ndarray) -> np.ndarray:
        kept.append(data.nbytes)
        in_place.append(self.holds(data))
        return real_keep(self, data)

    monkeypatch.setattr(scratch.Staging, "keep", keep)
    inner, shard = (256, 256), (512, 512)  # edge shards and inner chunks cut short
    rng = np.random.default_rng(11)
    field = np.sin(np.arange(shape[0] * shape[1]).reshape(shape) / 900).astype("float32")
    field[256:512, :] = rng.random((256, shape[1]))  # incompressible rows: stored raw
    field[:256, :256] = 0  # fill values: not stored
    case = dict(WRITE_CASES[name], shards=shard)
    if name == "sharded":  # a decision batches leave to the chunk-by-chunk path, whose
        case["decision"] = "spec_literal"  # inner chunks are staged (pipeline/batch_encoding.py)
    values: Any = field
    if name == "sharded-pad":
        values = (np.abs(field) * 1000).astype("uint16")
    elif name == "sharded-optional":
        values = np.ma.MaskedArray(field, mask=(np.arange(field.size) % 5 == 0).reshape(shape))
    url = f"{s3['url']}/staged-{name}-{shape[0]}.zarr"
    with zarr.config.set({"codec_pipeline.max_workers": 2, "async.concurrency": 4}):
        for location, options in ((url, s3["options"]), (str(tmp_path / "a.zarr"), None)):
            zarrext.create_array(location, storage_options=options, shape=shape, chunks=inner,
                                 **case)[:] = values
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    remote = {p[len(url) - 5 + 1:]: fs.cat(p) for p in fs.find(url)
              if not p.endswith("zarr.json")}
    local = {str(p.relative_to(tmp_path / "a.zarr")): p.read_bytes()
             for p in (tmp_path / "a.zarr").rglob("*") if p.is_file() and p.name != "zarr.json"}
    assert remote.keys() == local.keys()
    assert len(local) == 4
    for key in local:
        assert remote[key] == local[key], key
    if name != "sharded-optional":  # optional's inner chunks: (value, valid) records
        assert len(kept) >= 15  # every stored inner chunk of the S3 write was staged
        # conditional and pad, the chains' last codecs, wrote them into the staging
        assert all(in_place)
    assert len(scratch._free_segments) <= scratch._SEGMENTS_KEPT
    back = zarrext.open_array(url, storage_options=s3["options"], mode="r")[:]
    if name == "sharded-optional":
        np.testing.assert_array_equal(back["valid"], ~values.mask)
        np.testing.assert_array_equal(back["value"][~values.mask], field[~values.mask])
    else:
        np.testing.assert_array_equal(back, values)


def test_staging_copies_and_reuses_its_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    from zarrext.pipeline import scratch

    monkeypatch.setattr(scratch, "SEGMENT_BYTES", 1000)
    monkeypatch.setattr(scratch, "_free_segments", [])
    staging = scratch.Staging()
    pieces = [np.full(n, k, np.uint8) for k, n in enumerate((400, 400, 400, 1500))]
    kept = [staging.keep(p) for p in pieces]
    for piece, copy in zip(pieces, kept, strict=True):
        np.testing.assert_array_equal(copy, piece)
        assert not np.may_share_memory(copy, piece)
    assert staging.holds(kept[0])
    assert staging.holds(kept[2])
    assert not staging.holds(kept[3])  # larger than a segment: a fresh copy
    assert not np.may_share_memory(kept[0], kept[2])  # the third took a new segment
    staging.release()
    assert len(scratch._free_segments) == 2
    again = scratch.Staging().keep(pieces[0])
    assert any(np.may_share_memory(again, s) for s in [kept[0], kept[2]])  # reused
    written = scratch.Staging()  # a codec's output reserved in the staging: not copied
    reserved = written.reserve(300)
    assert reserved is not None
    reserved[:] = 7
    assert written.keep(reserved) is reserved
    # staged memory seen through another object (its base is not a segment): copied,
    # to memory of its own, with the same bytes
    through = np.frombuffer(memoryview(reserved), np.uint8)
    copied = written.keep(through)
    assert copied is not through
    assert not np.may_share_memory(copied, reserved)
    np.testing.assert_array_equal(copied, reserved)
    assert written.reserve(1001) is None  # more than a segment
