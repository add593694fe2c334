"""Tests for zarrext's codec pipeline (chunk indices) and the runtime API (zarrext.api)."""

from __future__ import annotations

import itertools
import json
import math
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import (
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

import zarrext
from tests.conftest import chunk_files, conditional, on_batched_path, raises_chunk_error
from zarrext import ConditionalCodec, ShuffleCodec
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline
from zarrext.sharding.codec import RuntimeShardingCodec


class Recorder:
    """A plain-signature decision that records (chunk_index, nested codec name)."""

    def __init__(self, answer: bool = False) -> None:
        self.seen: list[tuple[Any, str]] = []
        self.answer = answer
        self._lock = threading.Lock()

    def __call__(self, chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        with self._lock:
            self.seen.append((chunk_index, codec.name))
        return self.answer

    def indices(self, name: str | None = None) -> set[Any]:
        return {i for i, n in self.seen if name is None or n == name}


def grid(*shape: int) -> set[tuple[int, ...]]:
    return set(itertools.product(*(range(n) for n in shape)))


# -- chunk index on the ordinary write path --------------------------------------------------


def test_chunk_index_create_array(tmp_path: Path) -> None:
    rec = Recorder()
    z = zarrext.create_array(
        tmp_path,
        shape=(5, 6, 7),
        chunks=(2, 3, 4),
        dtype="<i2",
        compressors=[conditional()],
        decision=rec,
    )
    z[:] = 1
    assert rec.indices() == grid(3, 2, 2)
    assert len(rec.seen) == 12  # one call per chunk and nested codec
    rec.seen.clear()
    z[1:3, 4:6, 0] = 2
    assert rec.indices() == {(0, 1, 0), (1, 1, 0)}
    rec.seen.clear()
    z.oindex[[0, 4], :, 6] = 3
    assert rec.indices() == {(0, 0, 1), (0, 1, 1), (2, 0, 1), (2, 1, 1)}


def test_chunk_index_open_array(tmp_path: Path) -> None:
    zarr.create_array(
        tmp_path, shape=(10, 10), chunks=(4, 4), dtype="u1", compressors=[conditional()]
    )
    rec = Recorder()
    z = zarrext.open_array(tmp_path, mode="r+", decision=rec)
    z[:] = np.arange(100, dtype="u1").reshape(10, 10)
    assert rec.indices() == grid(3, 3)
    rec.seen.clear()
    z[9, 9] = 0
    assert rec.indices() == {(2, 2)}


@pytest.mark.parametrize("encoding", [("default", "/"), ("default", "."), ("v2", "."), ("v2", "/")])
def test_chunk_index_with_key_encodings_and_array_path(
    tmp_path: Path, encoding: tuple[str, str]
) -> None:
    """Indices come from store keys, whatever the key encoding and the array's path."""
    plan = np.random.default_rng(0).integers(0, 8, size=(3, 2), dtype=np.uint8)
    root = zarr.open_group(tmp_path, mode="w")
    root.create_group("g")
    z = zarrext.create_array(
        tmp_path,
        name="g/a",
        shape=(6, 4),
        chunks=(2, 2),
        dtype="u1",
        chunk_key_encoding={"name": encoding[0], "separator": encoding[1]},
        compressors=[conditional(ShuffleCodec(element_size=1), ZstdCodec(level=1), Crc32cCodec())],
        decision=zarrext.from_plan(plan),
    )
    z[:] = 5
    headers = np.zeros_like(plan)
    prefix = "c" + encoding[1] if encoding[0] == "default" else ""
    for i, j in grid(3, 2):
        key = f"{prefix}{i}{encoding[1]}{j}"
        headers[i, j] = (tmp_path / "g" / "a" / key).read_bytes()[0]
    np.testing.assert_array_equal(headers, plan)
    np.testing.assert_array_equal(
        zarr.open_array(tmp_path, path="g/a")[:], np.full((6, 4), 5, "u1")
    )


def test_concurrent_chunks_get_their_own_index(tmp_path: Path) -> None:
    """Many chunks encoded concurrently: each header matches its own plan entry."""
    plan = np.random.default_rng(1).integers(0, 8, size=(8, 8), dtype=np.uint8)
    z = zarrext.create_array(
        tmp_path,
        shape=(64, 64),
        chunks=(8, 8),
        dtype="<f4",
        compressors=[
            conditional(ShuffleCodec(element_size=4), ZstdCodec(level=1), GzipCodec(level=1))
        ],
        decision=zarrext.from_plan(plan),
    )
    data = np.random.default_rng(2).random((64, 64), dtype=np.float32)
    z[:] = data
    headers = np.array(
        [[(tmp_path / "c" / str(i) / str(j)).read_bytes()[0] for j in range(8)] for i in range(8)]
    )
    np.testing.assert_array_equal(headers, plan)
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


# -- inside sharding_indexed ------------------------------------------------------------------


def inner_chunks_of_shard(shard: bytes, n_inner: int) -> list[bytes | None]:
    """Split a shard (index at the end, crc32c-protected) into its inner chunks, C order."""
    index_size = n_inner * 16 + 4
    index = np.frombuffer(shard[-index_size:-4], dtype="<u8").reshape(n_inner, 2)
    out: list[bytes | None] = []
    for offset, nbytes in index:
        if offset == nbytes == 2**64 - 1:
            out.append(None)
        else:
            out.append(shard[int(offset) : int(offset) + int(nbytes)])
    return out


def test_chunk_index_inside_shards_is_array_wide(tmp_path: Path) -> None:
    rec = Recorder()
    z = zarrext.create_array(
        tmp_path,
        shape=(12, 10),
        chunks=(4, 5),
        shards=(8, 10),
        dtype="<i4",
        compressors=[conditional()],
        decision=rec,
    )
    z[:] = 7
    assert rec.indices() == grid(3, 2)  # 3x2 inner chunks over 2x1 shards
    rec.seen.clear()
    z[8:12, 5:10] = 1
    assert rec.indices() == {(2, 1)}
    rec.seen.clear()
    z[5, :] = 2  # second row of inner chunks, first shard
    assert rec.indices() == {(1, 0), (1, 1)}


def test_from_plan_inside_shards_reads_headers(tmp_path: Path) -> None:
    """Plan over the array-wide inner grid; headers read back from the shard files."""
    inner_grid = (4, 6)
    plan = np.random.default_rng(5).integers(0, 4, size=inner_grid, dtype=np.uint8)
    z = zarrext.create_array(
        tmp_path,
        shape=(8, 12),
        chunks=(2, 2),
        shards=(4, 6),
        dtype="<u2",
        compressors=[conditional(ShuffleCodec(element_size=2), ZstdCodec(level=1)), Crc32cCodec()],
        decision=zarrext.from_plan(plan),
    )
    data = np.arange(96, dtype="<u2").reshape(8, 12)
    z[:] = data
    headers = np.zeros(inner_grid, dtype=np.uint8)
    for si, sj in grid(2, 2):
        inner = inner_chunks_of_shard((tmp_path / "c" / str(si) / str(sj)).read_bytes(), 6)
        for k, chunk in enumerate(inner):
            assert chunk is not None
            li, lj = divmod(k, 3)
            headers[si * 2 + li, sj * 3 + lj] = chunk[0]
    np.testing.assert_array_equal(headers, plan)
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


def test_conditional_inside_and_outside_shards(tmp_path: Path) -> None:
    """Outer conditional sees shard indices; inner one sees array-wide inner-chunk indices."""
    rec = Recorder(answer=True)
    sharding = ShardingCodec(
        chunk_shape=(2, 2), codecs=[BytesCodec(), conditional(ZstdCodec(level=1))]
    )
    z = zarrext.create_array(
        tmp_path,
        shape=(8, 4),
        chunks=(4, 4),
        dtype="u1",
        serializer=sharding,
        compressors=[conditional(GzipCodec(level=1))],
        decision=rec,
    )
    data = np.arange(32, dtype="u1").reshape(8, 4)
    z[:] = data
    assert rec.indices("zstd") == grid(4, 2)
    assert rec.indices("gzip") == grid(2, 1)
    assert (tmp_path / "c" / "1" / "0").read_bytes()[0] == 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


def test_nested_shards(tmp_path: Path) -> None:
    rec = Recorder(answer=True)
    inner = ShardingCodec(chunk_shape=(2,), codecs=[BytesCodec(), conditional()])
    outer = ShardingCodec(chunk_shape=(4,), codecs=[inner])
    z = zarrext.create_array(
        tmp_path,
        shape=(16,),
        chunks=(16,),
        dtype="u1",
        serializer=outer,
        compressors=None,
        decision=rec,
    )
    z[:] = np.arange(16, dtype="u1")
    assert rec.indices() == grid(8)
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], np.arange(16, dtype="u1"))


