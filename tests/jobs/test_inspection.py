"""``zarrext.jobs.inspection``: stored chunks, sizes and conditional masks."""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec

import zarrext
from tests import shard_bytes
from tests.conftest import Run
from zarrext.jobs.inspection import conditional_placement, inventory, stored_chunk_keys


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
        assert "damaged: 1 chunk whose" in out
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


# -- bytes: counted one way by every report (issues 27.3, 34.6) --
#
# stored: the encoded chunks' own bytes (a shard's index and free space not counted;
# a shard compressed whole by codecs after sharding_indexed counts whole); objects:
# the objects' sizes as the store holds them; on disk: what a local file system
# allocates for them.

CHAINS = {
    "plain": {"compressors": None},
    "zstd": {"compressors": [ZstdCodec(level=3)]},
    "conditional+crc32c": {"compressors": [zarrext.ConditionalCodec([ZstdCodec()]),
                                           Crc32cCodec()]},
    # 16x16 shards of 8x8 chunks on a 48x40 array: the last column of shards reaches
    # past the array's edge, their inner chunks there hold nothing
    "sharded": {"serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec()]),
                "compressors": None},
    "sharded+index-at-start": {
        "serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), ZstdCodec()],
                                    index_location="start"),
        "compressors": None},
    # zarr's default compressor (zstd) after sharding_indexed: shards compressed whole
    "sharded+default-zstd": {"serializer": ShardingCodec(chunk_shape=(8, 8),
                                                         codecs=[BytesCodec()])},
    "sharded+inner-zstd+gzip": {
        "serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), ZstdCodec()]),
        "compressors": [GzipCodec(level=1)]},
}

EMPTY = 2**64 - 1


def _chunks_in_shard(shard: bytes, per_shard: tuple[int, int], inside: tuple[int, int],
                     location: str) -> int:
    """The bytes of a bare shard's inner chunks inside the array, read from its index
    as spec 001 lays it out (little-endian uint64 offset and nbytes per inner chunk,
    C order, then a crc32c): built by hand, not by zarrext."""
    n = per_shard[0] * per_shard[1]
    size = 16 * n + 4
    index = shard[:size] if location == "start" else shard[-size:]
    entries = np.frombuffer(index[:-4], dtype="<u8").reshape(*per_shard, 2)
    entries = entries[: inside[0], : inside[1]]
    present = entries[..., 0] != EMPTY
    return int(entries[..., 1][present].sum())


