"""Progress on every long command: info, inspect and check report it (issue 27.11)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import zarrext
from tests.conftest import Run
from zarrext.jobs.inspection import inventory
from zarrext.jobs.node_info import node_info
from zarrext.jobs.shards.check import check
from zarrext.stores import open_store

CHUNKS = 16  # a 16x16 array in 4x4 chunks


def _group(location: str, storage_options: dict[str, Any] | None = None) -> zarr.Group:
    store = open_store(location, mode="w", storage_options=storage_options)
    group = zarr.open_group(store, mode="w")
    a = zarrext.create_array(group.store, name="a", shape=(16, 16), chunks=(4, 4), dtype="i4")
    a[:] = np.arange(256, dtype="i4").reshape(16, 16)
    b = zarrext.create_array(group.store, name="b", shape=(8,), chunks=(4,), dtype="f4")
    b[:] = 1.5
    return group


@pytest.fixture(params=["local", "s3"])
def group(request: pytest.FixtureRequest, tmp_path: Path) -> zarr.Group:
    if request.param == "local":
        return _group(str(tmp_path / "g.zarr"))
    s3 = request.getfixturevalue("s3")
    return _group(f"{s3['url']}/g.zarr", s3["options"])


def _assert_counts(calls: list[tuple[int, int]], total: int) -> None:
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    done = [d for d, _ in calls]
    assert done == sorted(done)
    assert {t for _, t in calls} == {total}


def test_inventory_and_check_report_every_object(group: zarr.Group) -> None:
    array = group["a"]
    calls: list[tuple[int, int]] = []
    inventory(array, progress=lambda d, t: calls.append((d, t)))  # type: ignore[arg-type]
    _assert_counts(calls, CHUNKS)
    calls.clear()
    check(array, deep=True, progress=lambda d, t: calls.append((d, t)))
    _assert_counts(calls, CHUNKS)
    assert len(calls) >= 2


def test_node_info_reports_each_array(group: zarr.Group) -> None:
    calls: list[tuple[str, int, int]] = []
    node_info(group, progress=lambda p, d, t: calls.append((p, d, t)))
    assert {p for p, _, _ in calls} == {"a", "b"}
    _assert_counts([(d, t) for p, d, t in calls if p == "a"], CHUNKS)
    _assert_counts([(d, t) for p, d, t in calls if p == "b"], 2)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr taken for an interactive terminal (rich's own switches)."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("COLUMNS", "120")


# Each bar's last frame is drawn for sure (earlier ones at rich's refresh rate): info
# has one bar, relabelled per array; inspect and check one bar per array.
@pytest.mark.parametrize(
    ("command", "frames"),
    [
        (["info"], ["info b", "2/2"]),
        (["inspect"], ["inspect a", f"{CHUNKS}/{CHUNKS}", "inspect b", "2/2"]),
        (["check", "--deep"], ["check a", f"{CHUNKS}/{CHUNKS}", "check b", "2/2"]),
    ],
)
def test_long_commands_show_progress_on_a_terminal(
    run: Run, terminal: None, tmp_path: Path, command: list[str], frames: list[str]
) -> None:
    _group(str(tmp_path / "g.zarr"))
    code, out, err = run(command[0], tmp_path / "g.zarr", *command[1:])
    assert code == 0, err
    for text in frames:
        assert text in err  # on stderr
        assert text not in out


@pytest.mark.parametrize("command", [["info"], ["inspect"], ["check", "--deep"]])
def test_json_output_has_no_progress(
    run: Run, terminal: None, tmp_path: Path, command: list[str]
) -> None:
    _group(str(tmp_path / "g.zarr"))
    code, out, err = run(command[0], tmp_path / "g.zarr", *command[1:], "--json")
    assert code == 0, err
    json.loads(out)
    assert f"{CHUNKS}/{CHUNKS}" not in err
    assert err == ""

