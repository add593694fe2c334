"""``zarrext convert`` of an N5 container read through ``zarrext n5`` (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.conftest import Run
from tests.formats.test_n5 import make_container, sample, write_n5

N5_FORM = ("n5_default", "pad", "transpose")


def _names(array: Any) -> list[str]:
    return [c["name"] for c in json.loads(json.dumps(array.metadata.to_dict()["codecs"]))]


@pytest.mark.parametrize(
    "options",
    [(), ("--chunks", "2,2", "--shards", "4,4"), ("--arrays", "raw/image")],
    ids=["default", "resharded", "one-array"],
)
def test_n5_container_converts_exactly(run: Run, tmp_path: Path,
                                       options: tuple[str, ...]) -> None:
    root = tmp_path / "c.n5"
    arrays = make_container(root)
    code, _, err = run("n5", root, "--quiet")
    assert code == 0, err
    if options[:1] == ("--chunks",):  # a 2-d grid: the 2-d arrays alone
        options = (*options, "--arrays", "raw/image", "--arrays", "labels/s0")
    code, _, err = run("convert", root, "--out", tmp_path / "out.zarr", "--quiet", *options)
    assert code == 0, err
    out = zarr.open_group(tmp_path / "out.zarr", mode="r")
    assert out.attrs["title"] == "demo"
    assert out["raw"].attrs["kind"] == "raw data"
    assert out["raw/image"].attrs["unit"] == "nm"
    converted = [options[i + 1] for i, o in enumerate(options) if o == "--arrays"] or list(arrays)
    for name, data in arrays.items():
        np.testing.assert_array_equal(out[name][:], data)
        names = _names(out[name])
        if name in converted:  # plain Zarr: N5's block format is not carried over
            assert not set(names) & set(N5_FORM), (name, names)
            assert names[-1] == "conditional" or "sharding_indexed" in names
        else:  # copied as it is: still N5's blocks, read through its zarr.json
            assert set(names) & set(N5_FORM)
    if "--shards" in options:
        assert out["raw/image"].shards == (4, 4)
        assert out["raw/image"].chunks == (2, 2)


def test_n5_dataset_converts_with_truncated_edge_blocks(tmp_path: Path) -> None:
    import zarrext

    data = sample((13, 9, 5), "int32", seed=3)
    write_n5(tmp_path / "d.n5", data, (4, 4, 2), "gzip")  # edge blocks truncated: n5_default
    from zarrext.formats import n5

    [result] = n5.write_zarr_metadata(tmp_path / "d.n5")
    assert result.codec == "n5_default"
    [report] = zarrext.convert(tmp_path / "d.n5", tmp_path / "out.zarr", chunks=(5, 5, 5))
    out = zarr.open_array(tmp_path / "out.zarr", mode="r")
    np.testing.assert_array_equal(out[:], data)
    assert out.chunks == (5, 5, 5)
    assert not set(_names(out)) & set(N5_FORM)
    assert "transpose" not in report.becomes
