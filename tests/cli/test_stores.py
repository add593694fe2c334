"""``zarrext inspect`` and ``zarrext recompress`` on whole stores."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import zarr
from typer.testing import CliRunner
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from zarrext.cli import app

runner = CliRunner(env={"COLUMNS": "200"})


def make_group(path: Path) -> None:
    group = zarr.open_group(str(path), mode="w")
    rng = np.random.default_rng(0)
    noisy = zarrext.with_runtime(
        group.create_array(
            "noisy", shape=(32, 32), chunks=(16, 16), dtype="uint32", serializer=BytesCodec(),
            compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        )
    )
    noisy[:] = rng.integers(0, 2**32, (32, 32), dtype=np.uint32)
    smooth = zarrext.with_runtime(
        group.create_array(
            "sub/smooth", shape=(32, 32), chunks=(16, 16), dtype="uint32",
            serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        )
    )
    smooth[:] = np.arange(32 * 32, dtype=np.uint32).reshape(32, 32) // 64
    group.create_array("plain", shape=(4,), chunks=(2,), dtype="i4")[:] = 1


def test_recompress_then_inspect_group(tmp_path: Path) -> None:
    make_group(tmp_path / "g.zarr")
    result = runner.invoke(app, ["recompress", str(tmp_path / "g.zarr"),
                                 "--decision", "compress_if_smaller"])
    assert result.exit_code == 0, result.output
    assert "skipping plain" in result.output
    noisy = zarrext.jobs.inspection.inventory(zarr.open_array(str(tmp_path / "g.zarr" / "noisy")))
    smooth = zarrext.jobs.inspection.inventory(
        zarr.open_array(str(tmp_path / "g.zarr" / "sub" / "smooth"))
    )
    assert noisy.mask_counts == {0: 4}
    assert smooth.mask_counts == {1: 4}

    plot = tmp_path / "grid.png"
    result = runner.invoke(app, ["inspect", str(tmp_path / "g.zarr"), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert "0b0: 4" in result.output
    assert "0b1: 4" in result.output
    assert "(no conditional codec)" in result.output
    image = matplotlib.image.imread(plot)
    assert image.shape[0] > 300  # three rows of panels
    assert image.shape[1] > 300


def test_recompress_with_nothing_to_do_fails(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "p.zarr"), shape=(4,), chunks=(2,), dtype="i4")[:] = 1
    result = runner.invoke(app, ["recompress", str(tmp_path / "p.zarr")])
    assert result.exit_code == 1
    assert "no array with a conditional codec" in result.output
