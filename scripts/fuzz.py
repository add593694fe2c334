"""Long fuzz run over every zarrext decoder and metadata parser, with statistics.

    python scripts/fuzz.py --inputs 100000 [--seed 1] [--only optional,pad-end]

Codecs alone (each chain decoding damaged bytes), then zarrext's read path
(``pipeline-*``: a real array on a local store opened with ``zarrext.open_array``,
one damaged chunk or shard file at a time, its region read back: a clean failure is
a ``ChunkDecodeError`` naming the array, the file's key and a codec), then
``optional`` fill values and codec metadata (a tenth as many inputs each).

For each decoder: inputs tried, how many decoded, failed cleanly (the codec's own
``ValueError``-family error) or uncleanly, how many cost more work than their budget
(``tests.fuzzing.budget``: calls made and memory held, against the undamaged input's),
and the most calls and memory (tracemalloc) a single input took, beside the chunk's
decoded size. The goal is 0 unclean and 0 over budget: no input allocates or loops by
what its bytes claim. ``tests/test_fuzz.py`` runs the same harness at a small size in
``make test``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzzing import (
    FILL_VALUE_SEEDS,
    METADATA_SEEDS,
    Outcome,
    PipelineRun,
    Work,
    budget,
    decode_one,
    inputs,
    json_size,
    mutate_fill_value,
    mutate_metadata,
    parse_fill_value,
    parse_one,
    pipeline_targets,
    targets,
)


def _most(most: Work, outcome: Outcome) -> Work:
    return Work(max(most.calls, outcome.work.calls),
                max(most.peak_bytes, outcome.work.peak_bytes))


def _over(allowed: Work, outcome: Outcome, again: Callable[[], Outcome]) -> bool:
    """Over ``allowed`` when measured twice (a first error path may import once)."""
    return not (outcome.work.within(allowed) or again().work.within(allowed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per decoder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated target names")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    failures = 0
    print(f"{'target':<28}{'inputs':>9}{'ok':>9}{'clean':>9}{'unclean':>9}{'over':>6}"
          f"{'calls':>8}{'peak KiB':>10}{'chunk B':>9}")
    for target in targets():
        if only and target.name not in only:
            continue
        transform = target.transform()
        draw = inputs(target, seed=args.seed, count=args.inputs)
        chunk_bytes = target.spec().dtype.to_native_dtype().itemsize * math.prod(target.shape)
        counts = {"ok": 0, "clean": 0, "unclean": 0, "over": 0}
        most = Work(0, 0)
        examples = []
        for _ in range(args.inputs):
            valid, damaged = draw()
            allowed = budget(decode_one(target, transform, valid).work, len(damaged))
            outcome = decode_one(target, transform, damaged)
            counts[outcome.kind] += 1
            most = _most(most, outcome)
            if _over(allowed, outcome, lambda: decode_one(target, transform, damaged)):  # noqa: B023
                counts["over"] += 1
            if outcome.kind == "unclean" and len(examples) < 3:
                examples.append((damaged[:48].hex(), outcome.detail[:200]))
        failures += counts["unclean"] + counts["over"]
        print(f"{target.name:<28}{args.inputs:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}{counts['over']:>6}{most.calls:>8}"
              f"{most.peak_bytes / 1024:>10.1f}{chunk_bytes:>9}", flush=True)
        for example in examples:
            print("    unclean:", *example)
    for target in pipeline_targets():
        # zarrext's read path: damaged chunk files of a real array, read back.
        if only and target.name not in only:
            continue
        counts = {"ok": 0, "clean": 0, "unclean": 0, "over": 0}
        most = Work(0, 0)
        examples = []
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="zarrext-fuzz-") as directory:
            run = PipelineRun(target, Path(directory), seed=args.seed)
            draw = run.inputs(args.seed)
            for _ in range(args.inputs):
                key, valid, damaged = draw()
                outcome = run.read_one(key, damaged)
                allowed = budget(run.read_one(key, valid).work, len(damaged))
                counts[outcome.kind] += 1
                most = _most(most, outcome)
                if _over(allowed, outcome, lambda: run.read_one(key, damaged)):  # noqa: B023
                    counts["over"] += 1
                run.read_one(key, valid)
                if outcome.kind == "unclean" and len(examples) < 3:
                    examples.append((key, damaged[:48].hex(), outcome.detail[:200]))
        failures += counts["unclean"] + counts["over"]
        print(f"{target.name:<28}{args.inputs:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}{counts['over']:>6}{most.calls:>8}"
              f"{most.peak_bytes / 1024:>10.1f}{'':>9}  "
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
        counts = {"ok": 0, "clean": 0, "unclean": 0, "over": 0}
        most = Work(0, 0)
        start = time.perf_counter()
        undamaged = parse_one(name, document).work
        n = max(1, args.inputs // 10)
        for _ in range(n):
            damaged = mutate_metadata(document, rng)
            outcome = parse_one(name, damaged)
            counts[outcome.kind] += 1
            most = _most(most, outcome)
            if _over(budget(undamaged, json_size(damaged)), outcome,
                     lambda: parse_one(name, damaged)):  # noqa: B023
                counts["over"] += 1
        failures += counts["unclean"] + counts["over"]
        print(f"{'metadata ' + name:<28}{n:>9}{counts['ok']:>9}{counts['clean']:>9}"
              f"{counts['unclean']:>9}{counts['over']:>6}{most.calls:>8}"
              f"{most.peak_bytes / 1024:>10.1f}{'':>9}  "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
