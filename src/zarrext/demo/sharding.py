"""Demo: fast ingest into fixed-slot shards, recompress in place, compact."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import zarr
from rich.console import Console
from rich.table import Table
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

import zarrext
from zarrext.jobs.recompression import recompress
from zarrext.jobs.shards.inspect import shard_report

SHAPE = (1024, 1024)
SHARD = (512, 512)
INNER = (64, 64)
CODECS = [
    {"name": "shuffle", "configuration": {"element_size": 4}},
    {"name": "zstd", "configuration": {"level": 3}},
]


def sample_data() -> np.ndarray:
    """Smooth float32 field with one noisy quarter (compression does not pay there)."""
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]].astype(np.float32) / 50
    data = (np.sin(x) * np.cos(y)).astype(np.float32)
    rng = np.random.default_rng(0)
    data[:512, :512] = rng.integers(0, 2**32, (512, 512), dtype=np.uint32).view(np.float32)
    return data


def _sizes(array: zarr.Array) -> tuple[int, int, str]:
    report = shard_report(array)
    layouts = sorted({info.layout for info in report})
    return (
        sum(info.file_size for info in report),
        sum(info.stored_bytes for info in report),
        ", ".join(layouts),
    )


def run(root: Path, console: Console) -> None:
    data = sample_data()
    path = root / "ingest.zarr"
    array = zarrext.create_array(
        str(path),
        shape=SHAPE,
        chunks=SHARD,
        dtype="float32",
        fill_value=0.0,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=INNER,
            codecs=[BytesCodec(), zarrext.ConditionalCodec(CODECS), Crc32cCodec()],
            index_location="start",
        ),
        shard_layout="fixed-slot",  # runtime only: zarr.json is plain sharding_indexed
        decision="never_apply",  # fast ingest: raw chunks now, recompressed in step 2
    )
    rows: list[tuple[str, float, tuple[int, int, str]]] = []

    # 1. fast ingest: every inner chunk lands in its own slot (stored raw), 4 threads
    regions = [
        (slice(i, i + INNER[0]), slice(j, j + INNER[1]))
        for i in range(0, SHAPE[0], INNER[0])
        for j in range(0, SHAPE[1], INNER[1])
    ]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda r: array.__setitem__(r, data[r]), regions))
    rows.append((f"1. ingest: {len(regions)} inner-chunk writes", time.perf_counter() - t0,
                 _sizes(array)))

    # 2. recompress later: compress where it pays; each shard swapped in whole, slotted
    t0 = time.perf_counter()
    recompress(array, decision="compress_if_smaller")
    rows.append(("2. recompress", time.perf_counter() - t0, _sizes(array)))

    # 3. compact: pack each shard densely, atomically
    t0 = time.perf_counter()
    zarrext.compact(array)
    rows.append(("3. compact", time.perf_counter() - t0, _sizes(array)))

    table = Table(title="sharding: fast ingest, recompress, compact")
    # Folded rather than cut, so that the table fits 80 columns.
    table.add_column("step", overflow="fold")
    table.add_column("seconds", justify="right")
    table.add_column("shard files (bytes)", justify="right", overflow="fold")
    table.add_column("bytes stored", justify="right", overflow="fold")
    table.add_column("layout", overflow="fold")
    for name, seconds, (size, used, layout) in rows:
        table.add_row(name, f"{seconds:.2f}", f"{size:,}", f"{used:,}", layout)
    table.caption = "recompress with decision compress_if_smaller"
    console.print(table)

    check = np.asarray(zarr.open_array(str(path), mode="r")[:])
    same = bool(np.array_equal(check.view(np.uint32), data.view(np.uint32)))  # NaN bits too
    console.print(
        f"a fresh zarr.open_array reads the same values after all three steps: {same}; "
        f"zarrext check: {'every shard validates' if not zarrext.check(array) else 'problems'}"
    )
    if not same:
        raise RuntimeError("sharding demo: values changed")
