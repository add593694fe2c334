"""Hostile bytes and metadata: every decoder fails cleanly (seeded, small, fast).

The long run with statistics is ``scripts/fuzz.py``; both use ``tests/fuzzing.py``.
"""

from __future__ import annotations

import random

import pytest

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

INPUTS_PER_TARGET = 300
TARGETS = targets()
PIPELINE_TARGETS = pipeline_targets()


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
        if outcome.kind == "unclean" or outcome.seconds > 2:
            unclean.append((key, damaged[:64], outcome))
        else:
            outcomes[outcome.kind] += 1
        assert run.read_one(key, valid).kind == "ok"
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
    assert parse_one(parser, document).kind == "ok"
    rng = random.Random(99)
    outcomes = [parse_one(parser, mutate_metadata(document, rng)) for _ in range(200)]
    unclean = [o.detail for o in outcomes if o.kind == "unclean" or o.seconds > 2]
    assert not unclean, unclean[:3]
    assert sum(o.kind == "clean" for o in outcomes) > 20


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

    root = Path(__file__).resolve().parents[1]
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
