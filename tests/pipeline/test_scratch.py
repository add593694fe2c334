"""Tests for zarrext.pipeline.scratch: memory each codec thread reuses for decodes and encodes.

Reads decode zstd into two buffers per thread; writes to a local store encode into
a per-job arena. Both must give exactly what zarr-python reads and writes, and no
arena memory may reach anything that outlives the job: a store that keeps buffers
(MemoryStore) or a decision that keeps chunk bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec
from zarr.storage import LocalStore, MemoryStore

import zarrext
import zarrext.pipeline.chunk_io
import zarrext.pipeline.codec_pipeline
import zarrext.pipeline.scratch as scratch
from tests.conftest import chunk_files, conditional, on_batched_path
from zarrext import ConditionalCodec, ShuffleCodec
from zarrext.codecs.decisions import ChunkEncoding, Decision
from zarrext.codecs.walk import walk_codecs
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline


def chunk_label(encoded: bytes, index: Any, shape: tuple[int, ...]) -> bytes:
    """A padding function: the chunk's index and its first encoded byte."""
    i, j = index
    return bytes([i, j, encoded[0], shape[0], 0xFF])


def pipeline_of(z: zarr.Array) -> ZarrextCodecPipeline:
    pipeline = z._async_array.codec_pipeline
    assert isinstance(pipeline, ZarrextCodecPipeline)
    return pipeline


DEFAULT_ARENA_MIN_BYTES = zarrext.pipeline.codec_pipeline.ARENA_MIN_BYTES


@pytest.fixture(autouse=True)
def arena_for_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arena writes for chunks of any size, so that these tests' small arrays use it
    (by default only chunks of ARENA_MIN_BYTES or more do)."""
    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "ARENA_MIN_BYTES", 0)


@pytest.fixture
def arena_takes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the arena buffers handed out while the test runs."""
    taken: list[int] = []
    real = scratch.arena_buffer

    def counting(nbytes: int) -> np.ndarray | None:
        out = real(nbytes)
        if out is not None:
            taken.append(nbytes)
        return out

    monkeypatch.setattr(scratch, "arena_buffer", counting)
    return taken


# -- the scratch forms of a chain ------------------------------------------------------------


def test_scratch_forms_reach_nested_chains_but_not_the_mask() -> None:
    """zstd, bytes, conditional and pad become their scratch forms at any depth in
    ``conditional`` and in ``optional``'s values; ``optional``'s mask codecs, codecs
    of other classes and a conditional's subclass keep their class (the subclass's
    nested codecs still become scratch forms); the settings stay."""
    from zarrext.codecs.optional import OptionalCodec
    from zarrext.codecs.packbits import PackBitsCodec
    from zarrext.codecs.pad import PadCodec

    class OwnHeader(ConditionalCodec):
        pass

    nested = ConditionalCodec([ShuffleCodec(element_size=4), ZstdCodec(level=4, checksum=True)],
                              header_bits=16, decision="compress_if_smaller")
    optional = OptionalCodec(mask_codecs=[PackBitsCodec(), ZstdCodec()],
                             data_codecs=[BytesCodec(endian="big"), nested],
                             name="zarrs.optional")
    own = OwnHeader([ZstdCodec(level=2)])
    pad = PadCodec(location="end", nbytes=16)
    got = scratch.scratch_codecs([optional, own, pad, Crc32cCodec()])
    assert [type(c) for c in got] == [OptionalCodec, OwnHeader, scratch.ScratchPadCodec,
                                      Crc32cCodec]
    assert [c.to_dict() for c in got] == [  # the same metadata
        c.to_dict() for c in (optional, own, pad, Crc32cCodec())
    ]
    mask, values = got[0].mask_codecs, got[0].data_codecs
    assert [type(c) for c in mask] == [PackBitsCodec, ZstdCodec]
    assert [type(c) for c in values] == [scratch.ScratchBytesCodec,
                                         scratch.ScratchConditionalCodec]
    assert values[0].endian == BytesCodec(endian="big").endian
    inner = values[1]
    assert (inner.header_bits, inner.decision) == (16, nested.decision)
    assert [type(c) for c in inner.codecs] == [ShuffleCodec, scratch.ScratchZstdCodec]
    assert (inner.codecs[1].level, inner.codecs[1].checksum) == (4, True)
    assert [type(c) for c in got[1].codecs] == [scratch.ScratchZstdCodec]
    assert got[2].nbytes == 16


