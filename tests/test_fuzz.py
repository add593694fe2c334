"""Hostile bytes and metadata: every decoder fails cleanly (seeded, small, fast).

Each damaged input also stays within a budget of work (:func:`tests.fuzzing.budget`:
calls made and memory held, against the undamaged input's): no input makes a decoder
allocate or loop by what its bytes claim. The long run with statistics is
``scripts/fuzz.py``; both use ``tests/fuzzing.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

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
from tests.paths import ROOT

INPUTS_PER_TARGET = 300
TARGETS = targets()
PIPELINE_TARGETS = pipeline_targets()


def within(allowed: Work, outcome: Outcome, again: Callable[[], Outcome]) -> bool:
    """Whether ``outcome`` cost at most ``allowed``. One that cost more is measured
    ``again``: the first run of an error path may import a module or fill a cache,
    once; an input that allocates or loops by what its bytes claim does so each time."""
    return outcome.work.within(allowed) or again().work.within(allowed)


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_damaged_chunks_decode_or_fail_cleanly(target) -> None:
    transform = target.transform()
    draw = inputs(target, seed=1234, count=INPUTS_PER_TARGET)
    unclean = []
    outcomes = {"ok": 0, "clean": 0}
    for _ in range(INPUTS_PER_TARGET):
        valid, damaged = draw()
        undamaged = decode_one(target, transform, valid)
        assert undamaged.kind == "ok"
        outcome = decode_one(target, transform, damaged)
        if outcome.kind == "unclean" or not within(
                budget(undamaged.work, len(damaged)), outcome,
                lambda: decode_one(target, transform, damaged)):  # noqa: B023
            unclean.append((damaged[:64], outcome))
        else:
            outcomes[outcome.kind] += 1
    assert not unclean, unclean[:3]
    # The mutator must reach the codec's checks, not only produce decodable bytes.
    assert outcomes["clean"] > INPUTS_PER_TARGET // 10


@pytest.mark.parametrize("target", PIPELINE_TARGETS, ids=[t.name for t in PIPELINE_TARGETS])
def test_damaged_chunk_files_read_or_fail_naming_the_chunk(target, tmp_path) -> None:
    """zarrext's read path (zarrext.open_array on a local store, zarr's zstd and
    crc32c included): a damaged file reads, or fails with a ChunkDecodeError naming
    the array, the file's key and a codec."""
    run = PipelineRun(target, tmp_path, seed=1234)
    draw = run.inputs(1234)
    unclean = []
    outcomes = {"ok": 0, "clean": 0}
    for _ in range(150):
        key, valid, damaged = draw()
        outcome = run.read_one(key, damaged)
        undamaged = run.read_one(key, valid)
        assert undamaged.kind == "ok"
        if outcome.kind == "unclean" or not within(
                budget(undamaged.work, len(damaged)), outcome,
                lambda: run.read_one(key, damaged)):  # noqa: B023
            unclean.append((key, damaged[:64], outcome))
        else:
            outcomes[outcome.kind] += 1
        run.read_one(key, valid)  # the file undamaged again, whatever was measured
    assert not unclean, unclean[:3]
    assert outcomes["clean"] > 15


@pytest.mark.parametrize(
    ("dtype", "fill"), [(d, f) for _, d, f in FILL_VALUE_SEEDS],
    ids=[name for name, _, _ in FILL_VALUE_SEEDS],
)
def test_odd_optional_fill_values_fail_naming_the_field(dtype, fill) -> None:
    assert parse_fill_value(dtype, fill).kind == "ok"
    rng = random.Random(7)
    outcomes = [parse_fill_value(dtype, mutate_fill_value(fill, rng)) for _ in range(200)]
    unclean = [o.detail for o in outcomes if o.kind == "unclean"]
    assert not unclean, unclean[:3]
    assert sum(o.kind == "clean" for o in outcomes) > 100


