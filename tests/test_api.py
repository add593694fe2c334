"""``zarrext.api``: runtime settings attached to arrays without touching zarr.json."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from zarrext.formats import tiff


def chunk_file(root: Path, i: int, j: int) -> Path:
    return root / "c" / str(i) / str(j)


def test_reopened_tiff_array_gets_its_header_function_back(tmp_path: Path) -> None:
    path = tmp_path / "tiff.zarr"
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    z = zarrext.create_array(
        str(path), shape=data.shape, **tiff.create_kwargs((32, 32), "uint16", compression="zstd")
    )
    z[:32] = data[:32]
    meta = (path / "zarr.json").read_bytes()

    # Reopened without a function, the pad codec fills in the header template that
    # zarr.json records (zarrext.formats.tiff registers it): still a TIFF.
    plain = zarrext.open_array(str(path))
    plain[32:, :32] = data[32:, :32]
    assert np.array_equal(tifffile.imread(chunk_file(path, 1, 0)), data[32:, :32])

    again = zarrext.open_array(
        str(path), padding=tiff.dynamic_header("uint16", compression="zstd")
    )
    again[32:] = data[32:]
    assert (path / "zarr.json").read_bytes() == meta
    for i in range(2):
        for j in range(2):
            image = tifffile.imread(chunk_file(path, i, j))
            assert np.array_equal(image, data[32 * i : 32 * (i + 1), 32 * j : 32 * (j + 1)])
    assert np.array_equal(zarr.open_array(str(path))[:], data)


def test_padding_needs_a_pad_codec(tmp_path: Path) -> None:
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), chunks=(2,), dtype="u1")
    with pytest.raises(ValueError, match="no pad codec"):
        zarrext.with_runtime(z, padding=lambda data, index, shape: b"")


def test_decision_reaches_conditional_codec_nested_in_shard_and_pad_stays(tmp_path: Path) -> None:
    inner = [BytesCodec(), zarrext.ConditionalCodec([ZstdCodec()])]
    z = zarrext.create_array(
        str(tmp_path / "s.zarr"), shape=(8, 8), chunks=(8, 8), dtype="u1",
        serializer=zarr.codecs.ShardingCodec(chunk_shape=(4, 4), codecs=inner),
        compressors=[zarrext.PadCodec(location="start", nbytes=3, padding=b"abc")],
        decision="always_apply",
    )
    z[:] = 5
    shard = (tmp_path / "s.zarr" / "c" / "0" / "0").read_bytes()
    assert shard[:3] == b"abc"
    inventory = zarrext.inventory(z)
    assert inventory.mask_counts == {1: 4}
    assert z.metadata.to_dict() == zarr.open_array(str(tmp_path / "s.zarr")).metadata.to_dict()
