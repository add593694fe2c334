"""Every expected CLI failure is one line on stderr, no traceback, the right exit code."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.codecs.numcodecs import BZ2

import zarrext
from tests.conftest import Run, tree_digest
from zarrext.codecs.decisions import BUILTIN_DECISIONS


def one_line_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("zarrext: error: "), err
    return lines[0]


def conditional_array(path: Path) -> None:
    array = zarr.create_array(
        str(path), shape=(8, 8), chunks=(4, 4), dtype="uint16", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
    )
    zarrext.with_runtime(array)[:] = np.arange(64, dtype=np.uint16).reshape(8, 8)


def sharded_array(path: Path, **kwargs: object) -> None:
    zarr.create_array(
        str(path), shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="uint16", **kwargs  # type: ignore[arg-type]
    )[:] = 1


def test_help_lists_every_command(run: Run) -> None:
    code, out, _ = run("--help")
    assert code == 0
    for command in ("demo", "inspect", "recompress", "compact", "check", "n5", "quantize"):
        assert command in out


@pytest.mark.parametrize("command", ["inspect", "recompress", "check", "compact"])
def test_missing_path(run: Run, tmp_path: Path, command: str) -> None:
    code, _, err = run(command, tmp_path / "nonexistent")
    assert code == 1
    assert "no such file or directory" in one_line_error(err)


@pytest.mark.parametrize("command", ["inspect", "recompress", "check", "compact"])
def test_not_a_zarr_store(run: Run, tmp_path: Path, command: str) -> None:
    (tmp_path / "notzarr").mkdir()
    code, _, err = run(command, tmp_path / "notzarr")
    assert code == 1
    assert "not a Zarr array or group" in one_line_error(err)


# quantize and convert copy format 2 into format 3 (tests/cli/test_quantize.py)
@pytest.mark.parametrize("command", ["info", "inspect", "recompress", "check", "compact"])
def test_zarr_v2_is_not_supported_by_name(run: Run, tmp_path: Path, command: str) -> None:
    zarr.create_array(str(tmp_path / "v2.zarr"), shape=(4,), chunks=(2,), dtype="f4",
                      zarr_format=2)[:] = 1
    before = tree_digest(tmp_path / "v2.zarr")
    code, _, err = run(command, tmp_path / "v2.zarr")
    assert code == 1
    line = one_line_error(err)
    assert "a Zarr format 2 array; this command reads Zarr format 3" in line
    assert f"zarrext convert {tmp_path / 'v2.zarr'} --out" in line
    assert tree_digest(tmp_path / "v2.zarr") == before


def test_malformed_zarr_json(run: Run, tmp_path: Path) -> None:
    (tmp_path / "bad.zarr").mkdir()
    (tmp_path / "bad.zarr" / "zarr.json").write_text("{oops")
    code, _, err = run("inspect", tmp_path / "bad.zarr")
    assert code == 1
    assert "bad.zarr/zarr.json is not valid JSON" in one_line_error(err)


def test_unknown_decision_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    conditional_array(tmp_path / "c.zarr")
    before = tree_digest(tmp_path / "c.zarr")
    code, _, err = run("recompress", tmp_path / "c.zarr", "--decision", "bogus")
    assert code == 2
    line = one_line_error(err)
    assert "'--decision': 'bogus' is unknown" in line
    assert all(name in line for name in BUILTIN_DECISIONS)
    assert tree_digest(tmp_path / "c.zarr") == before


def test_decision_help_lists_the_choices(run: Run) -> None:
    code, out, _ = run("recompress", "--help")
    assert code == 0
    help_text = " ".join(out.replace("│", " ").split())
    assert len(BUILTIN_DECISIONS) > 1
    for name in BUILTIN_DECISIONS:
        assert name in help_text


@pytest.mark.parametrize("command", [
    "info", "inspect", "recompress", "check", "compact", "expand", "quantize",
])
@pytest.mark.parametrize("options", ["{oops", "[1]"], ids=["not-json", "not-an-object"])
def test_bad_storage_options_are_a_usage_error(
    run: Run, tmp_path: Path, command: str, options: str
) -> None:
    conditional_array(tmp_path / "c.zarr")
    before = tree_digest(tmp_path)
    extra = ["--max-abs-error", "0.1", "--out", str(tmp_path / "q.zarr")]
    code, _, err = run(
        command, tmp_path / "c.zarr", "--storage-options", options,
        *(extra if command == "quantize" else []),
    )
    assert code == 2
    assert "'--storage-options'" in one_line_error(err)
    assert tree_digest(tmp_path) == before


def test_malformed_scheduler_address_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    conditional_array(tmp_path / "c.zarr")
    code, _, err = run("recompress", tmp_path / "c.zarr", "--scheduler", "http://nowhere")
    assert code == 2
    assert "expected tcp://HOST:PORT" in one_line_error(err)


@pytest.mark.parametrize(("command", "workers"), [
    ("recompress", "-1"), ("recompress", "0"), ("compact", "0"), ("compact", "-1"),
])
def test_workers_must_be_positive(run: Run, tmp_path: Path, command: str, workers: str) -> None:
    conditional_array(tmp_path / "c.zarr")
    code, _, err = run(command, tmp_path / "c.zarr", "--workers", workers)
    assert code == 2
    assert "--workers" in one_line_error(err)


def test_unreachable_scheduler_fails_fast(run: Run, tmp_path: Path) -> None:
    conditional_array(tmp_path / "c.zarr")
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run("recompress", tmp_path / "c.zarr", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert code == 3
    assert "cannot reach the dask scheduler" in one_line_error(err)


def _make_read_only(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.mark.parametrize("args", [
    ("recompress",), ("compact",), ("compact", "--expand"), ("check", "--repair"),
])
def test_read_only_store(run: Run, tmp_path: Path, args: tuple[str, ...]) -> None:
    store = tmp_path / "ro.zarr"
    if args[0] == "recompress":
        conditional_array(store)
    else:
        sharded_array(store, compressors=None)
    before = tree_digest(store)
    _make_read_only(store)
    try:
        code, _, err = run(args[0], store, *args[1:])
        assert code == 1
        assert "is read-only" in one_line_error(err)
        assert tree_digest(store) == before
    finally:
        for p in [store, *store.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_inspect_plot_into_read_only_store(run: Run, tmp_path: Path) -> None:
    store = tmp_path / "ro.zarr"
    conditional_array(store)
    _make_read_only(store)
    try:
        code, _, err = run("inspect", store, "--plot", store / "grid.png")
        assert code == 1
        assert "read-only" in one_line_error(err)
        assert not (store / "grid.png").exists()
    finally:
        store.chmod(store.stat().st_mode | stat.S_IWUSR)


def test_demo_into_an_existing_directory(run: Run, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("keep")
    code, _, err = run("demo", tmp_path / "d")
    assert code == 1
    assert "already exists" in one_line_error(err)
    assert tree_digest(tmp_path / "d") == {"mine.txt": b"keep"}


def test_group_job_goes_on_past_an_array_it_must_skip(run: Run, tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    # zarrext knows no bound on bz2's encoded size: this one cannot take fixed slots
    group.create_array("a_unbounded", shape=(8, 8), chunks=(2, 2), shards=(4, 4),
                       dtype="uint16", compressors=[BZ2(level=1)])[:] = 1
    group.create_array("b_plain", shape=(8, 8), chunks=(2, 2), shards=(4, 4),
                       dtype="uint16", compressors=None)[:] = 2
    before = tree_digest(tmp_path / "g.zarr" / "a_unbounded")
    code, out, err = run("compact", tmp_path / "g.zarr", "--expand")
    assert code == 1
    lines = err.splitlines()
    assert "Traceback" not in err
    assert len(lines) == 2, err
    assert lines[0].startswith("zarrext: skipped a_unbounded: ")
    assert lines[1].startswith("zarrext: error: 1 of 2 arrays")
    assert "b_plain" in out  # the array after the skipped one was expanded
    assert tree_digest(tmp_path / "g.zarr" / "a_unbounded") == before
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "g.zarr" / "b_plain"))[:], 2)
