"""Benchmark: TIFF-per-chunk arrays (``pad``) and N5 read in place (``pad``/``n5_default``).

Measured against the real alternatives, in the same run, on the same data:

1. TIFF chunks (zstd + a per-chunk header function) vs the same array without the
   header (plain ``bytes`` + ``zstd``): write and read time (read with
   ``zarr.open_array`` and with ``zarrext.open_array``). Goal: write overhead
   <= 10 % (the write alone into a new array, median of paired runs), read
   overhead <= 5 %.
2. Reading a tensorstore-written N5 dataset in place with zarr-python via ``pad``
   and via ``n5_default``, vs tensorstore reading it. Goal: ``n5_default`` within
   20 % of ``pad`` (the price of parsing headers); zarr-python vs tensorstore is
   reported for context.
3. Making N5 readable: ``write_zarr_metadata`` (in place) vs copying the data to a
   zarr v3 array with tensorstore. Goal: in place >= 10x faster.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorstore as ts
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import get_data_type_from_native_dtype

import zarrext
from timing import interleave
from zarrext.formats import n5, tiff


def report(
    label: str, value: float, baseline: float, goal: float | None, unit: str = "s",
    ratio: float | None = None,
):
    """One line: ``value``, and its ratio to ``baseline`` (or the ``ratio`` given,
    e.g. a median of paired ratios) against ``goal``."""
    ratio = value / baseline if ratio is None else ratio
    verdict = "" if goal is None else (" OK" if ratio <= goal else " MISSED")
    goal_text = "" if goal is None else f" (goal <= {goal:.2f}){verdict}"
    print(f"  {label:<48} {value:9.4f} {unit}   ratio {ratio:6.3f}{goal_text}")


def file_writes(plain: Path, padded: Path, repeat: int) -> tuple[float, float]:
    """Best seconds to write each array's chunk files again, bytes as stored, the
    way zarr's LocalStore does (a temporary file, then a rename): the file system's
    share of a write. On ext4 here a file just over 128 KiB takes about twice as long
    to write as one just under, and the TIFF header moves chunks of barely
    compressible 256x256 uint16 data across that line."""
    contents = {
        root: [(p, p.read_bytes()) for p in sorted((root / "c").rglob("*")) if p.is_file()]
        for root in (plain, padded)
    }

    def rewrite(root: Path) -> Callable[[], None]:
        def run() -> None:
            for path, data in contents[root]:
                partial = path.with_suffix(".partial")
                partial.write_bytes(data)
                partial.replace(path)

        return run

    runs = interleave({"plain": rewrite(plain), "padded": rewrite(padded)}, repeat)
    return runs.best("plain"), runs.best("padded")


def sample(shape: tuple[int, ...]) -> np.ndarray:
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    return (20000 + 15000 * np.sin(x / 90) * np.cos(y / 70) + (x + y) % 16).astype(np.uint16)


def bench_tiff(root: Path, shape: tuple[int, int], chunks: tuple[int, int], repeat: int) -> None:
    data = sample(shape)
    print(f"1. TIFF chunks: {shape} uint16, chunks {chunks}, zstd level 0")

    def plain_array() -> zarr.Array:
        return zarrext.create_array(
            str(root / "plain.zarr"),
            shape=shape,
            chunks=chunks,
            dtype="uint16",
            serializer=BytesCodec(endian="little"),
            compressors=[ZstdCodec(level=0)],
            overwrite=True,
        )

    def tiff_array() -> zarr.Array:
        return zarrext.create_array(
            str(root / "tiff.zarr"),
            shape=shape,
            overwrite=True,
            **tiff.create_kwargs(chunks, "uint16", compression="zstd", level=0),
        )

    # Only the write is timed: create_array(overwrite=True) first deletes the last
    # run's chunk files, file-system work that is not the codecs' and varies widely.
    # Pairs alternate which goes first; the median of their ratios is the figure.
    create = {"plain": plain_array, "tiff": tiff_array}
    fresh: dict[str, zarr.Array] = {}

    def recreate(name: str) -> None:
        fresh[name] = create[name]()

    writes = interleave(
        {name: lambda n=name: fresh[n].__setitem__(slice(None), data) for name in create},
        repeat, before=recreate, alternate_order=True,
    )
    t_plain_w, t_tiff_w = writes.best("plain"), writes.best("tiff")
    reads = {}
    for reader, open_array in (("zarr", zarr.open_array), ("zarrext", zarrext.open_array)):
        plain = open_array(str(root / "plain.zarr"), mode="r")
        tiled = open_array(str(root / "tiff.zarr"), mode="r")
        assert np.array_equal(tiled[:], data)
        runs = interleave({"plain": lambda p=plain: p[:], "tiff": lambda t=tiled: t[:]}, repeat)
        reads[reader] = (runs.best("plain"), runs.best("tiff"))
    # Whole-array timings on a shared machine swing by +-20 %; the per-chunk cost of
    # the codec itself, next to the compressor it follows, is the stable figure.
    spec = ArraySpec(
        shape=chunks,
        dtype=get_data_type_from_native_dtype(np.dtype("uint16")),
        fill_value=0,
        config=ArrayConfig.from_dict({}),
        prototype=default_buffer_prototype(),
    )
    raw = default_buffer_prototype().buffer.from_array_like(
        data[: chunks[0], : chunks[1]].ravel().view(np.uint8)
    )
    zstd = ZstdCodec(level=0)
    compressed = zstd._encode_sync(raw, spec)
    pad = tiff.pad_codec("uint16", compression="zstd")
    n = 200
    t_zstd = timeit.timeit(lambda: zstd._encode_sync(raw, spec), number=n) / n
    t_pad = timeit.timeit(lambda: pad._encode_sync(compressed, spec), number=n) / n
    report("write, bytes+zstd (baseline)", t_plain_w, t_plain_w, None)
    report("write, bytes+zstd+pad(TIFF header function)", t_tiff_w, t_plain_w, 1.10,
           ratio=writes.paired_ratio("tiff", "plain"))
    t_plain_f, t_tiff_f = file_writes(root / "plain.zarr", root / "tiff.zarr", repeat)
    report("  their chunk files alone (no codecs)", t_tiff_f, t_plain_f, None)
    for reader, (t_plain_r, t_tiff_r) in reads.items():
        report(f"read, bytes+zstd (baseline), {reader}", t_plain_r, t_plain_r, None)
        report(f"read, bytes+zstd+pad, {reader}", t_tiff_r, t_plain_r, 1.05)
    report("per chunk: zstd encode (baseline)", t_zstd * 1e6, t_zstd * 1e6, None, "us")
    report("per chunk: pad encode with TIFF header function", t_pad * 1e6, t_zstd * 1e6, 0.10, "us")


def bench_n5(root: Path, shape: tuple[int, int], block: tuple[int, int], repeat: int) -> None:
    data = sample(shape)
    path = root / "data.n5"
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(path)}}
    store = ts.open(
        {
            **spec,
            "metadata": {
                "dimensions": list(shape),
                "blockSize": list(block),
                "dataType": "uint16",
                "compression": {"type": "gzip"},
            },
        },
        create=True,
        delete_existing=True,
    ).result()
    store[...] = data
    print(f"2. N5 read in place: {shape} uint16, blocks {block}, gzip (written by tensorstore)")

    def ts_read() -> np.ndarray:
        return ts.open(spec).result().read().result()

    arrays = {}
    for codec in ("pad", "n5_default"):
        n5.write_zarr_metadata(path, codec=codec, overwrite=True)  # type: ignore[arg-type]
        # The array object keeps its codecs, so both can be read from one directory.
        arrays[codec] = zarr.open_array(str(path), mode="r")
        assert np.array_equal(arrays[codec][:], data)
    runs = interleave(
        {"pad": lambda: arrays["pad"][:], "n5_default": lambda: arrays["n5_default"][:],
         "tensorstore": ts_read},
        repeat,
    )
    t_pad, t_n5d, t_ts = (runs.best(name) for name in ("pad", "n5_default", "tensorstore"))
    times = {"pad": t_pad, "n5_default": t_n5d}
    report("zarr-python via pad (baseline)", times["pad"], times["pad"], None)
    report("zarr-python via n5_default", times["n5_default"], times["pad"], 1.20)
    print(f"  {'tensorstore read (context)':<48} {t_ts:9.4f} s")
    print(f"  {'zarr-python via pad / tensorstore':<48} {'':11} ratio {times['pad'] / t_ts:6.3f}")

    print("3. Making the N5 readable by zarr: in place vs copy")

    def in_place() -> None:
        n5.write_zarr_metadata(path, overwrite=True)

    def copy() -> None:
        target = root / "copy.zarr"
        shutil.rmtree(target, ignore_errors=True)
        out = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(target)},
                "metadata": {
                    "shape": list(shape),
                    "data_type": "uint16",
                    "chunk_grid": {
                        "name": "regular",
                        "configuration": {"chunk_shape": list(block)},
                    },
                    "codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "gzip", "configuration": {"level": 6}},
                    ],
                },
            },
            create=True,
        ).result()
        out[...] = ts_read()

    runs = interleave({"copy": copy, "in place": in_place}, repeat)
    t_copy, t_place = runs.best("copy"), runs.best("in place")
    report("copy to zarr v3 with tensorstore (baseline)", t_copy, t_copy, None)
    report("write_zarr_metadata in place (auto)", t_place, t_copy, 0.10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args()
    if args.quick:
        tiff_shape, n5_shape, repeat = (512, 512), (512, 512), 2
    else:
        tiff_shape, n5_shape, repeat = (4096, 4096), (4096, 4096), 7
    with tempfile.TemporaryDirectory(prefix="bench-pad-n5-") as tmp:
        root = Path(tmp)
        bench_tiff(root, tiff_shape, (256, 256), repeat)
        bench_n5(root, n5_shape, (256, 256), repeat)


if __name__ == "__main__":
    main()
