"""Objects' sizes from one listing of the store (``zarrext.stores.object_sizes``), and
``inventory``'s totals from it (issue 37): the same keys and sizes as one
``getsize`` per key, one LIST request instead of a HEAD per object on S3."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import zarr
import zarr.storage
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrext
import zarrext.jobs.inspection
from zarrext.jobs.inspection import inventory
from zarrext.stores import list_keys, object_sizes, open_store

SHAPE = (48, 40)  # 8x8 chunks: a 6x5 grid; 16x16 shards: 3x3, the last column partial

LAYOUTS: dict[str, dict[str, Any]] = {
    "chunks": {"compressors": [ZstdCodec(level=1)]},
    "sharded": {"shards": (16, 16), "compressors": [ZstdCodec(level=1)]},
    "sharded+index-at-start": {
        "serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), ZstdCodec()],
                                    index_location="start"),
        "compressors": None},
    # shards compressed whole (a codec after sharding_indexed): they count whole
    "sharded+zstd-after": {
        "serializer": ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec()]),
        "compressors": [ZstdCodec(level=1)]},
    "conditional": {"compressors": [zarrext.ConditionalCodec([ZstdCodec()])],
                    "decision": "compress_if_smaller"},
    "sharded+conditional": {"shards": (16, 16),
                            "compressors": [zarrext.ConditionalCodec([ZstdCodec()])],
                            "decision": "compress_if_smaller"},
    "v2-keys": {"chunk_key_encoding": {"name": "v2", "separator": "."},
                "compressors": [ZstdCodec(level=1)]},
    "v2-keys+sharded": {"chunk_key_encoding": {"name": "v2", "separator": "."},
                        "shards": (16, 16), "compressors": [ZstdCodec(level=1)]},
}

# Objects under an array's path that are none of its chunks: out of the grid, of
# another rank, no chunk key at all, a hidden file (a lock, say).
FOREIGN = {
    "default": ["c/99/0", "c/0/0/0", "notes.txt", ".lock", "c/x/1"],  # c/0/0: fill
    "v2": ["99.0", "1.2.3", "notes.txt", ".lock", "x.1"],
}


def _store(where: Any, name: str, kind: str, mode: str = "r") -> Any:
    """The store at ``where``'s ``name``: as zarrext opens it (obstore for S3, a local
    directory), or zarr's FsspecStore (s3fs)."""
    if kind == "fsspec":
        if where.options:
            return zarr.storage.FsspecStore.from_url(
                where.location(name), storage_options=where.options, read_only=mode == "r")
        return zarr.storage.FsspecStore.from_url(  # fsspec's local file system
            f"file://{where.location(name)}", storage_options={"auto_mkdir": True},
            read_only=mode == "r")
    return open_store(where.location(name), mode=mode, storage_options=where.options)


def _fill(array: Any) -> None:
    """Values that leave some chunks unwritten (all fill value) and vary the rest's
    sizes, so that objects differ and some are missing."""
    values = np.arange(np.prod(array.shape), dtype="int32").reshape(array.shape) % 977
    values[:16, :16] = 0  # a whole shard (and its chunks) of fill: not stored
    values[40:, 8:] = np.random.default_rng(0).integers(0, 2**31, size=(8, 32))
    array[...] = values


def _make(store: Any, path: str, layout: str) -> Any:
    """An array at ``path`` of ``store`` in ``layout``, filled, with foreign objects."""
    kwargs = dict(LAYOUTS[layout])
    if "serializer" not in kwargs:
        kwargs.setdefault("chunks", (8, 8))
    else:
        kwargs["chunks"] = (16, 16)  # the shard's shape, its inner chunks the serializer's
    array = zarrext.create_array(zarr.storage.StorePath(store, path), shape=SHAPE,
                                 dtype="int32", fill_value=0, **kwargs)
    _fill(array)
    foreign = FOREIGN["v2" if layout.startswith("v2") else "default"]
    for key in foreign:
        sync(store.set(f"{path}/{key}",
                       default_buffer_prototype().buffer.from_bytes(b"not a chunk")))
    return array