def _expected_bytes(objects: dict[str, bytes], shape: tuple[int, int], kwargs: dict[str, Any],
                    shard: tuple[int, int] = (16, 16)) -> tuple[int, int]:
    """(stored, objects) of an array whose chunk objects are ``objects`` (keys like
    ``c/0/1``), from the bytes themselves."""
    chunk_objects = {k: v for k, v in objects.items() if k.startswith("c/")}
    total = sum(len(v) for v in chunk_objects.values())
    serializer = kwargs.get("serializer")
    after = kwargs.get("compressors", "default")
    if not isinstance(serializer, ShardingCodec) or after is not None:
        return total, total  # chunks, or shards compressed whole: the objects are the chunks
    inner = serializer.chunk_shape
    per_shard = (shard[0] // inner[0], shard[1] // inner[1])
    stored = 0
    for key, data in chunk_objects.items():
        i, j = (int(p) for p in key.split("/")[1:])
        inside = tuple(
            max(0, min(k, -(-s // c) - o * k))
            for s, c, k, o in zip(shape, inner, per_shard, (i, j), strict=True)
        )
        stored += _chunks_in_shard(data, per_shard, inside, str(serializer.index_location))
    return stored, total


def _cli(run: Run, where: Any, command: str, name: str, *args: str) -> Any:
    extra = ["--storage-options", json.dumps(where.options)] if where.options else []
    code, out, err = run(command, where.location(name), "--json", *args, *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_stored_bytes_are_the_chunks_own_bytes_everywhere(
    run: Run, where: Any, chain: str
) -> None:
    """``info``, ``inspect``, ``check`` and the inventory count the chunks' bytes as
    stored and the objects' sizes apart, both from the same rule (never a shard's
    index or free space as stored; never shards counted decoded)."""
    rng = np.random.default_rng(len(chain))
    url = where.location("a.zarr")
    store = zarr.storage.FsspecStore.from_url(url, storage_options=where.options) if (
        where.options) else url
    a = zarr.create_array(store, shape=(48, 40), chunks=(16, 16), dtype="float32",
                          fill_value=0.0, **CHAINS[chain])
    values = rng.integers(0, 50, (48, 40)).astype("float32")
    values[32:] = 0  # a row of empty chunks (not stored)
    a[:] = values
    stored, objects = _expected_bytes(where.stored("a.zarr"), (48, 40), CHAINS[chain])
    if chain == "sharded":  # uncompressed: the chunks are the values of the first 32 rows
        assert stored == 32 * 40 * 4 < objects
    inv = inventory(zarr.open_array(store, mode="r"))
    assert (inv.stored_bytes, inv.object_bytes) == (stored, objects)
    totals = inventory(zarr.open_array(store, mode="r"), list_chunks=False)
    assert (totals.stored_bytes, totals.object_bytes) == (stored, objects)
    info = _cli(run, where, "info", "a.zarr")
    assert (info["stored_bytes"], info["object_bytes"]) == (stored, objects)
    report = _cli(run, where, "inspect", "a.zarr")["arrays"][0]
    assert (report["stored_bytes"], report["object_bytes"]) == (stored, objects)
    # the inner chunks' own figure, labelled: decoded shards' bytes when codecs follow
    assert report["chunk_bytes"] == inv.chunk_bytes
    if report["shards"] is not None:
        assert sum(s["stored_bytes"] for s in report["shards"]) == stored
    checked = _cli(run, where, "check", "a.zarr")["arrays"][0]
    assert (checked["stored_bytes"], checked["object_bytes"]) == (stored, objects)


def _sharded(store: Any, path: str | None = None) -> zarr.Array:
    """100x100 float32 in 64x64 shards of 16x16 chunks (edge shards reach past the
    array), uncompressed: its chunks hold exactly the values (edge chunks whole)."""
    kwargs: dict[str, Any] = {"name": path} if path is not None else {}
    create = store.create_array if isinstance(store, zarr.Group) else functools.partial(
        zarr.create_array, store)
    a = create(shape=(100, 100), chunks=(16, 16), shards=(64, 64), dtype="float32",
               compressors=None, **kwargs)
    a[:] = np.random.default_rng(0).random((100, 100), dtype="float32")
    return a


def _open(where: Any, name: str, mode: str = "r") -> Any:
    if where.options:
        return zarr.storage.FsspecStore.from_url(
            where.location(name), storage_options=where.options, read_only=mode == "r")
    return where.location(name)


def test_info_inspect_and_check_agree_on_groups_roots_and_after_expand_and_compact(
    run: Run, where: Any
) -> None:
    """The same figures from every command for an array at the root, sharded arrays
    and an unsharded one in a group (as ngff-zarr writes a multiscale), after
    ``expand`` (local only: fixed slots are files) and after ``compact``."""
    values_bytes = 7 * 7 * 16 * 16 * 4  # 49 chunks, those at the edges stored whole
    root = _sharded(_open(where, "root.zarr", "w"))
    group = zarr.open_group(_open(where, "g.zarr", "w"), mode="w")
    _sharded(group, "0")
    _sharded(group.create_group("labels"), "1")
    plain = group.create_array("plain", shape=(50,), chunks=(20,), dtype="int32",
                               compressors=[ZstdCodec()])
    plain[:] = np.arange(50, dtype="int32")
    del root

    def figures() -> dict[str, tuple[int, int]]:
        """(stored, objects) per array path, as each command gives them; all alike."""
        out = {}
        for name in ("root.zarr", "g.zarr"):
            info = _cli(run, where, "info", name)
            listed = {m["path"]: m for m in _members(info)}
            inspected = {a["path"]: a for a in _cli(run, where, "inspect", name)["arrays"]}
            checked = {a["array"]: a for a in _cli(run, where, "check", name)["arrays"]}
            assert set(listed) == set(inspected) == set(checked)
            for path, entry in listed.items():
                both = (entry["stored_bytes"], entry["object_bytes"])
                for other in (inspected[path], checked[path]):
                    assert (other["stored_bytes"], other["object_bytes"]) == both, (name, path)
                out[f"{name}/{path}"] = both
            assert info["stored_bytes"] == sum(
                v[0] for k, v in out.items() if k.startswith(f"{name}/"))
        return out

    before = figures()
    sharded = ["root.zarr//", "g.zarr/0", "g.zarr/labels/1"]
    for name in sharded:  # the chunks hold the values, no more; the objects their index too
        assert before[name][0] == values_bytes < before[name][1]
    stored_plain = sum(len(v) for k, v in where.stored("g.zarr").items()
                       if k.startswith("plain/c/"))
    assert before["g.zarr/plain"] == (stored_plain, stored_plain)
    if where.local:
        for name in ("root.zarr", "g.zarr"):
            code, _, err = run("expand", where.location(name))
            assert code == 0, err
        expanded = figures()
        for name in sharded:  # no chunk changed: stored the same; free space in the objects
            assert expanded[name][0] == values_bytes
            assert expanded[name][1] > before[name][1]
        for name in ("root.zarr", "g.zarr"):
            code, _, err = run("compact", where.location(name))
            assert code == 0, err
    assert figures() == before


def _members(info: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every array of an ``info`` tree."""
    if info["type"] == "array":
        yield info
    for member in info.get("members", ()):
        yield from _members(member)


def test_info_allocated_bytes_of_arrays_in_groups_and_at_the_root(
    run: Run, where: Any
) -> None:
    """``allocated_bytes`` ("on disk") is what the file system allocates for the
    array's own files wherever the array sits (it read 0 for every array inside a
    group, even right after compact); None on an object store."""
    _sharded(_open(where, "root.zarr", "w"))
    group = zarr.open_group(_open(where, "g.zarr", "w"), mode="w")
    _sharded(group.create_group("multiscale"), "0")
    plain = group.create_array("plain", shape=(50,), chunks=(20,), dtype="int32")
    plain[:] = np.arange(50, dtype="int32")
    for name, prefix in (("root.zarr", ""), ("g.zarr", "multiscale/0/"), ("g.zarr", "plain/")):
        info = _cli(run, where, "info", name)
        (entry,) = [m for m in _members(info) if m["path"] == (prefix.rstrip("/") or "/")]
        if not where.local:
            assert entry["allocated_bytes"] is None
            continue
        files = [p for p in Path(where.location(name), prefix).rglob("*")
                 if p.is_file() and p.name != "zarr.json"]
        assert entry["allocated_bytes"] == sum(p.stat().st_blocks * 512 for p in files) > 0
        code, out, _ = run("info", where.location(name))
        assert code == 0
        assert " 0 on disk" not in out


def test_info_reads_of_each_shard_only_its_index(where: Any) -> None:
    """``info`` asks the store each object's size and reads of a shard only its
    index (a byte range of the index's size), for its chunks' sizes: a shard is never
    fetched whole (terabytes of shards on an object store would be read)."""
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest

    from tests.conftest import CountingStore
    from zarrext.jobs.node_info import node_info

    inner: Any
    if where.options:
        inner = zarr.storage.FsspecStore.from_url(where.location("a.zarr"),
                                                  storage_options=where.options)
    else:
        inner = zarr.storage.LocalStore(where.location("a.zarr"))
    a = zarr.create_array(inner, shape=(64, 64), chunks=(8, 8), shards=(32, 32),
                          dtype="float32", fill_value=0.0, compressors=[ZstdCodec(level=1)])
    a[:] = np.arange(64 * 64, dtype="float32").reshape(64, 64)
    ranges: list[tuple[str, Any]] = []

    class Counting(CountingStore):  # jobs reopen the store: its copies count here too
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            ranges.append((key, byte_range))
            return await self._store.get(key, prototype, byte_range)

        async def getsize(self, key: str) -> int:  # the store's own, not a get
            return await self._store.getsize(key)

    counting = Counting(inner)
    info = node_info(zarr.open_array(counting, mode="r"))
    index_size = 16 * 16 + 4
    assert sorted(k for k, _ in ranges if k.startswith("c/")) == [
        "c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    assert {type(r) for k, r in ranges if k.startswith("c/")} == {SuffixByteRequest}
    assert {r.suffix for k, r in ranges if isinstance(r, SuffixByteRequest)} == {index_size}
    assert not any(isinstance(r, RangeByteRequest) for _, r in ranges)
    stored, objects = _expected_bytes(where.stored("a.zarr"), (64, 64),
                                      {"serializer": ShardingCodec(chunk_shape=(8, 8)),
                                       "compressors": None}, shard=(32, 32))
    assert (info["stored_bytes"], info["object_bytes"]) == (stored, objects)
    # the full inventory still reads each shard once
    ranges.clear()
    assert len(inventory(zarr.open_array(counting, mode="r")).chunks) == 64
    assert sorted(k for k, _ in ranges if k.startswith("c/")) == [
        "c/0/0", "c/0/1", "c/1/0", "c/1/1"]


_EDGE_VALUES = (0, 1, 2**63, 2**64 - 2, 2**64 - 1)  # EMPTY alone, and what wraps around


@st.composite
def _index_tables(draw: st.DrawFn) -> tuple[tuple[int, ...], int, np.ndarray]:
    """A shard's chunk grid, its size, and an index table of entries stored, missing
    (``2**64 - 1`` twice), half missing, reaching past the end or wrapping around."""
    grid = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    shard_size = draw(st.integers(shard_bytes.index_size(int(np.prod(grid))), 4096))
    entry = st.one_of(
        st.tuples(st.integers(0, shard_size + 2), st.integers(0, shard_size + 2)),
        st.just((shard_bytes.EMPTY, shard_bytes.EMPTY)),
        st.tuples(st.sampled_from(_EDGE_VALUES), st.sampled_from(_EDGE_VALUES)),
    )
    table = np.array(draw(st.lists(entry, min_size=int(np.prod(grid)),
                                   max_size=int(np.prod(grid)))), dtype=np.uint64)
    return grid, shard_size, table.reshape(-1, 2)


def _entries_one_by_one(table: np.ndarray, grid: tuple[int, ...],
                        shard_size: int) -> list[Any] | str:
    """Each stored entry as zarr's ``get_chunk_slice`` gives it, in C order, or the
    first entry outside the shard (what the index is refused for)."""
    found = []
    for flat, local in enumerate(np.ndindex(grid)):
        start, length = (int(v) for v in table[flat])
        if (start, length) == (shard_bytes.EMPTY, shard_bytes.EMPTY):
            continue
        if not start + length <= shard_size:
            return f"inner chunk {local} spans bytes {start}..{start + length}"
        found.append((local, (start, start + length)))
    return found


@settings(max_examples=300, deadline=None)
@given(_index_tables())
def test_index_entries_are_those_of_the_index_entry_by_entry(
    case: tuple[tuple[int, ...], int, np.ndarray],
) -> None:
    """A shard index built by hand from spec 001's layout gives the entries zarr's
    ``get_chunk_slice`` gives one by one; an index with an entry outside the shard
    (past its end, or wrapping around 2**64) is refused naming the first such entry,
    and the totals count exactly the stored entries within the array's grid."""
    from zarr.core.buffer import default_buffer_prototype

    from zarrext.jobs.inspection import index_entries, index_extents

    grid, shard_size, table = case
    sharding = ShardingCodec(chunk_shape=(1,) * len(grid))
    index = default_buffer_prototype().buffer.from_bytes(shard_bytes.encode_index(table))
    expected = _entries_one_by_one(table, grid, shard_size)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(f"shard 'k': {expected}, outside")):
            index_entries(sharding, index, grid, shard_size, "k")
        return
    assert list(index_entries(sharding, index, grid, shard_size, "k")) == expected
    extents = index_extents(sharding, index, grid, shard_size, "k")
    stored = {local: stop - start for local, (start, stop) in expected}
    assert {local: int(extents.stops[local] - extents.starts[local])
            for local in np.ndindex(grid) if extents.present[local]} == stored


def test_an_index_that_does_not_decode_is_refused() -> None:
    """A checksum that does not match, and an index of another size, are refused."""
    from zarr.core.buffer import default_buffer_prototype

    from zarrext.jobs.inspection import index_entries

    encoded = bytearray(shard_bytes.encode_index(np.zeros((4, 2), np.uint64)))
    encoded[-1] ^= 0xFF
    index = default_buffer_prototype().buffer.from_bytes(bytes(encoded))
    with pytest.raises(ValueError, match="checksum"):
        index_entries(ShardingCodec(chunk_shape=(1,)), index, (4,), 1000, "k")
    with pytest.raises(ValueError, match="shorter than its 68-byte index"):
        index_entries(ShardingCodec(chunk_shape=(1,)), index[:-1], (4,), 1000, "k")


@pytest.mark.parametrize("location", ["start", "end"])
def test_totals_leave_out_inner_chunks_beyond_the_arrays_edge(
    tmp_path: Path, location: str,
) -> None:
    """A shard (built by hand) whose index also holds chunks beyond the array's edge
    (a shard written before the array shrank, or by another writer) counts only the
    chunks within the array in its stored bytes, as the chunks the inventory lists."""
    z = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=(5, 3), dtype="uint8", fill_value=0,
        serializer=ShardingCodec(chunk_shape=(1, 1), codecs=[BytesCodec()],
                                 index_location=location), compressors=None)
    assert z.shards == (5, 3)  # one shard of 5x3 inner chunks
    z.resize((3, 2))  # rows 3, 4 and column 2 now beyond the edge; the shard stays
    n = 15
    start = shard_bytes.index_size(n) if location == "start" else 0
    placed = {flat: (start + 2 * flat, bytes([flat, flat])[: 1 + flat % 2])
              for flat in range(n)}
    (tmp_path / "a.zarr" / "c" / "0").mkdir(parents=True)
    (tmp_path / "a.zarr" / "c" / "0" / "0").write_bytes(
        shard_bytes.shard_file(n, placed, location, start + 2 * n))
    inside = {flat: len(data) for flat, (_, data) in placed.items() if flat // 3 < 3
              and flat % 3 < 2}
    totals = inventory(str(tmp_path / "a.zarr"), read_masks=False, list_chunks=False)
    listed = inventory(str(tmp_path / "a.zarr"), read_masks=False)
    assert totals.stored_sizes == {"c/0/0": sum(inside.values())}
    assert sorted(c.nbytes for c in listed.chunks) == sorted(inside.values())
