"""Messages a new user meets first (issue 42, item 8): what to do with a format 2
store or a TIFF, shard shapes that do not fit, --arrays, zarrext --help, and progress
bars that stay out of piped stdout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.conftest import Run


def _four_d(path: Path) -> None:
    zarr.create_array(path, shape=(2, 2, 200, 200), chunks=(1, 1, 50, 50), dtype="u1")[:] = 1


def _consolidated_format_2(path: Path) -> None:
    """A format 2 group as xarray writes it by default: consolidated."""
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset({"t": (("y", "x"), np.arange(12.0).reshape(3, 4))})
    ds.to_zarr(path, zarr_format=2, consolidated=True)


@pytest.mark.parametrize("command", ["info", "check", "inspect"])
@pytest.mark.parametrize("consolidated", [False, True])
def test_a_format_2_store_points_to_zarrext_convert(
    run: Run, tmp_path: Path, command: str, consolidated: bool
) -> None:
    path = tmp_path / "v2.zarr"
    if consolidated:
        _consolidated_format_2(path)
    else:
        zarr.create_array(path, shape=(4,), chunks=(2,), dtype="f4", zarr_format=2)[:] = 1
    code, _, err = run(command, path)
    assert code == 1
    assert err.count("\n") == 1, err
    assert "zarr migrate" not in err
    assert f"zarrext convert {path} --out" in err


def test_shards_of_the_wrong_rank_name_the_option_and_both_ranks(
    run: Run, tmp_path: Path
) -> None:
    _four_d(tmp_path / "a.zarr")
    code, _, err = run("convert", tmp_path / "a.zarr", "--out", tmp_path / "o.zarr",
                       "--shards", "100,100")
    assert code == 1
    assert err.count("\n") == 1, err
    assert "chunks has 2 dimensions" not in err
    assert "shards 100x100 have 2 dimensions" in err
    assert "4 (shape 2x2x200x200)" in err
    code, _, err = run("convert", tmp_path / "a.zarr", "--out", tmp_path / "o.zarr",
                       "--chunks", "50,50")
    assert code == 1
    assert "chunks 50x50 have 2 dimensions" in err


def test_shards_not_a_multiple_of_the_chunks_say_which_is_which(
    run: Run, tmp_path: Path
) -> None:
    _four_d(tmp_path / "a.zarr")
    code, _, err = run("convert", tmp_path / "a.zarr", "--out", tmp_path / "o.zarr",
                       "--shards", "1,1,75,75")
    assert code == 1
    assert err.count("\n") == 1, err
    assert "shards 1x1x75x75 are not a multiple of the chunks 1x1x50x50" in err
    assert "dimension 2: 75 is not a multiple of 50" in err
    assert not (tmp_path / "o.zarr").exists()


def test_arrays_errors_name_the_option_not_the_keyword(run: Run, tmp_path: Path) -> None:
    zarr.create_array(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="f4")[:] = 1
    code, _, err = run("convert", tmp_path / "a.zarr", "--out", tmp_path / "o.zarr",
                       "--arrays", "x")
    assert code == 1
    assert "arrays=" not in err
    assert f"--arrays: {tmp_path / 'a.zarr'} is an array, not a group" in err
    group = zarr.create_group(tmp_path / "g.zarr")
    group.create_array("x", shape=(4,), chunks=(2,), dtype="f4")[:] = 1
    code, _, err = run("convert", tmp_path / "g.zarr", "--out", tmp_path / "o.zarr",
                       "--arrays", "nope")
    assert code == 1
    assert "arrays=" not in err
    assert "--arrays: no array 'nope' in group" in err


def test_zarrext_help_says_convert_reads_format_2(run: Run) -> None:
    code, out, _ = run("--help")
    assert code == 0
    text = " ".join(out.split())  # as rich wraps it
    assert "whole Zarr format 3 stores" not in text
    assert "convert and quantize copy Zarr format 3 or 2 into format 3" in text


@pytest.mark.parametrize("command", ["convert", "quantize", "info"])
def test_a_tiff_file_says_what_to_do_with_it(run: Run, tmp_path: Path, command: str) -> None:
    tifffile = pytest.importorskip("tifffile")
    tifffile.imwrite(tmp_path / "img.tif", np.zeros((8, 8), "u2"))
    extra = {"convert": ["--out", tmp_path / "o.zarr"],
             "quantize": ["--out", tmp_path / "o.zarr", "--max-abs-error", "1"]}
    code, _, err = run(command, tmp_path / "img.tif", *extra.get(command, []))
    assert code == 1
    assert err.count("\n") == 1, err
    assert "StorePath" not in err
    assert f"{tmp_path / 'img.tif'}: a TIFF file, not a Zarr store" in err
    assert "tifffile" in err
    assert "zarrext.formats.tiff" in err


def _f4(path: Path) -> None:
    data = np.linspace(0, 1, 64 * 64, dtype="f4").reshape(64, 64)
    zarr.create_array(path, shape=data.shape, chunks=(16, 16), dtype="f4")[:] = data


@pytest.mark.parametrize(
    "args",
    [("convert",), ("convert", "--max-abs-error", "0.01"), ("quantize", "--max-abs-error", "0.01")],
)
def test_progress_bars_stay_out_of_stdout(run: Run, tmp_path: Path, args: tuple[str, ...]) -> None:
    _f4(tmp_path / "a.zarr")
    code, out, _ = run(args[0], tmp_path / "a.zarr", "--out", tmp_path / "o.zarr", *args[1:])
    assert code == 0
    assert "a.zarr->" in "".join(out.split())  # the report (its title may wrap)
    for word in ("converting", "scanning", "writing quantized", "0:00:0"):  # 0:00:00 elapsed
        assert word not in out


def test_json_output_is_parseable_from_a_pipe(run: Run, tmp_path: Path) -> None:
    _f4(tmp_path / "a.zarr")
    code, out, _ = run("convert", tmp_path / "a.zarr", "--out", tmp_path / "o.zarr", "--json")
    assert code == 0
    assert json.loads(out)["arrays"][0]["total_write_units"] == 16


@pytest.mark.parametrize(
    "args",
    [("convert",), ("quantize", "--max-abs-error", "0.01"), ("compact",)],
)
def test_on_a_terminal_the_bars_are_drawn_on_stderr(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: draw as on a terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    if args[0] == "compact":
        data = np.arange(64 * 64, dtype="f4").reshape(64, 64)
        zarr.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(16, 16),
                          shards=(32, 32), dtype="f4")[:] = data
        code, out, err = run("compact", tmp_path / "a.zarr")
        verb = "compacting"
    else:
        _f4(tmp_path / "a.zarr")
        code, out, err = run(args[0], tmp_path / "a.zarr", "--out", tmp_path / "o.zarr",
                             *args[1:])
        verb = "converting" if args[0] == "convert" else "writing quantized"
    assert code == 0
    assert verb not in out
    assert verb in err
