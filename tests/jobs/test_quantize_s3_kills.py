"""kill -9 of ``zarrext quantize --out s3://... --overwrite`` on the loopback S3 server.

After every kill, what opens at the output is the old output or the new one, with
exact values (or nothing, where there was no old output); a rerun completes; and
after a successful rerun no temporary object of the job is left in the bucket.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
import s3fs
import zarr

from tests.conftest import ROOT
from zarrext.jobs.outputs import STAGING_MARKER, UNFINISHED


def _fs(s3: dict[str, Any]) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)


def _objects(fs: s3fs.S3FileSystem, url: str) -> dict[str, bytes]:
    """Every object under ``url`` with its bytes (listed afresh)."""
    fs.invalidate_cache()
    root = url.removeprefix("s3://")
    return {k[len(root) + 1:]: fs.cat_file(k) for k in fs.find(root)}


def _written(fs: s3fs.S3FileSystem, url: str) -> int:
    """How many objects lie under ``url`` (listed afresh)."""
    fs.invalidate_cache()
    return len(fs.find(url.removeprefix("s3://")))


def _kill_while_writing(fs: s3fs.S3FileSystem, proc: subprocess.Popen[str], out: str,
                        least: int) -> None:
    """Wait (counting, not timing) until ``proc`` has marked ``out`` unfinished and
    written ``least`` objects there, or has ended; then kill it."""
    while proc.poll() is None and not (
        fs.exists(f"{out}/{UNFINISHED}") and _written(fs, out) >= least
    ):
        time.sleep(0.005)
    _killed(proc)


def _opened(url: str, s3: dict[str, Any]) -> np.ndarray | None:
    """The values of the array at ``url``, or None when nothing opens there."""
    try:
        array = zarr.open_array(url, mode="r", storage_options=s3["options"])
    except FileNotFoundError:
        return None
    return np.asarray(array[:])


def _quantize(s3: dict[str, Any], source: str, out: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "zarrext", "quantize", source, "--max-abs-error", "0.01",
         "--out", out, "--overwrite", "-q", "--storage-options", json.dumps(s3["options"])],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _killed(proc: subprocess.Popen[str]) -> bool:
    """SIGKILL ``proc`` (and anything it started) if it still runs; whether it did."""
    running = proc.poll() is None
    if running:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    return running and proc.returncode == -signal.SIGKILL


def _source(s3: dict[str, Any], name: str, scale: float) -> str:
    url = f"{s3['url']}/{name}"
    y, x = np.mgrid[0:128, 0:128]
    data = (scale * np.sin(x / 37.0) * np.cos(y / 23.0) + 280).astype("f4")
    data[:5, :5] = np.nan
    zarr.create_array(url, shape=data.shape, chunks=(16, 16), dtype="f4", fill_value=np.nan,
                      storage_options=s3["options"])[:] = data
    return url


def _no_leftovers(fs: s3fs.S3FileSystem, s3: dict[str, Any]) -> None:
    keys = list(_objects(fs, s3["url"]))
    assert not [k for k in keys if STAGING_MARKER in k], keys  # marker, temporary copies


@pytest.mark.slow
def test_killed_quantize_overwrite_on_s3_keeps_old_or_new_and_reruns(
    s3: dict[str, Any],
) -> None:
    rnd = random.Random(26)
    fs = _fs(s3)
    source = _source(s3, "src.zarr", 15.0)

    # what a complete run writes (quantizing is deterministic), and how long it takes
    # (the untargeted kills land at a random moment of it; the targeted ones by count)
    started = time.monotonic()
    proc = _quantize(s3, source, f"{s3['url']}/reference.zarr")
    marked = False
    while proc.poll() is None:
        marked = marked or fs.exists(f"{s3['url']}/reference.zarr/{UNFINISHED}")
        time.sleep(0.02)
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    whole = time.monotonic() - started
    assert marked
    new = _opened(f"{s3['url']}/reference.zarr", s3)
    assert new is not None
    objects = _written(fs, f"{s3['url']}/reference.zarr")

    # 1. An existing output, replaced with --overwrite: killed at random moments, the
    # old output stays byte for byte; the rerun ends with one line naming what to do.
    out = f"{s3['url']}/out.zarr"
    old_proc = _quantize(s3, _source(s3, "old-src.zarr", 5.0), out)
    assert old_proc.wait() == 0
    old, old_objects = _opened(out, s3), _objects(fs, out)
    assert old is not None
    assert not np.array_equal(old, new, equal_nan=True)
    for _ in range(3):
        proc = _quantize(s3, source, out)
        time.sleep(rnd.uniform(0, whole))
        _killed(proc)
        assert _objects(fs, out) == old_objects
        np.testing.assert_array_equal(_opened(out, s3), old)
        _no_leftovers(fs, s3)
    rerun = _quantize(s3, source, out)
    _, err = rerun.communicate()
    assert rerun.returncode == 1
    assert len(err.strip().splitlines()) == 1, err
    assert "never replaced" in err
    assert "write to a new prefix" in err
    assert _objects(fs, out) == old_objects

    # 2. A new output (--overwrite given, as a script keeps it): killed at random
    # moments, also while a rerun deletes a killed run's objects; after every kill
    # nothing or the complete new output opens; every rerun completes.
    out = f"{s3['url']}/new.zarr"
    in_write = 0
    for cycle in range(8):
        proc = _quantize(s3, source, out)
        if cycle % 2:  # while the job writes: after a random share of its objects
            _kill_while_writing(fs, proc, out, rnd.randrange(1, objects // 2))
        else:
            time.sleep(rnd.uniform(0, whole))
            _killed(proc)
        left = _objects(fs, out)
        in_write += UNFINISHED in left and "zarr.json" not in left
        values = _opened(out, s3)
        if values is not None:
            np.testing.assert_array_equal(values, new)
        if rnd.random() < 0.3 and cycle < 7:
            continue  # the next run starts from this one's leftovers
        rerun = _quantize(s3, source, out)
        _, err = rerun.communicate()
        if values is None:
            assert rerun.returncode == 0, err
        else:  # the killed run had finished: its output stays, the rerun says so
            assert rerun.returncode == 1, err
            assert "already exists" in err
        np.testing.assert_array_equal(_opened(out, s3), new)
        _no_leftovers(fs, s3)
        fs.rm(out.removeprefix("s3://"), recursive=True)  # the next cycle writes anew
    assert in_write >= 2  # kills did land while objects were being written