# -- the arena ----------------------------------------------------------------------------


def test_arena_buffers_are_distinct_in_a_job_and_reused_by_the_next() -> None:
    assert scratch.arena_buffer(8) is None  # no arena open
    with scratch.encode_arena():
        first = [scratch.arena_buffer(100) for _ in range(scratch.ARENA_MAX_BUFFERS)]
        assert all(b is not None for b in first)
        bases = [b.base if b.base is not None else b for b in first]  # type: ignore[union-attr]
        assert len({id(b) for b in bases}) == scratch.ARENA_MAX_BUFFERS
        assert scratch.arena_buffer(100) is None  # the job holds them all: fresh memory
        with scratch.encode_arena():  # a block inside a block changes nothing
            assert scratch.arena_buffer(1) is None
        assert scratch.arena_buffer(1) is None
    assert scratch.arena_buffer(8) is None  # closed again
    with scratch.encode_arena():
        again = scratch.arena_buffer(50)
        assert again is not None
        assert np.shares_memory(again, first[0])
        assert scratch.arena_buffer(scratch.SCRATCH_MAX_BYTES + 1) is None
        bigger = scratch.arena_buffer(1000)  # the second buffer grows
        assert bigger is not None
        assert bigger.nbytes == 1000
        assert not np.shares_memory(bigger, again)


def test_arena_closes_when_the_job_fails() -> None:
    def failing_job() -> None:
        with scratch.encode_arena():
            assert scratch.arena_buffer(10) is not None
            raise RuntimeError("encode failed")

    with pytest.raises(RuntimeError, match="encode failed"):
        failing_job()
    assert scratch.arena_buffer(10) is None


def test_only_builtin_decisions_let_writes_use_the_arena() -> None:
    class Custom(Decision):
        def choose(self, chunk: ChunkEncoding) -> tuple[int, Any]:
            return 0, chunk.data

    def plain(chunk_index: Any, codec: Any, unencoded: Any) -> bool:
        return True

    for decision in ("compress_if_smaller", "always_apply", "never_apply", "smallest", 1,
                     zarrext.codecs.decisions.from_plan(np.zeros((2,), np.uint8))):
        assert scratch.keeps_no_chunk_bytes([BytesCodec(), conditional().with_decision(decision)])
    for decision in (Custom(), plain):
        codec = conditional().with_decision(decision)
        assert not scratch.keeps_no_chunk_bytes([BytesCodec(), codec])
        nested = conditional(codec)  # the user's decision one level down
        assert not scratch.keeps_no_chunk_bytes([nested.with_decision("always_apply")])
        in_optional = zarrext.OptionalCodec(
            mask_codecs=[zarrext.PackBitsCodec()], data_codecs=[BytesCodec(), codec]
        )
        assert not scratch.keeps_no_chunk_bytes([in_optional])


# -- writes -------------------------------------------------------------------------------


