"""zarrext.convert against tensorstore and zarr.from_array, and the limit (issues 37, 46).

Two cases (``--case``), each ``--mib`` MiB of float32 (a smooth field plus noise, as
bench_scale.py makes it), converted into 16 MiB shards (2048x2048):

* ``v3`` (default, 1024 MiB): the source Zarr format 3, plain ``zstd`` in 1 MiB
  chunks (512x512), unsharded; the target's inner chunks 512x512. On local disk and
  on a moto S3 server on loopback (``tests/moto_server.py``).
* ``v2`` (400 MiB, square): the source Zarr format 2, ``blosc`` lz4 with byte
  shuffle in 256x256 chunks; the target's inner chunks 256x256, ``[bytes, zstd 3]``
  (tensorstore's) or convert's default.

The source and the output in the same place. The rows of each place, run in turn
round after round (``timing.interleave``, the order reversed every other round, the
last round's output deleted untimed before each run):

* ``zarrext.convert, tensorstore's codecs``: ``zarrext.convert(source, out,
  codecs=[bytes, zstd], chunks=, shards=)``, the target tensorstore writes;
* ``zarrext.convert, conditional``: the same with ``conditional`` (decision
  ``compress_if_smaller``): ``v3``, ``conditional([zstd])`` as from_array writes it;
  ``v2``, convert's default (no ``codecs``: ``conditional([shuffle, zstd])``);
* ``tensorstore``: ``ts.open`` the source (driver ``zarr3``, ``v2``: ``zarr``),
  create the ``zarr3`` target with the same shards and ``[bytes, zstd]`` inner
  chunks, ``dst.write(src).result()``;
* ``zarr.from_array(out, data=zarr.open_array(source), chunks=, shards=,
  compressors=)``: zarr-python's own copy (``v3``: the conditional row's
  ``ConditionalCodec([ZstdCodec()], decision="compress_if_smaller")``, writing its
  bytes; ``v2``: ``ZstdCodec(level=3)``, tensorstore's);
* the limit: reading the source plus encoding alone. Every source chunk's object
  is read from the store (``zarrext.stores.open_store``, as convert opens it; a
  local store's chunk files in the pool's threads, a shard's at a time, as
  convert reads them; an object store's objects ``async.concurrency`` at once),
  decoded (imagecodecs' blosc, as convert; python-zstandard) and encoded as the
  output's inner chunk with a zstd compressor kept per thread (``v3``: zstd, then
  the conditional's header byte with the raw chunk kept if zstd is not smaller;
  ``v2``: zstd 3), on every core, in memory: no shard assembled, nothing written.
  The source's chunks are the output's inner chunks here, so each source chunk is
  one inner chunk.
* the limit storing its shards: the same, each 16 MiB shard's encoded chunks also
  stored as one object (the output's bytes but its index). On S3 the loopback
  server stores them on the same 2 cores (about 55 ms of its CPU per 16 MiB PUT),
  work the limit leaves out and a conversion cannot.

Each row: the best time, MiB/s, tensorstore's best time / the row's (above 1: faster
than tensorstore) and the median of the rounds' paired ratios, the same against
from_array, the limit's best time / the row's (the fraction of the limit), the CPU
seconds of every process (this one, moto) in the best round. Then the goals (times,
paired medians): convert with tensorstore's codecs / tensorstore at most 1.0, the
conditional row / that row at most 1.1, convert / from_array below 1, convert /
limit at most 1.25; the stored sizes, and the load average after the place's rounds
(the machine's other work shares its cores: figures are comparable only at like
loads).

Usage: ``python benchmarks/bench_convert.py [--case v3|v2] [--mib N] [--repeat 3]
[--rows local,s3]`` (``--quick``, as ``run_all.py --quick`` passes it, means
``--mib 64``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imagecodecs
import numpy as np
import s3fs
import tensorstore as ts
import zarr
import zstandard
from numcodecs import Blosc
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrext
from bench_scale import KEY, SECRET, SHARD, Bucket, field_block
from timing import ProcessTreeCpu, Runs, interleave, save_results
from zarrext.pipeline.scratch import zstd_compressor
from zarrext.stores import open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.moto_server: the tests' S3 server
from tests.moto_server import moto_server  # noqa: E402

ROWS = ("local", "s3")
CONVERT_SAME = "zarrext.convert, tensorstore's codecs"
CONVERT = "zarrext.convert, conditional"
TENSORSTORE = "tensorstore"
FROM_ARRAY = "zarr.from_array"
LIMIT = "limit: read the source + encode, in memory"
STORING = "the limit storing its shards' bytes"
CORES = os.cpu_count() or 1
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


@dataclass(frozen=True)
class Case:
    """One conversion: its source, its target's inner chunks and codecs."""

    name: str
    inner: int
    """The source's chunks and the target's inner chunks (square)."""
    zarr_format: int
    level: int
    """The target's zstd level."""
    conditional: list[dict[str, Any]] | None
    """The conditional row's codecs (None: convert's default)."""
    conditional_chain: str
    """The conditional row's inner codecs, as :func:`chain` names them."""

    @property
    def same_codecs(self) -> list[dict[str, Any]]:
        """The inner codecs tensorstore writes (and convert's row with them)."""
        return [BYTES, {"name": "zstd", "configuration": {"level": self.level, "checksum": False}}]

    def describe(self) -> str:
        if self.zarr_format == 2:
            return (f"source format 2, blosc lz4 + shuffle in {self.inner}^2 chunks; target "
                    f"{SHARD}^2 shards of {self.inner}^2 [bytes, zstd {self.level}] "
                    f"(conditional: convert's default, {self.conditional_chain})")
        return (f"source format 3, zstd in {self.inner}^2 chunks; target {SHARD}^2 shards "
                f"of {self.inner}^2 [bytes, zstd] (conditional: {self.conditional_chain})")

    def shape_of(self, mib: int) -> tuple[int, int]:
        """About ``mib`` MiB of float32. ``v3``: whole shards, 4 across, from 64 MiB;
        below, whole inner chunks, 2 across (one partial shard: ``--mib 4`` is a smoke
        test). ``v2``: a square of whole shards (from 16 MiB), else of inner chunks."""
        if self.zarr_format == 2:
            side = int((mib * 2**20 // 4) ** 0.5)
            unit = SHARD if side >= SHARD else self.inner
            side = max(1, side // unit) * unit
            return (side, side)
        if mib >= 64:
            width = 4 * SHARD
            return (max(1, mib * 2**20 // 4 // width // SHARD) * SHARD, width)
        width = 2 * self.inner
        return (max(1, mib * 2**20 // 4 // width // self.inner) * self.inner, width)

    def make_source(self, store: Any, shape: tuple[int, int]) -> None:
        if self.zarr_format == 2:
            src = zarr.create_array(
                store, shape=shape, chunks=(self.inner, self.inner), dtype="float32",
                fill_value=0, zarr_format=2, filters=None,
                compressors=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
        else:  # plain zstd (zarr's default level), unsharded
            src = zarr.create_array(
                store, shape=shape, chunks=(self.inner, self.inner), dtype="float32",
                fill_value=0, serializer=BytesCodec(), compressors=[ZstdCodec()])
        for rows, cols in bands(shape):
            info = [{"array-location": [(rows.start, rows.stop), (cols.start, cols.stop)]}]
            src[rows, cols] = field_block(np.empty(0), info)

    def chunk_keys(self, shape: tuple[int, int]) -> list[tuple[str, int, int]]:
        """Every source chunk's key and its coordinates."""
        every = [(i, j) for i in range(-(-shape[0] // self.inner))
                 for j in range(-(-shape[1] // self.inner))]
        if self.zarr_format == 2:
            return [(f"{i}.{j}", i, j) for i, j in every]
        return [(f"c/{i}/{j}", i, j) for i, j in every]

    def ts_source_driver(self) -> str:
        return "zarr" if self.zarr_format == 2 else "zarr3"

    def from_array_compressors(self) -> list[Any]:
        if self.zarr_format == 2:
            return [ZstdCodec(level=self.level)]
        return [zarrext.ConditionalCodec([ZstdCodec()], decision="compress_if_smaller")]

    def from_array_chain(self) -> str:
        return "bytes,zstd" if self.zarr_format == 2 else self.conditional_chain


CASES = {
    "v3": Case("v3", 512, 3, 0, [
        BYTES,
        # zstd's configuration in full: a nested codec without one is refused (zarr's
        # parser), unlike a top-level codec of convert's JSON
        {"name": "conditional", "configuration": {
            "codecs": [{"name": "zstd", "configuration": {"level": 0, "checksum": False}}]}},
    ], "bytes,conditional(zstd)"),
    "v2": Case("v2", 256, 2, 3, None, "bytes,conditional(shuffle,zstd)"),
}


def bands(shape: tuple[int, int]) -> Iterator[tuple[slice, slice]]:
    """Row bands a shard high, the whole width: how the data is made and compared."""
    for r0 in range(0, shape[0], SHARD):
        yield slice(r0, min(r0 + SHARD, shape[0])), slice(0, shape[1])


def chain(codecs: list[dict[str, Any]]) -> str:
    """Codec JSON's names, a conditional's own in brackets: ``bytes,conditional(zstd)``."""
    return ",".join(
        f"{c['name']}({chain(c['configuration']['codecs'])})" if c["name"] == "conditional"
        else c["name"] for c in codecs)


def check_copy(source: Any, copy: Any, label: str, inner: int, expected: str) -> None:
    """Every value of ``copy`` equals the source's, and it is stored as the target says."""
    codecs = copy.metadata.to_dict()["codecs"]
    assert codecs[0]["name"] == "sharding_indexed", (label, codecs)
    names = chain(codecs[0]["configuration"]["codecs"])
    assert names == expected, (label, names, expected)
    # convert fits shards to a smaller array (clipped to it): --mib 4
    fitted = tuple(min(SHARD, n) for n in source.shape)
    assert tuple(copy.shards) in {(SHARD, SHARD), fitted}, (label, copy.shards)
    assert tuple(copy.chunks) == (inner, inner), (label, copy.chunks)
    for region in bands(source.shape):
        if not np.array_equal(source[region], copy[region]):
            raise AssertionError(f"{label}: the copy differs from the source in rows {region[0]}")


_kept = threading.local()


def transcode(blob: bytes, zarr_format: int, level: int) -> bytes:
    """A source chunk decoded and encoded as the output's inner chunk, with the
    fastest decoders zarrext has (format 2: imagecodecs' blosc, as convert reads
    it; format 3: python-zstandard) and zstd contexts kept per thread (the
    compressor convert's own, :func:`zarrext.pipeline.scratch.zstd_compressor`):
    zstd (format 2), or conditional([zstd]) deciding compress_if_smaller (zstd's
    bytes when smaller, else the raw chunk, after a one-byte header)."""
    if zarr_format == 2:
        raw = imagecodecs.blosc_decode(blob)
    else:
        decompressor = getattr(_kept, "decompressor", None)
        if decompressor is None:
            decompressor = _kept.decompressor = zstandard.ZstdDecompressor()
        raw = decompressor.decompress(blob)
    compressed = zstd_compressor(level, False).compress(raw)
    if zarr_format == 2:
        return compressed
    return b"\x01" + compressed if len(compressed) < len(raw) else b"\x00" + bytes(raw)


def read_and_encode(case: Case, store: Any, keys: list[tuple[str, int, int]],
                    pool: ThreadPoolExecutor, into: Any = None) -> int:
    """The limit: every source chunk object read from ``store`` and transcoded on
    ``pool``; the encoded bytes. A local store's chunk files are read in the pool's
    threads, a shard's at a time per thread; an object store's objects are fetched
    ``async.concurrency`` at once. With ``into``, each shard's encoded chunks are
    also stored there as one object (the output's bytes but its index: the storing
    the limit leaves out)."""
    prototype = default_buffer_prototype()
    root = store.root if isinstance(store, zarr.storage.LocalStore) else None
    per = SHARD // case.inner
    shards: dict[str, list[str]] = {}
    for key, i, j in keys:
        shards.setdefault(f"c/{i // per}/{j // per}", []).append(key)

    async def all_keys() -> int:
        loop = asyncio.get_running_loop()
        concurrency = int(zarr.config.get("async.concurrency") or 10)
        slots = asyncio.Semaphore(concurrency)
        # shards held at once: a shard's chunk files per thread; else its objects'
        # requests
        shard_slots = asyncio.Semaphore(
            2 * CORES if root is not None else max(1, concurrency // per))

        def read_shard(members: list[str]) -> list[bytes]:
            assert root is not None
            return [transcode((root / key).read_bytes(), case.zarr_format, case.level)
                    for key in members]

        async def one(key: str) -> bytes:
            async with slots:
                buffer = await store.get(key, prototype)
                assert buffer is not None, key
                return await loop.run_in_executor(
                    pool, transcode, buffer.to_bytes(), case.zarr_format, case.level)

        async def shard(name: str, members: list[str]) -> int:
            async with shard_slots:
                if root is not None:
                    encoded = await loop.run_in_executor(pool, read_shard, members)
                else:
                    encoded = await asyncio.gather(*(one(k) for k in members))
                if into is not None:
                    await into.set(name, prototype.buffer.from_bytes(b"".join(encoded)))
                return sum(len(e) for e in encoded)

        return sum(await asyncio.gather(*(shard(n, m) for n, m in shards.items())))

    return sync(all_keys())


def ts_target(case: Case, kvstore: dict[str, Any], shape: tuple[int, int]) -> dict[str, Any]:
    """tensorstore's zarr3 target: SHARD^2 shards of the case's inner chunks, each
    ``[bytes, zstd]`` (its index ``[bytes, crc32c]`` at the end, as zarr's default)."""
    return {
        "driver": "zarr3",
        "kvstore": kvstore,
        "metadata": {
            "shape": list(shape),
            "data_type": "float32",
            "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD, SHARD]}},
            "codecs": [{
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [case.inner, case.inner],
                    "codecs": [BYTES, {"name": "zstd", "configuration": {"level": case.level}}],
                    "index_codecs": [BYTES, {"name": "crc32c"}],
                },
            }],
        },
    }


@dataclass
class Place:
    """Where one row group runs: how to name, open and delete arrays there."""

    name: str
    url: Callable[[str], str]
    options: dict[str, Any] | None
    remove: Callable[[str], None]
    ts_kvstore: Callable[[str], dict[str, Any]]

    def kwargs(self) -> dict[str, Any]:
        return {} if self.options is None else {"storage_options": self.options}


def run_place(case: Case, place: Place, shape: tuple[int, int], mib: float,
              repeat: int) -> None:
    """Make the source at ``place``, time the rows, print them and the goals."""
    case.make_source(
        open_store(place.url("source.zarr"), mode="w", storage_options=place.options), shape)
    rounds = iter(range(10**6))
    written: list[str] = []
    cpu = ProcessTreeCpu()
    pool = ThreadPoolExecutor(CORES)
    keys = case.chunk_keys(shape)
    grid = {"chunks": (case.inner, case.inner), "shards": (SHARD, SHARD)}

    def before(_: str) -> None:
        """Untimed: delete the last run's output; flush dirty pages (local writeback)."""
        while written:
            place.remove(written.pop())
        os.sync()

    def output(name: str) -> str:
        path = f"{name}-{next(rounds)}.zarr"
        written.append(path)
        return path

    def convert_same() -> str:
        path = output("convert-same")
        # the same target as tensorstore's, larger than a blosc source or not
        zarrext.convert(place.url("source.zarr"), place.url(path), codecs=case.same_codecs,
                        allow_larger=True, **grid, **place.kwargs())
        return path

    def convert() -> str:
        path = output("convert")
        codecs = {} if case.conditional is None else {"codecs": case.conditional}
        zarrext.convert(place.url("source.zarr"), place.url(path), **codecs, **grid,
                        allow_larger=True, **place.kwargs())
        return path

    def tensorstore() -> str:
        path = output("tensorstore")
        src = ts.open({"driver": case.ts_source_driver(),
                       "kvstore": place.ts_kvstore("source.zarr")}, open=True, read=True).result()
        dst = ts.open(ts_target(case, place.ts_kvstore(path), shape), create=True).result()
        dst.write(src).result()
        return path

    def from_array() -> str:
        path = output("from-array")
        source = zarr.open_array(place.url("source.zarr"), mode="r", **place.kwargs())
        zarr.from_array(place.url(path), data=source, **grid, zarr_format=3,
                        serializer=BytesCodec(),
                        compressors=case.from_array_compressors(), **place.kwargs())
        return path

    def limit() -> int:
        store = open_store(place.url("source.zarr"), mode="r", storage_options=place.options)
        return read_and_encode(case, store, keys, pool)

    def storing() -> int:
        path = output("limit")
        store = open_store(place.url("source.zarr"), mode="r", storage_options=place.options)
        into = open_store(place.url(path), mode="w", storage_options=place.options)
        return read_and_encode(case, store, keys, pool, into)

    with_cpu = cpu.wrap
    # Once, untimed: every copy holds the source's values, stored as the target says.
    source = zarr.open_array(place.url("source.zarr"), mode="r", **place.kwargs())
    copies = {CONVERT_SAME: (convert_same, "bytes,zstd"),
              CONVERT: (convert, case.conditional_chain),
              TENSORSTORE: (tensorstore, "bytes,zstd"),
              FROM_ARRAY: (from_array, case.from_array_chain())}
    for label, (make, expected) in copies.items():
        path = make()
        check_copy(source, zarr.open_array(place.url(path), mode="r", **place.kwargs()), label,
                   case.inner, expected)
    source_bytes, encoded = stored_bytes(place, "source.zarr"), limit()
    sizes = {label: stored_bytes(place, path) for label, path in
             zip(copies, written, strict=True)}
    before("")

    runs = interleave({CONVERT_SAME: with_cpu(CONVERT_SAME, convert_same),
                       CONVERT: with_cpu(CONVERT, convert),
                       TENSORSTORE: with_cpu(TENSORSTORE, tensorstore),
                       FROM_ARRAY: with_cpu(FROM_ARRAY, from_array),
                       LIMIT: with_cpu(LIMIT, limit),
                       STORING: with_cpu(STORING, storing)},
                      repeat, before=before, alternate_order=True)
    before("")
    pool.shutdown()
    print_place(place.name, runs, cpu.seconds, mib, repeat)
    where = "local" if place.options is None else "s3"
    save_results(runs, f"convert-v{case.zarr_format}-{where}",
                 f"Conversion, {where}: {mib:.0f} MiB, {case.describe()}", TENSORSTORE,
                 mib=mib)
    print(f"  stored: source {source_bytes / 2**20:.1f} MiB; "
          + "; ".join(f"{label} {size / 2**20:.1f} MiB" for label, size in sizes.items())
          + f" (the limit's inner chunks: {encoded / 2**20:.1f} MiB)", flush=True)
    # other work on the machine shares its cores: say how much, with the figures
    print(f"  load average after the rounds: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)", flush=True)


def stored_bytes(place: Place, path: str) -> int:
    if place.options is None:
        return sum(p.stat().st_size for p in Path(place.url(path)).rglob("*") if p.is_file())
    fs = s3fs.S3FileSystem(**place.options, skip_instance_cache=True)
    return int(fs.du(place.url(path).removeprefix("s3://")))


def goal(runs: Runs, row: str, against: str, at_most: float, strictly: bool = False) -> str:
    best = runs.best(row) / runs.best(against)
    paired = runs.paired_ratio(row, against)
    met = paired < at_most if strictly else paired <= at_most
    return (f"{row} / {against} {paired:.2f} paired (best {best:.2f}; "
            f"{'below' if strictly else 'at most'} {at_most:g}: {'met' if met else 'missed'})")


def cpu_ratio(cpu: dict[str, list[float]], row: str, against: str) -> str:
    """The median over rounds of ``row``'s CPU seconds / ``against``'s, said in words."""
    ratios = [a / b for a, b in zip(cpu[row], cpu[against], strict=True) if b > 0]
    median = statistics.median(ratios) if ratios else float("nan")
    return f"{row} / {against} {median:.2f} (median of {len(ratios)} rounds)"


def print_place(name: str, runs: Runs, cpu: dict[str, list[float]], mib: float,
                repeat: int) -> None:
    print(f"{name}, best of {repeat}")
    print(f"  {'':<44} {'best':>9} {'':>13} {'/ ts':>7} {'median':>7} {'/ from_a':>9} "
          f"{'median':>7} {'of limit':>8} {'cpu, all':>8} {'of cores':>8}")
    for row, times in runs.seconds.items():
        t = min(times)
        busy = cpu[row][times.index(t)]
        print(f"  {row:<44} {t:7.2f} s {mib / t:7.0f} MiB/s "
              f"{runs.best(TENSORSTORE) / t:6.2f}x {runs.paired_ratio(TENSORSTORE, row):6.2f}x "
              f"{runs.best(FROM_ARRAY) / t:8.2f}x {runs.paired_ratio(FROM_ARRAY, row):6.2f}x "
              f"{runs.best(LIMIT) / t:8.2f} {busy:6.2f} s {busy / t / CORES:5.0%}", flush=True)
    print(f"  goal: {goal(runs, CONVERT_SAME, TENSORSTORE, 1.0)}", flush=True)
    print(f"  goal: {goal(runs, CONVERT, CONVERT_SAME, 1.1)}", flush=True)
    print(f"  goal: {goal(runs, CONVERT, FROM_ARRAY, 1.0, strictly=True)}", flush=True)
    print(f"  goal: {goal(runs, CONVERT, LIMIT, 1.25)}", flush=True)
    # CPU seconds hold under the load of other work on the machine, where waiting for a
    # core stretches the times above: the same comparisons by the CPU each run took
    print(f"  cpu, paired by round: {cpu_ratio(cpu, CONVERT, CONVERT_SAME)}; "
          f"{cpu_ratio(cpu, CONVERT_SAME, TENSORSTORE)}", flush=True)
    print(f"  beside it: convert / the limit storing its shards "
          f"{runs.best(CONVERT) / runs.best(STORING):.2f} (paired "
          f"{runs.paired_ratio(CONVERT, STORING):.2f}): the storing the output needs, on "
          f"the same cores", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="v3",
                        help="v3: format 3 zstd source, 1024 MiB; v2: format 2 blosc-lz4 "
                             "source, 400 MiB (default v3)")
    parser.add_argument("--mib", type=int, help="MiB of float32 (default: the case's)")
    parser.add_argument("--quick", action="store_true", help="same as --mib 64")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, interleaved (best)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"where to run, of {','.join(ROWS)} (default all)")
    args = parser.parse_args()
    rows = args.rows.split(",")
    if not set(rows) <= set(ROWS):
        parser.error(f"--rows: unknown {', '.join(sorted(set(rows) - set(ROWS)))}")
    case = CASES[args.case]
    default_mib = 400 if case.zarr_format == 2 else 1024
    shape = case.shape_of(64 if args.quick else args.mib or default_mib)
    mib = shape[0] * shape[1] * 4 / 2**20
    print(f"data: {shape[0]}x{shape[1]} float32 = {mib:.0f} MiB; {case.describe()}; "
          f"{CORES} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
          flush=True)
    if "local" in rows:
        with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
            run_place(case, Place(
                "local", lambda path: f"{tmp}/{path}", None,
                lambda path: shutil.rmtree(f"{tmp}/{path}", ignore_errors=True),
                lambda path: {"driver": "file", "path": f"{tmp}/{path}/"}),
                shape, mib, args.repeat)
    if "s3" in rows:
        # tensorstore's s3 kvstore takes credentials from the environment only
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
        with moto_server() as endpoint:
            bucket = Bucket(f"bench-{uuid.uuid4().hex[:8]}", endpoint)
            options = bucket.storage_options()
            s3fs.S3FileSystem(**options, skip_instance_cache=True).mkdir(bucket.name)
            run_place(case, Place("s3 (moto on loopback)", bucket.url, options, bucket.remove,
                                  bucket.tensorstore_kvstore),
                      shape, mib, args.repeat)


if __name__ == "__main__":
    main()
