"""``zarrext convert``: the command line of zarrext.convert (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import zarr

from tests.conftest import Run


def _source(path: Path) -> np.ndarray:
    data = (np.arange(48 * 40, dtype="f4").reshape(48, 40) / 7).astype("f4")
    zarr.create_array(path, shape=data.shape, chunks=(16, 16), dtype="f4",
                      zarr_format=2)[:] = data
    return data


def test_convert_json_report_and_values(run: Run, tmp_path: Path) -> None:
    data = _source(tmp_path / "src.zarr")
    code, out, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "out.zarr",
                         "--chunks", "8,8", "--shards", "16,40", "--layout", "fixed-slot",
                         "--json")
    assert (code, err) == (0, "")
    [report] = json.loads(out)["arrays"]
    assert report["source_bytes"] > 0
    assert report["output_bytes"] > 0
    assert report["total_write_units"] == 3
    assert "fixed-slot" in report["becomes"]
    copy = zarr.open_array(tmp_path / "out.zarr")
    np.testing.assert_array_equal(copy[:], data)
    assert (copy.chunks, copy.shards) == ((8, 8), (16, 40))


def test_convert_codecs_and_quantized(run: Run, tmp_path: Path) -> None:
    data = _source(tmp_path / "src.zarr")
    chain = '[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]'
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "a.zarr",
                       "--codecs", chain, "-q")
    assert (code, err) == (0, "")
    assert [c["name"] for c in zarr.open_array(tmp_path / "a.zarr").metadata.to_dict()[
        "codecs"]] == ["bytes", "zstd"]
    code, out, _ = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "q.zarr",
                       "--max-abs-error", "0.05", "--json")
    assert code == 0
    assert json.loads(out)["arrays"][0]["worst_error"] <= 0.05
    assert np.max(np.abs(zarr.open_array(tmp_path / "q.zarr")[:] - data)) <= 0.05


def test_codecs_named_alone_take_their_defaults_at_any_depth(run: Run, tmp_path: Path) -> None:
    data = _source(tmp_path / "src.zarr")
    chain = ('[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": '
             '"conditional", "configuration": {"codecs": [{"name": "zstd"}]}}]')
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "c.zarr",
                       "--codecs", chain, "-q")
    assert (code, err) == (0, "")
    copy = zarr.open_array(tmp_path / "c.zarr")
    conditional = copy.metadata.to_dict()["codecs"][-1]
    assert conditional["name"] == "conditional"
    assert [c["name"] for c in conditional["configuration"]["codecs"]] == ["zstd"]
    np.testing.assert_array_equal(copy[:], data)


def test_convert_errors_are_one_line_and_write_nothing(run: Run, tmp_path: Path) -> None:
    _source(tmp_path / "src.zarr")
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "o.zarr",
                       "--chunks", "5,5", "--shards", "16,16")
    assert code == 1
    assert err.count("\n") == 1
    assert "cannot convert /" in err
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "o.zarr",
                       "--chunks", "a,b")
    assert code == 2
    assert "--chunks" in err
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "o.zarr",
                       "--codecs", "[{")
    assert code == 2
    assert "--codecs" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]
    (tmp_path / "o.zarr").mkdir()
    zarr.create_group(tmp_path / "o.zarr", overwrite=True)
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "o.zarr")
    assert code == 1
    assert "already exists" in err
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "o.zarr",
                       "--overwrite", "-q")
    assert code == 0
    assert isinstance(zarr.open(tmp_path / "o.zarr"), zarr.Array)


def test_convert_dry_run_writes_nothing(run: Run, tmp_path: Path) -> None:
    _source(tmp_path / "src.zarr")
    code, out, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "o.zarr",
                         "--dry-run")
    assert (code, err) == (0, "")
    assert "dry run" in out
    assert "conditional" in out
    assert "expected" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]
