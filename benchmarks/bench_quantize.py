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
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from timing import interleave
from zarrext import quantize

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1024x1024 instead of 8192x8192")
    parser.add_argument("--max-abs-error", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