@pytest.mark.usefixtures("parallel_small_chunks")
@pytest.mark.parametrize(
    ("compressors", "decision"),
    [
        ([conditional()], "compress_if_smaller"),
        ([conditional()], "always_apply"),
        ([conditional(ShuffleCodec(element_size=4), ZstdCodec(level=1))], "smallest"),
        ([conditional(ShuffleCodec(element_size=4), ZstdCodec(level=1))], "compress_if_smaller"),
        ([conditional(), Crc32cCodec()], "compress_if_smaller"),
        ([ZstdCodec(level=1)], None),
        ([conditional(), zarrext.PadCodec(location="start", nbytes=6, padding=b"TIFF\x00\x01")],
         "compress_if_smaller"),
        ([ZstdCodec(level=1), zarrext.PadCodec(location="end", nbytes=5, padding=chunk_label)],
         None),
    ],
    ids=["compress_if_smaller", "always", "smallest", "shuffle-zstd", "crc32c-after", "zstd",
         "pad-start", "pad-end-function"],
)
@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("workers", [1, 3])
def test_arena_writes_store_what_zarrs_batched_path_stores(
    tmp_path: Path, compressors: list[Any], decision: str | None, endian: str, workers: int,
    arena_takes: list[int],
) -> None:
    """Whole, partial (read-modify-write) and strided writes of views of the
    caller's array: the bytes zarr-python's batched path stores, the values it reads."""
    rng = np.random.default_rng(11)
    data = np.round(rng.normal(size=(45, 38)), 2).astype("<f4")
    fortran = np.asfortranarray(data)
    arrays = []
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        for name in ("arena", "batched"):
            z = zarrext.create_array(
                tmp_path / name, shape=data.shape, chunks=(16, 12), dtype="<f4", fill_value=0,
                serializer=BytesCodec(endian=endian),  # type: ignore[arg-type]
                compressors=compressors, **({"decision": decision} if decision else {}),
            )
            if name == "batched":
                on_batched_path(z)
            z[:] = fortran  # chunk views that are not contiguous
            z[3:20, 5:33] = data[3:20, 5:33] * 2  # partial chunks
            z[16:32, 12:24] = 0  # a whole chunk of fill: deleted
            z[::7, 1] = -1.5
            arrays.append(z)
    assert chunk_files(tmp_path / "arena") == chunk_files(tmp_path / "batched")
    assert Path("1/1") not in chunk_files(tmp_path / "arena")
    np.testing.assert_array_equal(arrays[0][:], arrays[1][:])
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "arena", mode="r")[:], arrays[1][:])
    # The C-order copy of a little-endian chunk, the conditional header and the pad
    # codec's output use the arena; a big-endian chunk is byte-swapped into fresh
    # memory, as zarr does.
    into_arena = (ConditionalCodec, zarrext.PadCodec)
    assert bool(arena_takes) is (
        endian == "little" or any(isinstance(c, into_arena) for c in compressors)
    )


@pytest.mark.parametrize(("side", "used"), [(181, False), (182, True)], ids=["below", "from"])
def test_only_chunks_from_the_threshold_use_the_arena(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arena_takes: list[int], side: int,
    used: bool,
) -> None:
    """Small chunks get malloc's reused memory: the arena starts at ARENA_MIN_BYTES."""
    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "ARENA_MIN_BYTES", DEFAULT_ARENA_MIN_BYTES)
    assert (side * side * 4 >= DEFAULT_ARENA_MIN_BYTES) is used
    data = np.arange(side * side * 2, dtype="<f4").reshape(2 * side, side)
    z = zarrext.create_array(
        tmp_path, shape=data.shape, chunks=(side, side), dtype="<f4",
        compressors=[conditional()], decision="compress_if_smaller",
    )
    z[:] = np.asfortranarray(data)
    assert bool(arena_takes) is used
    np.testing.assert_array_equal(zarr.open_array(tmp_path, mode="r")[:], data)


