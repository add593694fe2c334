"""``zarrext quantize PATH --max-abs-error E --out PATH2``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.conftest import Run, tree_digest
from zarrext.cli import app, main
from zarrext.jobs.inspection import inventory

runner = CliRunner(env={"COLUMNS": "200"})


def chunk_bytes(array: zarr.Array) -> int:
    """Bytes stored, as info, inspect and quantize count them: chunks, no zarr.json."""
    return inventory(array, read_masks=False).stored_bytes


def _source(path: Path, dtype: str = "float64") -> np.ndarray:
    y, x = np.mgrid[0:96, 0:128]
    data = (1000 + 50 * np.sin(x / 13) + 20 * np.cos(y / 7)).astype(dtype)
    data[10:12, 20:30] = np.nan
    arr = zarr.create_array(str(path), shape=data.shape, chunks=(32, 64), shards=(64, 128),
                            dtype=dtype, fill_value=np.nan)
    arr[:] = data
    return data


def test_cli_quantize_copies_within_bound_and_prints_ratio_and_error(tmp_path: Path) -> None:
    data = _source(tmp_path / "src.zarr")
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "0.02", "--out", str(tmp_path / "q.zarr")])
    assert result.exit_code == 0, result.output
    out = zarr.open_array(str(tmp_path / "q.zarr"))
    back = np.asarray(out[:])
    finite = np.isfinite(data)
    worst = float(np.max(np.abs(back[finite] - data[finite])))
    assert worst <= 0.02
    assert np.isnan(back[~finite]).all()
    # the source's 32x64 chunks in 64x128 shards, the filters inside the sharding codec
    assert (out.chunks, out.shards) == ((32, 64), (64, 128))
    assert [c.to_dict()["name"] for c in out.metadata.codecs] == ["sharding_indexed"]
    m = re.search(r"size ratio ([0-9.]+); worst error seen ([0-9.e-]+)", result.output)
    assert m is not None, result.output
    src_bytes = chunk_bytes(zarr.open_array(str(tmp_path / "src.zarr")))
    assert float(m.group(1)) == round(src_bytes / chunk_bytes(out), 3)
    assert float(m.group(2)) == worst
    assert float(m.group(1)) > 2  # float64 -> uint16 at least halves it
    names = [f.to_dict()["name"] for f in out.filters]
    assert names == ["scale_offset", "cast_value"]


def test_cli_quantize_impossible_bound_fails_clearly(tmp_path: Path) -> None:
    # 2e300 / 1e-3 distinct codes: far beyond 2**64
    src = zarr.create_array(str(tmp_path / "src.zarr"), shape=(3,), dtype="float64")
    src[:] = np.array([-1e300, 0.0, 1e300])
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "1e-3", "--out", str(tmp_path / "q.zarr")])
    assert result.exit_code == 1
    assert "no integer type up to 64 bits" in result.output
    assert not (tmp_path / "q.zarr").exists()


def test_cli_quantize_rejects_integer_source(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "i.zarr"), shape=(4,), dtype="int32")[:] = 1
    result = runner.invoke(app, ["quantize", str(tmp_path / "i.zarr"), "--max-abs-error",
                                 "1", "--out", str(tmp_path / "q.zarr")])
    assert result.exit_code == 1
    assert "floating-point" in result.output


def test_cli_quantize_console_script_in_fresh_process(tmp_path: Path) -> None:
    data = _source(tmp_path / "src.zarr", dtype="float32")
    proc = subprocess.run(
        [sys.executable, "-c", "from zarrext.cli import main; main()", "quantize",
         str(tmp_path / "src.zarr"), "--max-abs-error", "0.5", "--out", str(tmp_path / "q.zarr")],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "size ratio" in proc.stdout
    back = np.asarray(zarr.open_array(str(tmp_path / "q.zarr"))[:])
    finite = np.isfinite(data)
    assert float(np.max(np.abs(back[finite] - data[finite]))) <= 0.5


@pytest.mark.parametrize(
    ("out", "message"),
    [("src.zarr", "is the input"), ("src.zarr/q", "inside the input"), (".", "contains the input")],
    ids=["same", "inside", "containing"],
)
def test_cli_quantize_refuses_output_over_its_input(
    tmp_path: Path, out: str, message: str
) -> None:
    data = _source(tmp_path / "src.zarr")
    before = tree_digest(tmp_path)
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "0.1", "--out", str(tmp_path / out), "--overwrite"])
    assert result.exit_code == 1
    assert message in result.output
    assert tree_digest(tmp_path) == before
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "src.zarr"))[:], data)


def test_cli_quantize_never_replaces_what_is_not_zarr(tmp_path: Path) -> None:
    _source(tmp_path / "src.zarr")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("keep me")
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "0.1", "--out", str(tmp_path / "notes"), "--overwrite"])
    assert result.exit_code == 1
    assert "not a Zarr array or group" in result.output
    assert (tmp_path / "notes" / "a.txt").read_text() == "keep me"


def test_interrupted_quantize_leaves_nothing_that_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the middle of the copy: no array at --out, no temporary left, a message."""
    _source(tmp_path / "src.zarr")
    calls = []

    def interrupt(phase: str, done: int, total: int) -> None:
        calls.append((phase, done))
        if phase == "copy" and done == 1:
            raise KeyboardInterrupt

    from zarrext import quantize

    real = quantize.copy_quantized
    monkeypatch.setattr(
        quantize, "copy_quantized", lambda *a, **k: real(*a, **{**k, "progress": interrupt})
    )
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "0.1", "--out", str(tmp_path / "b.zarr")])
    assert result.exit_code == 130
    assert "stopped after 1 of 2 blocks; nothing was written" in result.output
    assert ("copy", 1) in calls
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_failed_replacement_keeps_the_old_output(tmp_path: Path) -> None:
    """--overwrite with a bound no plan meets: the old --out array stays as it was."""
    _source(tmp_path / "src.zarr")
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "0.1", "--out", str(tmp_path / "q.zarr")])
    assert result.exit_code == 0, result.output
    before = tree_digest(tmp_path / "q.zarr")
    # ~2e3 / 1e-20 codes: no integer type holds them
    result = runner.invoke(app, ["quantize", str(tmp_path / "src.zarr"), "--max-abs-error",
                                 "1e-20", "--out", str(tmp_path / "q.zarr"), "--overwrite"])
    assert result.exit_code == 1
    assert "no integer type up to 64 bits" in result.output
    assert tree_digest(tmp_path / "q.zarr") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.zarr", "src.zarr"]