def test_runtime_sharding_codec_equals_stock(tmp_path: Path) -> None:
    z = zarrext.create_array(
        tmp_path,
        shape=(4,),
        chunks=(2,),
        shards=(4,),
        dtype="u1",
        compressors=[conditional()],
        decision="always_apply",
    )
    (bound,) = z.metadata.codecs  # type: ignore[union-attr]
    assert isinstance(bound, RuntimeShardingCodec)
    assert isinstance(z._async_array.codec_pipeline, ZarrextCodecPipeline)
    stock = zarr.open_array(tmp_path).metadata
    assert bound == stock.codecs[0]  # type: ignore[union-attr]
    assert z.metadata.to_dict() == stock.to_dict()
    assert z.metadata == stock
    assert hash(bound) == hash(stock.codecs[0])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "sel", [np.s_[:], np.s_[3:9, 1:11], np.s_[11, :], np.s_[::3, ::4], np.s_[0, 0]]
)
def test_reads_through_zarrext_pipeline(tmp_path: Path, sel: Any) -> None:
    data = np.arange(120, dtype="<f8").reshape(12, 10)
    zarrext.create_array(
        tmp_path,
        shape=(12, 10),
        chunks=(4, 5),
        shards=(8, 10),
        dtype="<f8",
        compressors=[conditional(ShuffleCodec(element_size=8), ZstdCodec())],
        decision="compress_if_smaller",
    )[:] = data
    np.testing.assert_array_equal(zarrext.open_array(tmp_path, mode="r")[sel], data[sel])
    np.testing.assert_array_equal(zarr.open_array(tmp_path, mode="r")[sel], data[sel])


