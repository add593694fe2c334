"""Throughput of the optional codec against the plain numpy work its format needs.

One float32 chunk (64 MiB of values at full size) with 0 %, 50 % and 99 % nulls.

* optional codec: ``OptionalCodec(mask=[packbits], data=[bytes, zstd])`` encoding
  and decoding the in-memory optional (structured value/valid) chunk.
* baseline, same run, same data: the work the format itself requires on plain
  numpy arrays -- encode: ``np.packbits(mask)``, ``values[mask]`` and zstd of the
  present values; decode: zstd, ``np.unpackbits`` and scattering the values into a
  full array.

Goal: the codec within 1.5x of the baseline's time. Throughput is in MiB of
float32 values per second.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from numcodecs import Zstd
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype

from timing import interleave
from zarrext import OptionalCodec, OptionalDType, PackBitsCodec

GOAL = 1.5
LEVEL = 1


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[float, Any]]:
    """Best time and last result of each function, run in turn ``repeat`` times.

    Alternating the contenders exposes them to the same background load (the
    machine is shared), which a block of runs per contender would not.
    """
    runs = interleave(fns, repeat, keep_results=True)
    return {name: (runs.best(name), runs.results[name]) for name in fns}


def run(n: int, null_fraction: float, repeat: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(42)
    # smooth signal + noise: compressible like measured data, not constant
    values = (np.sin(np.arange(n, dtype=np.float32) / 1000) * 100
              + rng.normal(0, 1, n).astype(np.float32)).astype(np.float32)
    mask = rng.random(n) >= null_fraction  # True = present
    dtype = OptionalDType("float32")
    chunk = np.zeros(n, dtype.to_native_dtype())
    chunk["value"][mask] = values[mask]
    chunk["valid"] = mask

    prototype = default_buffer_prototype()
    spec = ArraySpec(shape=(n,), dtype=dtype, fill_value=dtype.default_scalar(),
                     config=ArrayConfig.from_dict({}), prototype=prototype)
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()],
                          data_codecs=[BytesCodec(), ZstdCodec(level=LEVEL)])
    codec = codec.evolve_from_array_spec(spec)
    nd = prototype.nd_buffer.from_numpy_array(chunk)
    zstd = Zstd(level=LEVEL)

    def base_encode() -> tuple[bytes, bytes]:
        packed = np.packbits(mask, bitorder="little")
        return packed.tobytes(), zstd.encode(values[mask])

    def base_decode(parts: tuple[bytes, bytes]) -> tuple[np.ndarray, np.ndarray]:
        valid = np.unpackbits(np.frombuffer(parts[0], np.uint8), count=n,
                              bitorder="little").view(bool)
        present = np.frombuffer(zstd.decode(parts[1]), np.float32)
        out = np.zeros(n, np.float32)
        out[valid] = present
        return out, valid

    enc = interleaved({"base": base_encode, "codec": lambda: codec._encode_sync(nd, spec)},
                      repeat)
    (t_base_enc, parts), (t_enc, encoded) = enc["base"], enc["codec"]
    dec = interleaved({"base": lambda: base_decode(parts),
                       "codec": lambda: codec._decode_sync(encoded, spec)}, repeat)
    (t_base_dec, (out, valid)), (t_dec, decoded) = dec["base"], dec["codec"]

    got = decoded.as_numpy_array()
    assert np.array_equal(got["valid"], mask)
    assert np.array_equal(got["value"][mask], values[mask])
    assert np.array_equal(valid, mask)
    assert np.array_equal(out[mask], values[mask])
    size_ratio = len(encoded) / (len(parts[0]) + len(parts[1]))
    print(f"  encoded {len(encoded) / 2**20:8.2f} MiB (baseline parts x{size_ratio:.4f})")
    return [("encode", t_enc, t_base_enc), ("decode", t_dec, t_base_dec)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 MiB chunk, fewer repeats")
    args = parser.parse_args()
    mib = 1 if args.quick else 64
    n = mib * 2**20 // 4
    repeat = 3 if args.quick else 7
    print(f"optional codec vs numpy baseline: float32 chunk of {mib} MiB ({n} values), "
          f"zstd level {LEVEL}, best of {repeat}")
    worst = 0.0
    for nulls in (0.0, 0.5, 0.99):
        print(f"nulls {nulls:.0%}")
        for what, t, base in run(n, nulls, repeat):
            ratio = t / base
            worst = max(worst, ratio)
            verdict = "ok" if ratio <= GOAL else "MISSED"
            print(f"  {what}: codec {mib / t:8.1f} MiB/s  baseline {mib / base:8.1f} MiB/s  "
                  f"time ratio {ratio:5.2f} (goal <= {GOAL}) {verdict}")
    print(f"worst time ratio {worst:.2f} (goal <= {GOAL})")


if __name__ == "__main__":
    main()
