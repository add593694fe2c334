"""Whole shards written in the codec threads (:mod:`zarrext.pipeline.whole_shards`)
store the bytes zarr-python's sharding path stores, on local disk and in memory."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import event, given, reject, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

import zarrext
import zarrext.pipeline.codec_pipeline
import zarrext.pipeline.whole_shards
from tests.configurations import Configuration, configurations

# the two paths' gzip streams are made at different moments
pytestmark = pytest.mark.usefixtures("gzip_without_a_clock")


def _stored(store: Any) -> dict[str, bytes]:
    """Every chunk object of ``store`` (the metadata aside), by key."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    async def read() -> dict[str, bytes]:
        found = {}
        async for key in store.list():
            if not key.endswith("zarr.json"):
                value = await store.get(key, prototype=default_buffer_prototype())
                found[key] = value.to_bytes()
        return found

    return sync(read())


def _write(store: Any, config: Configuration, write_empty: bool, cut: int) -> None:
    """The user's writes: all of the array, then rows from ``cut`` on (whole shards
    and parts of shards in one write), then the first shard's rows of fill values
    (where other rows follow)."""
    options = {"decision": "compress_if_smaller"} if config.conditional else {}
    array = zarrext.create_array(store, **config.kwargs, **options,
                                 config={"write_empty_chunks": write_empty})
    array[...] = config.values()
    array[cut:] = config.values(salt=1)[cut:]
    if config.dtype != "optional-int16" and config.shape[0] > config.shard[0]:
        array[: config.shard[0]] = 0


@settings(max_examples=60, deadline=None)
@given(config=configurations(sharded_only=True), write_empty=st.booleans(),
       cut=st.integers(0, 40), local=st.booleans())
def test_whole_shards_store_what_zarrs_sharding_path_stores(
    config: Configuration, write_empty: bool, cut: int, local: bool
) -> None:
    try:
        zarr.create_array(MemoryStore(), **config.kwargs)
    except ValueError:
        reject()  # a configuration zarr refuses is not one users reach
    planned: list[str] = []
    real = zarrext.pipeline.whole_shards.plan_shard

    def plan_shard(*args: Any, **kwargs: Any) -> Any:
        planned.append(threading.current_thread().name)
        return real(*args, **kwargs)

    stored = []
    with tempfile.TemporaryDirectory() as where:
        for path in ("threads", "zarr"):
            store = LocalStore(Path(where) / path) if local else MemoryStore()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(zarrext.pipeline.whole_shards, "plan_shard", plan_shard)
                if path == "zarr":  # zarr-python's sharding codec writes every shard
                    patch.setattr(zarrext.pipeline.codec_pipeline, "whole_shard_writes",
                                  lambda pipeline, batch: None)
                _write(store, config, write_empty, cut)
            stored.append(_stored(store))
            if path == "threads":
                if planned:  # shards, or the inner shards of nested ones
                    event("whole shards in the codec threads")
                if config.route == "shards" and config.dtype != "optional-int16":
                    assert planned  # the plainest case takes the path
                # in the codec threads (one small shard: in asyncio's, as a small chunk)
                assert all(name.startswith(("zarrext-codec", "asyncio_")) for name in planned)
                planned.clear()
        assert not planned  # zarr's path planned no shard
    assert stored[0] == stored[1]
    assert stored[0], "nothing stored"


def test_a_write_of_whole_and_partial_shards_splits_them(tmp_path: Path) -> None:
    """One write that covers some shards whole and others in part: the whole ones are
    encoded in the codec threads, the others merged by zarr-python's path; the values
    read back are those written."""
    array = zarrext.create_array(tmp_path, shape=(40, 16), chunks=(4, 4), shards=(8, 8),
                                 dtype="i4", fill_value=0)
    values = np.arange(40 * 16, dtype="i4").reshape(40, 16)
    array[:] = values
    planned: list[Any] = []
    real = zarrext.pipeline.whole_shards.plan_shard

    def plan_shard(pipeline: Any, item: Any, **kwargs: Any) -> Any:
        planned.append(item[0].path)
        return real(pipeline, item, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zarrext.pipeline.whole_shards, "plan_shard", plan_shard)
        array[4:40] = -values[4:40]  # shard rows 1-4 whole, row 0 in part
    assert sorted(planned) == sorted(f"c/{i}/{j}" for i in range(1, 5) for j in range(2))
    expected = values.copy()
    expected[4:40] = -values[4:40]
    np.testing.assert_array_equal(zarrext.open_array(tmp_path, mode="r")[:], expected)
    np.testing.assert_array_equal(zarr.open_array(tmp_path, mode="r")[:], expected)