# -- runtime settings never reach zarr.json -----------------------------------------------------


def test_create_array_metadata_same_as_stock(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {
        "shape": (8, 8),
        "chunks": (4, 4),
        "dtype": "<f4",
        "compressors": [conditional(ShuffleCodec(element_size=4), ZstdCodec()), Crc32cCodec()],
    }
    zarr.create_array(tmp_path / "stock", **kwargs)
    zarrext.create_array(
        tmp_path / "runtime",
        decision=lambda chunk_index, codec, unencoded_chunk, trial: True,
        trial_encode=True,
        **kwargs,
    )
    stock = (tmp_path / "stock" / "zarr.json").read_bytes()
    assert (tmp_path / "runtime" / "zarr.json").read_bytes() == stock
    assert "decision" not in stock.decode()
    assert "trial" not in stock.decode()


def test_open_array_does_not_change_zarr_json(tmp_path: Path) -> None:
    z = zarrext.create_array(
        tmp_path,
        shape=(8, 8),
        chunks=(4, 4),
        dtype="<f4",
        compressors=[conditional(ShuffleCodec(element_size=4), ZstdCodec())],
    )
    z[:] = 1.5
    path = tmp_path / "zarr.json"
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    for decision, trial in [
        ("compress_if_smaller", None),
        (lambda a, b, c, d: True, True),
        (0b11, None),
    ]:
        zx = zarrext.open_array(tmp_path, mode="r+", decision=decision, trial_encode=trial)
        zx[:] = np.arange(64, dtype="<f4").reshape(8, 8)
        assert (
            zx.metadata == zarr.open_array(tmp_path).metadata
        )  # runtime settings: not in equality
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    assert (tmp_path / "c" / "0" / "0").read_bytes()[0] == 0b11


def test_open_array_modes(tmp_path: Path) -> None:
    zarr.create_array(tmp_path, shape=(4,), chunks=(2,), dtype="u1", compressors=[conditional()])
    for mode in ("w", "w-", "x"):
        with pytest.raises(ValueError, match=f"mode {mode!r} would replace it"):
            zarrext.open_array(tmp_path, mode=mode)
    assert zarrext.open_array(tmp_path, mode="a", decision="always_apply").shape == (4,)
    z = zarrext.open_array(tmp_path, mode="r")
    with pytest.raises(Exception, match=r"read-only|read only"):
        z[:] = 1


def test_decision_without_conditional_codec_is_refused(tmp_path: Path) -> None:
    zarr.create_array(tmp_path, shape=(4,), chunks=(2,), dtype="u1")
    with pytest.raises(ValueError, match="has no conditional codec"):
        zarrext.open_array(tmp_path, decision="always_apply")
    # Without a decision the array opens; writes and reads are unchanged.
    z = zarrext.open_array(tmp_path)
    z[:] = 3
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], [3, 3, 3, 3])


def test_with_runtime_rejects_v2(tmp_path: Path) -> None:
    z = zarr.create_array(tmp_path, shape=(4,), chunks=(2,), dtype="u1", zarr_format=2)
    with pytest.raises(ValueError, match="Zarr format 3"):
        zarrext.with_runtime(z)


def test_with_runtime_keeps_codec_decision_when_none(tmp_path: Path) -> None:
    codec = ConditionalCodec(codecs=[ZstdCodec()], decision="always_apply")
    z = zarr.create_array(tmp_path, shape=(4,), chunks=(4,), dtype="u1", compressors=[codec])
    zx = zarrext.with_runtime(z)
    zx[:] = 1
    assert (tmp_path / "c" / "0").read_bytes()[0] == 1
    zarrext.with_runtime(z, decision="never_apply")[:] = 2
    assert (tmp_path / "c" / "0").read_bytes() == b"\x00" + bytes([2] * 4)


