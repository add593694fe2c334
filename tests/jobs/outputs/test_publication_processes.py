"""Two jobs started together to one output, as real processes (issue 42, item 5).

``zarrext convert`` (and ``quantize``) run twice at once with the same ``--out``,
each from its own source: exactly one exits 0 and its output is what opens at
``--out``, exactly; the other exits 1 with one line saying why (the output exists,
appeared during its run, or another job is writing it), and nothing else is deleted.
Locally and on the loopback S3 server, for a new output and for ``--overwrite`` of
an existing one (two reruns at once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.conftest import ROOT
from zarrext.jobs.outputs import STAGING_MARKER, UNFINISHED

# Sources big enough that both runs are past their start before either publishes
# (on S3 each chunk is a request: fewer do).
SHAPE, CHUNKS = (1024, 768), (16, 16)
S3_SHAPE = (256, 192)


def _source(location: str, seed: int, options: dict[str, Any] | None) -> np.ndarray:
    shape = SHAPE if options is None else S3_SHAPE
    data = np.random.default_rng(seed).uniform(0, 10, shape).astype("f4")
    zarr.create_array(location, shape=shape, chunks=CHUNKS, dtype="f4", fill_value=np.nan,
                      storage_options=options)[:] = data
    return data


def _started(job: str, source: str, out: str, overwrite: bool,
             options: dict[str, Any] | None) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "zarrext", job, source, "--out", out, "-q"]
    if job == "quantize":
        args += ["--max-abs-error", "0.01", "--allow-larger"]
    if overwrite:
        args.append("--overwrite")
    if options is not None:
        args += ["--storage-options", json.dumps(options)]
    return subprocess.Popen(
        args, env=dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _race(job: str, base: str, options: dict[str, Any] | None, *,
          overwrite: bool) -> tuple[str, dict[str, np.ndarray], list[tuple[int, str]]]:
    sources = {name: f"{base}/{name}.zarr" for name in ("a", "b")}
    data = {name: _source(location, i, options) for i, (name, location)
            in enumerate(sources.items())}
    out = f"{base}/out.zarr"
    if overwrite:
        _source(out, 9, options)
    runs = [_started(job, sources[n], out, overwrite, options) for n in ("a", "b")]
    ended = []
    for run in runs:
        _, err = run.communicate(timeout=600)
        ended.append((run.returncode, err))
    return out, data, ended


def _one_won(out: str, data: dict[str, np.ndarray], ended: list[tuple[int, str]],
             options: dict[str, Any] | None, tolerance: float) -> None:
    codes = sorted(code for code, _ in ended)
    assert codes == [0, 1], ended
    winner = "ab"[[code for code, _ in ended].index(0)]
    (loser_err,) = [err for code, err in ended if code == 1]
    assert len(loser_err.strip().splitlines()) == 1, loser_err
    assert any(w in loser_err for w in ("already exists", "during this run", "is writing")), \
        loser_err
    values = zarr.open_array(out, mode="r", storage_options=options)[:]
    np.testing.assert_allclose(values, data[winner], rtol=0, atol=tolerance)


@pytest.mark.slow
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("job", ["convert", "quantize"])
def test_two_local_jobs_to_one_output_one_wins(tmp_path: Path, job: str,
                                                overwrite: bool) -> None:
    (tmp_path / "notes.txt").write_text("beside the output")
    out, data, ended = _race(job, str(tmp_path), None, overwrite=overwrite)
    _one_won(out, data, ended, None, 0.01 if job == "quantize" else 0)
    assert (tmp_path / "notes.txt").read_text() == "beside the output"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.zarr", "b.zarr", "notes.txt", "out.zarr"]  # no temporary output left
    assert not any(STAGING_MARKER in p.name for p in Path(out).rglob("*"))


@pytest.mark.slow
@pytest.mark.parametrize("job", ["convert", "quantize"])
def test_two_s3_jobs_to_one_new_output_one_wins(s3: dict[str, Any], job: str) -> None:
    import s3fs

    out, data, ended = _race(job, s3["url"], s3["options"], overwrite=False)
    _one_won(out, data, ended, s3["options"], 0.01 if job == "quantize" else 0)
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    keys = fs.find(out.removeprefix("s3://"))
    assert not any(k.endswith(UNFINISHED) for k in keys)
    # exactly the winner's objects: no chunk of the loser's mixed in
    chunks = {k.rsplit("/c/", 1)[1] for k in keys if "/c/" in k}
    expected = {f"{i}/{j}" for i in range(S3_SHAPE[0] // CHUNKS[0])
                for j in range(S3_SHAPE[1] // CHUNKS[1])}
    assert chunks <= expected