@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    chunks=st.tuples(st.integers(1, 16), st.integers(1, 16)),
    dtype=st.sampled_from(["<f8", "<i2", "|u1", "<c8", "?"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_arena_writes_match_the_batched_path_for_any_chunking(
    tmp_path_factory: pytest.TempPathFactory,
    shape: tuple[int, int], chunks: tuple[int, int], dtype: str, seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    data = (rng.random(shape) * 50).astype(dtype)
    sel = tuple(slice(int(rng.integers(0, n)), None, int(rng.integers(1, 4))) for n in shape)
    root = tmp_path_factory.mktemp("arena")
    arrays = []
    for name in ("arena", "batched"):
        z = zarrext.create_array(
            root / name, shape=shape, chunks=chunks, dtype=dtype, fill_value=0,
            compressors=[conditional()], decision="compress_if_smaller",
        )
        if name == "batched":
            on_batched_path(z)
        z[:] = data
        z[sel] = data[::-1, ::-1][sel]
        arrays.append(z)
    assert chunk_files(root / "arena") == chunk_files(root / "batched")
    np.testing.assert_array_equal(arrays[0][:], arrays[1][:])


@pytest.mark.usefixtures("parallel_small_chunks")
def test_a_store_that_keeps_buffers_gets_fresh_memory(arena_takes: list[int]) -> None:
    """MemoryStore keeps the Buffer it is given: arena memory there would turn every
    chunk a thread wrote into that thread's last one."""
    data = np.arange(48 * 40, dtype="<f4").reshape(48, 40)
    store = MemoryStore()
    with zarr.config.set({"codec_pipeline.max_workers": 2}):
        z = zarrext.create_array(
            store, shape=data.shape, chunks=(8, 8), dtype="<f4", fill_value=0,
            compressors=[conditional()], decision="compress_if_smaller",
        )
        z[:] = np.asfortranarray(data)
        np.testing.assert_array_equal(z[:], data)
    assert arena_takes == []


class LocalStoreSubclass(LocalStore):
    """A LocalStore subclass, which might keep what it is given: fresh memory."""


@pytest.mark.usefixtures("parallel_small_chunks")
def test_local_store_subclasses_get_fresh_memory(tmp_path: Path, arena_takes: list[int]) -> None:
    data = np.arange(32 * 32, dtype="<f4").reshape(32, 32)
    z = zarrext.create_array(
        LocalStoreSubclass(tmp_path), shape=data.shape, chunks=(8, 8), dtype="<f4",
        compressors=[conditional()], decision="compress_if_smaller",
    )
    z[:] = np.asfortranarray(data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path, mode="r")[:], data)
    assert arena_takes == []


@pytest.mark.usefixtures("parallel_small_chunks")
@pytest.mark.parametrize("workers", [1, 3])
def test_bytes_a_decision_keeps_stay_the_chunks_own(
    tmp_path: Path, workers: int, arena_takes: list[int]
) -> None:
    """A user's decision may keep what it was shown (the unencoded bytes, the trial):
    after the write, each kept view still holds its own chunk's bytes."""
    kept: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def record(chunk_index: Any, codec: Any, unencoded: np.ndarray, trial: np.ndarray) -> bool:
        kept[chunk_index] = (unencoded, trial)
        return True

    data = np.random.default_rng(5).random((40, 30)).astype("<f4")
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        z = zarrext.create_array(
            tmp_path, shape=data.shape, chunks=(8, 10), dtype="<f4",
            compressors=[conditional()], decision=record,
        )
        assert not pipeline_of(z).encodes_into_arena
        z[:] = np.asfortranarray(data)
    assert len(kept) == 15
    assert arena_takes == []
    for (i, j), (unencoded, trial) in kept.items():
        block = np.ascontiguousarray(data[8 * i : 8 * i + 8, 10 * j : 10 * j + 10])
        assert unencoded.tobytes() == block.tobytes()
        stored = (tmp_path / "c" / str(i) / str(j)).read_bytes()
        assert trial.tobytes() == stored[1:]


# -- reads --------------------------------------------------------------------------------

@pytest.mark.usefixtures("parallel_small_chunks")
@pytest.mark.parametrize(
    "compressors",
    [
        [ZstdCodec(level=1)],
        [ZstdCodec(level=1), ZstdCodec(level=3)],  # a decode reads the other's scratch
        [conditional(ShuffleCodec(element_size=4), ZstdCodec(level=1)), ZstdCodec(level=2)],
        # zstd decodes to more than the chunk: past the scratch bound, zarr's decoder
        [zarrext.PadCodec(location="end", nbytes=20_000), ZstdCodec(level=1)],
        # blosc in chains the direct decoder does not take
        [ShuffleCodec(element_size=4), BloscCodec(cname="zstd")],
        [conditional(BloscCodec(cname="lz4"), Crc32cCodec())],
    ],
    ids=["zstd", "zstd-zstd", "conditional-zstd", "padded-zstd", "shuffle-blosc",
         "conditional-blosc-crc32c"],
)
@pytest.mark.parametrize("workers", [1, 3])
def test_scratch_decodes_match_zarr(tmp_path: Path, compressors: list[Any], workers: int) -> None:
    """zstd and blosc decoding into the codec threads' scratch memory: the values
    zarr-python reads, for whole and partial reads and read-modify-write updates."""
    data = np.random.default_rng(6).normal(size=(50, 40)).astype("<f4")
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        z = zarrext.create_array(
            tmp_path, shape=(50, 40), chunks=(16, 16), dtype="<f4", fill_value=0,
            compressors=compressors,
            **({"decision": "always_apply"} if isinstance(compressors[0], ConditionalCodec)
               else {}),
        )
        z[:] = data
        z[3:20, 5:9] = -1.0  # partial chunks: decode, merge, encode
        data[3:20, 5:9] = -1.0
        reader = zarrext.open_array(tmp_path, mode="r")
        transform = pipeline_of(reader).transform
        assert transform is not None
        assert any(isinstance(c, scratch.ScratchZstdCodec | scratch.ScratchBloscCodec)
                   for c in walk_codecs(transform.codecs))
        for sel in (np.s_[:], np.s_[17:33, 2:39], np.s_[49, :]):
            np.testing.assert_array_equal(reader[sel], data[sel])
    np.testing.assert_array_equal(zarr.open_array(tmp_path, mode="r")[:], data)


def test_corrupt_zstd_chunk_fails_as_in_zarr(tmp_path: Path) -> None:
    """A chunk that is not zstd: zarr-python's decoder and its error, not a scratch one,
    as the cause of zarrext's error naming the chunk and the codec."""
    from zarrext.errors import ChunkDecodeError

    zarr.create_array(
        tmp_path, shape=(8,), chunks=(4,), dtype="u1", compressors=[ZstdCodec(level=1)]
    )[:] = np.arange(8, dtype="u1")
    (tmp_path / "c" / "1").write_bytes(b"not zstd at all")
    with pytest.raises(RuntimeError) as stock:
        zarr.open_array(tmp_path, mode="r")[:]
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/1'.*codec 'zstd'") as ours:
        zarrext.open_array(tmp_path, mode="r")[:]
    assert type(ours.value.__cause__) is type(stock.value)
    assert str(ours.value.__cause__) == str(stock.value)
    np.testing.assert_array_equal(zarrext.open_array(tmp_path, mode="r")[:4], np.arange(4))


@pytest.mark.usefixtures("parallel_small_chunks")
@pytest.mark.parametrize("workers", [1, 3])
def test_scratch_decodes_of_optional_values(tmp_path: Path, workers: int) -> None:
    """optional's values decode into scratch memory, its mask (zstd too) does not:
    the values and mask zarr-python reads."""
    rng = np.random.default_rng(7)
    values = rng.normal(size=(40, 30)).astype("<f4")
    mask = rng.random((40, 30)) < 0.3
    codec = zarrext.OptionalCodec(
        mask_codecs=[zarrext.PackBitsCodec(), ZstdCodec(level=1)],
        data_codecs=[BytesCodec(), ZstdCodec(level=1)],
    )
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        z = zarrext.create_array(
            tmp_path, shape=(40, 30), chunks=(16, 16), fill_value=None,
            dtype=zarrext.OptionalDType("float32"), serializer=codec,
            compressors=[ZstdCodec(level=2)],
        )
        z[:] = np.ma.MaskedArray(values, mask=mask)
        z[5:20, 3:7] = np.ma.MaskedArray(np.full((15, 4), 2.5, "<f4"), mask=False)
        values[5:20, 3:7], mask[5:20, 3:7] = 2.5, False
        got = zarrext.to_masked(zarrext.open_array(tmp_path, mode="r")[:])
    stock = zarrext.to_masked(zarr.open_array(tmp_path, mode="r")[:])
    for back in (got, stock):
        np.testing.assert_array_equal(back.mask, mask)
        np.testing.assert_array_equal(back.data[~mask], values[~mask])




@pytest.mark.parametrize("workers", [1, 2])
def test_chunk_files_read_into_thread_memory_give_each_chunk_its_own_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    # A chunk file is read into its thread's read buffer, reused by the thread's
    # next chunk. Chunks stored raw behind the conditional header decode to a view
    # of that buffer: each must reach the output before the next read, and chunks
    # of other sizes (the edge) must not see a longer chunk's tail.
    sizes: list[int] = []
    real = scratch.read_scratch

    def read_scratch(nbytes: int) -> np.ndarray:
        sizes.append(nbytes)
        return real(nbytes)

    # looked up where chunk_io reads a chunk file (its own import of the name)
    monkeypatch.setattr(zarrext.pipeline.chunk_io, "read_scratch", read_scratch)
    rng = np.random.default_rng(5)
    values = rng.random((200, 130)).astype("float32")  # incompressible: stored raw
    values[:64, :64] = np.arange(64 * 64, dtype="float32").reshape(64, 64)  # compresses
    path = str(tmp_path / "a.zarr")
    zarrext.create_array(path, shape=values.shape, chunks=(64, 64), dtype="float32",
                         fill_value=0, serializer=BytesCodec(),
                         compressors=[ConditionalCodec([ZstdCodec(level=1)])],
                         decision="compress_if_smaller")[:] = values
    with zarr.config.set({"codec_pipeline.max_workers": workers}):
        back = zarrext.open_array(path, mode="r")[:]
    np.testing.assert_array_equal(back, values)
    assert len(sizes) == 4 * 3  # every chunk file went through a thread's read buffer
    assert len(set(sizes)) > 2  # of several sizes: raw, compressed, edge chunks


@settings(max_examples=40, deadline=None)
@given(
    payload=st.binary(max_size=5000) | st.builds(lambda n: bytes(n), st.integers(0, 70_000)),
    level=st.sampled_from([-131073, -7, -1, 0, 1, 3, 9, 22]),
    checksum=st.booleans(),
)
def test_the_pipelines_zstd_writes_frames_zarrs_zstd_reads(
    payload: bytes, level: int, checksum: bool
) -> None:
    """The pipeline's zstd encoder (a compressor kept per thread): frames that zarr's own
    zstd (numcodecs) decodes to the input, with the content size and, when asked, the
    checksum in their header, at every level zarr's zstd takes (up to 22, and below
    zstd's lowest)."""
    import zstandard
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.dtype import UInt8

    prototype = default_buffer_prototype()
    spec = ArraySpec(shape=(len(payload),), dtype=UInt8(), fill_value=0,
                     config=ArrayConfig.from_dict({}), prototype=prototype)
    chunk = prototype.buffer.from_bytes(payload)
    ours = scratch.ScratchZstdCodec(level=level, checksum=checksum)
    frame = ours._encode_sync(chunk, spec)
    zarrs = ZstdCodec(level=level, checksum=checksum)
    if payload:
        assert zarrs._decode_sync(frame, spec).to_bytes() == payload
    else:  # numcodecs cannot decode a frame of nothing, its own either: the same bytes
        assert frame.to_bytes() == zarrs._encode_sync(chunk, spec).to_bytes()
    header = zstandard.get_frame_parameters(frame.to_bytes())
    assert header.content_size == len(payload)
    assert header.has_checksum == checksum


def test_each_thread_keeps_its_own_zstd_compressor() -> None:
    """A compressor is not for two threads at once: each thread gets its own, and keeps it."""
    import threading

    mine = scratch.zstd_compressor(3, False)
    assert mine is not None
    assert scratch.zstd_compressor(3, False) is mine
    assert scratch.zstd_compressor(3, True) is not mine
    theirs: list[Any] = []
    worker = threading.Thread(target=lambda: theirs.append(scratch.zstd_compressor(3, False)))
    worker.start()
    worker.join()
    assert theirs[0] is not None
    assert theirs[0] is not mine
    # past the kept levels (large tables): a new compressor each time, none kept
    high = scratch.ZSTD_LEVEL_KEPT_UP_TO + 1
    assert scratch.zstd_compressor(high, False) is not scratch.zstd_compressor(high, False)


def _frames_numcodecs_reads() -> dict[str, tuple[bytes, int]]:
    """zstd inputs built from the format (RFC 8878) with numcodecs' encoder and by hand,
    with the size each decodes to: one frame, and what is not exactly one frame."""
    from numcodecs import Zstd

    values = np.arange(3000, dtype="<u4").tobytes()
    frame = bytes(Zstd(level=3).encode(values))
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    return {
        "one frame": (frame, len(values)),
        "two frames": (frame + frame, 2 * len(values)),
        "a skippable frame after": (frame + skippable, len(values)),
    }


def _decode(blob: bytes, room: int) -> tuple[int | None, bytes]:
    target = np.full(room, 0xAA, np.uint8)
    size = scratch.zstd_decode_into(np.frombuffer(blob, np.uint8), target)
    return size, target.tobytes()[: size or 0]


@pytest.mark.parametrize("case", list(_frames_numcodecs_reads()))
@pytest.mark.parametrize("room", [0, 1], ids=["exact", "roomy"])
def test_the_pipelines_zstd_decode_is_zarrs_for_one_frame_or_leaves_the_rest_to_it(
    case: str, room: int
) -> None:
    """One whole frame: decoded into the buffer by the thread's kept decompressor, as
    zarr's decoder decodes it; a second frame after it is not ignored but left to
    zarr's decoder (None), which reads both; a skippable frame after it is skipped."""
    from numcodecs import Zstd

    blob, size = _frames_numcodecs_reads()[case]
    decoded_size, decoded = _decode(blob, 12_000 + room * 5000)
    assert len(Zstd().decode(blob)) == size
    if case == "two frames":
        assert decoded_size is None
    else:
        assert decoded_size == size
        assert decoded == bytes(Zstd().decode(blob))


def test_the_pipelines_zstd_decode_refuses_damage_and_sizes_past_its_buffer() -> None:
    """A damaged or cut frame, bytes after it that are no frame, a frame without its
    size, and a frame whose header claims more than the buffer holds are not decoded
    here (None: the caller's decoder raises or decodes); the claimed size is not
    allocated."""
    import zstandard

    values = np.arange(3000, dtype="<u4").tobytes()
    frame = scratch.zstd_compressor(3, True).compress(values)
    assert _decode(frame, len(values)) == (len(values), values)
    assert _decode(frame[:-7], 1 << 20)[0] is None  # cut inside its checksum
    assert _decode(frame[: len(frame) // 2], 1 << 20)[0] is None  # cut inside a block
    damaged = bytearray(frame)
    damaged[len(damaged) // 2] ^= 0xFF
    assert _decode(bytes(damaged), 1 << 20)[0] is None
    assert _decode(frame + b"\x00\x01\x02\x03", 1 << 20)[0] is None
    assert _decode(frame, len(values) - 1)[0] is None
    unsized = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(values)
    assert zstandard.frame_content_size(unsized) == -1
    assert _decode(unsized, 1 << 20)[0] is None
    # a header claiming 2**60 bytes: refused by its size, not by an allocation
    huge = bytes([0x28, 0xB5, 0x2F, 0xFD, 0xE0]) + (1 << 60).to_bytes(8, "little") + bytes(8)
    assert zstandard.frame_content_size(huge) == 1 << 60
    assert _decode(huge, 1 << 20)[0] is None


# -- blosc ----------------------------------------------------------------------------------


def _blosc_decode(frame: bytes, room: int) -> tuple[int | None, bytes]:
    target = np.full(room, 0xAB, dtype=np.uint8)
    size = scratch.blosc_decode_into(np.frombuffer(frame, np.uint8), target)
    return size, target.tobytes()[: size or 0]


@given(
    dtype=st.sampled_from(["u1", "<i2", "<f4", ">f8", "<c8"]),
    n=st.integers(0, 3000),
    cname=st.sampled_from(["lz4", "lz4hc", "blosclz", "zstd", "zlib"]),
    shuffle=st.sampled_from([0, 1, 2]),
    blocksize=st.sampled_from([0, 256, 4096]),
    room=st.integers(0, 64),
    seed=st.integers(0, 2**16),
)
def test_the_pipelines_blosc_decode_is_numcodecs_for_every_frame_it_writes(
    dtype: str, n: int, cname: str, shuffle: int, blocksize: int, room: int, seed: int
) -> None:
    """Every frame numcodecs' Blosc writes (its compressors, shuffles, block sizes, of
    any type size) decodes into the buffer to numcodecs' bytes; a buffer one byte too
    small is not written past (None)."""
    from numcodecs import Blosc

    values = (np.random.default_rng(seed).random(n) * 50).astype(dtype)
    codec = Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize,
                  typesize=values.dtype.itemsize)
    frame = bytes(codec.encode(values.tobytes()))
    assert _blosc_decode(frame, values.nbytes + room) == (values.nbytes, values.tobytes())
    if values.nbytes:
        assert _blosc_decode(frame, values.nbytes - 1)[0] is None


def test_the_pipelines_blosc_decode_refuses_what_is_not_one_whole_frame() -> None:
    """Cut short, bytes after it, a header c-blosc refuses, or no frame at all: None
    (the caller's decoder raises, naming the chunk). blosc frames carry no checksum:
    damaged data inside a whole frame is not seen here, as nowhere."""
    from numcodecs import Blosc

    values = np.random.default_rng(1).random(2000).astype("<f4").tobytes()
    frame = bytes(Blosc(cname="lz4", clevel=5, shuffle=1).encode(values))
    assert _blosc_decode(frame, len(values))[0] == len(values)
    for bad in (frame[:-1], frame[:-100], frame + bytes(3), b"", b"not blosc, not at all!"):
        assert _blosc_decode(bad, 1 << 20)[0] is None
    lying = bytearray(frame)  # a header whose frame size is the chunk's, blocks beyond it
    lying[4:8] = (len(values) * 4).to_bytes(4, "little")
    assert _blosc_decode(bytes(lying), 1 << 20)[0] is None