def _totals(array: Any) -> tuple[dict[str, int], dict[str, int], int]:
    found = inventory(array, read_masks=False, list_chunks=False)
    return found.object_sizes, found.stored_sizes, found.store_keys


@pytest.mark.parametrize("kind", ["zarrext", "fsspec"])
def test_object_sizes_are_the_listed_keys_with_their_sizes(where: Any, kind: str) -> None:
    """The keys ``list_keys`` gives under any prefix (an array's, a sibling's whose
    name starts alike, a group's, the root, one that holds nothing), each with the
    size ``getsize`` gives."""
    store = _store(where, "t.zarr", kind, mode="w")
    group = zarr.open_group(store, mode="w")
    for name in ("a", "ab"):
        group.create_array(name, shape=(10, 10), chunks=(3, 3), dtype="uint8")[:7, :] = 5
    group.create_group("a_group").create_array("x", shape=(4,), chunks=(2,), dtype="f8")[:] = 1
    sync(store.set("a/.hidden/x", default_buffer_prototype().buffer.from_bytes(b"xyz")))
    read = _store(where, "t.zarr", kind)
    for prefix in ("", "a/", "ab/", "a_group/", "a_group/x/", "a/c/", "missing/"):
        sizes = object_sizes(read, prefix)
        assert sizes is not None
        keys = list_keys(read, prefix)
        assert sorted(sizes) == keys
        assert sizes == {k: sync(read.getsize(k)) for k in keys}
    assert len(object_sizes(read, "a/") or {}) == 1 + 3 * 4 + 1  # zarr.json, 12 chunks, .hidden


def test_a_local_listing_keys_files_as_zarr_lists_them(tmp_path: Any) -> None:
    """A local directory's sizes are keyed as ``LocalStore.list_prefix`` keys its files,
    under prefixes pathlib would write otherwise (a doubled or a ``./`` separator, a
    trailing one), through a link to a file, at the root and levels down."""
    import os

    store = zarr.storage.LocalStore(tmp_path)
    for key in ("a/c/0/0", "a/c/1/0", "a/zarr.json", "b.txt", "a/c/0/deep/x"):
        sync(store.set(key, default_buffer_prototype().buffer.from_bytes(b"v" * len(key))))
    os.symlink(tmp_path / "b.txt", tmp_path / "a" / "link")
    for prefix in ("", "a", "a/", "a//c/", "./a/c", "a/c/0", "missing"):
        sizes = object_sizes(store, prefix)
        keys = list_keys(store, prefix)
        assert sizes is not None, prefix
        assert sorted(sizes) == keys, prefix
        assert sizes == {k: sync(store.getsize(k)) for k in keys}, prefix
    linked = object_sizes(store, "a")
    assert linked is not None
    assert linked["a/link"] == len("b.txt")  # the size of the file linked to


def test_stores_that_cannot_list_sizes_say_none(tmp_path: Any) -> None:
    memory = zarr.storage.MemoryStore()
    zarr.create_array(memory, shape=(4,), chunks=(2,), dtype="u1")[:] = 1
    assert object_sizes(memory, "") is None
    local = zarr.storage.LocalStore(tmp_path)
    wrapped = zarr.storage.LoggingStore(local)  # a store wrapping another: its own requests
    assert object_sizes(wrapped, "") is None
    assert object_sizes(local, "") == {}


