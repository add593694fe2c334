"""Reading zarr ``blosc`` arrays: zarrext against tensorstore, zarrs-python and zarr-python.

A float32 field (a random walk along rows, ``--mib`` MiB) stored with zarr's
``BloscCodec`` (lz4, byte shuffle) in square chunks of each ``--sides`` side, read
whole by each contender in interleaved rounds (best and paired median):

* zarrext (``zarrext.open_array``): each chunk decoded by imagecodecs' c-blosc
  straight into its place in the output, or into the codec thread's scratch memory
  and copied (:mod:`zarrext.pipeline.direct`);
* tensorstore, zarrs-python (strict, no fallback) and zarr-python (numcodecs'
  c-blosc, through its codec objects).

Beside them, the cause: one chunk's frame decoded by numcodecs and by imagecodecs,
alone and on two threads at once (microseconds per decode, per thread).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import imagecodecs
import numcodecs
import numpy as np
import tensorstore as ts
import zarr
from zarr.codecs import BloscCodec

import zarrext
from timing import interleave, save_results

ZARRS = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}
OURS = "zarrext"


def field(shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (np.cumsum(rng.normal(size=shape), axis=1) / 10).astype("f4")


def per_decode(make: Callable[[], Callable[[], object]], n: int) -> tuple[float, float]:
    """Microseconds per call of the decoder ``make()`` gives (one per thread, with
    its own output): alone, and on each of two threads at once."""
    def loop() -> None:
        decode = make()
        for _ in range(n):
            decode()

    t0 = time.perf_counter()
    loop()
    alone = (time.perf_counter() - t0) / n
    threads = [threading.Thread(target=loop) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return alone * 1e6, (time.perf_counter() - t0) / n * 1e6


def decoders(data: np.ndarray, side: int) -> None:
    values = np.ascontiguousarray(data[:side, :side])
    frame = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1, typesize=4).encode(values)

    def with_numcodecs() -> Callable[[], object]:
        return functools.partial(numcodecs.Blosc(cname="lz4").decode, frame)

    def with_imagecodecs() -> Callable[[], object]:
        out = memoryview(np.empty(values.nbytes, np.uint8))
        return functools.partial(imagecodecs.blosc_decode, frame, numthreads=1, out=out)

    n = max(20, int(2000 * (256 / side) ** 2))
    for name, make in (("numcodecs", with_numcodecs), ("imagecodecs", with_imagecodecs)):
        alone, two = per_decode(make, n)
        print(f"    one {values.nbytes >> 10} KiB chunk, {name:<11}: {alone:7.1f} us alone, "
              f"{two:7.1f} us each on two threads ({two / alone:.2f}x)")


def bench(root: Path, data: np.ndarray, side: int, repeat: int) -> None:
    path = root / f"blosc-{side}.zarr"
    written = zarr.create_array(path, shape=data.shape, chunks=(side, side), dtype="f4",
                                compressors=BloscCodec(cname="lz4", shuffle="shuffle"))
    written[:] = data
    ours = zarrext.open_array(path, mode="r")
    plain = zarr.open_array(path, mode="r")
    with zarr.config.set(ZARRS):
        zarrs = zarr.open_array(path, mode="r")
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}},
                    read=True).result()

    contenders: dict[str, Callable[[], object]] = {
        OURS: lambda: ours[:],
        "tensorstore": lambda: store.read().result(),
        "zarrs-python": lambda: zarrs[:],
        "zarr-python": lambda: plain[:],
    }
    for name, read in contenders.items():
        assert np.array_equal(np.asarray(read()), data), name
    runs = interleave(contenders, repeat, alternate_order=True)
    mib = data.nbytes / 2**20
    load = os.getloadavg()[0]
    print(f"  {side}x{side} chunks ({side * side * 4 >> 10} KiB), best of {repeat}, "
          f"load {load:.1f}")
    for name in contenders:
        print(f"    {name:<28} {mib / runs.best(name):7.0f} MiB/s  "
              f"x zarr-python {runs.paired_ratio('zarr-python', name):5.2f}")
    print(f"    zarrext, paired median: x tensorstore "
          f"{runs.paired_ratio('tensorstore', OURS):.2f}, x zarrs-python "
          f"{runs.paired_ratio('zarrs-python', OURS):.2f}")
    decoders(data, side)
    save_results(runs, f"blosc-reads-{side}", f"Local blosc reads: {mib:.0f} MiB, "
                 f"{side}x{side} chunks", "zarr-python")
    shutil.rmtree(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128, help="MiB of float32 (default 128)")
    parser.add_argument("--sides", default="128,256,512,1024",
                        help="chunk sides, comma-separated (default 128,256,512,1024)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds, interleaved")
    parser.add_argument("--quick", action="store_true", help="16 MiB, two chunk sides, 3 rounds")
    args = parser.parse_args()
    mib, sides, repeat = args.mib, [int(s) for s in args.sides.split(",")], args.repeat
    if args.quick:
        mib, sides, repeat = 16, [128, 256], 3
    cols = 4096
    data = field((mib * 2**20 // 4 // cols, cols))
    print(f"data: {data.shape[0]}x{data.shape[1]} float32 = {data.nbytes >> 20} MiB, "
          f"blosc lz4 + shuffle; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="zarrext-bench-blosc-") as tmp:
        for side in sides:
            bench(Path(tmp), data, side, repeat)


if __name__ == "__main__":
    main()