@pytest.mark.parametrize(
    ("parser", "document"), METADATA_SEEDS, ids=[name for name, _ in METADATA_SEEDS]
)
def test_damaged_metadata_parses_or_fails_cleanly(parser: str, document: dict) -> None:
    undamaged = parse_one(parser, document)
    assert undamaged.kind == "ok"
    rng = random.Random(99)
    damaged = [mutate_metadata(document, rng) for _ in range(200)]
    outcomes = [parse_one(parser, d) for d in damaged]
    unclean = [
        (o.detail, o.work) for d, o in zip(damaged, outcomes, strict=True)
        if o.kind == "unclean" or not within(
            budget(undamaged.work, json_size(d)), o, lambda d=d: parse_one(parser, d))
    ]
    assert not unclean, unclean[:3]
    assert sum(o.kind == "clean" for o in outcomes) > 20


@pytest.mark.parametrize("waste", ["allocates", "loops"])
def test_a_decoder_that_works_by_what_its_bytes_claim_is_over_budget(waste, monkeypatch):
    """The budget can fail: a shuffle decoder that allocates 16 MiB, or decodes 1000
    times over, for a damaged input is over it, each time it is measured."""
    from zarrext.codecs.shuffle import ShuffleCodec

    target = next(t for t in TARGETS if t.name == "shuffle")
    transform = target.transform()
    valid, damaged = inputs(target, seed=5, count=1)()
    undamaged = decode_one(target, transform, valid)
    allowed = budget(undamaged.work, len(damaged))
    decode = ShuffleCodec._decode_sync

    def wasteful(self, chunk_bytes, chunk_spec):
        if waste == "allocates":
            claimed = np.ones(16 * 2**20, np.uint8)
            assert claimed.sum() == claimed.size
        else:
            for _ in range(1000):
                decode(self, chunk_bytes, chunk_spec)
        return decode(self, chunk_bytes, chunk_spec)

    assert decode_one(target, transform, damaged).work.within(allowed)
    monkeypatch.setattr(ShuffleCodec, "_decode_sync", wasteful)
    outcome = decode_one(target, transform, damaged)
    assert not within(allowed, outcome, lambda: decode_one(target, transform, damaged))


def test_raised_in_zarrext_is_decided_by_module_not_path(tmp_path) -> None:
    """A frame of zarr's code whose file lies under a folder named ``zarrext`` (a
    checkout of that name with its venv inside) is not zarrext's."""
    from tests.fuzzing import raised_in_zarrext

    fake = tmp_path / "zarrext" / ".venv" / "site-packages" / "zarr" / "codecs" / "x.py"
    code = compile("def fail():\n    raise ValueError('bad')\n", str(fake), "exec")
    for module, ours in (("zarr.codecs.x", False), ("zarrext.codecs.x", True)):
        namespace: dict = {"__name__": module}
        exec(code, namespace)
        with pytest.raises(ValueError, match="bad") as raised:
            namespace["fail"]()
        assert raised_in_zarrext(raised.value) is ours


def test_fuzz_tests_pass_in_a_checkout_named_zarrext(tmp_path) -> None:
    """The fuzz tests from a checkout named ``zarrext`` whose venv lies inside it, as
    ``git clone`` and ``make test`` make it: zarr's files then live under
    ``zarrext/.venv/...`` (the venv's site-packages, reached through a link)."""
    import os
    import shutil
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    root = ROOT
    checkout = tmp_path / "zarrext"
    shutil.copytree(root / "tests", checkout / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    shutil.copy(root / "pyproject.toml", checkout / "pyproject.toml")
    site = checkout / ".venv" / "lib" / "site-packages"
    site.parent.mkdir(parents=True)
    site.symlink_to(sysconfig.get_paths()["purelib"], target_is_directory=True)
    probe = "import zarr, sys; print(zarr.__file__)"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{checkout}"}
    found = subprocess.run([sys.executable, "-c", probe], env=env, cwd=checkout,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert "zarrext" in Path(found).parts  # the situation of the bug is reproduced
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", "tests/test_fuzz.py", "-k", "damaged_chunks"],
        env=env, cwd=checkout, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
