"""Long fuzz run over every zarrext decoder and metadata parser, with statistics.

    python scripts/fuzz.py --inputs 100000 [--seed 1] [--only optional,pad-end]

Codecs alone (each chain decoding damaged bytes), then zarrext's read path
(``pipeline-*``: a real array on a local store opened with ``zarrext.open_array``,
one damaged chunk or shard file at a time, its region read back: a clean failure is
a ``ChunkDecodeError`` naming the array, the file's key and a codec), then
``optional`` fill values and codec metadata (a tenth as many inputs each).

For each decoder: inputs tried, how many decoded, failed cleanly (the codec's own
``ValueError``-family error) or uncleanly, the slowest input, and the peak memory a
single input allocated (tracemalloc) beside the chunk's decoded size. The goal is
0 unclean, none over 2 s, peak memory bounded (no input allocates by what its bytes
claim; the chunks here are small, so the fixed cost of the codecs dominates).
``tests/test_fuzz.py`` runs the same harness at a small size in ``make test``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzzing import (
    FILL_VALUE_SEEDS,
    METADATA_SEEDS,
    PipelineRun,
    decode_one,
    inputs,
    mutate_fill_value,
    mutate_metadata,
    parse_fill_value,
    parse_one,
    pipeline_targets,
    targets,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per decoder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated target names")
    parser.add_argument("--memory-every", type=int, default=100,
                        help="measure peak memory on every Nth input (tracemalloc is slow)")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    failures = 0
    print(f"{'target':<28}{'inputs':>9}{'ok':>9}{'clean':>9}{'unclean':>9}"
          f"{'slowest s':>11}{'peak KiB':>10}{'chunk B':>9}")
    for target in targets():
        if only and target.name not in only:
            continue
        transform = target.transform()
        draw = inputs(target, seed=args.seed, count=args.inputs)
        chunk_bytes = target.spec().dtype.to_native_dtype().itemsize * math.prod(target.shape)
        counts = {"ok": 0, "clean": 0, "unclean": 0}
        slowest = 0.0
        peak = 0
        examples = []
        for i in range(args.inputs):
            _, damaged = draw()
            measure = i % args.memory_every == 0
            if measure:
                tracemalloc.start()
            outcome = decode_one(target, transform, damaged)
            if measure:
                peak = max(peak, tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
            counts[outcome.kind] += 1
            slowest = max(slowest, outcome.seconds)
            if outcome.kind == "unclean" and len(examples) < 3:
                examples.append((damaged[:48].hex(), outcome.detail[:200]))
        failures += counts["unclean"] + (slowest > 2)
        print(f"{target.name:<28}{args.inputs:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}{slowest:>11.4f}{peak / 1024:>10.1f}{chunk_bytes:>9}",
              flush=True)
        for example in examples:
            print("    unclean:", *example)
    for target in pipeline_targets():
        # zarrext's read path: damaged chunk files of a real array, read back.
        if only and target.name not in only:
            continue
        counts = {"ok": 0, "clean": 0, "unclean": 0}
        slowest = 0.0
        examples = []
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="zarrext-fuzz-") as directory:
            run = PipelineRun(target, Path(directory), seed=args.seed)
            draw = run.inputs(args.seed)
            for _ in range(args.inputs):
                key, _, damaged = draw()
                outcome = run.read_one(key, damaged)
                counts[outcome.kind] += 1
                slowest = max(slowest, outcome.seconds)
                if outcome.kind == "unclean" and len(examples) < 3:
                    examples.append((key, damaged[:48].hex(), outcome.detail[:200]))
        failures += counts["unclean"] + (slowest > 2)
        print(f"{target.name:<28}{args.inputs:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}{slowest:>11.4f}{'':>12}  "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        for example in examples:
            print("    unclean:", *example)
    rng = random.Random(args.seed)
    for dtype_name, dtype, fill in FILL_VALUE_SEEDS:
        name = f"fill_value {dtype_name}"
        if only and "fill_value" not in only:
            continue
        counts = {"ok": 0, "clean": 0, "unclean": 0}
        n = max(1, args.inputs // 10)
        for _ in range(n):
            outcome = parse_fill_value(dtype, mutate_fill_value(fill, rng))
            counts[outcome.kind] += 1
            if outcome.kind == "unclean":
                print("    unclean:", outcome.detail[:200])
        failures += counts["unclean"]
        print(f"{name:<28}{n:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}", flush=True)
    for name, document in METADATA_SEEDS:
        if only and name not in only:
            continue
        counts = {"ok": 0, "clean": 0, "unclean": 0}
        slowest = 0.0
        start = time.perf_counter()
        n = max(1, args.inputs // 10)
        for _ in range(n):
            outcome = parse_one(name, mutate_metadata(document, rng))
            counts[outcome.kind] += 1
            slowest = max(slowest, outcome.seconds)
        failures += counts["unclean"] + (slowest > 2)
        print(f"{'metadata ' + name:<28}{n:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}{slowest:>11.4f}{'':>12}  "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
