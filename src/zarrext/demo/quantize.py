"""Demo: planned ``scale_offset`` + ``cast_value`` quantization, and CF packing."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import zarr
from rich.console import Console
from rich.table import Table

from zarrext import quantize

SHAPE = (1024, 1024)
CHUNKS = (256, 256)


def smooth_field(shape: tuple[int, int] = SHAPE, seed: int = 0) -> np.ndarray:
    """A smooth float32 "temperature" field in kelvin, with NaN over a masked disc."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]].astype(np.float32)
    field = 280 + 15 * np.sin(x / 97) * np.cos(y / 131) + 5 * np.sin((x + y) / 41)
    field += rng.normal(0, 0.02, size=shape)
    field = field.astype(np.float32)
    cy, cx = shape[0] // 3, shape[1] // 3
    field[(y - cy) ** 2 + (x - cx) ** 2 < (shape[0] // 8) ** 2] = np.nan
    return field


def _write(path: Path, data: np.ndarray, filters: list | None) -> zarr.Array:
    arr = zarr.create_array(
        str(path), shape=data.shape, chunks=CHUNKS, dtype=data.dtype, fill_value=np.nan,
        filters=filters or None, overwrite=True,
    )
    arr[:] = data
    return arr


def run(root: Path, console: Console) -> None:
    data = smooth_field()
    finite = np.isfinite(data)
    plain = _write(root / "float32_zstd.zarr", data, None)
    table = Table(title="smooth float32 field 1024x1024 (NaN disc), zstd in every case")
    for column in ("max_abs_error", "stored as", "scale", "bytes", "vs float32", "worst error"):
        table.add_column(column, justify="right")
    table.add_row("-", "float32", "-", f"{plain.nbytes_stored():,}", "1.00x", "0")
    for bound in (0.1, 0.01, 0.001):
        p = quantize.plan_quantization(data, max_abs_error=bound)
        arr = _write(root / f"quantized_{bound:g}.zarr", data, list(p.filters))
        back = np.asarray(zarr.open_array(str(root / f"quantized_{bound:g}.zarr"))[:])
        worst = float(np.max(np.abs(back[finite].astype(np.float64) - data[finite])))
        assert worst <= bound, (worst, bound)
        assert np.isnan(back[~finite]).all()
        ratio = plain.nbytes_stored() / arr.nbytes_stored()
        table.add_row(f"{bound:g}", str(p.stored_dtype), f"{p.scale:.6g}",
                      f"{arr.nbytes_stored():,}", f"{ratio:.2f}x", f"{worst:.3g}")
    console.print(table)
    filters = quantize.plan(data, max_abs_error=0.01)
    console.print(f"filters for 0.01: {[f.to_dict() for f in filters]}")

    # netCDF/CF packing: int16 with scale_factor/add_offset and a _FillValue.
    attrs = {"scale_factor": np.float32(0.01), "add_offset": np.float32(280.0),
             "_FillValue": np.int16(-32767), "dtype": "int16"}
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        conv = quantize.from_cf(attrs)
    arr = zarr.create_array(
        str(root / "from_cf.zarr"), shape=data.shape, chunks=CHUNKS, dtype=conv.dtype,
        fill_value=conv.fill_value, filters=list(conv.filters), overwrite=True,
    )
    arr[:] = data
    back = np.asarray(arr[:])
    packed = np.where(finite, np.rint((data - np.float32(280.0)) / np.float32(0.01)), -32767)
    cf_decoded = np.where(packed == -32767, np.nan,
                          packed.astype(np.float32) * np.float32(0.01) + np.float32(280.0))
    diff = np.abs(back[finite] - cf_decoded[finite])
    cf_table = Table(title="from_cf: int16 packing, scale_factor=0.01, add_offset=280")
    cf_table.add_column("")
    cf_table.add_column("value", justify="right")
    cf_table.add_row("filters", ", ".join(str(f.to_dict()["name"]) for f in conv.filters))
    cf_table.add_row("exact", str(conv.exact))
    cf_table.add_row("max |zarr - CF decode|", f"{float(diff.max()):.3g}")
    cf_table.add_row("bytes", f"{arr.nbytes_stored():,}")
    cf_table.add_row("note", conv.notes[0] if conv.notes else "-")
    console.print(cf_table)
    assert math.isfinite(float(diff.max()))
