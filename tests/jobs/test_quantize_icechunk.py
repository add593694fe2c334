"""``zarrext quantize`` in an icechunk repository: only the group or array asked for."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.conftest import Run
from zarrext.jobs.transactions import job_message, read_session

icechunk = pytest.importorskip("icechunk")
icechunk.set_logs_filter("off")  # its warnings about local repositories are not ours to test

TEMP = (280 + 10 * np.sin(np.arange(32 * 32, dtype="f4") / 50)).reshape(32, 32).astype("f4")
PR = (np.cos(np.arange(32 * 32, dtype="f4") / 70) + 1).reshape(32, 32).astype("f4")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Any, Path]:
    """A repository with an unrelated array ``big`` at its root and a group ``clim``."""
    path = tmp_path / "repo.icechunk"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w")
    root.create_array("big", shape=(64, 64), chunks=(32, 32), dtype="f8")[:] = 1.5
    clim = root.create_group("clim")
    clim.create_array("temp", shape=(32, 32), chunks=(16, 16), dtype="f4")[:] = TEMP
    clim.create_array("pr", shape=(32, 32), chunks=(16, 16), dtype="f4")[:] = PR
    session.commit("data")
    return repo, path


def _quantize(run: Run, path: Path, *args: str) -> tuple[int, str, str]:
    return run("quantize", path, "--icechunk-branch", "main", "--max-abs-error", "0.01", *args)


def test_icechunk_path_copies_only_the_group_named(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    code, _, err = _quantize(run, path, "--icechunk-path", "clim", "--out", "clim_q")
    assert code == 0, err
    now = read_session(repo_).store
    copy = zarr.open_group(now, path="clim_q", mode="r")
    assert sorted(copy.keys()) == ["pr", "temp"]  # not the repository's `big`, nor clim_q
    for name, data in (("temp", TEMP), ("pr", PR)):
        back = zarr.open_array(now, path=f"clim_q/{name}", mode="r")
        assert [f.to_dict()["name"] for f in back.filters] == ["scale_offset", "cast_value"]
        assert float(np.abs(back[:] - data).max()) <= 0.01
    message = next(iter(repo_.ancestry(branch="main"))).message
    assert message == "zarrext quantize --icechunk-path clim --max-abs-error 0.01 --out clim_q"


def test_icechunk_path_names_an_array(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    code, _, err = _quantize(run, path, "--icechunk-path", "/clim/temp", "--out", "clim/temp_q")
    assert code == 0, err
    now = read_session(repo_).store
    back = zarr.open_array(now, path="clim/temp_q", mode="r")
    assert float(np.abs(back[:] - TEMP).max()) <= 0.01
    assert sorted(zarr.open_group(now, mode="r").keys()) == ["big", "clim"]  # nothing else new


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--icechunk-path", "clim/nothere"), "--icechunk-path clim/nothere: no Zarr array"),
        # quantize always writes: no snapshot to read from, so no such option
        (("--icechunk-path", "clim", "--icechunk-snapshot", "x"),
         "No such option: --icechunk-snapshot"),
    ],
)
def test_icechunk_path_refusals_are_one_line_and_commit_nothing(
    run: Run, repo: tuple[Any, Path], args: tuple[str, ...], said: str
) -> None:
    repo_, path = repo
    before = str(repo_.lookup_branch("main"))
    code, _, err = _quantize(run, path, *args, "--out", "q")
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert said in err
    assert str(repo_.lookup_branch("main")) == before


def test_icechunk_path_needs_a_repository(run: Run, tmp_path: Path) -> None:
    zarr.create_array(tmp_path / "a.zarr", shape=(4,), dtype="f4")[:] = 1
    code, _, err = run("quantize", tmp_path / "a.zarr", "--max-abs-error", "0.01",
                       "--icechunk-path", "a", "--out", tmp_path / "q.zarr")
    assert code == 2
    assert "add --icechunk-branch" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "q.zarr").exists()


def test_commit_message_is_the_command_line(run: Run, repo: tuple[Any, Path]) -> None:
    repo_, path = repo
    args = ["--icechunk-path", "clim", "--array", "temp", "--array", "pr", "--out", "my q"]
    code, _, err = _quantize(run, path, *args)
    assert code == 0, err
    message = next(iter(repo_.ancestry(branch="main"))).message
    # what a shell would take back: the same words, the list as repeated options
    assert message == (
        "zarrext quantize --icechunk-path clim --max-abs-error 0.01 --out 'my q' "
        "--array temp --array pr"
    )
    assert shlex.split(message)[6:] == ["--out", "my q", "--array", "temp", "--array", "pr"]
    assert "[" not in message


def test_job_message_writes_lists_as_repeated_options() -> None:
    message = job_message("quantize", {"array": ["clim/temp", "a b"], "overwrite": True,
                                       "allow_larger": False, "out": None})
    assert message == "zarrext quantize --array clim/temp --array 'a b' --overwrite"
    assert shlex.split(message)[2:] == ["--array", "clim/temp", "--array", "a b", "--overwrite"]


def test_a_path_inside_a_repository_is_named_in_the_refusal(
    run: Run, repo: tuple[Any, Path]
) -> None:
    _, path = repo
    code, _, err = _quantize(run, path / "clim", "--out", "q")
    assert code != 0
    assert len(err.strip().splitlines()) == 1, err
    assert f"inside the repository {path}" in err
    assert "--icechunk-path clim" in err
