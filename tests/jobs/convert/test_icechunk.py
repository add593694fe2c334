"""``zarrext convert`` in an icechunk repository (issue 37): one commit; in place too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.conftest import Run
from zarrext.jobs.transactions import read_session

icechunk = pytest.importorskip("icechunk")
icechunk.set_logs_filter("off")  # its warnings about local repositories are not ours to test

IMAGE = (np.arange(48 * 40, dtype="u2").reshape(48, 40) * 37 % 4001).astype("u2")
TEMP = (280 + 10 * np.sin(np.arange(24 * 24) / 50)).reshape(24, 24).astype("f4")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Any, Path]:
    """A repository: an array ``big`` at its root and a group ``clim`` of two arrays."""
    path = tmp_path / "repo.icechunk"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w")
    root.attrs["title"] = "kept"
    root.create_array("big", shape=IMAGE.shape, chunks=(16, 8), dtype="u2",
                      dimension_names=("y", "x"))[:] = IMAGE
    clim = root.create_group("clim")
    clim.attrs["cf"] = {"Conventions": "CF-1.8"}
    clim.create_array("temp", shape=TEMP.shape, chunks=(8, 8), dtype="f4")[:] = TEMP
    clim.create_array("mask", shape=(24,), chunks=(5,), dtype="i1")[:] = np.arange(24) % 3
    session.commit("data")
    return repo, path


def _codecs(array: Any) -> str:
    return json.dumps(array.metadata.to_dict()["codecs"])


def _commits(repo: Any) -> list[str]:
    return [c.message for c in repo.ancestry(branch="main")]


def test_conversion_into_the_repository_is_one_commit(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    before = repo_.lookup_branch("main")
    code, _, err = run("convert", path, "--icechunk-branch", "main", "--icechunk-path", "clim",
                       "--out", "clim_c", "--arrays", "temp", "--chunks", "4,4", "--quiet")
    assert code == 0, err
    assert len(_commits(repo_)) == 3  # the repository's first, "data", and this one
    assert "zarrext convert" in _commits(repo_)[0]
    assert "--icechunk-path clim" in _commits(repo_)[0]
    now = read_session(repo_).store
    copy = zarr.open_group(now, path="clim_c", mode="r")
    assert sorted(copy.keys()) == ["mask", "temp"]
    assert copy.attrs["cf"] == {"Conventions": "CF-1.8"}
    np.testing.assert_array_equal(copy["temp"][:], TEMP)
    np.testing.assert_array_equal(copy["mask"][:], np.arange(24) % 3)
    assert copy["temp"].chunks == (4, 4)
    assert "conditional" in _codecs(copy["temp"])
    assert "conditional" not in _codecs(copy["mask"])  # not selected: copied as it was
    # the earlier snapshot is as it was: no clim_c
    old = zarr.open_group(repo_.readonly_session(snapshot_id=before).store, mode="r")
    assert sorted(old.keys()) == ["big", "clim"]


def test_in_place_replaces_the_arrays_in_one_commit(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    before = repo_.lookup_branch("main")
    code, _, err = run("convert", path, "--icechunk-branch", "main", "--out", "/",
                       "--arrays", "big", "--arrays", "clim/temp", "--chunks", "8,8",
                       "--shards", "16,16", "--quiet")
    assert code == 0, err
    assert len(_commits(repo_)) == 3
    root = zarr.open_group(read_session(repo_).store, mode="r")
    assert sorted(root.keys()) == ["big", "clim"]  # replaced where they were, nothing added
    assert root.attrs["title"] == "kept"
    np.testing.assert_array_equal(root["big"][:], IMAGE)
    np.testing.assert_array_equal(root["clim/temp"][:], TEMP)
    np.testing.assert_array_equal(root["clim/mask"][:], np.arange(24) % 3)
    assert (root["big"].chunks, root["big"].shards) == ((8, 8), (16, 16))
    assert root["big"].metadata.dimension_names == ("y", "x")
    assert "conditional" in _codecs(root["big"])
    assert "conditional" not in _codecs(root["clim/mask"])  # not selected: as it was
    old = zarr.open_group(repo_.readonly_session(snapshot_id=before).store, mode="r")
    assert old["big"].chunks == (16, 8)  # the earlier snapshot keeps the old arrays
    assert "conditional" not in _codecs(old["big"])
    np.testing.assert_array_equal(old["big"][:], IMAGE)


def test_in_place_an_array(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    code, _, err = run("convert", path, "--icechunk-branch", "main", "--icechunk-path",
                       "clim/temp", "--out", "clim/temp", "--max-abs-error", "0.01", "--quiet")
    assert code == 0, err
    now = zarr.open_array(read_session(repo_).store, path="clim/temp", mode="r")
    assert float(np.abs(now[:] - TEMP).max()) <= 0.01
    assert "scale_offset" in json.dumps(now.metadata.to_dict())


def test_a_failed_conversion_commits_nothing(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    before = repo_.lookup_branch("main")
    code, _, err = run("convert", path, "--icechunk-branch", "main", "--out", "/",
                       "--chunks", "3,3", "--shards", "4,4")
    assert code != 0
    assert len(err.strip().splitlines()) == 1, err
    assert "cannot convert" in err
    assert repo_.lookup_branch("main") == before
    code, _, err = run("convert", path, "--icechunk-branch", "main", "--out", "/",
                       "--shards", "16,16", "--layout", "append")
    assert code != 0
    assert "only a local directory" in err
    assert repo_.lookup_branch("main") == before


def test_dry_run_reads_a_snapshot(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    snapshot = repo_.lookup_branch("main")
    code, printed, err = run("convert", path, "--icechunk-snapshot", snapshot, "--dry-run",
                             "--json")
    assert code == 0, err
    reports = json.loads(printed)["arrays"]
    assert sorted(r["path"] for r in reports) == ["big", "clim/mask", "clim/temp"]
    assert repo_.lookup_branch("main") == snapshot