def test_stock_zarr_writes_raw(tmp_path: Path) -> None:
    """Opened without zarrext's runtime API, the codec applies nothing (spec default)."""
    zarrext.create_array(
        tmp_path,
        shape=(4,),
        chunks=(4,),
        dtype="u1",
        compressors=[conditional()],
        decision="always_apply",
    )
    zarr.open_array(tmp_path, mode="r+")[:] = 9
    assert (tmp_path / "c" / "0").read_bytes() == b"\x00" + bytes([9] * 4)
    assert json.loads((tmp_path / "zarr.json").read_text())["codecs"][1]["name"] == "conditional"


def test_inner_index_unknown_behind_array_array_codec(tmp_path: Path) -> None:
    """Behind a transpose, shard-local coordinates are not array-wide: report None.

    Shard-local indices would collide across shards and silently misapply a plan.
    """
    rec = Recorder()
    sharding = ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), conditional()])
    kwargs: dict[str, Any] = {
        "shape": (8, 4),
        "chunks": (4, 4),
        "dtype": "u1",
        "filters": [TransposeCodec(order=(1, 0))],
        "serializer": sharding,
        "compressors": None,
    }
    zarrext.create_array(tmp_path / "a", decision=rec, **kwargs)[:] = 1
    assert rec.indices() == {None}
    z = zarrext.create_array(
        tmp_path / "b", decision=zarrext.from_plan(np.zeros((4, 2), int)), **kwargs
    )
    with pytest.raises(ValueError, match="needs the chunk index"):
        z[:] = 1


def test_failed_decision_leaves_shard_unchanged(tmp_path: Path) -> None:
    data = np.arange(64, dtype="u1").reshape(8, 8)
    zarrext.create_array(
        tmp_path,
        shape=(8, 8),
        chunks=(2, 2),
        shards=(4, 8),
        dtype="u1",
        compressors=[conditional()],
        decision="always_apply",
    )[:] = data
    shard = tmp_path / "c" / "1" / "0"
    before = shard.read_bytes()

    def decide(chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        if chunk_index == (3, 2):
            raise RuntimeError("analysis failed")
        return True

    z = zarrext.open_array(tmp_path, decision=decide)
    with pytest.raises(
        ValueError, match=r"raised RuntimeError for chunk \(3, 2\).*analysis failed"
    ):
        z[4:, :] = 5
    assert shard.read_bytes() == before
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


def test_read_error_names_inner_chunk(tmp_path: Path) -> None:
    """A bad header inside a shard: zarrext's reader names the array-wide inner chunk."""
    zarrext.create_array(
        tmp_path,
        shape=(8, 8),
        chunks=(2, 2),
        shards=(4, 8),
        dtype="u1",
        compressors=[conditional()],
        decision="never_apply",
    )[:] = np.arange(64, dtype="u1").reshape(8, 8)
    shard_path = tmp_path / "c" / "1" / "0"
    shard = bytearray(shard_path.read_bytes())
    index = np.frombuffer(bytes(shard[-(8 * 16 + 4) : -4]), dtype="<u8").reshape(2, 4, 2)
    offset = int(index[1, 3, 0])  # inner chunk (1, 3) of shard (1, 0) = array-wide (3, 3)
    assert shard[offset] == 0
    shard[offset] = 0b10
    shard_path.write_bytes(bytes(shard))
    with pytest.raises(ValueError, match=r"chunk \(3, 3\): header sets bit 1"):
        zarrext.open_array(tmp_path, mode="r")[:]
    with pytest.raises(ValueError, match=r"header sets bit 1"):
        zarr.open_array(tmp_path, mode="r")[:]
    np.testing.assert_array_equal(
        zarr.open_array(tmp_path, mode="r")[:6], np.arange(48, dtype="u1").reshape(6, 8)
    )


@pytest.mark.parametrize("shards", [None, (8,)])
def test_pickled_array_keeps_decision(tmp_path: Path, shards: tuple[int, ...] | None) -> None:
    """Arrays travel pickled (dask); the bound decision must travel with them."""
    z = zarrext.create_array(
        tmp_path,
        shape=(8,),
        chunks=(4,),
        shards=shards,
        dtype="u1",
        compressors=[conditional()],
        decision="always_apply",
    )
    clone = pickle.loads(pickle.dumps(z))
    assert clone.metadata == z.metadata
    clone[:] = 5
    stored = (tmp_path / "c" / "0").read_bytes()
    if shards is None:
        assert stored[0] == 1
    else:
        first = int(np.frombuffer(stored[-(2 * 16 + 4) : -4], "<u8")[0])
        assert stored[first] == 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], np.full(8, 5, "u1"))


# -- codec work in threads ----------------------------------------------------------------------


