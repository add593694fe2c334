"""A writer and zarrext jobs committing to one branch of a repository in S3 (issue 26).

icechunk's storage in a local directory lost commits of writers racing each other
(2 of 1,536 writer commits against ``zarrext recompress``; 69 of 512 between two
plain writers), each commit having returned its snapshot id. In object storage,
commits are conditional writes of the branch ref: none may be lost. This races,
on the loopback S3 server, a writer process committing new chunks of one array,
one commit each, against ``zarrext recompress REPO --icechunk-branch main`` runs
(another array) as the CLI runs them, and checks that every snapshot id returned
to anyone is an ancestor of the branch's tip and that every chunk the writer
committed reads back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import zarrext
from tests.conftest import ROOT, conditional
from zarrext.jobs.transactions import open_repository, read_session, repository_storage

icechunk = pytest.importorskip("icechunk")

WRITER_COMMITS = 120
ROWS = 4  # the writer's commit i writes rows [i * ROWS, (i + 1) * ROWS) of "w" with i + 1

JOB_RUNS = 2  # recompress runs the writer waits for halfway through its commits

# Halfway through its commits the writer waits until the test has run JOB_RUNS jobs
# (their count in a file): the jobs race the writer by count, not by speed.
WRITER = """
import json, os, sys, time
import zarr
from zarrext.jobs.transactions import commit, open_repository

url, options, n, rows, log, runs, least = sys.argv[1:8]
n, rows, least = int(n), int(rows), int(least)
repo = open_repository(url, storage_options=json.loads(options))
with open(log, "w") as out:
    out.write("started\\n")
    out.flush()
    for i in range(n):
        while i == n // 2 and int(open(runs).read() or 0) < least:
            time.sleep(0.05)  # the jobs run (the test's hang guard bounds this)
        session = repo.writable_session("main")
        zarr.open_array(session.store, path="w")[i * rows : (i + 1) * rows] = i + 1
        snapshot = commit(session, f"writer {i}")  # rebases over others' commits
        out.write(f"{i} {snapshot}\\n")
        out.flush()
"""


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return env


@pytest.mark.slow
def test_a_writer_and_zarrext_jobs_lose_no_commit_in_s3(
    s3: dict[str, Any], tmp_path: Path
) -> None:
    url, options = f"{s3['url']}/repo", s3["options"]
    repo = icechunk.Repository.create(repository_storage(url, options))
    session = repo.writable_session("main")
    a = zarrext.create_array(
        session.store, name="a", shape=(64, 64), chunks=(16, 16), dtype="f4", fill_value=0,
        compressors=[conditional(ZstdCodec(level=1))], decision="never_apply",
    )
    a[:] = np.tile(np.linspace(0, 1, 64, dtype="f4"), (64, 1))
    zarr.create_array(session.store, name="w", shape=(WRITER_COMMITS * ROWS,),
                      chunks=(ROWS,), dtype="i4", fill_value=0)
    first = session.commit("arrays")

    log = tmp_path / "writer.log"
    counted = tmp_path / "runs"
    counted.write_text("0")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, json.dumps(options), str(WRITER_COMMITS),
         str(ROWS), str(log), str(counted), str(JOB_RUNS)],
        env=environment(), stderr=subprocess.PIPE, text=True,
    )
    job_snapshots: list[str] = []
    runs = 0
    try:
        while not log.exists() or "started" not in log.read_text():
            assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
            time.sleep(0.05)
        # zarrext jobs on the same branch for as long as the writer commits; each run
        # changes every chunk of "a" (the decision alternates), so each one commits
        while writer.poll() is None:
            decision = ("compress_if_smaller", "never_apply")[runs % 2]
            done = subprocess.run(
                [sys.executable, "-m", "zarrext", "recompress", url, "--icechunk-branch",
                 "main", "--decision", decision, "--storage-options", json.dumps(options)],
                env=environment(), capture_output=True, text=True, timeout=300,
            )
            assert done.returncode == 0, done.stderr
            found = re.search(r"committed snapshot (\w+) to branch main", done.stderr)
            assert found is not None, done.stderr
            job_snapshots.append(found.group(1))
            runs += 1
            counted.write_text(str(runs))
    finally:
        if writer.poll() is None:
            writer.kill()
        _, errors = writer.communicate(timeout=60)
    assert writer.returncode == 0, errors

    written = dict(line.split() for line in log.read_text().splitlines()[1:])
    assert len(written) == WRITER_COMMITS
    assert runs >= JOB_RUNS  # the jobs did race the writer
    repo = open_repository(url, storage_options=options)
    ancestors = {info.id for info in repo.ancestry(branch="main")}
    lost = [i for i, snapshot in written.items() if snapshot not in ancestors]
    assert lost == [], f"writer commits missing from main: {lost}"
    assert [s for s in job_snapshots if s not in ancestors] == []
    assert first in ancestors
    tip = read_session(repo, branch="main").store
    expected = np.repeat(np.arange(1, WRITER_COMMITS + 1, dtype="i4"), ROWS)
    np.testing.assert_array_equal(zarr.open_array(tip, path="w", mode="r")[:], expected)
    last = Counter({1: 16}) if runs % 2 else Counter({0: 16})  # the last run's decision
    assert zarrext.inventory(zarrext.open_array(tip, path="a", mode="r")).mask_counts == last
