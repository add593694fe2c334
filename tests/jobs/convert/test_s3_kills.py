"""kill -9 of ``zarrext convert --out s3://...`` on the loopback S3 server (issue 37).

After every kill, what opens at the output is nothing or the complete conversion
with exact values; an existing output stays byte for byte; a rerun completes and
leaves no temporary object of the job in the bucket.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
import zarr

from tests.conftest import ROOT
from tests.jobs.test_quantize_s3_kills import (
    _fs,
    _kill_while_writing,
    _killed,
    _no_leftovers,
    _objects,
    _written,
)
from zarrext.jobs.outputs import UNFINISHED


def _convert(s3: dict[str, Any], source: str, out: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        # 8x8 chunks of random values: a header per chunk makes the copy larger
        [sys.executable, "-m", "zarrext", "convert", source, "--out", out, "--chunks", "8,8",
         "--overwrite", "--allow-larger", "-q", "--storage-options", json.dumps(s3["options"])],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _group(s3: dict[str, Any], name: str, seed: int) -> tuple[str, dict[str, np.ndarray]]:
    url = f"{s3['url']}/{name}"
    rng = np.random.default_rng(seed)
    data = {"a": rng.integers(0, 500, (128, 128)).astype("u2"),
            "sub/b": rng.normal(size=(96, 64)).astype("f4")}
    root = zarr.open_group(url, mode="w", storage_options=s3["options"])
    root.attrs["seed"] = seed
    for path, values in data.items():
        root.create_array(path, shape=values.shape, chunks=(32, 32), dtype=values.dtype)[:] = values
    zarr.consolidate_metadata(root.store)
    return url, data


def _opened(url: str, s3: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """Every array of the group at ``url`` (as its consolidated metadata lists them),
    or None when nothing opens there."""
    try:
        group = zarr.open_group(url, mode="r", storage_options=s3["options"])
    except FileNotFoundError:
        return None
    return {path: np.asarray(array[:]) for path, array in group.arrays()} | {
        f"sub/{path}": np.asarray(array[:]) for path, array in group["sub"].arrays()
    }


def _exact(values: dict[str, np.ndarray] | None, data: dict[str, np.ndarray]) -> None:
    assert values is not None
    assert sorted(values) == sorted(data)
    for path, expected in data.items():
        np.testing.assert_array_equal(values[path], expected)


@pytest.mark.slow
def test_killed_convert_on_s3_leaves_nothing_or_all_and_reruns(s3: dict[str, Any]) -> None:
    rnd = random.Random(37)
    fs = _fs(s3)
    source, data = _group(s3, "src.zarr", 1)

    started = time.monotonic()
    proc = _convert(s3, source, f"{s3['url']}/reference.zarr")
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    whole = time.monotonic() - started
    _exact(_opened(f"{s3['url']}/reference.zarr", s3), data)
    objects = _written(fs, f"{s3['url']}/reference.zarr")

    # an existing output is never replaced on an object store: killed or not, it stays
    out = f"{s3['url']}/old.zarr"
    old_source, old_data = _group(s3, "old-src.zarr", 2)
    assert _convert(s3, old_source, out).wait() == 0
    old_objects = _objects(fs, out)
    proc = _convert(s3, source, out)
    time.sleep(rnd.uniform(0, whole))
    _killed(proc)
    assert _objects(fs, out) == old_objects
    _exact(_opened(out, s3), old_data)

    # a new output: after every kill nothing opens, or all of it, exactly
    out = f"{s3['url']}/new.zarr"
    in_write = 0
    for cycle in range(6):
        proc = _convert(s3, source, out)
        if cycle % 2:  # while the job writes: after a random share of its objects
            _kill_while_writing(fs, proc, out, rnd.randrange(1, objects // 2))
        else:
            time.sleep(rnd.uniform(0, whole))
            _killed(proc)
        left = _objects(fs, out)
        in_write += UNFINISHED in left and "zarr.json" not in left
        values = _opened(out, s3)
        if values is not None:
            _exact(values, data)
        rerun = _convert(s3, source, out)
        _, err = rerun.communicate()
        if values is None:
            assert rerun.returncode == 0, err
        else:  # the killed run had finished: its output stays, the rerun says so
            assert rerun.returncode == 1, err
            assert "already exists" in err
        _exact(_opened(out, s3), data)
        _no_leftovers(fs, s3)
        fs.rm(out.removeprefix("s3://"), recursive=True)
    assert in_write >= 1  # kills did land while objects were being written
