"""Hostile bytes and metadata: every decoder fails cleanly (seeded, small, fast).

The long run with statistics is ``scripts/fuzz.py``; both use ``tests/fuzzing.py``.
"""

from __future__ import annotations

import random

import pytest

from tests.fuzzing import (
    METADATA_SEEDS,
    decode_one,
    inputs,
    mutate_metadata,
    parse_one,
    targets,
)

INPUTS_PER_TARGET = 300
TARGETS = targets()


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_damaged_chunks_decode_or_fail_cleanly(target) -> None:
    transform = target.transform()
    draw = inputs(target, seed=1234, count=INPUTS_PER_TARGET)
    unclean = []
    outcomes = {"ok": 0, "clean": 0}
    for _ in range(INPUTS_PER_TARGET):
        valid, damaged = draw()
        assert decode_one(target, transform, valid).kind == "ok"
        outcome = decode_one(target, transform, damaged)
        if outcome.kind == "unclean" or outcome.seconds > 2:
            unclean.append((damaged[:64], outcome))
        else:
            outcomes[outcome.kind] += 1
    assert not unclean, unclean[:3]
    # The mutator must reach the codec's checks, not only produce decodable bytes.
    assert outcomes["clean"] > INPUTS_PER_TARGET // 10


@pytest.mark.parametrize(
    ("parser", "document"), METADATA_SEEDS, ids=[name for name, _ in METADATA_SEEDS]
)
def test_damaged_metadata_parses_or_fails_cleanly(parser: str, document: dict) -> None:
    assert parse_one(parser, document).kind == "ok"
    rng = random.Random(99)
    outcomes = [parse_one(parser, mutate_metadata(document, rng)) for _ in range(200)]
    unclean = [o.detail for o in outcomes if o.kind == "unclean" or o.seconds > 2]
    assert not unclean, unclean[:3]
    assert sum(o.kind == "clean" for o in outcomes) > 20