class ThreadRecorder(Recorder):
    """A Recorder that also notes which thread asked, per chunk."""

    def __init__(self, answer: bool = False) -> None:
        super().__init__(answer)
        self.threads: dict[Any, str] = {}

    def __call__(self, chunk_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        with self._lock:
            self.threads[chunk_index] = threading.current_thread().name
        return super().__call__(chunk_index, codec, unencoded_chunk)


@pytest.mark.usefixtures("parallel_small_chunks")
@pytest.mark.parametrize("workers", [1, 4])
def test_threaded_writes_keep_each_chunks_index(tmp_path: Path, workers: int) -> None:
    """Chunk jobs run in the codec threads; each sees its own chunk index there."""
    rec = ThreadRecorder(answer=True)
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        z = zarrext.create_array(
            tmp_path, shape=(40, 30), chunks=(4, 5), dtype="<f4",
            compressors=[conditional()], decision=rec,
        )
        assert isinstance(z._async_array.codec_pipeline, ZarrextCodecPipeline)
        assert z._async_array.codec_pipeline.transform is not None  # the threaded path
        data = np.random.default_rng(3).random((40, 30), dtype=np.float32)
        z[:] = data
    assert set(rec.threads) == grid(10, 6)
    names = set(rec.threads.values())
    assert threading.current_thread().name not in names  # never on the caller's thread
    if workers > 1:
        assert all(n.startswith("zarrext-codec") for n in names)
    for i, j in grid(10, 6):  # every chunk was compressed (mask 1), as decided for it
        assert (tmp_path / "c" / str(i) / str(j)).read_bytes()[0] == 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], data)


@pytest.mark.parametrize(
    ("chunks", "in_pool"), [((64, 64), False), ((128, 512), True)], ids=["16KiB", "256KiB"]
)
def test_small_chunks_are_written_by_one_thread(
    tmp_path: Path, chunks: tuple[int, int], in_pool: bool
) -> None:
    """Chunks below PARALLEL_WRITE_MIN_BYTES run in one thread (not the codec pool's):
    their codec work is too short to pay for the GIL handoffs between threads."""
    threshold = zarrext.pipeline.codec_pipeline.PARALLEL_WRITE_MIN_BYTES
    assert (math.prod(chunks) * 4 >= threshold) is in_pool
    rec = ThreadRecorder(answer=True)
    with zarr.config.set({"codec_pipeline.max_workers": 2}):
        z = zarrext.create_array(
            tmp_path, shape=(256, 1024), chunks=chunks, dtype="<f4",
            compressors=[conditional()], decision=rec,
        )
        z[:] = np.ones((256, 1024), np.float32)
    names = set(rec.threads.values())
    assert all(n.startswith("zarrext-codec") for n in names) is in_pool
    if not in_pool:
        assert len(names) == 1


@pytest.mark.usefixtures("parallel_small_chunks")
@pytest.mark.parametrize("workers", [1, 4])
def test_threaded_read_error_names_chunk(tmp_path: Path, workers: int) -> None:
    """A bad header read in a codec thread: the error names that chunk."""
    zarrext.create_array(
        tmp_path, shape=(8, 8), chunks=(2, 2), dtype="u1",
        compressors=[conditional()], decision="never_apply",
    )[:] = np.arange(64, dtype="u1").reshape(8, 8)
    chunk = tmp_path / "c" / "2" / "3"
    chunk.write_bytes(b"\x02" + chunk.read_bytes()[1:])
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        z = zarrext.open_array(tmp_path, mode="r")
        with pytest.raises(ValueError, match=r"chunk \(2, 3\): header sets bit 1"):
            z[:]
        np.testing.assert_array_equal(z[:4], np.arange(32, dtype="u1").reshape(4, 8))


def test_threaded_path_matches_batched_path(tmp_path: Path) -> None:
    """Partial writes, empty chunks and reads: the same stored bytes and values as
    zarr-python's batched path (a pipeline without its synchronous transform)."""
    rng = np.random.default_rng(4)
    data = rng.integers(0, 5, (30, 20)).astype("<i2")
    arrays = []
    for name in ("threaded", "batched"):
        z = zarrext.create_array(
            tmp_path / name, shape=(30, 20), chunks=(7, 6), dtype="<i2", fill_value=0,
            compressors=[conditional(ShuffleCodec(element_size=2), ZstdCodec(level=1))],
            decision="compress_if_smaller",
        )
        if name == "batched":
            on_batched_path(z)
        z[:] = data
        z[3:9, 2:15] = 0  # partial chunks, read-modify-write
        z[14:21, 6:12] = 0  # one whole chunk of fill: deleted
        arrays.append(z)
    files = [chunk_files(tmp_path / n) for n in ("threaded", "batched")]
    assert files[0] == files[1]
    assert Path("2/1") not in files[0]
    for sel in (np.s_[:], np.s_[5, :], np.s_[2:25:3, 7], np.s_[[1, 29], 3:4]):
        np.testing.assert_array_equal(arrays[0][sel], arrays[1][sel])


# -- the public route: zarr's codec_pipeline.path ----------------------------------------

PIPELINE_PATH = {"codec_pipeline.path": "zarrext.pipeline.ZarrextCodecPipeline"}


