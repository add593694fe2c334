"""Planned quantization + zstd against plain float32 + zstd, on one smooth field.

Both arrays use the same chunks and zarr's default compressor (zstd level 0); the
quantized one adds the ``scale_offset`` + ``cast_value`` filters from
``zarrext.quantize.plan`` for ``--max-abs-error``. In one run, on the same data:

1. Stored size. Goal: quantized at least 3x smaller.
2. Encode (write the whole array) time. Goal: at most 2x plain.
3. Decode (read the whole array) time. Goal: at most 2x plain.

The planning time (which encodes and decodes the data once to verify the bound) is
reported apart from the write. Writes and reads alternate between the two
contenders and the median of ``--repeats`` runs is compared. Full size: a 256 MiB
float32 field (8192 x 8192); ``--quick``: 1024 x 1024.

4. Reading one inner chunk of a quantized sharded array (issue 34, item 5), on local
   disk and on a moto S3 server on loopback (``tests/moto_server.py``): one shard of
   2048 x 4096 uint16 codes (noise over [10, 90] within 0.001, which zstd leaves at
   about 16 MiB) in 256 x 256 inner chunks. Before: the filters outside the sharding
   codec (``zarrext quantize``'s layout until then, built here explicitly); after: the
   copy ``zarrext.quantize.copy_quantized`` makes of a ``shards=`` source (the filters
   inside). Bytes fetched (a store wrapper counting them, ``zarr.json`` left out) and
   the median time of ``--repeats`` reads, alternating, through plain
   ``zarr.open_array`` and through ``zarrext.open_array``, with the ratios.
   ``--quick``: a shard of 1024 x 2048. ``--only-shard-read`` runs this part alone.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr

import zarrext
from timing import interleave
from zarrext import quantize

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the S3 server, the byte-counting store
from tests.byte_counting import ByteCountingStore  # noqa: E402
from tests.moto_server import moto_server  # noqa: E402

GOAL_SIZE = 3.0
GOAL_ENCODE = 2.0
GOAL_DECODE = 2.0


def smooth_field(side: int) -> np.ndarray:
    """A smooth float32 temperature-like field (kelvin), built row-block by row-block."""
    out = np.empty((side, side), dtype=np.float32)
    x = np.arange(side, dtype=np.float64)
    sx, cx = np.sin(x / 397.0), np.cos(x / 211.0)
    for start in range(0, side, 1024):
        y = np.arange(start, min(start + 1024, side), dtype=np.float64)[:, None]
        out[start : start + y.shape[0]] = (
            285 + 20 * sx * np.cos(y / 293.0) + 6 * np.sin((y + x) / 151.0) + 2 * cx
        )
    return out


def verdict(ok: bool) -> str:
    return "meets goal" if ok else "MISSES goal"


# -- 4. one inner chunk of a quantized shard ------------------------------------------

SHARD_READ_SHARD = (2048, 4096)  # 8 Mi uint16 codes: about 16 MiB once zstd is done
SHARD_READ_QUICK = (1024, 2048)
SHARD_READ_INNER = (256, 256)
SHARD_READ_BOUND = 0.001  # over [10, 90]: 40,000 codes of noise, which zstd barely shrinks


def _old_layout(inner: tuple[int, int], shard: tuple[int, int],
                filters: list[Any]) -> dict[str, Any]:
    """``zarr.create_array`` arguments of the layout ``zarrext quantize`` wrote before:
    the filters before (outside) the sharding codec, zstd inside."""
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    return {"chunks": shard, "filters": filters, "compressors": None,
            "serializer": ShardingCodec(chunk_shape=inner, codecs=[BytesCodec(), ZstdCodec()])}


def _stores(where: str, location: Callable[[str], str], options: Any) -> Callable[[str], Any]:
    def store(name: str) -> ByteCountingStore:
        if where == "local":
            return ByteCountingStore(zarr.storage.LocalStore(location(name), read_only=True))
        return ByteCountingStore(zarr.storage.FsspecStore.from_url(
            location(name), storage_options=options, read_only=True))
    return store


def shard_read_rows(where: str, location: Callable[[str], str], options: Any,
                    shard: tuple[int, int], repeats: int) -> None:
    """Part 4 at one place (``local`` or ``s3``): print its rows."""
    import warnings

    inner = SHARD_READ_INNER
    data = np.random.default_rng(0).uniform(10, 90, shard).astype(np.float32)
    zarr.create_array(location("src.zarr"), storage_options=options, shape=shard,
                      dtype="float32", fill_value=np.nan, chunks=inner, shards=shard)[:] = data
    report = quantize.copy_quantized(location("src.zarr"), location("after.zarr"),
                                     max_abs_error=SHARD_READ_BOUND, storage_options=options)
    with warnings.catch_warnings():  # zarr's "disables partial reads": this is that layout
        warnings.simplefilter("ignore")
        zarr.create_array(location("before.zarr"), storage_options=options, shape=shard,
                          dtype="float32", fill_value=np.nan,
                          **_old_layout(inner, shard, list(report.plan.filters)))[:] = data
    store = _stores(where, location, options)
    counted = {name: store(f"{name}.zarr") for name in ("before", "after")}
    opened: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, counting in counted.items():
            opened[f"zarr {name}"] = zarr.open_array(counting, mode="r")
            opened[f"zarrext {name}"] = zarrext.open_array(counting, mode="r")
    shard_bytes: dict[str, int] = {}
    region = (slice(inner[0] * 3, inner[0] * 4), slice(inner[1] * 4, inner[1] * 5))
    fetched: dict[str, int] = {}

    def one_chunk(name: str) -> Callable[[], None]:
        counting = counted[name.split()[1]]

        def read() -> None:
            counting.reset()
            got = np.asarray(opened[name][region])
            fetched[name] = sum(counting.chunk_bytes().values())
            assert np.abs(got - data[region]).max() <= SHARD_READ_BOUND

        return read

    for name in counted:  # the whole shard's stored size, for scale
        counted[name].reset()
        np.asarray(opened[f"zarr {name}"][:])
        shard_bytes[name] = sum(counted[name].chunk_bytes().values())
    runs = interleave({name: one_chunk(name) for name in opened}, repeats, alternate_order=True)
    n_inner = (shard[0] // inner[0]) * (shard[1] // inner[1])
    print(f"shard read, {where}: one {inner[0]}x{inner[1]} inner chunk of a "
          f"{shard_bytes['after'] / 2**20:.1f} MiB shard ({n_inner} inner chunks, "
          f"{report.plan.stored_dtype} codes; before's shard {shard_bytes['before'] / 2**20:.1f} "
          f"MiB), median of {repeats}")
    for reader in ("zarr", "zarrext"):
        before, after = f"{reader} before", f"{reader} after"
        t_b, t_a = runs.median(before), runs.median(after)
        print(f"  {reader + ' ' * (8 - len(reader))} before (filters outside): "
              f"{fetched[before]:>12,} bytes {t_b * 1e3:8.1f} ms | after (inside): "
              f"{fetched[after]:>10,} bytes {t_a * 1e3:7.1f} ms | "
              f"{fetched[before] / fetched[after]:6.1f}x fewer bytes, {t_b / t_a:5.1f}x faster "
              f"(paired {runs.paired_ratio(before, after):.1f}x)")


@contextlib.contextmanager
def _s3_bucket() -> Iterator[tuple[str, dict[str, Any]]]:
    import s3fs

    with moto_server() as endpoint:
        options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench",
                   "client_kwargs": {"region_name": "eu-west-1"}}
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3fs.S3FileSystem(**options, skip_instance_cache=True).mkdir(bucket)
        yield f"s3://{bucket}", options


def shard_read(quick: bool, repeats: int) -> None:
    shard = SHARD_READ_QUICK if quick else SHARD_READ_SHARD
    with tempfile.TemporaryDirectory(prefix="bench-quantize-shards-") as tmp:
        shard_read_rows("local", lambda name: f"{tmp}/{name}", None, shard, repeats)
    with _s3_bucket() as (root, options):
        shard_read_rows("s3", lambda name: f"{root}/{name}", options, shard, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1024x1024 instead of 8192x8192")
    parser.add_argument("--max-abs-error", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only-shard-read", action="store_true",
                        help="run part 4 alone (one inner chunk of a quantized shard)")
    args = parser.parse_args()
    if args.only_shard_read:
        shard_read(args.quick, args.repeats or 7)
        return
    side = 1024 if args.quick else 8192
    repeats = args.repeats or (3 if args.quick else 2)
    chunks = (512, 512)
    bound = args.max_abs_error

    data = smooth_field(side)
    print(f"field: {side}x{side} float32 = {data.nbytes / 2**20:.0f} MiB, "
          f"range [{data.min():.3f}, {data.max():.3f}], max_abs_error {bound:g}, "
          f"chunks {chunks}")
    t0 = time.perf_counter()
    planned = quantize.plan_quantization(data, max_abs_error=bound)
    plan_s = time.perf_counter() - t0
    print(f"plan: {planned.stored_dtype}, scale {planned.scale:.6g}, offset "
          f"{planned.offset:.6g}, verified worst error {planned.worst_error:.3g} "
          f"({plan_s:.2f} s, one encode+decode of the data)")

    with tempfile.TemporaryDirectory(prefix="bench-quantize-") as tmp:
        root = Path(tmp)

        def create(name: str, filters: list[Any] | None) -> zarr.Array:
            path = root / name
            shutil.rmtree(path, ignore_errors=True)
            return zarr.create_array(str(path), shape=data.shape, chunks=chunks,
                                     dtype="float32", fill_value=np.nan, filters=filters)

        filters: dict[str, list[Any] | None] = {"plain": None, "quant": list(planned.filters)}
        targets: dict[str, zarr.Array] = {}

        def fresh(name: str) -> None:
            targets[name] = create(f"{name}.zarr", filters[name])

        encodes = interleave(
            {name: lambda n=name: targets[n].__setitem__(slice(None), data) for name in filters},
            repeats, before=fresh,
        )
        plain = zarr.open_array(str(root / "plain.zarr"))
        quant = zarr.open_array(str(root / "quant.zarr"))
        decodes = interleave({"plain": lambda: plain[:], "quant": lambda: quant[:]}, repeats)
        back = np.asarray(quant[:])
        worst = float(np.max(np.abs(back.astype(np.float64) - data)))
        size_plain = plain.nbytes_stored()
        size_quant = quant.nbytes_stored()

    e_p, e_q = encodes.median("plain"), encodes.median("quant")
    d_p, d_q = decodes.median("plain"), decodes.median("quant")
    size_ratio = size_plain / size_quant
    mib = data.nbytes / 2**20
    size_ok = verdict(size_ratio >= GOAL_SIZE)
    print(f"stored bytes: float32+zstd {size_plain:,}  quantized+zstd {size_quant:,}  "
          f"-> {size_ratio:.2f}x smaller (goal >= {GOAL_SIZE}x: {size_ok})")
    print(f"encode: float32+zstd {e_p:.3f} s ({mib / e_p:.0f} MiB/s)  quantized+zstd "
          f"{e_q:.3f} s ({mib / e_q:.0f} MiB/s) -> ratio {e_q / e_p:.2f} "
          f"(goal <= {GOAL_ENCODE}: {verdict(e_q / e_p <= GOAL_ENCODE)})")
    print(f"decode: float32+zstd {d_p:.3f} s ({mib / d_p:.0f} MiB/s)  quantized+zstd "
          f"{d_q:.3f} s ({mib / d_q:.0f} MiB/s) -> ratio {d_q / d_p:.2f} "
          f"(goal <= {GOAL_DECODE}: {verdict(d_q / d_p <= GOAL_DECODE)})")
    print(f"worst error read back: {worst:.4g} (bound {bound:g}: "
          f"{'within' if worst <= bound else 'EXCEEDED'})")
    if worst > bound:
        raise SystemExit(1)
    shard_read(args.quick, args.repeats or 7)


if __name__ == "__main__":
    main()