def test_cli_quantize_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _source(tmp_path / "src.zarr")
    with pytest.raises(SystemExit) as exited:
        main(["quantize", str(tmp_path / "src.zarr"), "--max-abs-error", "0.02",
              "--out", str(tmp_path / "q.zarr"), "--json"])
    assert exited.value.code == 0
    report = json.loads(capsys.readouterr().out)
    back = np.asarray(zarr.open_array(str(tmp_path / "q.zarr"))[:])
    finite = np.isfinite(data)
    assert report["worst_error"] == float(np.max(np.abs(back[finite] - data[finite])))
    assert report["worst_error"] <= report["max_abs_error"] == 0.02
    assert report["stored_dtype"] in ("uint16", "int16")  # ~7000 steps of 0.04
    assert report["output_bytes"] == chunk_bytes(zarr.open_array(str(tmp_path / "q.zarr")))


def _dataset_group(path: Path, consolidated: bool = True) -> dict[str, np.ndarray]:
    """A group as xarray writes it: a float variable, an integer one, float coordinates."""
    import xarray as xr

    y, x = np.mgrid[0:64, 0:96]
    values = {
        "temp": (280 + 10 * np.sin(x / 9) * np.cos(y / 7)).astype("f4"),
        "pressure": (1000 + 5 * np.cos(x / 11)).astype("f8"),
        "count": (x * y % 7).astype("i2"),
    }
    ds = xr.Dataset(
        {name: (("y", "x"), v) for name, v in values.items()},
        coords={"x": np.arange(96.0), "y": np.arange(64.0)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata is not in the v3 spec
        ds.to_zarr(str(path), zarr_format=3, consolidated=consolidated)
    return values


def test_quantize_group_quantizes_every_float_variable_and_copies_the_rest(
    run: Run, tmp_path: Path
) -> None:
    values = _dataset_group(tmp_path / "g.zarr", consolidated=False)
    code, out, err = run("quantize", tmp_path / "g.zarr", "--max-abs-error", "0.01",
                         "--out", tmp_path / "q.zarr", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [a["path"] for a in report["arrays"]] == ["pressure", "temp"]
    q = zarr.open_group(str(tmp_path / "q.zarr"), mode="r")
    for name in ("pressure", "temp"):
        back = np.asarray(q[name][:])
        assert float(np.abs(back - values[name]).max()) <= 0.01
        assert [f.to_dict()["name"] for f in q[name].filters] == ["scale_offset", "cast_value"]
    # the integer variable and the dimension coordinates are copied byte for byte
    src, dst = tree_digest(tmp_path / "g.zarr"), tree_digest(tmp_path / "q.zarr")
    kept = {k: v for k, v in src.items() if not k.startswith(("temp", "pressure"))}
    assert kept
    assert all(dst[k] == v for k, v in kept.items())
    assert not q["x"].filters


def test_quantize_group_array_option_picks_arrays(run: Run, tmp_path: Path) -> None:
    values = _dataset_group(tmp_path / "g.zarr", consolidated=False)
    code, _, err = run("quantize", tmp_path / "g.zarr", "--max-abs-error", "0.5",
                       "--out", tmp_path / "q.zarr", "--array", "temp", "-q")
    assert code == 0, err
    src, dst = tree_digest(tmp_path / "g.zarr"), tree_digest(tmp_path / "q.zarr")
    assert {k for k in src if src[k] != dst.get(k)} == {
        k for k in src if k.startswith("temp/")
    }
    back = np.asarray(zarr.open_array(str(tmp_path / "q.zarr" / "temp"))[:])
    assert float(np.abs(back - values["temp"]).max()) <= 0.5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--array", "nope"], "no array 'nope'"),
        (["--array", "count"], "floating-point"),
    ],
    ids=["unknown", "integer"],
)
def test_quantize_group_bad_array_is_refused_as_its_path_is(
    run: Run, tmp_path: Path, args: list[str], message: str
) -> None:
    # `quantize GROUP --array NAME` and `quantize GROUP/NAME` are one refusal: one
    # exit code (the job refuses what it found, ExitCode.FAILED), not a usage error.
    _dataset_group(tmp_path / "g.zarr", consolidated=False)
    code, out, err = run("quantize", tmp_path / "g.zarr", "--max-abs-error", "0.1",
                         "--out", tmp_path / "q.zarr", *args)
    as_path, _, _ = run("quantize", tmp_path / "g.zarr" / args[1], "--max-abs-error", "0.1",
                        "--out", tmp_path / "q.zarr")
    assert code == as_path == 1
    assert message in err
    assert err.count("\n") == 1
    assert out == ""
    assert not (tmp_path / "q.zarr").exists()


# The first pass, patched where jobs.convert.scanning.quantized looks it up.
SCAN = "zarrext.jobs.convert.scanning.scan"


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the source was scanned")


@pytest.mark.parametrize("bound", ["0", "-1", "nan", "inf"])
def test_bad_bound_is_a_usage_error_before_any_read(
    run: Run, tmp_path: Path, bound: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _source(tmp_path / "src.zarr")
    monkeypatch.setattr(SCAN, _never)
    code, out, err = run("quantize", tmp_path / "src.zarr", "--max-abs-error", bound,
                         "--out", tmp_path / "q.zarr")
    assert code == 2
    assert "'--max-abs-error'" in err
    assert "> 0" in err
    assert out == ""
    assert not (tmp_path / "q.zarr").exists()


@pytest.mark.parametrize("kind", ["array", "group"])
def test_existing_out_is_refused_before_any_read(
    run: Run, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "array":
        _source(tmp_path / "src.zarr")
    else:
        _dataset_group(tmp_path / "src.zarr", consolidated=False)
    zarr.create_array(str(tmp_path / "q.zarr"), shape=(2,), dtype="f4")[:] = 1
    before = tree_digest(tmp_path / "q.zarr")
    monkeypatch.setattr(SCAN, _never)
    code, out, err = run("quantize", tmp_path / "src.zarr", "--max-abs-error", "0.1",
                         "--out", tmp_path / "q.zarr")
    assert code == 1
    assert "already exists (pass --overwrite" in err
    assert out == ""  # no progress bar was drawn
    assert tree_digest(tmp_path / "q.zarr") == before


def test_a_larger_copy_is_refused_unless_allowed(run: Run, tmp_path: Path) -> None:
    # float32 values near 1000 within 1e-6: uint32 codes that compress worse than the floats
    data = _source(tmp_path / "src.zarr", dtype="float32")
    args = ["quantize", tmp_path / "src.zarr", "--max-abs-error", "1e-6",
            "--out", tmp_path / "q.zarr"]
    code, _, err = run(*args)
    assert code == 1
    assert "larger than its source" in err
    assert "--allow-larger" in err
    assert not (tmp_path / "q.zarr").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]

    code, out, err = run(*args, "--allow-larger", "--json")
    assert code == 0, err
    report = json.loads(out)
    out_array = zarr.open_array(str(tmp_path / "q.zarr"))
    assert report["output_bytes"] == chunk_bytes(out_array) > report["source_bytes"]
    back = np.asarray(out_array[:])
    finite = np.isfinite(data)
    assert float(np.abs(back[finite] - data[finite]).max()) <= 1e-6

    code, out, _ = run(*args, "--allow-larger", "--overwrite")
    assert code == 0
    ratio = report["output_bytes"] / report["source_bytes"]
    assert f"{ratio:.2f}x larger" in out
    assert "smaller" not in out


def test_quantize_into_a_consolidated_group_updates_its_metadata(
    run: Run, tmp_path: Path
) -> None:
    import xarray as xr

    values = _dataset_group(tmp_path / "g.zarr")
    code, _, err = run("quantize", tmp_path / "g.zarr" / "temp", "--max-abs-error", "0.01",
                       "--out", tmp_path / "g.zarr" / "temp_q", "-q")
    assert code == 0, err
    assert err == ""
    ds = xr.open_zarr(str(tmp_path / "g.zarr"), consolidated=True)
    assert "temp_q" in ds.data_vars
    assert float(np.abs(ds["temp_q"].values - values["temp"]).max()) <= 0.01


def test_quantized_copy_of_a_consolidated_group_has_fresh_metadata(
    run: Run, tmp_path: Path
) -> None:
    import xarray as xr

    values = _dataset_group(tmp_path / "g.zarr")
    code, _, err = run("quantize", tmp_path / "g.zarr", "--max-abs-error", "0.01",
                       "--out", tmp_path / "q.zarr", "-q")
    assert code == 0, err
    group = zarr.open_group(str(tmp_path / "q.zarr"), use_consolidated=True)
    assert group.metadata.consolidated_metadata is not None
    consolidated = group.metadata.consolidated_metadata.metadata["temp"]
    assert [f.to_dict()["name"] for f in consolidated.codecs[:2]] == [
        "scale_offset", "cast_value"
    ]
    ds = xr.open_zarr(str(tmp_path / "q.zarr"), consolidated=True)
    assert float(np.abs(ds["temp"].values - values["temp"]).max()) <= 0.01
    np.testing.assert_array_equal(ds["count"].values, values["count"])


def test_readme_quantize_block_runs(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    from tests.docs_text import page

    guide, job = page("docs/guide/quantize.md"), page("docs/jobs/quantize.md")
    code_block = re.search(r"```python\n(.*?)```", guide, flags=re.S)
    sh_block = re.search(r"```sh\n(.*?)```", job, flags=re.S)
    assert code_block is not None
    assert sh_block is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(code_block.group(1), "docs/guide/quantize.md", "exec"),
         {"__name__": "__readme__"})
    commands = [shlex.split(line, comments=True) for line in sh_block.group(1).splitlines()]
    assert len(commands) >= 2
    for command in commands:
        assert command[0] == "zarrext"
        code, out, err = run(*command[1:])
        assert code == 0, (command, err)
        if "--json" in command:
            report = json.loads(out)
            assert report["worst_error"] <= 0.01
            assert report["output_bytes"] < report["source_bytes"]


@pytest.mark.parametrize("node", ["array", "group"])
def test_quantize_copies_an_xarray_format_2_store_into_format_3(
    run: Run, tmp_path: Path, node: str
) -> None:
    """quantize is convert's quantizing form: a format 2 source (xarray's, consolidated)
    is read as convert reads it, the copy is format 3 with its dimension names, and
    the source is left as it was."""
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(5)
    ds = xr.Dataset(
        {"t": (("time", "y"), (280 + 10 * rng.random((6, 40))).astype("f4")),
         "n": (("y",), np.arange(40))},
        coords={"y": np.arange(40.0)},
    )
    ds.to_zarr(tmp_path / "ds.zarr", zarr_format=2, consolidated=True)
    before = tree_digest(tmp_path / "ds.zarr")
    source = tmp_path / "ds.zarr" / ("t" if node == "array" else "")
    code, out, err = run("quantize", source, "--max-abs-error", "0.01",
                         "--out", tmp_path / "q.zarr", "--json")
    assert (code, err) == (0, ""), err
    report = json.loads(out)
    worst = report["worst_error"] if node == "array" else report["arrays"][0]["worst_error"]
    assert worst <= 0.01
    assert tree_digest(tmp_path / "ds.zarr") == before
    copied = zarr.open_array(tmp_path / "q.zarr" / ("" if node == "array" else "t"), mode="r")
    assert copied.metadata.zarr_format == 3
    assert copied.metadata.dimension_names == ("time", "y")
    assert "_ARRAY_DIMENSIONS" not in copied.attrs
    assert float(np.abs(copied[:] - ds["t"].values).max()) <= 0.01
    if node == "group":  # the other arrays as they were, readable by xarray
        back = xr.open_zarr(tmp_path / "q.zarr").load()
        xr.testing.assert_equal(back["n"], ds["n"])
        assert [a["path"] for a in report["arrays"]] == ["t"]  # not y: a coordinate
