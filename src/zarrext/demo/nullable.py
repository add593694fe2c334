"""Demo: a table with missing values as ``optional`` arrays, against NaN-filled floats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import zarr
from rich.console import Console
from rich.table import Table
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from zarrext import OptionalCodec, OptionalDType, PackBitsCodec

ROWS = 1_000_000
CHUNK = 250_000
# column -> (dtype, fraction missing)
COLUMNS = {
    "temperature": ("float32", 0.70),  # a sensor that is mostly offline
    "humidity": ("uint8", 0.30),
    "wind": ("float32", 0.05),
    "station": ("int16", 0.0),
}


def sample_table(seed: int = 0) -> dict[str, np.ma.MaskedArray]:
    """Weather readings with gaps, as masked arrays (masked = missing)."""
    rng = np.random.default_rng(seed)
    t = np.arange(ROWS, dtype=np.float64)
    data = {
        "temperature": 15 + 10 * np.sin(t / 5000) + rng.normal(0, 0.5, ROWS),
        "humidity": 60 + 30 * np.sin(t / 7000) + rng.normal(0, 3, ROWS),
        "wind": np.abs(rng.normal(4, 2, ROWS)),
        "station": t // 50_000,
    }
    table = {}
    for name, (dtype, missing) in COLUMNS.items():
        values = np.round(data[name], 1).astype(dtype)
        # single dropped readings, scattered through the series
        table[name] = np.ma.MaskedArray(values, mask=rng.random(ROWS) < missing)
    return table


def _stored_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")


def run(root: Path, console: Console) -> None:
    table = sample_table()
    rows = Table(title=f"1. the table ({ROWS:,} rows; first rows, '-' = missing)")
    for name in COLUMNS:
        rows.add_column(name, justify="right")
    start = 0
    stored = {}
    totals = [0, 0]
    sizes = Table(title="2. stored size per column: optional vs NaN-filled float32 (zstd 5)")
    for column in ("column", "missing", "optional", "NaN-filled", "smaller by"):
        sizes.add_column(column, justify="right")
    for name, (dtype, _) in COLUMNS.items():
        masked = table[name]
        path = root / f"{name}.zarr"
        z = zarr.create_array(
            path, shape=(ROWS,), chunks=(CHUNK,), dtype=OptionalDType(dtype), fill_value=None,
            serializer=OptionalCodec(mask_codecs=[PackBitsCodec(), ZstdCodec(level=5)],
                                     data_codecs=[BytesCodec(), ZstdCodec(level=5)]),
            compressors=None,
        )
        z[...] = masked
        back = zarrext.to_masked(np.asarray(zarr.open_array(path, mode="r")[...]))
        assert (back.mask == masked.mask).all()
        assert (back.compressed() == masked.compressed()).all()
        stored[name] = back
        nan_path = root / f"{name}_nan.zarr"
        nan = zarr.create_array(nan_path, shape=(ROWS,), chunks=(CHUNK,), dtype="float32",
                                fill_value=np.nan, compressors=ZstdCodec(level=5))
        nan[...] = np.ma.filled(masked.astype("float32"), np.nan)
        ours, theirs = _stored_bytes(path), _stored_bytes(nan_path)
        totals[0] += ours
        totals[1] += theirs
        sizes.add_row(name, f"{masked.mask.mean():.0%}", f"{ours / 1e3:,.1f} kB",
                      f"{theirs / 1e3:,.1f} kB", f"{theirs / ours:.2f}x")
    sizes.add_row("all", "", f"{totals[0] / 1e3:,.1f} kB", f"{totals[1] / 1e3:,.1f} kB",
                  f"{totals[1] / totals[0]:.2f}x", style="bold")
    for i in range(start, start + 8):
        rows.add_row(*("-" if np.ma.getmaskarray(stored[n])[i] else str(stored[n][i])
                       for n in COLUMNS))
    console.print(rows)
    console.print(sizes)

    arrow = pa.table({
        name: zarrext.to_arrow(np.asarray(zarr.open_array(root / f"{name}.zarr")[...]))
        for name in COLUMNS
    })
    nulls = Table(title="3. the same columns as a pyarrow table (nulls in the validity bitmap)")
    for column in ("column", "arrow type", "null_count"):
        nulls.add_column(column, justify="right")
    for name in COLUMNS:
        assert arrow[name].null_count == int(table[name].mask.sum())
        nulls.add_row(name, str(arrow[name].type), f"{arrow[name].null_count:,}")
    console.print(nulls)
    console.print(
        "Each missing value costs one bit before compression (packbits mask) and no value "
        "bytes, and integers keep their type; a NaN-filled float array spends 4 bytes per "
        "missing value and scattered NaNs break up the compressor's matches."
    )
