"""zarrext on an object store, next to tensorstore and moto's own rate, in one run.

One process against a moto S3 server on loopback (``tests/moto_server.py``), the
array in 16 MiB shards of 1 MiB inner chunks, zstd level 3 (zarrext:
``conditional(zstd)``, ``compress_if_smaller``; tensorstore: plain ``zstd``).
Every row is printed with its best time, its ratio to the row it is compared with
(bests, and the median of the rounds' paired ratios: both runs of a round share
the load of their moment) and, where a limit exists, the fraction of it:

* write: zarrext (``zarrext.create_array("s3://...")[:] = data``) / tensorstore;
  of moto: moto's raw PUT rate (obstore, one PUT per object of the shards' size);
  beside each, the CPU seconds of every process (this one, moto) and their share
  of the cores: where it is near 100 %, the row is bound by the machine's CPU;
* read: zarrext reading its own ``conditional(zstd)`` array / tensorstore reading
  its ``zstd`` one; ``optional`` (nullable float32) and a quantized array (uint16
  within 0.01, as ``zarrext quantize`` writes) beside; a ``pad`` array (a
  TIFF's chunks: unsharded 1 MiB objects) / tensorstore reading the same unsharded
  chunks; of moto: moto's raw GET rate. Each reader opens its array in the round.
  tensorstore is told the format (its driver, ``zarr3``) and reads ``zarr.json``
  alone; ``zarrext.open_array`` without ``zarr_format`` asks for ``zarr.json``,
  ``.zarray`` and ``.zattrs`` at once (zarr's probe, which warns when both formats'
  metadata exist), which the loopback server answers one after another (about 5 ms
  a round; on a real object store they go in parallel). The conditional row is
  read both ways: as a user opens it without the format (the goal's row), and told
  the format (``zarr_format=3``), as tensorstore is;
* ingest: ``zarrext.write_dask`` on a 2-process ``LocalCluster`` (``--threads``
  per worker) / zarrext's write in this process, on a cluster started without and
  one with dask's ``MALLOC_TRIM_THRESHOLD_`` (see :func:`zarrext.write_dask`);
* local read: ``zarrext.open_array(path)[:]`` of an unsharded zstd array / zstd
  decoding of the same chunk files (bytes in memory) into a fresh output on every
  core (the limit).

Usage: ``python benchmarks/bench_remote.py [--mib 256] [--repeat 3] [--rows
write,read,ingest,local]`` (``--quick`` means ``--mib 64``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import s3fs
import tensorstore as ts
import zarr
from numcodecs import Zstd
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.dtype import Float32

import zarrext
from bench_scale import INNER, KEY, LEVEL, SECRET, SHARD, Bucket, measure_raw, ts_spec
from timing import ProcessTreeCpu, Runs, interleave
from zarrext import quantize

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.moto_server: the tests' S3 server
from tests.moto_server import moto_server  # noqa: E402

ROWS = ("write", "read", "ingest", "local")
PAD = "zarrext, pad(zstd), unsharded 1 MiB chunks"
# told the format, as tensorstore's driver tells it: zarr.json alone is read
FORMAT_NAMED = "zarrext, its conditional(zstd), zarr_format=3"
ONE_PROCESS = "zarrext, this process"
DASK_DEFAULT = "zarrext.write_dask, 2 processes"
DASK_NO_TRIM = "zarrext.write_dask, 2 processes, no MALLOC_TRIM_THRESHOLD_"
CORES = os.cpu_count() or 1


def _field(shape: tuple[int, int]) -> np.ndarray:
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]].astype(np.float32)
    noise = np.random.default_rng(0).normal(0, 0.01, shape).astype(np.float32)
    return (np.sin(x / 50) * np.cos(y / 70) * 100 + noise).astype(np.float32)


def _row(
    name: str, t: float, mib: float, base: float | None, limit: float | None,
    cpu: float | None = None, paired: float | None = None,
) -> None:
    """One row: best time, throughput, ratio of bests to the reference, the median
    of the rounds' paired ratios (each round's two runs share its load), the
    fraction of the limit, the CPU of every process and its share of the cores."""
    ratio = f"{base / t:8.2f}x" if base else f"{'':>9}"
    median = f"{paired:7.2f}x" if paired else f"{'':>8}"
    of_limit = f"{limit / t:8.2f}" if limit else f"{'':>8}"
    busy = f"{cpu:6.2f} s {cpu / t / CORES:5.0%}" if cpu is not None else ""
    print(f"  {name:<58} {t:7.2f} s {mib / t:7.0f} MiB/s {ratio} {median} {of_limit} {busy}",
          flush=True)


def _read_rounds(reads: Runs, reference: str, name: str) -> float:
    """Each round's ratio of ``name``'s read rate to ``reference``'s, and both reads'
    CPU in this process (user+system, ms; moto's is apart), with the load now; the
    median ratio."""
    ratios = [r / t for r, t in zip(reads.seconds[reference], reads.seconds[name], strict=True)]
    print(f"  {name} / {reference} by round: {' '.join(f'{x:.2f}' for x in ratios)} "
          f"(median {statistics.median(ratios):.2f}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    for who in (name, reference):
        cells = " ".join(f"{u * 1e3:.0f}+{s * 1e3:.0f}" for u, s in reads.cpu[who])
        print(f"    CPU by round, ms (user+system), {who}: {cells}")
    return statistics.median(ratios)


def _header(title: str, reference: str, limit: str, cpu: bool = False) -> None:
    print(title)
    busy = f"{'cpu, all':>8} {'of cores':>8}" if cpu else ""
    print(f"  {'':<58} {'':>9} {'':>13} {'/ ' + reference[:7]:>9} {'median':>8} {limit:>8} "
          f"{busy}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB of float32 (default 256)")
    parser.add_argument("--quick", action="store_true", help="same as --mib 64")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, interleaved (best)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads per worker of the 2-process cluster (default 2)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"the groups of rows to run, of {','.join(ROWS)} (default all)")
    args = parser.parse_args()
    rows = set(args.rows.split(","))
    if not rows <= set(ROWS):
        parser.error(f"--rows: unknown {', '.join(sorted(rows - set(ROWS)))}")
    mib = 64 if args.quick else args.mib
    width = 4 * SHARD  # 4 shards across; whole shards down
    shape = (max(SHARD, mib * 2**20 // 4 // width // SHARD * SHARD), width)
    mib = shape[0] * shape[1] * 4 / 2**20
    data = _field(shape)
    os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    print(f"data: {shape[0]}x{shape[1]} float32 = {mib:.0f} MiB, shards {SHARD}^2 of {INNER}^2,"
          f" zstd level {LEVEL}; moto on loopback; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    sharded: dict[str, Any] = dict(shape=shape, chunks=(INNER, INNER), shards=(SHARD, SHARD))
    conditional: dict[str, Any] = dict(
        dtype="float32", fill_value=0, serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec(level=LEVEL)])],
        decision="compress_if_smaller",
    )

    with moto_server() as endpoint:
        bucket = Bucket(f"bench-{uuid.uuid4().hex[:8]}", endpoint)
        so = bucket.storage_options()
        s3fs.S3FileSystem(**so, skip_instance_cache=True).mkdir(bucket.name)
        rounds = iter(range(10**6))
        written: list[str] = []

        def remove_written(_: str) -> None:
            """Untimed, before each call: delete the last calls' outputs (moto keeps
            objects in memory). s3fs's client setup alone costs ~0.5 s of CPU."""
            while written:
                bucket.remove(written.pop())

        # -- write ---------------------------------------------------------------------
        def zarrext_write() -> None:
            path = f"w{next(rounds)}.zarr"
            zarrext.create_array(bucket.url(path), storage_options=so, **sharded,
                                 **conditional)[:] = data
            written.append(path)

        def ts_write() -> None:
            path = f"w{next(rounds)}.zarr"
            ts.open(ts_spec(bucket, path, shape), create=True).result().write(data).result()
            written.append(path)

        cpu = ProcessTreeCpu()
        if "write" in rows:
            writes = interleave({"zarrext": cpu.wrap("zarrext", zarrext_write),
                                 "tensorstore": cpu.wrap("tensorstore", ts_write)},
                                args.repeat, before=remove_written, alternate_order=True)
        zarrext.create_array(bucket.url("zarrext.zarr"), storage_options=so, **sharded,
                             **conditional)[:] = data
        ts.open(ts_spec(bucket, "ts.zarr", shape), create=True).result().write(data).result()
        stored = bucket.stored_bytes("ts.zarr")
        shards = (shape[0] // SHARD) * (shape[1] // SHARD)
        raw = measure_raw(bucket, stored // shards, stored, (1, 4, 16), 2)
        if "write" in rows:
            _header(f"write, best of {args.repeat}", "tensorstore", "of moto", cpu=True)
            for name in ("tensorstore", "zarrext"):
                _row(name, writes.best(name), mib, writes.best("tensorstore"), stored / raw.put,
                     cpu.of_best(name, writes.seconds[name]),
                     writes.paired_ratio("tensorstore", name))
        print(f"  moto raw PUT {raw.put / 2**20:.0f} MiB/s, GET {raw.get / 2**20:.0f} MiB/s "
              f"({stored / shards / 2**20:.1f} MiB objects)", flush=True)

        # -- read ------------------------------------------------------------------------
        if "read" in rows:
            missing = (np.arange(data.size).reshape(shape) % 7) == 0
            zarrext.create_array(
                bucket.url("optional.zarr"), storage_options=so, **sharded,
                dtype=zarrext.OptionalDType(Float32()), fill_value=None, compressors=None,
            )[:] = np.ma.MaskedArray(data, mask=missing)
            zarrext.create_array(
                bucket.url("pad.zarr"), storage_options=so, shape=shape, chunks=(INNER, INNER),
                dtype="float32", fill_value=0, serializer=BytesCodec(),
                compressors=[ZstdCodec(level=LEVEL), zarrext.PadCodec(location="end", nbytes=8)],
            )[:] = data
            # quantized: scale_offset and cast_value to uint16 before the sharded chunks
            # (what `zarrext quantize` writes), within 0.01 of the values
            quantized = zarrext.create_array(
                bucket.url("quantized.zarr"), storage_options=so, **sharded,
                dtype="float32", fill_value=0,
                filters=quantize.plan(data, max_abs_error=0.01, fill_value=0),
                compressors=[zarrext.ConditionalCodec([ZstdCodec(level=LEVEL)])],
                decision="compress_if_smaller",
            )
            quantized[:] = data
            # pad's like for like: the same unsharded 1 MiB chunks, plain zstd (a pad
            # array is a TIFF's chunks: one object each, 16x the requests of a shard).
            ts.open(ts_spec(bucket, "ts-unsharded.zarr", shape, sharded=False),
                    create=True).result().write(data).result()
            readers: dict[str, Callable[[], Any]] = {
                "tensorstore, zstd": lambda: ts.open(
                    {"driver": "zarr3", "kvstore": bucket.tensorstore_kvstore("ts.zarr")}
                ).result().read().result(),
                "zarrext, its conditional(zstd)": lambda: zarrext.open_array(
                    bucket.url("zarrext.zarr"), storage_options=so, mode="r")[:],
                FORMAT_NAMED: lambda: zarrext.open_array(
                    bucket.url("zarrext.zarr"), storage_options=so, mode="r", zarr_format=3)[:],
                "zarrext, the zstd one (tensorstore's)": lambda: zarrext.open_array(
                    bucket.url("ts.zarr"), storage_options=so, mode="r")[:],
                "zarrext, optional (nullable, 1/7 missing, sharded)": lambda: zarrext.open_array(
                    bucket.url("optional.zarr"), storage_options=so, mode="r")[:],
                "zarrext, quantized (uint16 within 0.01, conditional(zstd))": lambda: (
                    zarrext.open_array(bucket.url("quantized.zarr"), storage_options=so,
                                       mode="r")[:]),
                "tensorstore, zstd, unsharded 1 MiB chunks": lambda: ts.open(
                    {"driver": "zarr3",
                     "kvstore": bucket.tensorstore_kvstore("ts-unsharded.zarr")}
                ).result().read().result(),
                PAD: lambda: zarrext.open_array(
                    bucket.url("pad.zarr"), storage_options=so, mode="r")[:],
            }
            # reversed every other round: no reader is always first (or last) of a round
            reads = interleave(readers, args.repeat, alternate_order=True)
            _header(f"read, best of {args.repeat} (pad: / tensorstore unsharded)", "tensorstore",
                    "of moto")
            for name in readers:
                reference = "tensorstore, zstd, unsharded 1 MiB chunks" if name == PAD else (
                    "tensorstore, zstd")
                _row(name, reads.best(name), mib, reads.best(reference), stored / raw.get,
                     paired=reads.paired_ratio(reference, name))
            median = _read_rounds(reads, "tensorstore, zstd", "zarrext, its conditional(zstd)")
            named = _read_rounds(reads, "tensorstore, zstd", FORMAT_NAMED)
            print(f"  [{'OK ' if median >= 1.0 else 'MISS'}] S3 read: {median:.2f}x tensorstore "
                  f"in the median round (goal >= 1.0); told the format as tensorstore is, "
                  f"{named:.2f}x")

        # -- ingest on a cluster -----------------------------------------------------------
        if "ingest" in rows:
            import dask
            import dask.array as da
            from dask.distributed import Client, LocalCluster

            ingest: dict[str, list[float]] = {}
            pairs: dict[str, float] = {}
            # The second cluster's workers start without the allocator setting dask's
            # nanny gives them (MALLOC_TRIM_THRESHOLD_=65536): with it, every buffer
            # over 128 KiB is fresh memory from the system, faulted in page by page,
            # and the same encoding costs about twice the CPU (0.85 -> 1.65 s for this
            # write in one process started with it).
            # A nanny sets those variables in its own process too (dask says so), and
            # workers started later inherit them: the cluster without them goes first.
            for label, environ in ((DASK_NO_TRIM, {}), (DASK_DEFAULT, None)):
                settings: dict[str, Any] = {} if environ is None else {
                    "distributed.nanny.pre-spawn-environ": environ}
                if environ is not None:
                    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
                with dask.config.set(settings), LocalCluster(
                    n_workers=2, threads_per_worker=args.threads, processes=True,
                    dashboard_address=None,
                ) as cluster, Client(cluster) as client:
                    src = da.from_array(data, chunks=(SHARD, SHARD)).persist()

                    def dask_write(client: Client = client, src: da.Array = src) -> None:
                        path = f"w{next(rounds)}.zarr"
                        target = zarrext.create_array(bucket.url(path), storage_options=so,
                                                      **sharded, **conditional)
                        zarrext.write_dask(src, target, client=client)
                        written.append(path)

                    runs = interleave({ONE_PROCESS: cpu.wrap(ONE_PROCESS, zarrext_write),
                                       label: cpu.wrap(label, dask_write)}, args.repeat,
                                      before=remove_written, alternate_order=True)
                    for name, times in runs.seconds.items():
                        ingest.setdefault(name, []).extend(times)
                    pairs[label] = runs.paired_ratio(ONE_PROCESS, label)
            _header(f"ingest, best of {args.repeat} (this process: of both rounds)",
                    "this process", "", cpu=True)
            for name, times in ingest.items():
                _row(name, min(times), mib, min(ingest[ONE_PROCESS]), None,
                     cpu.of_best(name, times), pairs.get(name))

    # -- local read against zstd decoding on every core --------------------------------------
    if "local" not in rows:
        return
    chunk_rows = max(1, 2**20 // 4 // width)  # 1 MiB chunks of whole rows: contiguous
    with tempfile.TemporaryDirectory() as tmp:
        zarr.create_array(f"{tmp}/a.zarr", shape=shape, chunks=(chunk_rows, width), dtype="float32",
                          fill_value=0, compressors=[ZstdCodec(level=LEVEL)])[:] = data
        files = [(int(p.parent.name), p.read_bytes()) for p in Path(tmp, "a.zarr", "c").glob("*/*")]
        codec = Zstd()

        def decode_all() -> np.ndarray:
            out = np.empty(shape, np.float32)

            def one(job: tuple[int, bytes]) -> None:
                k, blob = job
                codec.decode(blob, out=out[k * chunk_rows:(k + 1) * chunk_rows])

            with ThreadPoolExecutor(os.cpu_count()) as pool:
                list(pool.map(one, files))
            return out

        assert np.array_equal(decode_all(), data)
        local = interleave({
            "zstd decoding into a fresh output, every core": decode_all,
            "zarrext.open_array(path)[:]": lambda: zarrext.open_array(f"{tmp}/a.zarr",
                                                                      mode="r")[:],
        }, args.repeat)
    _header(f"local read, {chunk_rows}x{width} chunks, best of {args.repeat}", "decoding", "")
    decoding = "zstd decoding into a fresh output, every core"
    for name in local.seconds:
        _row(name, local.best(name), mib, local.best(decoding), None,
             paired=local.paired_ratio(decoding, name))


if __name__ == "__main__":
    main()