@pytest.mark.parametrize(
    "encoding", [("default", "/"), ("default", "."), ("v2", "."), ("v2", "/")],
    ids=["default-slash", "default-dot", "v2-dot", "v2-slash"],
)
def test_codec_pipeline_path_gives_plain_zarr_arrays_chunk_indices(
    tmp_path: Path, encoding: tuple[str, str]
) -> None:
    """Through zarr's entry point and config, without zarrext.open_array: zarr gives
    no array path, so chunk coordinates come from the end of each key."""
    from zarrext._zarr_compat import async_array_of

    rec = Recorder(answer=True)
    zarr.open_group(tmp_path, mode="w").create_group("c")  # a group named like a key part
    with zarr.config.set(PIPELINE_PATH):
        z = zarr.create_array(
            tmp_path, name="c/a", shape=(6, 4, 2), chunks=(2, 2, 2), dtype="u1",
            chunk_key_encoding={"name": encoding[0], "separator": encoding[1]},
            compressors=[ConditionalCodec(codecs=[ZstdCodec(level=1)], decision=rec)],
        )
        assert type(async_array_of(z).codec_pipeline) is ZarrextCodecPipeline
        z[:] = 7
        assert rec.indices() == grid(3, 2, 1)
        back = zarr.open_array(tmp_path, path="c/a", mode="r")
        assert type(async_array_of(back).codec_pipeline) is ZarrextCodecPipeline
        np.testing.assert_array_equal(back[:], np.full((6, 4, 2), 7, "u1"))
    # zarr's default again outside the config: the route changes nothing for others
    plain = zarr.open_array(tmp_path, path="c/a", mode="r")
    assert type(async_array_of(plain).codec_pipeline) is not ZarrextCodecPipeline
    np.testing.assert_array_equal(plain[:], np.full((6, 4, 2), 7, "u1"))


def test_codec_pipeline_path_on_zero_dimensional_and_v2_arrays(tmp_path: Path) -> None:
    with zarr.config.set(PIPELINE_PATH):
        scalar = zarr.create_array(tmp_path / "s", shape=(), dtype="i4", fill_value=0)
        scalar[()] = 5
        assert int(zarr.open_array(tmp_path / "s", mode="r")[()]) == 5
        v2 = zarr.create_array(tmp_path / "v2", shape=(4,), chunks=(2,), dtype="i4",
                               zarr_format=2)
        v2[:] = [1, 2, 3, 4]
        np.testing.assert_array_equal(zarr.open_array(tmp_path / "v2")[:], [1, 2, 3, 4])


# -- local shards: one thread job per shard -------------------------------------------


SHARD_SELECTIONS = [
    (slice(None), slice(None)),
    (slice(3, 29), slice(5, 17)),
    (7, slice(None)),
    (slice(None), 30),
    (slice(16, 32), slice(0, 16)),
    ([1, 9, 29], slice(2, 3)),
]


@pytest.mark.parametrize(
    "selection", SHARD_SELECTIONS,
    ids=["all", "across-shards", "row", "column", "one-shard", "fancy"],
)
def test_local_shard_reads_are_thread_jobs_and_match_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, selection: Any
) -> None:
    z = zarrext.create_array(
        tmp_path, shape=(30, 31), chunks=(4, 4), shards=(16, 8), dtype="i4", fill_value=-3,
        compressors=[conditional()], decision="compress_if_smaller",
    )
    data = np.arange(30 * 31, dtype="i4").reshape(30, 31)
    data[16:, 8:16] = -3  # one shard of fill only: not stored
    z[:] = data
    z[16:, 8:16] = -3
    jobs: list[Any] = []
    original = zarrext.pipeline.codec_pipeline.read_local_shard

    def spy(pipeline: ZarrextCodecPipeline, item: Any, *args: Any) -> Any:
        jobs.append(threading.current_thread().name)
        return original(pipeline, item, *args)

    # patched where the pipeline looks it up (its own import of the name)
    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "read_local_shard", spy)
    reader = zarrext.open_array(tmp_path, mode="r")
    if isinstance(selection[0], list):
        got, want = reader.oindex[selection], zarr.open_array(tmp_path, mode="r").oindex[selection]
    else:
        got, want = reader[selection], zarr.open_array(tmp_path, mode="r")[selection]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, data[selection] if not isinstance(selection[0], list)
                                  else data[np.ix_(selection[0], range(2, 3))])
    assert jobs, "local shards were not read as thread jobs"
    assert all(name != "MainThread" for name in jobs)


def test_local_shard_read_of_a_truncated_shard_names_it(tmp_path: Path) -> None:
    z = zarrext.create_array(tmp_path, shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="u1")
    z[:] = 1
    shard = tmp_path / "c" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[:10])
    with pytest.raises(ValueError, match="shorter than its"):
        zarrext.open_array(tmp_path, mode="r")[:]


# -- local chunk files read directly ------------------------------------------------------


