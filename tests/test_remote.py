"""zarrext's paths for object stores (:mod:`zarrext.remote`), on the loopback S3 server:
whole shards fetched with one request each and decoded in the codec threads into
the output, the same values as the local path."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from zarrext.errors import ChunkDecodeError
from zarrext.sharding.codec import RuntimeShardingCodec

SHAPE, SHARD, INNER = (96, 128), (32, 64), (16, 16)


def _data() -> np.ndarray:
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]].astype("float32")
    return (np.sin(x / 7) * np.cos(y / 5) * 100).astype("float32")


def _create(location: str, **kwargs: Any) -> Any:
    return zarrext.create_array(
        location, shape=SHAPE, chunks=INNER, shards=SHARD, dtype="float32", fill_value=0,
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
        decision="compress_if_smaller", **kwargs,
    )


def _spy_decode_jobs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    threads: list[str] = []
    real = RuntimeShardingCodec.decode_jobs

    def decode_jobs(self: Any, *args: Any, **kwargs: Any) -> Any:
        jobs = real(self, *args, **kwargs)

        def named(job: Any) -> Any:
            def run() -> None:
                threads.append(threading.current_thread().name)
                job()
            return run

        return [named(job) for job in jobs]

    monkeypatch.setattr(RuntimeShardingCodec, "decode_jobs", decode_jobs)
    return threads


@pytest.mark.parametrize(
    "selection",
    [np.s_[:], np.s_[32:96, :], np.s_[5:70, 3:100], np.s_[7, :], np.s_[:, 64:128:3]],
    ids=["all", "whole-shards", "parts", "row", "step"],
)
def test_remote_shard_reads_match_local(
    s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, selection: Any
) -> None:
    data = _data()
    data[32:64, 64:128] = 0  # a shard of fill values: not stored
    url = f"{s3['url']}/a.zarr"
    for location, options in ((url, s3["options"]), (str(tmp_path / "a.zarr"), None)):
        _create(location, storage_options=options)[:] = data
    assert not s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True).exists(
        f"{url}/c/1/1"
    )
    threads = _spy_decode_jobs(monkeypatch)
    remote = zarrext.open_array(url, storage_options=s3["options"], mode="r")[selection]
    local = zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")[selection]
    np.testing.assert_array_equal(remote, data[selection])
    np.testing.assert_array_equal(remote, local)
    if selection == np.s_[:] or selection == np.s_[32:96, :]:
        # whole shards: decoded by zarrext's jobs, in the codec threads
        assert threads
        assert all(t.startswith("zarrext-codec") for t in threads)


def test_remote_shard_decode_error_names_the_shard(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/bad.zarr"
    _create(url, storage_options=s3["options"])[:] = _data()
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    blob = bytearray(fs.cat(f"{url}/c/0/1"))
    blob[0] = 0x7F  # the first inner chunk's conditional header: no such codec
    blob[1:40] = b"\xff" * 39
    fs.pipe(f"{url}/c/0/1", bytes(blob))
    array = zarrext.open_array(url, storage_options=s3["options"], mode="r")
    with pytest.raises(ChunkDecodeError) as raised:
        array[:]
    assert "c/0/1" in str(raised.value)
    np.testing.assert_array_equal(array[32:, :], _data()[32:, :])  # other shards read


# -- writes: encoded in the codec threads, uploaded with requests in flight -------------


def _stored(root: Any) -> dict[str, bytes]:
    return {k: v for k, v in root.items() if not k.endswith("zarr.json")}


WRITE_CASES: dict[str, dict[str, Any]] = {
    "conditional": dict(dtype="float32", serializer=BytesCodec(),
                        compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)])],
                        decision="compress_if_smaller"),
    "packbits": dict(dtype="bool", serializer=zarrext.PackBitsCodec(), compressors=None),
    "pad": dict(dtype="uint16", serializer=BytesCodec(),
                compressors=[zarrext.PadCodec(
                    location="start", nbytes=4,
                    # the chunk's index as the pad's bytes: the same index on both paths
                    padding=lambda d, i, s: str(i).encode()[:4].ljust(4, b"-"))]),
}


def _values(name: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    field = _data()
    field[:16, :16] = 0  # a chunk of fill values: not stored by either path
    if name == "packbits":
        return field > 10
    if name == "pad":
        return np.abs(field).astype("uint16")
    if name == "conditional":
        field[16:32, :] = rng.random((16, SHAPE[1]))  # incompressible: stored raw
    return field


@pytest.mark.parametrize("name", list(WRITE_CASES))
def test_remote_writes_store_the_local_bytes(
    s3: dict[str, Any], tmp_path: Path, name: str
) -> None:
    values = _values(name)
    url = f"{s3['url']}/{name}.zarr"
    for location, options in ((url, s3["options"]), (str(tmp_path / "a.zarr"), None)):
        array = zarrext.create_array(location, storage_options=options, shape=SHAPE,
                                     chunks=INNER, **WRITE_CASES[name])
        array[:] = values
        array[3:20, 5:40] = values[:17, :35]  # partial chunks: merged with what is stored
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    remote = {p[len(url) - 5 + 1:]: fs.cat(p) for p in fs.find(url)
              if not p.endswith("zarr.json")}
    local = {str(p.relative_to(tmp_path / "a.zarr")): p.read_bytes()
             for p in (tmp_path / "a.zarr").rglob("*") if p.is_file() and p.name != "zarr.json"}
    assert remote.keys() == local.keys()
    assert len(local) >= (SHAPE[0] // 16) * (SHAPE[1] // 16) - 1
    for key in local:
        assert remote[key] == local[key], key
