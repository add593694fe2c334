"""zarrext.convert against zarr.from_array writing the same encoding, and the limit (issue 37).

The source: ``--mib`` MiB of float32 (a smooth field plus noise, as bench_scale.py
makes it), Zarr format 3, plain ``zstd`` in 1 MiB chunks (512x512), unsharded. The
target: ``conditional([zstd])`` deciding ``compress_if_smaller``, in 16 MiB shards
(2048x2048) of 1 MiB inner chunks (512x512). On local disk and on a moto S3 server
on loopback (``tests/moto_server.py``), the source and the output in the same place.
The rows of each place, run in turn round after round (``timing.interleave``, the
order reversed every other round, the last round's output deleted untimed before
each run):

* ``zarrext.convert(source, out, codecs=[bytes, conditional([zstd])], chunks=,
  shards=)``: the target as codec JSON, the decision convert's default;
* ``zarr.from_array(out, data=zarr.open_array(source), chunks=, shards=,
  compressors=[ConditionalCodec([ZstdCodec()], decision="compress_if_smaller")])``:
  zarr-python's own copy, writing the same bytes (the codec object carries the
  decision, so zarr's pipeline compresses as zarrext does);
* the limit: reading the source plus encoding alone. Every source chunk's object
  is read from the store (``zarrext.stores.open_store``, as convert opens it),
  zstd-decoded and encoded as the output's inner chunk (zstd, then the
  conditional's header byte with the raw chunk kept if zstd is not smaller), on
  every core, in memory: no shard assembled, nothing written. The source's chunks
  are the output's inner chunks here, so each source chunk is one inner chunk.
* the limit storing its shards: the same, each 16 MiB shard's encoded chunks also
  stored as one object (the output's bytes but its index). On S3 the loopback
  server stores them on the same 2 cores (about 55 ms of its CPU per 16 MiB PUT),
  work the limit leaves out and a conversion cannot.

Each row: the best time, MiB/s, from_array's best time / the row's (above 1: faster
than from_array) and the median of the rounds' paired ratios, the limit's best
time / the row's (the fraction of the limit; 0.8 is 1.25x the limit's time), the
CPU seconds of every process (this one, moto) in the best round. Then the goal:
convert / from_array below 1, convert / limit at most 1.25 (times, paired medians),
the stored sizes, and the load average after the place's rounds (the machine's
other work shares its cores: figures are comparable only at like loads).

Usage: ``python benchmarks/bench_convert.py [--mib 1024] [--repeat 3] [--rows
local,s3]`` (``--quick``, as ``run_all.py --quick`` passes it, means ``--mib 64``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import s3fs
import zarr
from numcodecs import Zstd
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrext
from bench_scale import KEY, SECRET, SHARD, Bucket, field_block
from timing import Runs, interleave
from zarrext.stores import open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.moto_server: the tests' S3 server
from tests.moto_server import moto_server  # noqa: E402

ROWS = ("local", "s3")
INNER = 512  # 512x512 float32: 1 MiB chunks (the source's and the shards' inner ones)
CONVERT = "zarrext.convert"
FROM_ARRAY = "zarr.from_array"
LIMIT = "limit: read the source + encode, in memory"
STORING = "the limit storing its shards' bytes"
CORES = os.cpu_count() or 1
TARGET_CODECS = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    # zstd's configuration in full: a nested codec without one is refused (zarr's
    # parser), unlike a top-level codec of convert's JSON
    {"name": "conditional", "configuration": {
        "codecs": [{"name": "zstd", "configuration": {"level": 0, "checksum": False}}]}},
]


def shape_of(mib: int) -> tuple[int, int]:
    """About ``mib`` MiB of float32: whole shards, 4 across, from 64 MiB; below, whole
    inner chunks, 2 across (one partial shard: ``--mib 4`` is a smoke test)."""
    if mib >= 64:
        width = 4 * SHARD
        return (max(1, mib * 2**20 // 4 // width // SHARD) * SHARD, width)
    width = 2 * INNER
    return (max(1, mib * 2**20 // 4 // width // INNER) * INNER, width)


def bands(shape: tuple[int, int]) -> Iterator[tuple[slice, slice]]:
    """Row bands a shard high, the whole width: how the data is made and compared."""
    for r0 in range(0, shape[0], SHARD):
        yield slice(r0, min(r0 + SHARD, shape[0])), slice(0, shape[1])


def make_source(store: Any, shape: tuple[int, int]) -> None:
    """The source: plain zstd (zarr's default level) in 1 MiB chunks, unsharded."""
    src = zarr.create_array(store, shape=shape, chunks=(INNER, INNER), dtype="float32",
                            fill_value=0, serializer=BytesCodec(), compressors=[ZstdCodec()])
    for rows, cols in bands(shape):
        info = [{"array-location": [(rows.start, rows.stop), (cols.start, cols.stop)]}]
        src[rows, cols] = field_block(np.empty(0), info)


def check_copy(source: Any, copy: Any, label: str) -> None:
    """Every value of ``copy`` equals the source's, and it is stored as the target says."""
    codecs = copy.metadata.to_dict()["codecs"]
    assert codecs[0]["name"] == "sharding_indexed", (label, codecs)
    inner = codecs[0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "conditional"], (label, inner)
    assert [c["name"] for c in inner[1]["configuration"]["codecs"]] == ["zstd"], (label, inner)
    # convert fits one shard shape to the array (clipped to its extent in whole chunks;
    # the same shards whenever the array spans whole shards, as at --mib 1024)
    fitted = tuple(min(SHARD, -(-n // INNER) * INNER) for n in source.shape)
    assert tuple(copy.shards) in ((SHARD, SHARD), fitted), (label, copy.shards)
    assert tuple(copy.chunks) == (INNER, INNER), (label, copy.chunks)
    for region in bands(source.shape):
        if not np.array_equal(source[region], copy[region]):
            raise AssertionError(f"{label}: the copy differs from the source in rows {region[0]}")


def transcode(blob: bytes, decoder: Zstd, encoder: Zstd) -> bytes:
    """A source chunk decoded and encoded as the output's conditional([zstd]) inner
    chunk (compress_if_smaller: zstd's bytes when smaller, else the raw chunk, after
    a one-byte header)."""
    raw = decoder.decode(blob)
    compressed = encoder.encode(raw)
    return b"\x01" + compressed if len(compressed) < len(raw) else b"\x00" + bytes(raw)


def read_and_encode(store: Any, keys: list[str], pool: ThreadPoolExecutor,
                    into: Any = None) -> int:
    """The limit: every source chunk object read from ``store`` (zarr's
    ``async.concurrency`` at once) and transcoded on ``pool``; the encoded bytes.
    With ``into``, each shard's encoded chunks are also stored there as one object
    (the output's bytes but its index: the storing the limit leaves out)."""
    prototype = default_buffer_prototype()
    decoder, encoder = Zstd(), Zstd(level=0)  # ZstdCodec()'s level
    per = SHARD // INNER
    shards: dict[str, list[str]] = {}
    for key in keys:
        _, i, j = key.split("/")
        shards.setdefault(f"c/{int(i) // per}/{int(j) // per}", []).append(key)

    async def all_keys() -> int:
        loop = asyncio.get_running_loop()
        concurrency = int(zarr.config.get("async.concurrency") or 10)
        slots = asyncio.Semaphore(concurrency)
        shard_slots = asyncio.Semaphore(max(1, concurrency // per))  # shards held at once

        async def one(key: str) -> bytes:
            async with slots:
                buffer = await store.get(key, prototype)
                assert buffer is not None, key
                return await loop.run_in_executor(
                    pool, transcode, buffer.to_bytes(), decoder, encoder)

        async def shard(name: str, members: list[str]) -> int:
            async with shard_slots:
                encoded = await asyncio.gather(*(one(k) for k in members))
                if into is not None:
                    await into.set(name, prototype.buffer.from_bytes(b"".join(encoded)))
                return sum(len(e) for e in encoded)

        return sum(await asyncio.gather(*(shard(n, m) for n, m in shards.items())))

    return sync(all_keys())


def chunk_keys(shape: tuple[int, int]) -> list[str]:
    return [f"c/{i}/{j}" for i in range(-(-shape[0] // INNER))
            for j in range(-(-shape[1] // INNER))]


def cpu_seconds() -> float:
    """CPU seconds of this process and every live process it started (moto)."""
    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


@dataclass
class Place:
    """Where one row group runs: how to name, open and delete arrays there."""

    name: str
    url: Callable[[str], str]
    options: dict[str, Any] | None
    remove: Callable[[str], None]

    def kwargs(self) -> dict[str, Any]:
        return {} if self.options is None else {"storage_options": self.options}


def run_place(place: Place, shape: tuple[int, int], mib: float, repeat: int) -> None:
    """Make the source at ``place``, time the three rows, print them and the goal."""
    make_source(open_store(place.url("source.zarr"), mode="w", storage_options=place.options),
                shape)
    rounds = iter(range(10**6))
    written: list[str] = []
    cpu: dict[str, list[float]] = {}
    pool = ThreadPoolExecutor(CORES)
    keys = chunk_keys(shape)

    def before(_: str) -> None:
        """Untimed: delete the last run's output; flush dirty pages (local writeback)."""
        while written:
            place.remove(written.pop())
        os.sync()

    def convert() -> str:
        path = f"convert-{next(rounds)}.zarr"
        written.append(path)
        zarrext.convert(place.url("source.zarr"), place.url(path), codecs=TARGET_CODECS,
                        chunks=(INNER, INNER), shards=(SHARD, SHARD), **place.kwargs())
        return path

    def from_array() -> str:
        path = f"from-array-{next(rounds)}.zarr"
        written.append(path)
        source = zarr.open_array(place.url("source.zarr"), mode="r", **place.kwargs())
        zarr.from_array(
            place.url(path), data=source, chunks=(INNER, INNER), shards=(SHARD, SHARD),
            serializer=BytesCodec(),
            compressors=[zarrext.ConditionalCodec([ZstdCodec()], decision="compress_if_smaller")],
            **place.kwargs(),
        )
        return path

    def limit() -> int:
        store = open_store(place.url("source.zarr"), mode="r", storage_options=place.options)
        return read_and_encode(store, keys, pool)

    def storing() -> int:
        path = f"limit-{next(rounds)}.zarr"
        written.append(path)
        store = open_store(place.url("source.zarr"), mode="r", storage_options=place.options)
        into = open_store(place.url(path), mode="w", storage_options=place.options)
        return read_and_encode(store, keys, pool, into)

    def with_cpu(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            start = cpu_seconds()
            try:
                return fn()
            finally:
                cpu.setdefault(name, []).append(cpu_seconds() - start)

        return run

    # Once, untimed: both copies hold the source's values, stored as the target says.
    source = zarr.open_array(place.url("source.zarr"), mode="r", **place.kwargs())
    for label, make in ((CONVERT, convert), (FROM_ARRAY, from_array)):
        path = make()
        check_copy(source, zarr.open_array(place.url(path), mode="r", **place.kwargs()), label)
    source_bytes, encoded = stored_bytes(place, "source.zarr"), limit()
    sizes = {label: stored_bytes(place, path) for label, path in
             zip((CONVERT, FROM_ARRAY), written, strict=True)}
    before("")

    runs = interleave({CONVERT: with_cpu(CONVERT, convert),
                       FROM_ARRAY: with_cpu(FROM_ARRAY, from_array),
                       LIMIT: with_cpu(LIMIT, limit),
                       STORING: with_cpu(STORING, storing)},
                      repeat, before=before, alternate_order=True)
    before("")
    pool.shutdown()
    print_place(place.name, runs, cpu, mib, repeat)
    print(f"  stored: source {source_bytes / 2**20:.1f} MiB; convert's "
          f"{sizes[CONVERT] / 2**20:.1f} MiB, from_array's {sizes[FROM_ARRAY] / 2**20:.1f} MiB "
          f"(the limit's inner chunks: {encoded / 2**20:.1f} MiB)", flush=True)
    # other work on the machine shares its cores: say how much, with the figures
    print(f"  load average after the rounds: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)", flush=True)


def stored_bytes(place: Place, path: str) -> int:
    if place.options is None:
        return sum(p.stat().st_size for p in Path(place.url(path)).rglob("*") if p.is_file())
    fs = s3fs.S3FileSystem(**place.options, skip_instance_cache=True)
    return int(fs.du(place.url(path).removeprefix("s3://")))


def print_place(name: str, runs: Runs, cpu: dict[str, list[float]], mib: float,
                repeat: int) -> None:
    print(f"{name}, best of {repeat}")
    print(f"  {'':<44} {'best':>9} {'':>13} {'/ from_a':>9} {'median':>8} {'of limit':>8} "
          f"{'cpu, all':>8} {'of cores':>8}")
    for row, times in runs.seconds.items():
        t = min(times)
        busy = cpu[row][times.index(t)]
        print(f"  {row:<44} {t:7.2f} s {mib / t:7.0f} MiB/s "
              f"{runs.best(FROM_ARRAY) / t:8.2f}x {runs.paired_ratio(FROM_ARRAY, row):7.2f}x "
              f"{runs.best(LIMIT) / t:8.2f} {busy:6.2f} s {busy / t / CORES:5.0%}", flush=True)
    vs_from_array = runs.best(CONVERT) / runs.best(FROM_ARRAY)
    vs_limit = runs.best(CONVERT) / runs.best(LIMIT)
    print(f"  goal: convert / from_array {vs_from_array:.2f} (paired "
          f"{runs.paired_ratio(CONVERT, FROM_ARRAY):.2f}; below 1: "
          f"{'met' if vs_from_array < 1 else 'missed'}); convert / limit {vs_limit:.2f} "
          f"(paired {runs.paired_ratio(CONVERT, LIMIT):.2f}; at most 1.25: "
          f"{'met' if vs_limit <= 1.25 else 'missed'})", flush=True)
    print(f"  beside it: convert / the limit storing its shards "
          f"{runs.best(CONVERT) / runs.best(STORING):.2f} (paired "
          f"{runs.paired_ratio(CONVERT, STORING):.2f}): the storing the output needs, on "
          f"the same cores", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB of float32 (default 1024)")
    parser.add_argument("--quick", action="store_true", help="same as --mib 64")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, interleaved (best)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"where to run, of {','.join(ROWS)} (default all)")
    args = parser.parse_args()
    rows = args.rows.split(",")
    if not set(rows) <= set(ROWS):
        parser.error(f"--rows: unknown {', '.join(sorted(set(rows) - set(ROWS)))}")
    shape = shape_of(64 if args.quick else args.mib)
    mib = shape[0] * shape[1] * 4 / 2**20
    print(f"data: {shape[0]}x{shape[1]} float32 = {mib:.0f} MiB; source zstd in {INNER}^2 "
          f"chunks; target conditional(zstd) in {SHARD}^2 shards of {INNER}^2; "
          f"{CORES} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
          flush=True)
    if "local" in rows:
        with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
            run_place(Place("local", lambda path: f"{tmp}/{path}", None,
                            lambda path: shutil.rmtree(f"{tmp}/{path}", ignore_errors=True)),
                      shape, mib, args.repeat)
    if "s3" in rows:
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
        with moto_server() as endpoint:
            bucket = Bucket(f"bench-{uuid.uuid4().hex[:8]}", endpoint)
            options = bucket.storage_options()
            s3fs.S3FileSystem(**options, skip_instance_cache=True).mkdir(bucket.name)
            run_place(Place("s3 (moto on loopback)", bucket.url, options, bucket.remove),
                      shape, mib, args.repeat)


if __name__ == "__main__":
    main()