def test_local_chunk_reads_match_the_store(tmp_path: Path) -> None:
    """An open LocalStore's chunk files are read without the store's per-key pathlib
    objects: the same bytes, and None where LocalStore.get_sync gives None."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import LocalStore, StorePath

    from zarrext.pipeline.chunk_io import get_chunk_sync

    (tmp_path / "c" / "0").mkdir(parents=True)
    (tmp_path / "c" / "0" / "1").write_bytes(b"chunk bytes")
    (tmp_path / "c" / "2").write_bytes(b"a file where a folder is expected")
    store = zarr.core.sync.sync(LocalStore.open(tmp_path, read_only=True))
    prototype = default_buffer_prototype()
    for key in ("c/0/1", "c/0/9", "c/0", "c/2/0"):  # present, missing, a folder, under a file
        ours = get_chunk_sync(StorePath(store, key), prototype)
        stock = StorePath(store, key).get_sync(prototype=prototype)
        assert (ours is None) is (stock is None), key
        if stock is not None:
            assert ours is not None
            assert ours.to_bytes() == stock.to_bytes() == b"chunk bytes"


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(0, 5000),
    per_read=st.integers(1, 6000),
    grown=st.integers(0, 3000),
)
def test_chunk_files_are_read_whole_through_short_reads_and_growth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, per_read: int, grown: int
) -> None:
    """A chunk file is read to its end whatever the system's reads return at a
    time (``per_read`` bytes at most); one grown by ``grown`` bytes since its
    size was asked is read as it was then, or whole once a read sees the rest."""
    import os

    import zarrext.pipeline.chunk_io as chunk_io

    path = tmp_path / f"c{next(_KEYS)}"
    data = np.random.default_rng(size).integers(0, 256, size + grown, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    real_readv, real_fstat = os.readv, os.fstat

    class _Stat:
        st_size = size

    def readv(fd: int, buffers: list[Any]) -> int:
        return real_readv(fd, [memoryview(buffers[0]).cast("B")[:per_read]])

    def fstat(fd: int) -> Any:
        real_fstat(fd)
        return _Stat()

    monkeypatch.setattr(chunk_io.os, "readv", readv)
    monkeypatch.setattr(chunk_io.os, "fstat", fstat)
    got = chunk_io.read_chunk_file(str(path))
    monkeypatch.undo()
    assert got is not None
    # the file as it was when its size was asked, or (a read saw past that) all of it
    assert got.tobytes() in (data[:size], data)
    if grown == 0 or per_read > size:
        assert got.tobytes() == data


_KEYS = itertools.count()


def test_local_store_subclasses_and_unopened_stores_read_through_the_store(
    tmp_path: Path,
) -> None:
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import LocalStore, StorePath

    from zarrext._zarr_compat import store_is_open
    from zarrext.pipeline.chunk_io import get_chunk_sync

    (tmp_path / "k").write_bytes(b"stored")
    calls: list[str] = []

    class CountingStore(LocalStore):
        def get_sync(self, key: str, **kwargs: Any) -> Any:
            calls.append(key)
            return super().get_sync(key, **kwargs)

    prototype = default_buffer_prototype()
    counting = zarr.core.sync.sync(CountingStore.open(tmp_path, read_only=True))
    got = get_chunk_sync(StorePath(counting, "k"), prototype)
    assert got is not None
    assert got.to_bytes() == b"stored"
    assert calls == ["k"]
    unopened = LocalStore(tmp_path, read_only=True)
    assert not store_is_open(unopened)
    got = get_chunk_sync(StorePath(unopened, "k"), prototype)
    assert got is not None
    assert got.to_bytes() == b"stored"
    assert store_is_open(unopened)  # the store's own get_sync opened it


# -- errors: a chunk that does not decode names the array, its key and the codec -------


def _damage(path: Path, at: int = 5) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("compressors", "codec"),
    [
        ([zarrext.PadCodec(location="end", nbytes=3), ZstdCodec(level=1)], "zstd"),
        ([zarrext.ShuffleCodec(element_size=2), ZstdCodec(level=1)], "zstd"),
        ([Crc32cCodec()], "crc32c"),
    ],
    ids=["pad-zstd", "shuffle-zstd", "crc32c"],
)
def test_damaged_chunk_names_array_key_and_codec(
    tmp_path: Path, compressors: list, codec: str
) -> None:
    from zarrext.errors import ChunkDecodeError

    store = zarr.storage.LocalStore(tmp_path)
    zarrext.create_array(
        store, name="g/a", shape=(8,), chunks=(4,), dtype="int16", compressors=compressors
    )[:] = np.arange(8, dtype="int16")
    (tmp_path / "g" / "a" / "c" / "1").write_bytes(b"\x28\xb5\x2f\xfd not a frame at all")
    array = zarrext.open_array(store, path="g/a", mode="r")
    with pytest.raises(ChunkDecodeError) as raised:
        array[:]
    error = raised.value
    assert isinstance(error, ValueError)
    assert (error.array, error.key, error.codec) == ("g/a", "g/a/c/1", codec)
    assert "'g/a/c/1'" in str(error)
    assert f"codec {codec!r}" in str(error)
    assert error.__cause__ is not None
    assert not isinstance(error.__cause__, ChunkDecodeError)
    np.testing.assert_array_equal(array[:4], np.arange(4))  # the other chunk still reads


@pytest.mark.parametrize("store_kind", ["local", "memory"])
def test_damaged_inner_chunk_names_shard_key_and_inner_chunk(
    tmp_path: Path, store_kind: str
) -> None:
    """Whole-shard reads (local) and zarr's sharding path (memory) alike."""
    import asyncio

    from zarr.core.buffer import default_buffer_prototype

    from zarrext.errors import ChunkDecodeError

    store = zarr.storage.LocalStore(tmp_path) if store_kind == "local" else (
        zarr.storage.MemoryStore())
    zarrext.create_array(
        store, name="a", shape=(8, 8), chunks=(4, 4), shards=(8, 8), dtype="int16",
        compressors=[zarrext.ShuffleCodec(element_size=2), ZstdCodec(level=1)],
    )[:] = np.arange(64, dtype="int16").reshape(8, 8)
    proto = default_buffer_prototype()
    shard = bytearray(asyncio.run(store.get("a/c/0/0", proto)).to_bytes())
    shard[5] ^= 0xFF  # inside the first inner chunk (the index is at the end)
    asyncio.run(store.set("a/c/0/0", proto.buffer.from_bytes(bytes(shard))))
    with pytest.raises(ChunkDecodeError) as raised:
        zarrext.open_array(store, path="a", mode="r")[:]
    error = raised.value
    assert (error.array, error.key, error.codec) == ("a", "a/c/0/0", "zstd")
    assert error.inner == (0, 0)
    assert "inner chunk [0, 0]" in str(error)
    assert isinstance(error.__cause__, RuntimeError)  # numcodecs' zstd


