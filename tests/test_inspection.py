"""``zarrext.inspection``: stored chunks, sizes and conditional masks."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec
from zarr.core.sync import sync
from zarr.storage._common import make_store_path

import zarrext
from tests.conftest import Run
from zarrext.inspection import conditional_placement, inventory, stored_chunk_keys


def test_inventory_reads_masks_of_plain_chunks(tmp_path: Path) -> None:
    plan = np.array([[0, 1], [1, 0]])
    z = zarrext.create_array(
        str(tmp_path / "a.zarr"), shape=(20, 20), chunks=(10, 10), dtype="int16",
        serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec()]), Crc32cCodec()],
        decision=zarrext.from_plan(plan),
    )
    z[:] = 7
    inv = inventory(zarr.open_array(str(tmp_path / "a.zarr"), mode="r"))
    assert inv.mask_counts == Counter({0: 2, 1: 2})
    assert np.array_equal(inv.grid("mask"), plan)
    sizes = {c.index: c.nbytes for c in inv.chunks}
    for (i, j), size in sizes.items():
        assert size == (tmp_path / "a.zarr" / "c" / str(i) / str(j)).stat().st_size
    assert inv.raw_bytes == 4 * 10 * 10 * 2
    assert inv.stored_bytes == sum(sizes.values())


def test_inventory_of_sharded_array_uses_inner_grid(tmp_path: Path) -> None:
    inner = [BytesCodec(), zarrext.ConditionalCodec([ZstdCodec()]), Crc32cCodec()]
    z = zarrext.create_array(
        str(tmp_path / "s.zarr"), shape=(40, 40), chunks=(20, 40), dtype="uint8",
        serializer=ShardingCodec(chunk_shape=(10, 10), codecs=inner, index_location="start"),
        compressors=None, decision="always_apply",
    )
    z[:10, :] = 1
    inv = inventory(z)
    assert inv.grid_shape == (4, 4)
    assert sorted(c.index for c in inv.chunks) == [(0, j) for j in range(4)]
    assert inv.mask_counts == Counter({1: 4})
    assert {c.key for c in inv.chunks} == {"c/0/0"}


def test_inventory_without_conditional_has_no_masks(tmp_path: Path) -> None:
    z = zarr.create_array(str(tmp_path / "p.zarr"), shape=(6,), chunks=(2,), dtype="i4")
    z[:4] = 1
    inv = inventory(z)
    assert inv.placement is None
    assert [c.index for c in inv.chunks] == [(0,), (1,)]
    assert all(c.mask is None for c in inv.chunks)
    assert conditional_placement(z.metadata) is None  # type: ignore[arg-type]


def test_stored_chunk_keys_ignore_foreign_files(tmp_path: Path) -> None:
    z = zarr.create_array(str(tmp_path / "p.zarr"), shape=(6,), chunks=(2,), dtype="i4")
    z[:] = 1
    (tmp_path / "p.zarr" / "c" / "notes.txt").write_text("not a chunk")
    (tmp_path / "p.zarr" / "c" / "9").write_bytes(b"outside the grid")
    assert [k for _, k in stored_chunk_keys(z)] == ["c/0", "c/1", "c/2"]


def test_inventory_reports_corrupt_header(tmp_path: Path) -> None:
    z = zarrext.create_array(
        str(tmp_path / "a.zarr"), shape=(4,), chunks=(4,), dtype="uint8",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
    )
    z[:] = 3
    (tmp_path / "a.zarr" / "c" / "0").write_bytes(bytes([0b100, 3, 3, 3, 3]))
    with pytest.raises(ValueError, match=r"chunk \(0,\).*bit 2"):
        inventory(z)


@pytest.mark.parametrize("command", ["inspect", "recompress", "quantize"])
def test_a_damaged_chunk_is_named_by_every_job(run, tmp_path: Path, command: str) -> None:
    """inspect, recompress and quantize of an array with a damaged crc32c chunk fail
    with one line naming the array and the chunk's key (zarr's message names neither)."""
    path = tmp_path / "g.zarr"
    zarr.open_group(str(path))
    z = zarrext.create_array(
        str(path / "temp"), shape=(16, 16), chunks=(8, 8), dtype="float32",
        compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)]), Crc32cCodec()],
        decision="compress_if_smaller",
    )
    z[...] = np.linspace(0, 1, 256, dtype="float32").reshape(16, 16)
    chunk = path / "temp" / "c" / "1" / "0"
    damaged = bytearray(chunk.read_bytes())
    damaged[-1] ^= 0xFF  # the stored crc32c no longer matches
    chunk.write_bytes(bytes(damaged))
    extra = {"quantize": ["--max-abs-error", "0.01", "--out", str(tmp_path / "q.zarr")],
             "recompress": [], "inspect": []}[command]
    code, out, err = run(command, path / "temp", *extra)
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    # quantize stops at it; inspect and recompress go on, name it, then sum up
    assert len(lines) == (1 if command == "quantize" else 2), err
    assert "c/1/0" in lines[0]
    assert f"array '{path / 'temp'}'" in lines[0]  # the path the user gave
    assert "b'" not in lines[0]  # the checksums in hex, not as Python bytes
    assert not (tmp_path / "q.zarr").exists()
    if command == "inspect":  # the table is shown, the damaged chunk counted in it
        assert "damaged" in out.split("└")[0]  # a column of the table
        assert "damaged: 1 chunk(s)" in out
        code, out, _ = run("inspect", path / "temp", "--json")
        assert code == 1
        (array,) = json.loads(out)["arrays"]
        assert array["stored_chunks"] == 4
        assert sum(array["mask_counts"].values()) == 3  # the others' masks, counted
        assert [(d["key"], d["codec"]) for d in array["damaged"]] == [("c/1/0", "crc32c")]


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_inventory_marks_damaged_chunks_on_request(tmp_path: Path, sharded: bool) -> None:
    from zarrext.errors import ChunkDecodeError

    z = zarrext.create_array(
        str(tmp_path / "a.zarr"), shape=(16, 16), chunks=(8, 8), dtype="float32",
        shards=(16, 8) if sharded else None,
        compressors=[zarrext.ConditionalCodec([ZstdCodec(level=1)]), Crc32cCodec()],
        decision="compress_if_smaller",
    )
    z[...] = np.linspace(0, 1, 256, dtype="float32").reshape(16, 16)
    key = "c/0/0" if sharded else "c/1/0"
    path = tmp_path / "a.zarr" / key
    raw = bytearray(path.read_bytes())
    # a chunk file's crc32c at its end; in a shard, inner chunk (1, 0)'s: the one
    # just before the index (64 + 4 bytes at the end)
    raw[-1 - (68 if sharded else 0)] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ChunkDecodeError):
        inventory(z)
    inv = inventory(z, on_damage="mark")
    assert len(inv.chunks) == 4
    (error,) = inv.damaged
    assert (error.key, error.inner) == (key, (1, 0) if sharded else None)
    (bad,) = [c for c in inv.chunks if c.damaged]
    assert bad.index == (1, 0)
    assert bad.mask is None
    assert sum(inv.mask_counts.values()) == 3


def test_inventory_of_a_transposed_sharded_array_lists_every_inner_chunk(tmp_path: Path) -> None:
    """A transpose before the sharding codec: inner chunks live in its axes, where
    a (4, 5) array is (5, 4), two inner chunks of (4, 4) down the first axis."""
    from zarr.codecs import TransposeCodec

    z = zarr.create_array(tmp_path / "t.zarr", shape=(4, 5), chunks=(8, 8), dtype="int32",
                          filters=[TransposeCodec(order=(1, 0))], compressors=None,
                          serializer=ShardingCodec(chunk_shape=(4, 4)))
    z[...] = 1
    inv = inventory(z)
    assert inv.grid_shape == (2, 1)
    assert sorted(c.index for c in inv.chunks) == [(0, 0), (1, 0)]


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_inventory_keeps_requests_in_flight(tmp_path: Path, sharded: bool) -> None:
    """Stored objects are fetched many at a time (an object store's latency is paid
    once per batch, not per object), each once."""
    from zarr.storage import LocalStore

    from tests.conftest import CountingStore

    layout = {"shards": (8, 8)} if sharded else {}
    z = zarrext.create_array(str(tmp_path / "a.zarr"), shape=(64, 64), chunks=(4, 4),
                             dtype="uint8", compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
                             decision="compress_if_smaller", **layout)
    z[...] = 7
    store = CountingStore(LocalStore(tmp_path / "a.zarr", read_only=True))
    inv = inventory(zarr.open_array(store, mode="r"))
    assert len(inv.chunks) == 256
    objects = [k for k in store.gets if k.startswith("c/")]
    assert len(objects) == (64 if sharded else 256)
    assert all(store.gets[k] == 1 for k in objects)
    assert store.most_in_flight > 2


# -- stored bytes: the objects' sizes as the store holds them (issue 27.3) --

CHAINS = {
    "plain": {"compressors": None},
    "zstd": {"compressors": [ZstdCodec(level=3)]},
    "conditional+crc32c": {"compressors": [zarrext.ConditionalCodec([ZstdCodec()]),
                                           Crc32cCodec()]},
    "sharded": {"serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec()]),
                "compressors": None},
    # zarr's default compressor (zstd) after sharding_indexed: shards compressed whole
    "sharded+default-zstd": {"serializer": ShardingCodec(chunk_shape=(8, 8),
                                                         codecs=[BytesCodec()])},
    "sharded+inner-zstd+gzip": {
        "serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), ZstdCodec()]),
        "compressors": [GzipCodec(level=1)]},
}


def _sizes_in_store(url: str, options: dict[str, Any] | None) -> int:
    """Sum of the chunk (shard) objects' sizes, from the store's own listing."""
    async def total() -> int:
        store = await make_store_path(url, storage_options=options, mode="r")
        keys = [k async for k in store.store.list() if not k.endswith("zarr.json")]
        sizes = [await store.store.getsize(k) for k in keys]
        return sum(sizes)

    return sync(total())


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_stored_bytes_are_the_objects_sizes_in_the_store(
    run: Run, tmp_path: Path, request: pytest.FixtureRequest, where: str, chain: str,
) -> None:
    """``info``, ``inspect --json`` and the inventory report what the store holds,
    never shards counted decoded (with zstd after sharding_indexed they were 1.00x)."""
    if where == "s3":
        s3 = request.getfixturevalue("s3")
        url, options = f"{s3['url']}/a.zarr", s3["options"]
        extra = ["--storage-options", json.dumps(options)]
    else:
        url, options, extra = str(tmp_path / "a.zarr"), None, []
    rng = np.random.default_rng(len(chain))
    store = zarr.storage.FsspecStore.from_url(url, storage_options=options) if options else url
    a = zarr.create_array(store, shape=(48, 40), chunks=(16, 16), dtype="float32",
                          fill_value=0.0, **CHAINS[chain])
    values = rng.integers(0, 50, (48, 40)).astype("float32")
    values[32:] = 0  # a row of empty chunks (not stored)
    a[:] = values
    expected = _sizes_in_store(url, options)
    if where == "local":  # the same figure from the file system
        files = [p for p in (tmp_path / "a.zarr").rglob("*")
                 if p.is_file() and p.name != "zarr.json"]
        assert expected == sum(p.stat().st_size for p in files)
    assert inventory(zarr.open_array(store, mode="r")).stored_bytes == expected
    code, out, err = run("info", url, "--json", *extra)
    assert code == 0, err
    assert json.loads(out)["stored_bytes"] == expected
    code, out, err = run("inspect", url, "--json", *extra)
    assert code == 0, err
    report = json.loads(out)["arrays"][0]
    assert report["stored_bytes"] == expected
    # the inner chunks' own figure, labelled: decoded shards' bytes when codecs follow
    assert report["chunk_bytes"] == inventory(zarr.open_array(store, mode="r")).chunk_bytes


@pytest.mark.parametrize("where", ["local", "s3"])
def test_info_asks_each_objects_size_and_reads_no_shard(
    tmp_path: Path, request: pytest.FixtureRequest, where: str
) -> None:
    """``info`` sums the objects' sizes as the store gives them; a shard is not
    fetched for its index (terabytes of shards on an object store would be read)."""
    from tests.conftest import CountingStore
    from zarrext.inspection import node_info

    if where == "s3":
        s3 = request.getfixturevalue("s3")
        inner: Any = zarr.storage.FsspecStore.from_url(f"{s3['url']}/a.zarr",
                                                       storage_options=s3["options"])
    else:
        inner = zarr.storage.LocalStore(tmp_path / "a.zarr")
    a = zarr.create_array(inner, shape=(64, 64), chunks=(8, 8), shards=(32, 32),
                          dtype="float32", fill_value=0.0, compressors=[ZstdCodec(level=1)])
    a[:] = np.arange(64 * 64, dtype="float32").reshape(64, 64)
    seen: Counter[str] = Counter()

    class Counting(CountingStore):  # jobs reopen the store: its copies count here too
        def __init__(self, store: Any) -> None:
            super().__init__(store)
            self.gets = seen

        async def getsize(self, key: str) -> int:  # the store's own, not a get
            return await self._store.getsize(key)

    counting = Counting(inner)
    info = node_info(zarr.open_array(counting, mode="r"))
    assert info["stored_bytes"] == _sizes_in_store(
        f"{s3['url']}/a.zarr" if where == "s3" else str(tmp_path / "a.zarr"),
        s3["options"] if where == "s3" else None,
    )
    assert [k for k in seen if k.startswith("c/")] == []  # no shard read
    # the full inventory still reads each shard once, for its index
    seen.clear()
    assert len(inventory(zarr.open_array(counting, mode="r")).chunks) == 64
    assert sorted(k for k in seen if k.startswith("c/")) == [
        "c/0/0", "c/0/1", "c/1/0", "c/1/1"]
