"""zarrext at scale: a Dask cluster against an S3 server, next to tensorstore and zarr-python.

Everything runs in one process tree on this machine, in one run: a moto S3 server
on loopback (``python -m moto.server``), a ``dask.distributed.LocalCluster`` of 2
worker processes, and the contenders. Rows:

* moto's raw PUT and GET throughput (obstore; the best of 1, 4 and ``--in-flight``
  requests at once) for objects of the size the arrays store: moto itself is a
  limit here, so every figure below is also given as a fraction of it ("of moto":
  the time moto alone needs to move the row's stored bytes / the row's time).
* Ingest ``--gib`` GiB of float32 (a smooth field plus noise, generated on the
  workers and held there, untimed) into sharded arrays (16 MiB shards of 1 MiB
  chunks, zstd level 3): zarrext (``zarrext.write_dask`` on the cluster,
  ``conditional(zstd)``, ``compress_if_smaller``), zarr-python + dask (``da.store``
  on the cluster into an fsspec-backed array) and tensorstore (its ``s3`` kvstore,
  one process, the data in memory).
* Recompress the zarrext array on the cluster (``zarrext.recompress(..., client=)``).
* Read the zarr-python-written array back: zarrext (``open_array(url)`` and over
  ``zarr.storage.ObjectStore``), zarr-python over fsspec and over ``ObjectStore``
  (obstore), tensorstore; and zarrext reading its own ``conditional(zstd)`` array.
* Latency: the recompress through a proxy that adds 20 ms per request
  (``latency_proxy.py``) against the same job without it. Goal: within 1.5x.

A feature this branch does not have yet is printed as "not available" with the
reason, and the run goes on (the array it would have written is then written
another way, untimed, so the rows after it still run).

Usage: ``python benchmarks/bench_scale.py [--gib 1] [--repeat 2] [--read-repeat 5]
[--in-flight 16]``
(``--quick``, as ``run_all.py --quick`` passes it, means ``--gib 0.0625``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import s3fs
import tensorstore as ts
import zarr
from dask.distributed import Client, LocalCluster, wait
from obstore.store import S3Store
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.storage import FsspecStore, ObjectStore

import zarrext
from timing import best_of, interleave

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.moto_server: the tests' S3 server
from tests.moto_server import moto_server  # noqa: E402

SHARD = 2048  # 2048 x 2048 float32: 16 MiB shards
INNER = 512  # 1 MiB inner chunks
LEVEL = 3
REGION = "eu-west-1"  # moto refuses a LocationConstraint of us-east-1
KEY, SECRET = "bench", "bench"
LATENCY_GOAL = 1.5
NOT_AVAILABLE = "not available"


# -- the S3 server, the proxy ----------------------------------------------------------


@contextlib.contextmanager
def latency_proxy(endpoint: str, delay_ms: float, max_seconds: float) -> Iterator[str]:
    """``latency_proxy.py`` in front of ``endpoint``; its endpoint URL."""
    target = int(endpoint.rsplit(":", 1)[1])
    proxy = subprocess.Popen(
        [sys.executable, str(HERE / "latency_proxy.py"), str(target),
         "--delay-ms", str(delay_ms), "--max-seconds", str(max_seconds)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proxy.stdout is not None
        port = int(proxy.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


@dataclass(frozen=True)
class Bucket:
    """A bucket on the S3 server and the ways each client reaches it."""

    name: str
    endpoint: str

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """s3fs options (zarrext and zarr-python's FsspecStore)."""
        return {
            "endpoint_url": endpoint or self.endpoint, "key": KEY, "secret": SECRET,
            "client_kwargs": {"region_name": REGION},
        }

    def url(self, path: str) -> str:
        return f"s3://{self.name}/{path}"

    def obstore(self) -> S3Store:
        return S3Store(
            self.name, endpoint=self.endpoint, access_key_id=KEY, secret_access_key=SECRET,
            region=REGION, client_options={"allow_http": True},
        )

    def tensorstore_kvstore(self, path: str) -> dict[str, Any]:
        # Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (set in main) only:
        # no search of ~/.aws files, which would log an error for each missing file.
        return {"driver": "s3", "bucket": self.name, "path": f"{path}/",
                "endpoint": self.endpoint, "aws_region": REGION,
                "aws_credentials": {"type": "environment"}}

    def stored_bytes(self, path: str) -> int:
        fs = s3fs.S3FileSystem(**self.storage_options(), skip_instance_cache=True)
        return int(fs.du(f"{self.name}/{path}"))

    def remove(self, path: str) -> None:
        fs = s3fs.S3FileSystem(**self.storage_options(), skip_instance_cache=True)
        fs.rm(f"{self.name}/{path}", recursive=True)


# -- moto's own throughput ---------------------------------------------------------------


async def _raw_transfers(store: S3Store, size: int, count: int, in_flight: int) -> tuple[
    float, float
]:
    """Seconds to PUT ``count`` objects of ``size`` bytes, then to GET them back,
    ``in_flight`` requests at once."""
    import obstore

    payload = np.random.default_rng(0).bytes(size)
    slots = asyncio.Semaphore(in_flight)

    async def put(i: int) -> None:
        async with slots:
            # One PUT per object, as the array writers do (obstore would otherwise
            # split objects over 5 MB into a multipart upload, slower on moto).
            await obstore.put_async(store, f"raw/{i}", payload, use_multipart=False)

    async def get(i: int) -> None:
        async with slots:
            got = await (await obstore.get_async(store, f"raw/{i}")).bytes_async()
            assert len(got) == size

    t0 = time.perf_counter()
    await asyncio.gather(*(put(i) for i in range(count)))
    t_put = time.perf_counter() - t0
    t0 = time.perf_counter()
    await asyncio.gather(*(get(i) for i in range(count)))
    return t_put, time.perf_counter() - t0


@dataclass(frozen=True)
class Raw:
    """moto's raw throughput, bytes per second, and the requests in flight that gave it."""

    put: float
    get: float
    put_in_flight: int
    get_in_flight: int


def measure_raw(
    bucket: Bucket, size: int, total: int, in_flight: tuple[int, ...], repeat: int
) -> Raw:
    """moto's best PUT and GET throughput for objects of ``size`` bytes, over the
    given numbers of requests in flight (moto is one Python process: more requests
    at once do not always go faster)."""
    put: dict[int, float] = {}
    get: dict[int, float] = {}
    for n in in_flight:
        count = max(n, total // size)
        runs = [asyncio.run(_raw_transfers(bucket.obstore(), size, count, n))
                for _ in range(repeat)]
        put[n] = count * size / min(p for p, _ in runs)
        get[n] = count * size / min(g for _, g in runs)
    bucket.remove("raw")
    best_put, best_get = max(put, key=put.__getitem__), max(get, key=get.__getitem__)
    return Raw(put[best_put], get[best_get], best_put, best_get)


# -- the data ------------------------------------------------------------------------------


def shape_for(gib: float) -> tuple[int, int]:
    """Whole shards, up to 8 across, about ``gib`` GiB of float32 in all."""
    shards = max(1, round(gib * 2**30 / (SHARD * SHARD * 4)))
    across = min(8, shards)
    return (math.ceil(shards / across) * SHARD, across * SHARD)


def field_block(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    """One block of a smooth float32 field with noise, from its position alone."""
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    y = np.arange(r0, r1, dtype=np.float32)[:, None]
    x = np.arange(c0, c1, dtype=np.float32)[None, :]
    rng = np.random.default_rng(r0 * 1_000_003 + c0)
    noise = rng.normal(0, 0.01, (r1 - r0, c1 - c0)).astype(np.float32)
    return (np.sin(x / 50) * np.cos(y / 70) * 100 + noise).astype(np.float32)


def source(shape: tuple[int, int]) -> da.Array:
    return da.zeros(shape, dtype=np.float32, chunks=(SHARD, SHARD)).map_blocks(
        field_block, dtype=np.float32
    )


def ts_spec(
    bucket: Bucket, path: str, shape: tuple[int, int], *, sharded: bool = True
) -> dict[str, Any]:
    """tensorstore's zarr v3 float32 array of zstd chunks: SHARD^2 shards of INNER^2
    chunks, or (``sharded=False``) unsharded INNER^2 chunks."""
    chunks = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": LEVEL}}]
    codecs: list[dict[str, Any]] = chunks
    if sharded:
        codecs = [{
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [INNER, INNER],
                "codecs": chunks,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}],
            },
        }]
    grid = [SHARD, SHARD] if sharded else [INNER, INNER]
    return {
        "driver": "zarr3",
        "kvstore": bucket.tensorstore_kvstore(path),
        "metadata": {
            "shape": list(shape),
            "data_type": "float32",
            "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
            "codecs": codecs,
        },
    }