def test_chunk_decode_error_pickles_whole() -> None:
    from zarrext.errors import ChunkDecodeError

    error = ChunkDecodeError("bad", array="a", key="a/c/0", codec="zstd", inner=(1, 2))
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.array, copy.key, copy.codec, copy.inner, str(copy)) == (
        "a", "a/c/0", "zstd", (1, 2), str(error))


# -- stores without synchronous IO (object stores, fsspec) -------------------------------


def test_remote_reads_decode_in_codec_threads_with_requests_in_flight(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an object store, chunks are fetched concurrently on zarr's event loop and
    decoded in zarrext's codec threads, never on the loop's thread."""
    import threading

    from zarr.codecs import BytesCodec, ZstdCodec
    from zarr.storage import ObjectStore

    url = f"{s3['url']}/threads.zarr"
    data = np.arange(128 * 96, dtype="i4").reshape(128, 96) % 251
    zarrext.create_array(
        url, storage_options=s3["options"], shape=data.shape, chunks=(16, 16), dtype="i4",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        decision="compress_if_smaller",
    )[:] = data
    from zarrext.pipeline.direct import DirectDecoder

    decoded_in: list[str] = []
    real_decode = DirectDecoder.decode_bytes  # a [bytes, conditional(zstd)] chunk's decode

    def recording_decode(self: Any, *args: Any) -> Any:
        decoded_in.append(threading.current_thread().name)
        return real_decode(self, *args)

    in_flight = peak = 0
    real_get = ObjectStore.get

    async def counting_get(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await real_get(self, *args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr(DirectDecoder, "decode_bytes", recording_decode)
    monkeypatch.setattr(ObjectStore, "get", counting_get)
    array = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    assert isinstance(array.store, ObjectStore)
    with zarr.config.set({"async.concurrency": 8}):
        np.testing.assert_array_equal(array[:], data)
    assert len(decoded_in) == 48  # each chunk once
    assert all(name.startswith("zarrext-codec") for name in decoded_in), set(decoded_in)
    assert 1 < peak <= 8  # many requests at once, never more than async.concurrency


def test_remote_read_errors_name_the_chunk(s3: dict[str, Any]) -> None:
    import s3fs
    from zarr.codecs import BytesCodec, ZstdCodec

    url = f"{s3['url']}/broken.zarr"
    zarrext.create_array(
        url, storage_options=s3["options"], shape=(32, 32), chunks=(16, 16), dtype="i4",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        decision="always_apply",
    )[:] = 7
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    fs.pipe(f"{url}/c/1/0", b"\x01not zstd")
    array = zarrext.open_array(url, mode="r", storage_options=s3["options"])
    with raises_chunk_error(Exception, "c/1/0"):
        array[:]
    np.testing.assert_array_equal(array[:16], 7)  # the other chunks read
