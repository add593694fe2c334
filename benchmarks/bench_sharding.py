"""Shard write layouts against zarr-python's built-in sharded writes, in one run.

Figures (each a ratio on the same data and machine; goal in brackets):

1. update one inner chunk in a full shard: fixed-slot vs built-in        [>= 100x]
2. stream the array in inner-chunk-sized writes: fixed-slot vs built-in  [>= 20x]
3. shard-sized writes: fixed-slot vs built-in                            [>= 1.0x]
4. compaction vs shutil.copyfile of the same shard files, best of 3    [>= 0.8x]
   (for context: vs copying each shard to a temporary file and ``os.replace``-ing
   the original with it, which also pays for freeing the old shard's blocks)
5. reading fixed-slot vs compacted shards with zarr-python               [>= 0.9x]
   (after updating 10 % of the inner chunks                              [>= 0.95x])
   and with zarrext (``zarrext.open_array``), after the updates          [>= 0.95x]
   (each a median of paired alternate runs: compacted time / fixed-slot time)
   zarr-python reads a whole shard file when it wants all its chunks: after
   updates that includes the spare slots, so it reads up to twice the bytes;
   zarrext reads only what the shard's index references.
6. compressing chains, on one shard (16 MiB, ``--quick`` 4 MiB) of 64 KiB inner
   chunks of data that compresses about 2.5x: zarr's default ``zstd`` inside the
   shard (slots sized by ``ZSTD_compressBound``) and ``conditional(zstd)``,
   fixed-slot vs built-in (the gap grows with the shard):
   update one inner chunk in the full shard                             [>= 5x]
   stream the shard in inner-chunk-sized writes                         [>= 2x]
   (with the file's apparent and allocated bytes after the stream)

Full size: a 1 GiB uint32 array, 64 MiB shards of 64 KiB inner chunks. The
built-in streaming write rewrites the whole shard for every inner chunk, so its
cost grows with the shard's fill level; it is measured by timing single-chunk
writes into a shard prefilled to 8 fill levels and integrating (``--quick``
also measures it end to end, to show the estimate agrees).

Usage: ``python benchmarks/bench_sharding.py [--quick] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

import zarrext
from timing import interleave, timed
from zarrext.jobs.shards.inspect import shard_report


def create(path: Path, shape: tuple[int, int], shard: int, inner: int) -> None:
    zarr.create_array(
        str(path),
        shape=shape,
        chunks=(shard, shard),
        dtype="u4",
        fill_value=0,
        compressors=None,
        serializer=ShardingCodec(chunk_shape=(inner, inner), codecs=[BytesCodec()]),
    )


def compressing_chains(root: Path, side: int = 1024) -> None:
    """Figure 6: fixed-slot writes on compressing chains inside one shard of ``side``
    squared uint32 (1024: 4 MiB, 64 inner chunks of 64 KiB). zarr-python's own
    partial write rewrites the shard's stored bytes (not re-encoding the other
    chunks), so its cost, and the ratio, grows with the shard."""
    inner = 128
    g = side // inner
    rng = np.random.default_rng(1)
    tiles = [rng.integers(0, 300, (inner, inner), dtype="u4") for _ in range(4)]
    chains = {
        "zstd (zarr's default)": {},
        "conditional(zstd)": {"compressors": [zarrext.ConditionalCodec([ZstdCodec()])],
                              "decision": "compress_if_smaller"},
    }
    for name, kwargs in chains.items():
        arrays = {}
        for layout in ("fixed-slot", None):
            path = root / f"chain-{len(arrays)}-{name.split()[0]}"
            arrays[layout] = zarrext.create_array(
                str(path), shape=(side, side), chunks=(inner, inner), shards=(side, side),
                dtype="u4", fill_value=0, shard_layout=layout, **kwargs,
            )

        def stream(array: zarr.Array) -> None:
            for k in range(g * g):
                i, j = divmod(k, g)
                array[i * inner : (i + 1) * inner, j * inner : (j + 1) * inner] = tiles[k % 4]

        t_stream = {layout: timed(lambda a=a: stream(a), sync=True)
                    for layout, a in arrays.items()}
        report(f"{name}: stream {g * g} inner-chunk writes into one shard",
               t_stream["fixed-slot"], t_stream[None], 2)
        (info,) = shard_report(arrays["fixed-slot"])
        print(f"       fixed-slot shard after the stream: {info.file_size / 2**20:.2f} MiB "
              f"long, {(info.allocated or 0) / 2**20:.2f} MiB allocated, "
              f"{info.stored_bytes / 2**20:.2f} MiB stored")
        spots = [divmod(int(k), g) for k in rng.integers(0, g * g, 40)]

        def update(array: zarr.Array, k: int, positions: list[tuple[int, int]] = spots) -> float:
            i, j = positions[k % len(positions)]
            region = (slice(i * inner, (i + 1) * inner), slice(j * inner, (j + 1) * inner))
            return timed(lambda: array.__setitem__(region, tiles[k % 4]), sync=True)

        t_builtin = statistics.median(update(arrays[None], k) for k in range(10))
        t_fixed = statistics.median(update(arrays["fixed-slot"], k) for k in range(100))
        report(f"{name}: update one inner chunk in a full shard", t_fixed, t_builtin, 5)


def read_ratio(  # type: ignore[no-untyped-def]
    fixed_path: Path, compacted_path: Path, opener=zarr.open_array, repeat: int = 4
) -> tuple[float, float, float]:
    """Seconds to read each whole array with a fresh array (page cache warm), best
    of ``repeat`` alternate runs each, and the median of the runs' paired ratios
    (compacted / fixed-slot time): single reads here spread by up to 2x either way
    on a shared machine, and a pair shares the load of its moment."""
    read_fixed = opener(str(fixed_path), mode="r")
    read_compacted = opener(str(compacted_path), mode="r")
    read_fixed[:]
    read_compacted[:]
    runs = interleave(
        {"fixed": lambda: read_fixed[:], "compacted": lambda: read_compacted[:]},
        repeat, before=lambda _: os.sync(),
    )
    return runs.best("fixed"), runs.best("compacted"), runs.paired_ratio("compacted", "fixed")


def report(name: str, ours: float, builtin: float, goal: float, unit: str = "s") -> None:
    ratio = builtin / ours
    flag = "OK " if ratio >= goal else "MISS"
    print(f"[{flag}] {name}: fixed-slot {ours:.4g} {unit}, built-in {builtin:.4g} {unit}, "
          f"ratio {ratio:.1f}x (goal >= {goal}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB array, 4 MiB shards")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    if args.quick:
        side, shard, inner = 4096, 1024, 128  # 64 MiB array, 4 MiB shards, 64 KiB chunks
    else:
        side, shard, inner = 16384, 4096, 128  # 1 GiB array, 64 MiB shards, 64 KiB chunks
    shape = (side, side)
    per_side = shard // inner
    chunks_per_shard = per_side * per_side
    n_inner = (side // inner) ** 2
    root = Path(tempfile.mkdtemp(prefix="bench-sharding-", dir=args.dir))
    rng = np.random.default_rng(0)
    tile = rng.integers(0, 1 << 32, (inner, inner), dtype="u4")
    print(f"array {shape} uint32 = {side * side * 4 / 2**20:.0f} MiB, shards {shard}^2 = "
          f"{shard * shard * 4 / 2**20:.0f} MiB, "
          f"inner {inner}^2 = {inner * inner * 4 / 1024:.0f} KiB"
          f", {chunks_per_shard} inner chunks/shard; scratch {root}")
    try:
        # -- 2. streaming, fixed-slot (builds the array used below) ------------------------
        fixed_path = root / "fixed"
        create(fixed_path, shape, shard, inner)
        fixed = zarrext.open_array(str(fixed_path), shard_layout="fixed-slot")
        g = side // inner

        def stream_fixed() -> None:
            for i in range(g):
                for j in range(g):
                    fixed[i * inner : (i + 1) * inner, j * inner : (j + 1) * inner] = tile

        t_stream_fixed = timed(stream_fixed, sync=True)

        # -- 5a. read the freshly ingested fixed-slot array vs a compacted copy -------------
        pristine_path = root / "pristine-compacted"
        shutil.copytree(fixed_path, pristine_path)
        zarrext.compact(zarr.open_array(str(pristine_path), mode="r+"))
        t_read_pristine = read_ratio(fixed_path, pristine_path)
        shutil.rmtree(pristine_path)

        # -- 2. streaming, built-in: single-chunk writes at sampled fill levels -------------
        probe_path = root / "probe"
        create(probe_path, (shard, shard), shard, inner)
        probe = zarr.open_array(str(probe_path), mode="r+")
        levels = 8
        per_level = []
        for level in range(levels):
            rows = int((level + 0.5) / levels * per_side)
            shutil.rmtree(probe_path / "c", ignore_errors=True)
            if rows:
                probe[: rows * inner, :] = np.tile(tile, (rows, per_side))
            samples = []
            for j in range(3):
                region = (
                    slice(rows * inner, (rows + 1) * inner), slice(j * inner, (j + 1) * inner)
                )
                samples.append(timed(lambda r=region: probe.__setitem__(r, tile), sync=True))
            per_level.append(statistics.mean(samples))
        t_stream_builtin = statistics.mean(per_level) * n_inner
        report(f"stream {n_inner} inner-chunk writes", t_stream_fixed, t_stream_builtin, 20)
        print(f"       built-in estimated from 24 timed writes at {levels} fill levels: "
              + ", ".join(f"{t * 1e3:.1f}" for t in per_level) + " ms/write")
        if args.quick:
            builtin_path = root / "builtin-stream"
            create(builtin_path, shape, shard, inner)
            builtin = zarr.open_array(str(builtin_path), mode="r+")

            def stream_builtin() -> None:
                for i in range(g):
                    for j in range(g):
                        builtin[i * inner : (i + 1) * inner, j * inner : (j + 1) * inner] = tile

            t_full = timed(stream_builtin, sync=True)
            print(f"       built-in measured end to end: {t_full:.3g} s "
                  f"(estimate {t_stream_builtin:.3g} s), ratio {t_full / t_stream_fixed:.1f}x")
            shutil.rmtree(builtin_path)

        # -- 1. update one inner chunk in a full shard -------------------------------------
        full_shard = np.tile(tile, (per_side, per_side))
        probe[:, :] = full_shard
        positions = [(int(a), int(b)) for a, b in rng.integers(0, per_side, (40, 2))]

        def update(array: zarr.Array, k: int) -> float:
            i, j = positions[k % len(positions)]
            region = (slice(i * inner, (i + 1) * inner), slice(j * inner, (j + 1) * inner))
            return timed(lambda: array.__setitem__(region, tile), sync=True)

        t_upd_builtin = statistics.median(update(probe, k) for k in range(10))
        t_upd_fixed = statistics.median(update(fixed, k) for k in range(200))
        report("update one inner chunk in a full shard", t_upd_fixed, t_upd_builtin, 100)

        # -- 3. shard-sized writes ---------------------------------------------------------
        shard_fixed_path, shard_builtin_path = root / "shard-fixed", root / "shard-builtin"
        s = side // shard

        targets: dict[str, zarr.Array] = {}

        def fresh_target(layout: str) -> None:
            """Untimed: a fresh array each time, earlier writes flushed."""
            path = shard_fixed_path if layout == "fixed-slot" else shard_builtin_path
            shutil.rmtree(path, ignore_errors=True)
            create(path, shape, shard, inner)
            targets[layout] = (
                zarrext.open_array(str(path), shard_layout=layout)
                if layout == "fixed-slot"
                else zarr.open_array(str(path), mode="r+")
            )
            os.sync()

        def shards_into(layout: str) -> None:
            array = targets[layout]
            for i in range(s):
                for j in range(s):
                    array[i * shard : (i + 1) * shard, j * shard : (j + 1) * shard] = full_shard

        writes = interleave(  # alternately; the best of each
            {layout: lambda layout=layout: shards_into(layout)
             for layout in ("built-in", "fixed-slot")},
            3, before=fresh_target,
        )
        report(f"{s * s} shard-sized writes", writes.best("fixed-slot"), writes.best("built-in"),
               1.0)
        shutil.rmtree(shard_fixed_path)
        shutil.rmtree(shard_builtin_path)

        # -- 4. compaction vs shutil.copyfile --------------------------------------------
        # Move 10% of the chunks out of their slots first, so there is something to compact.
        for k in rng.choice(n_inner, n_inner // 10, replace=False):
            i, j = divmod(int(k), g)
            fixed[i * inner : (i + 1) * inner, j * inner : (j + 1) * inner] = tile
        files = sorted(
            p for p in (fixed_path / "c").rglob("*") if p.is_file() and "zarrext" not in p.name
        )
        copy_root = root / "copy"

        def copy_all() -> None:
            for p in files:
                target = copy_root / p.relative_to(fixed_path)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, target)

        replaced_root = root / "replaced"
        shutil.copytree(fixed_path, replaced_root)
        replaced = [replaced_root / p.relative_to(fixed_path) for p in files]

        def copy_replace_all() -> None:
            for p in replaced:
                tmp = p.with_name(p.name + ".tmp")
                shutil.copyfile(p, tmp)
                os.replace(tmp, p)

        t_copy_replace = timed(copy_replace_all, sync=True)
        shutil.rmtree(replaced_root)
        compacted_path = root / "compacted"

        to_compact: list[zarr.Array] = []

        def fresh_copy(name: str) -> None:
            """Untimed: the copy's target deleted, or a fresh copy of the updated array
            to compact; earlier writes flushed."""
            if name == "copy":
                shutil.rmtree(copy_root, ignore_errors=True)
            else:
                shutil.rmtree(compacted_path, ignore_errors=True)
                shutil.copytree(fixed_path, compacted_path)
                to_compact[:] = [zarr.open_array(str(compacted_path), mode="r+")]
            os.sync()

        # Alternately, the best of three each: one copy's time varied 4x between runs
        # with how the page cache's writeback went.
        rounds = interleave(
            {"copy": copy_all, "compact": lambda: zarrext.compact(to_compact[0])},
            3, before=fresh_copy,
        )
        t_copy, t_compact = rounds.best("copy"), rounds.best("compact")
        shutil.rmtree(copy_root)
        size_before = sum(p.stat().st_size for p in files)
        size_after = sum(
            p.stat().st_size for p in (compacted_path / "c").rglob("*") if "zarrext" not in p.name
            and p.is_file()
        )
        ratio = t_copy / t_compact
        print(f"[{'OK ' if ratio >= 0.8 else 'MISS'}] compaction {t_compact:.3g} s "
              f"({size_before / 2**20:.0f} -> {size_after / 2**20:.0f} MiB), "
              f"shutil.copyfile {t_copy:.3g} s, ratio {ratio:.2f}x (goal >= 0.8x)")
        print(f"       copyfile to a temporary + os.replace of the original "
              f"{t_copy_replace:.3g} s, ratio {t_copy_replace / t_compact:.2f}x")

        # -- 5. reading fixed-slot vs compacted with zarr-python ---------------------------
        def report_read(what: str, times: tuple[float, float, float], goal: float) -> None:
            t_rf, t_rc, ratio = times
            print(f"[{'OK ' if ratio >= goal else 'MISS'}] read whole array with {what}: "
                  f"fixed-slot {t_rf:.3g} s, compacted {t_rc:.3g} s (bests), ratio "
                  f"{ratio:.2f}x (median of paired runs; goal >= {goal}x)")

        report_read("zarr-python, as ingested", t_read_pristine, 0.9)
        report_read("zarr-python, after updating 10% of the chunks",
                    read_ratio(fixed_path, compacted_path), 0.95)
        report_read("zarrext, after updating 10% of the chunks",
                    read_ratio(fixed_path, compacted_path, zarrext.open_array, repeat=10), 0.95)
        np.testing.assert_array_equal(zarr.open_array(str(fixed_path))[:inner, :inner], tile)

        # -- 6. compressing chains inside the shard ----------------------------------------
        compressing_chains(root, 1024 if args.quick else 2048)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