# -- rows ------------------------------------------------------------------------------------


def attempt(label: str, fn: Callable[[], Any], repeat: int = 1) -> float | None:
    """Best seconds of ``repeat`` calls of ``fn()``, or None (printed as not
    available, with the reason) when this branch cannot do it yet."""
    try:
        return best_of(fn, repeat)
    except Exception as e:  # a missing feature shows as any error type; say which
        reason = str(e).splitlines()[0] if str(e) else ""
        print(f"  {label}: {NOT_AVAILABLE} ({type(e).__name__}: {reason[:150]})", flush=True)
        return None


@dataclass
class Table:
    """Rows of one kind: seconds, throughput, fraction of moto's raw rate, ratio."""

    title: str
    mib: float  # MiB of array data each row moves
    reference: str  # the row the ratio column divides by
    rows: dict[str, float | None]
    raw_seconds: float  # what moto alone needs to move the same stored bytes

    def print(self) -> None:
        print(f"{self.title}")
        print(f"  {'':<58} {'s':>8} {'MiB/s':>8} {'of moto':>8} {'/ ' + self.reference:>14}")
        base = self.rows.get(self.reference)
        for name, t in self.rows.items():
            if t is None:
                print(f"  {name:<58} {NOT_AVAILABLE:>8}")
                continue
            ratio = f"{base / t:14.2f}" if base else f"{'-':>14}"
            print(f"  {name:<58} {t:8.2f} {self.mib / t:8.0f} {self.raw_seconds / t:8.2f} "
                  f"{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="GiB to ingest (default 1)")
    parser.add_argument("--quick", action="store_true", help="same as --gib 0.0625")
    parser.add_argument("--repeat", type=int, default=2,
                        help="zarrext's ingest, recompress and latency rows: runs of each (best)")
    parser.add_argument("--read-repeat", type=int, default=5,
                        help="reads: runs of each, in turn (best)")
    parser.add_argument("--in-flight", type=int, default=16,
                        help="most raw moto requests at once tried (1 and 4 are tried too)")
    parser.add_argument("--threads", type=int, default=2, help="threads per worker")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the proxy's delay")
    args = parser.parse_args()
    gib = 0.0625 if args.quick else args.gib
    shape = shape_for(gib)
    mib = shape[0] * shape[1] * 4 / 2**20
    # tensorstore's s3 kvstore takes credentials from the environment only; the
    # workers, started below, inherit them too.
    os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    print(f"data: {shape[0]}x{shape[1]} float32 = {mib:.0f} MiB, shards {SHARD}^2 (16 MiB) of "
          f"{INNER}^2 chunks, zstd level {LEVEL}; moto on loopback; LocalCluster 2 processes "
          f"x {args.threads} threads", flush=True)

    with moto_server() as endpoint, LocalCluster(
        n_workers=2, threads_per_worker=args.threads, processes=True, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        bucket = Bucket(f"bench-{uuid.uuid4().hex[:8]}", endpoint)
        s3fs.S3FileSystem(**bucket.storage_options(), skip_instance_cache=True).mkdir(bucket.name)
        so = bucket.storage_options()
        src = source(shape).persist()  # generated on the workers, untimed
        wait(src)
        sharded: dict[str, Any] = dict(
            shape=shape, dtype="float32", fill_value=0, chunks=(INNER, INNER),
            shards=(SHARD, SHARD),
        )

        # -- ingest ----------------------------------------------------------------------
        print("ingest", flush=True)
        ours = zarrext.create_array(
            bucket.url("zarrext.zarr"), storage_options=so, serializer=BytesCodec(),
            compressors=[zarrext.ConditionalCodec([ZstdCodec(level=LEVEL)])],
            decision="compress_if_smaller", **sharded,
        )
        ingest: dict[str, float | None] = {}
        ingest["zarrext.write_dask, cluster"] = attempt(  # the first run starts the workers'
            "zarrext.write_dask, cluster",  # imports: the best of --repeat
            lambda: zarrext.write_dask(src, ours, client=client), args.repeat,
        )
        if ingest["zarrext.write_dask, cluster"] is None:
            # Untimed stand-in so that recompress and reads have the array.
            ours[:] = src.compute()
        stock = zarr.create_array(
            FsspecStore.from_url(bucket.url("zarr.zarr"), storage_options=so),
            compressors=[ZstdCodec(level=LEVEL)], **sharded,
        )
        # da.store takes any target with __setitem__; its annotation names arrays only.
        ingest["zarr-python + dask (da.store, fsspec), cluster"] = attempt(
            "zarr-python + dask",
            lambda: da.store(src, stock, lock=False, compute=True),  # type: ignore[arg-type]
        )
        data = src.compute()
        ts_array = ts.open(ts_spec(bucket, "ts.zarr", shape), create=True).result()
        ingest["tensorstore (s3 kvstore), this process"] = attempt(
            "tensorstore", lambda: ts_array.write(data).result()
        )
        # The same write as the cluster's, from this process alone (its codec threads,
        # the data in memory): write_dask's goal is to be at least as fast.
        one = zarrext.create_array(
            bucket.url("zarrext-one.zarr"), storage_options=so, serializer=BytesCodec(),
            compressors=[zarrext.ConditionalCodec([ZstdCodec(level=LEVEL)])],
            decision="compress_if_smaller", **sharded,
        )
        ingest["zarrext, this process ([:] = data)"] = attempt(
            "zarrext, this process", lambda: one.__setitem__(slice(None), data), args.repeat
        )
        stored = {name: bucket.stored_bytes(name) for name in ("zarrext.zarr", "zarr.zarr",
                                                                 "ts.zarr")}
        bucket.remove("zarrext-one.zarr")
        assert np.array_equal(zarr.open_array(stock.store, mode="r")[:], data)
        assert np.array_equal(zarrext.open_array(bucket.url("zarrext.zarr"),
                                                 storage_options=so, mode="r")[:], data)
        bucket.remove("ts.zarr")  # moto keeps objects in memory

        shards = (shape[0] // SHARD) * (shape[1] // SHARD)
        object_size = stored["zarr.zarr"] // shards
        raw = measure_raw(bucket, object_size, min(stored["zarr.zarr"], 256 * 2**20),
                          (1, 4, args.in_flight), 2)
        print(f"moto raw (obstore), {object_size / 2**20:.1f} MiB objects, best of 1, 4 and "
              f"{args.in_flight} requests in flight: PUT {raw.put / 2**20:.0f} MiB/s "
              f"({raw.put_in_flight} in flight), GET {raw.get / 2**20:.0f} MiB/s "
              f"({raw.get_in_flight} in flight); stored "
              + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in stored.items()), flush=True)
        Table("ingest (of moto: moto's raw PUT time for the bytes stored / row's time)", mib,
              "zarr-python + dask (da.store, fsspec), cluster", ingest,
              stored["zarr.zarr"] / raw.put).print()
        cluster_t, one_t = (ingest["zarrext.write_dask, cluster"],
                            ingest["zarrext, this process ([:] = data)"])
        if cluster_t and one_t:
            print(f"  write_dask on the cluster / zarrext in this process: "
                  f"{one_t / cluster_t:.2f}x (goal >= 1.0x; benchmarks/bench_remote.py "
                  "--rows ingest shows the CPU of each)")

        # -- recompress ----------------------------------------------------------------------
        def recompress(endpoint_url: str, on_cluster: bool) -> Callable[[], Any]:
            def run() -> Any:
                array = zarrext.open_array(
                    bucket.url("zarrext.zarr"), mode="r+",
                    storage_options=bucket.storage_options(endpoint_url),
                )
                return zarrext.recompress(array, decision="compress_if_smaller",
                                          client=client if on_cluster else None)

            return run

        print("recompress", flush=True)
        jobs: dict[str, float | None] = {
            "zarrext.recompress, cluster": attempt(
                "zarrext.recompress, cluster", recompress(endpoint, True), args.repeat
            ),
            "zarrext.recompress, local threads": attempt(
                "zarrext.recompress, local threads", recompress(endpoint, False), args.repeat
            ),
        }
        raw_rw = stored["zarrext.zarr"] * (1 / raw.get + 1 / raw.put)
        Table(f"recompress, best of {args.repeat} (of moto: raw GET + PUT time of the stored "
              "bytes / row's time)", mib,
              "zarrext.recompress, local threads", jobs, raw_rw).print()

        # -- reads -----------------------------------------------------------------------------
        print("read", flush=True)
        obj = ObjectStore(bucket.obstore(), read_only=True)
        readers: dict[str, Callable[[], Any]] = {}
        openers: dict[str, Callable[[], Any]] = {
            "zarr-python, ObjectStore (obstore)": lambda: zarr.open_array(
                obj, path="zarr.zarr", mode="r"),
            "zarr-python, FsspecStore (s3fs)": lambda: zarr.open_array(
                bucket.url("zarr.zarr"), storage_options=so, mode="r"),
            "zarrext.open_array(url)": lambda: zarrext.open_array(
                bucket.url("zarr.zarr"), storage_options=so, mode="r"),
            "zarrext.open_array(ObjectStore)": lambda: zarrext.open_array(
                obj, path="zarr.zarr", mode="r"),
            "zarrext.open_array(url), its conditional(zstd) array": lambda: zarrext.open_array(
                bucket.url("zarrext.zarr"), storage_options=so, mode="r"),
            "tensorstore": lambda: ts.open(
                {"driver": "zarr3", "kvstore": bucket.tensorstore_kvstore("zarr.zarr")}
            ).result(),
        }
        reads: dict[str, float | None] = {}
        for name, opener in openers.items():
            try:
                array = opener()
                read = (lambda a=array: a.read().result()) if name == "tensorstore" else (
                    lambda a=array: a[:])
                assert np.array_equal(read(), data), name
                readers[name] = read
            except Exception as e:  # a missing feature shows as any error type; say which
                print(f"  {name}: {NOT_AVAILABLE} ({type(e).__name__}: {e})")
                reads[name] = None
        reads |= interleave(readers, args.read_repeat).bests()
        Table(f"read, best of {args.read_repeat} (of moto: raw GET time of the stored bytes / "
              "row's time)", mib, "zarr-python, ObjectStore (obstore)",
              {name: reads[name] for name in openers}, stored["zarr.zarr"] / raw.get).print()

        # -- latency ---------------------------------------------------------------------------
        on_cluster = jobs["zarrext.recompress, cluster"] is not None
        where = "cluster" if on_cluster else "local threads (cluster not available)"
        print(f"latency: zarrext.recompress, {where}, {args.delay_ms:g} ms added per request",
              flush=True)
        with latency_proxy(endpoint, args.delay_ms, max_seconds=3600) as slow:
            runs = interleave(
                {"direct": recompress(endpoint, on_cluster),
                 "proxy": recompress(slow, on_cluster)},
                args.repeat, alternate_order=True,
            )
        ratio = runs.paired_ratio("proxy", "direct")
        print(f"  direct {runs.best('direct'):.2f} s, through the proxy {runs.best('proxy'):.2f} s"
              f" (bests of {args.repeat}), ratio {ratio:.2f}x (median of paired runs; "
              f"goal <= {LATENCY_GOAL}x: "
              f"{'OK' if ratio <= LATENCY_GOAL else 'MISSED'})")
        assert np.array_equal(zarrext.open_array(bucket.url("zarrext.zarr"),
                                                 storage_options=so, mode="r")[:], data)


if __name__ == "__main__":
    main()