@pytest.mark.parametrize("kind", ["zarrext", "fsspec"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_inventory_totals_from_the_listing_are_those_of_getsize(
    where: Any, monkeypatch: pytest.MonkeyPatch, layout: str, kind: str
) -> None:
    """Arrays in a group beside arrays whose names start alike ('a', 'ab', 'a.b'),
    foreign objects among their chunks: the totals from one listing equal those from
    one ``getsize`` per key, key by key, and the stored bytes those of the full
    inventory (which reads every object)."""
    store = _store(where, "g.zarr", kind, mode="w")
    zarr.open_group(store, mode="w")
    paths = ("a", "ab", "a.b")
    for path in paths:
        _make(store, path, layout)
    read = _store(where, "g.zarr", kind)
    for path in paths:
        array = zarr.open_array(read, path=path, mode="r")
        assert object_sizes(read, f"{path}/") is not None  # the listing is used here
        listed = _totals(array)
        with monkeypatch.context() as m:
            m.setattr(zarrext.jobs.inspection, "object_sizes", lambda store, prefix: None)
            asked = _totals(array)
        assert listed == asked
        object_sizes_, stored_sizes, keys = listed
        assert keys == len(object_sizes_) > 0
        assert all(k.startswith(f"{path}/") for k in object_sizes_)
        full = inventory(array, read_masks=False)
        assert (full.object_sizes, full.stored_sizes) == (object_sizes_, stored_sizes)


def test_an_array_at_the_root_counts_its_chunks_alone(where: Any) -> None:
    """An array at the store's root: prefix ``""``, the whole store listed; the
    foreign objects and zarr.json are not counted."""
    store = _store(where, "r.zarr", "zarrext", mode="w")
    array = zarrext.create_array(store, shape=SHAPE, chunks=(8, 8), shards=(16, 16),
                                 dtype="int32", fill_value=0)
    _fill(array)
    sync(store.set("notes.txt", default_buffer_prototype().buffer.from_bytes(b"x")))
    read = _store(where, "r.zarr", "zarrext")
    sizes = object_sizes(read, "")
    assert sizes is not None
    totals = _totals(zarr.open_array(read, mode="r"))
    chunk_keys = {k for k in sizes if k.startswith("c/")}
    assert totals[0] == {k: sizes[k] for k in chunk_keys}
    assert totals[2] == len(chunk_keys) == 8  # 9 shards, the one of fill not stored


# -- requests on S3: one LIST, no HEAD per object --


class _CountingProxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy on loopback to the S3 server that counts requests by method (and
    LISTs apart: GET of the bucket with ``list-type``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _CountingProxy

    def _forward(self) -> None:
        kind = "LIST" if self.command == "GET" and "list-type=" in self.path else self.command
        with self.server.lock:
            self.server.counts[kind] += 1
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response(answer.status, answer.reason)
            for k, v in answer.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def counting_proxy(s3_server: str) -> Iterator[_CountingProxy]:
    proxy = _CountingProxy(s3_server)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.parametrize("layout", ["chunks", "sharded"])
def test_inventory_on_s3_lists_once_instead_of_a_head_per_object(
    s3: dict[str, Any], counting_proxy: _CountingProxy, monkeypatch: pytest.MonkeyPatch,
    layout: str,
) -> None:
    """The totals of an array on S3 (as ``info`` and ``convert``'s report count them):
    one LIST request and no HEAD (a bare shard's index still read, one ranged GET
    per shard); without the listing, one HEAD per object."""
    url = f"{s3['url']}/a.zarr"
    _make(open_store(url, mode="w", storage_options=s3["options"]), "g", layout)
    through_proxy = {**s3["options"], "endpoint_url": counting_proxy.endpoint}
    array = zarr.open_array(open_store(url, storage_options=through_proxy), path="g", mode="r")
    # the objects stored: the chunks (shards) not all fill value, and 3 foreign keys
    values = array[...]
    block = (16, 16) if layout == "sharded" else (8, 8)
    stored = sum(
        bool(values[i : i + block[0], j : j + block[1]].any())
        for i in range(0, SHAPE[0], block[0]) for j in range(0, SHAPE[1], block[1])
    )
    assert len(list_keys(array.store_path.store, "g/c/")) == stored + 3
    shards = stored if layout == "sharded" else 0
    counting_proxy.counts.clear()
    listed = _totals(array)
    assert counting_proxy.counts == Counter({"LIST": 1, **({"GET": shards} if shards else {})})
    counting_proxy.counts.clear()
    with monkeypatch.context() as m:
        m.setattr(zarrext.jobs.inspection, "object_sizes", lambda store, prefix: None)
        asked = _totals(array)
    assert counting_proxy.counts == Counter(
        {"LIST": 1, "HEAD": stored, **({"GET": shards} if shards else {})})
    assert listed == asked
