"""Demo: the ``conditional`` codec deciding per chunk, then compress-later."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from zarr.codecs import BytesCodec, Crc32cCodec

import zarrext
from zarrext.cli.render import recompress_table
from zarrext.codecs.decisions import format_mask
from zarrext.jobs.inspection import inventory
from zarrext.jobs.recompression import recompress

SHAPE = (1024, 1024)
CHUNKS = (256, 256)
CODECS = [
    {"name": "shuffle", "configuration": {"element_size": 4}},
    {"name": "zstd", "configuration": {"level": 5}},
]


def sample_data(seed: int = 0) -> np.ndarray:
    """A smooth float32 field with a block of pure noise (random bits) in one corner."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]].astype(np.float32) / 64
    data = (np.sin(x) * np.cos(y)).astype(np.float32)
    noise = rng.integers(0, 2**32, size=(512, 512), dtype=np.uint32).view(np.float32)
    data[:512, :512] = noise
    return data


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def run(root: Path, console: Console) -> None:
    data = sample_data()
    raw_chunk = CHUNKS[0] * CHUNKS[1] * 4

    # 1. compress only where it pays
    path = root / "compress_if_smaller.zarr"
    z = zarrext.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="float32", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec(CODECS), Crc32cCodec()],
        decision="compress_if_smaller",
    )
    z[:] = data
    inv = inventory(z)
    table = Table(title="1. compress_if_smaller: one decision per chunk")
    table.add_column("mask")
    table.add_column("meaning")
    table.add_column("chunks", justify="right")
    table.add_column("largest stored chunk", justify="right")
    meaning = {0: "stored raw", 1: "shuffle only", 2: "zstd only", 3: "shuffle + zstd"}
    for mask, count in sorted(inv.mask_counts.items()):
        largest = max(c.nbytes for c in inv.chunks if c.mask == mask)
        table.add_row(format_mask(mask, len(CODECS)), meaning[mask], str(count), f"{largest:,}")
    table.caption = (
        f"raw chunk {raw_chunk:,} B; header 1 B + crc32c 4 B; noise chunks never exceed "
        f"raw + 5 B"
    )
    console.print(table)

    # 2. write fast, compress later
    path = root / "ingest.zarr"
    z = zarrext.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="float32", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec(CODECS), Crc32cCodec()],
        decision="never_apply",
    )
    t0 = time.perf_counter()
    z[:] = data
    ingest_s = time.perf_counter() - t0
    before = _digest(path / "zarr.json")
    report = recompress(str(path), "compress_if_smaller")
    after = _digest(path / "zarr.json")
    console.print(recompress_table(report))
    console.print(
        f"2. ingest (no compression) took {ingest_s:.3f} s; recompress {report.seconds:.3f} s; "
        f"store {report.bytes_before:,} -> {report.bytes_after:,} bytes "
        f"({report.ratio:.1f}x); zarr.json sha256 {before} -> {after} "
        f"({'unchanged' if before == after else 'CHANGED'})"
    )
    back = np.asarray(zarrext.open_array(str(path), mode="r")[:])
    assert np.array_equal(back.view(np.uint32), data.view(np.uint32))

    # 3. a precomputed plan
    path = root / "plan.zarr"
    plan = np.zeros((4, 4), dtype=np.uint8)
    plan[::2, ::2] = 0b11
    plan[1::2, 1::2] = 0b10
    z = zarrext.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="float32", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec(CODECS)], decision=zarrext.from_plan(plan),
    )
    z[:] = data
    stored = inventory(z).grid("mask").astype(int)
    console.print(
        f"3. plan masks\n{plan}\nheaders read back\n{stored}\n"
        f"{'identical' if np.array_equal(stored, plan) else 'DIFFERENT'}"
    )