def test_small_shards_are_encoded_in_one_job_and_large_ones_by_every_thread(
    tmp_path: Path,
) -> None:
    """A shard smaller than ``PARALLEL_WRITE_MIN_BYTES`` is one job (its hand-offs
    between threads would cost more than its encoding); a larger one is split among
    the codec threads."""
    jobs: list[int] = []
    real = zarrext.pipeline.whole_shards.plan_shard

    def plan_shard(*args: Any, **kwargs: Any) -> Any:
        planned = real(*args, **kwargs)
        jobs.append(len(planned[0]))
        return planned

    limit = zarrext.pipeline.codec_pipeline.PARALLEL_WRITE_MIN_BYTES
    side = int(np.sqrt(limit // 4))  # float32 shards of exactly the limit
    with pytest.MonkeyPatch.context() as patch, zarr.config.set(
        {"codec_pipeline.max_workers": 2}
    ):
        patch.setattr(zarrext.pipeline.whole_shards, "plan_shard", plan_shard)
        for name, shard in (("small", side // 2), ("large", side)):
            array = zarrext.create_array(tmp_path / name, shape=(shard, shard), dtype="f4",
                                         chunks=(shard // 4, shard // 4), shards=(shard, shard))
            array[:] = np.random.default_rng(0).random((shard, shard), dtype="f4")
    assert jobs == [1, 2]


# A writer that rewrites every whole shard of the array at ``path``, again and again,
# with values of round k (all k), writing the round's number to ``log`` after each.
_WRITER = """
import sys
import numpy as np
import zarrext
path, log = sys.argv[1], sys.argv[2]
array = zarrext.open_array(path, mode="r+", decision="compress_if_smaller")
base = np.arange(array.size, dtype="i4").reshape(array.shape)
k = 0
while True:
    k += 1
    array[...] = base + k
    with open(log, "w") as f:
        f.write(str(k))
"""


@pytest.mark.parametrize("seed", range(6))
def test_a_killed_whole_shard_write_leaves_each_shard_old_or_new(
    tmp_path: Path, seed: int
) -> None:
    """A process killed (SIGKILL) while it writes whole local shards: every shard
    reads back, through zarr-python and zarrext, as one round's values, the round
    before the kill or the one it was writing."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    from tests.paths import ROOT

    shape, shard = (64, 96), (32, 32)
    zarrext.create_array(tmp_path / "a.zarr", shape=shape, chunks=(8, 8), shards=shard,
                         dtype="i4", fill_value=-1,
                         compressors=[zarrext.ConditionalCodec([zarr.codecs.ZstdCodec()])],
                         decision="compress_if_smaller")
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "a.zarr"),
                               str(log)], env=env)
    try:
        rounds = random.Random(seed).randrange(1, 6)
        guard = time.monotonic() + 120  # a hang guard, not a bound on the writes
        while not (log.exists() and log.read_text() and int(log.read_text()) >= rounds):
            assert writer.poll() is None, "the writer died"
            assert time.monotonic() < guard, "the writer hung"
            time.sleep(0.001)
        time.sleep(random.Random(seed).random() * 0.01)  # somewhere in the next round
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    done = int(log.read_text())
    base = np.arange(shape[0] * shape[1], dtype="i4").reshape(shape)
    for read in (zarr.open_array, zarrext.open_array):
        values = read(tmp_path / "a.zarr", mode="r")[...]
        for i in range(0, shape[0], shard[0]):
            for j in range(0, shape[1], shard[1]):
                block = values[i:i + shard[0], j:j + shard[1]] - base[i:i + shard[0],
                                                                      j:j + shard[1]]
                assert np.unique(block).tolist() in ([done], [done + 1]), (i, j)
