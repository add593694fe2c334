"""The codecs ``zarrext.convert`` writes when none are given: ``conditional([shuffle,
zstd])``, zstd at level 1, and the values read back unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from numcodecs import Blosc

import zarrext


def test_the_default_target_is_shuffle_then_zstd_level_1(tmp_path: Path) -> None:
    data = np.random.default_rng(0).normal(100, 3, (64, 48)).astype("f4")
    source = zarr.create_array(
        tmp_path / "v2.zarr", shape=data.shape, chunks=(16, 16), dtype="f4", zarr_format=2,
        compressors=Blosc(cname="lz4", shuffle=Blosc.SHUFFLE))
    source[:] = data
    zarrext.convert(str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr"))
    copy = zarr.open_array(tmp_path / "v3.zarr", mode="r")
    conditional = copy.metadata.to_dict()["codecs"][-1]
    assert conditional["name"] == "conditional"
    assert conditional["configuration"]["codecs"] == [
        {"name": "shuffle", "configuration": {"element_size": 4}},
        {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
    ]
    np.testing.assert_array_equal(copy[:], data)
