"""Memory each codec thread keeps and reuses, and the codecs that decode or encode into it.

Fresh memory for every chunk costs more than it seems: the allocator hands large
blocks back to the system when they are freed, and the next chunk's buffer is
faulted in again page by page. On this project's 2-core machine that was about a
third of a read's time, and a third of a ``conditional(zstd)`` write's (a 1 MiB
chunk took three fresh buffers: its bytes in C order, zstd's output, and that
output behind the ``conditional`` header; the first and last now come from here,
as does a ``pad`` codec's output).

Reads (:class:`ScratchZstdCodec` and :class:`zarrext.pipeline.direct.DirectDecoder`
decode): two buffers per thread, used in turn. A decode reads its input while
writing its output, and its input may be the previous stage's output, a scratch
view; the decoded bytes stay valid until the thread decodes again, and the
pipeline's chunk job copies them out (scatter into the output, or the merge of a
partial write) before it ends.

Writes (:func:`encode_arena`): inside a write job that opened an arena, every
request gets a buffer of its own, and all of them return to the thread when the
job ends. The pipeline opens one for chunks of
:data:`zarrext.pipeline.codec_pipeline.ARENA_MIN_BYTES` or more (smaller ones fault nothing).
Two rules make that safe, and the pipeline keeps both:

- the job hands the encoded bytes to a store that copies them before the job ends
  (a ``LocalStore`` writes them to a file; a ``MemoryStore`` would keep them);
- nothing else keeps the bytes past the job: only built-in decisions see them
  (:attr:`zarrext.codecs.decisions.Decision.keeps_chunk_bytes`), never a user function.

A shard written to an object store (:class:`Staging`): each large inner chunk is
encoded in its thread's arena as above, and its encoded bytes are copied out into
segments that live until the shard is laid out, then serve the next shard.

Outside an arena the encoders below are zarr's and zarrext's, but for zstd, which
encodes with a compressor each thread keeps (:func:`zstd_compressor`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

import numcodecs
import numpy as np
import zstandard
from zarr.codecs import BytesCodec, ZstdCodec

from zarrext.codecs.blosc_frames import BloscFrameError, CheckedBloscCodec, check_blosc_frame
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.optional import OptionalCodec
from zarrext.codecs.pad import PadCodec
from zarrext.codecs.specs import chunk_nbytes
from zarrext.codecs.walk import map_nested, nested_codecs, walk_codecs

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

__all__ = [
    "ARENA_MAX_BUFFERS",
    "SCRATCH_MAX_BYTES",
    "ZSTD_LEVEL_KEPT_UP_TO",
    "DecodeInto",
    "ScratchBloscCodec",
    "ScratchBytesCodec",
    "ScratchConditionalCodec",
    "ScratchPadCodec",
    "ScratchZstdCodec",
    "Staging",
    "arena_buffer",
    "blosc_decode_into",
    "decode_in_scratch",
    "encode_arena",
    "numcodecs_decoder",
    "plain_numbers",
    "keeps_no_chunk_bytes",
    "kept_memory",
    "scratch_codecs",
    "staged_encoding",
    "written_as_they_are",
    "zstd_compressor",
    "zstd_decode_into",
]

# Chunks up to this size use a thread's scratch memory; larger ones fresh buffers,
# as zarr-python does (at most two read buffers and ARENA_MAX_BUFFERS write buffers
# of this size per thread).
SCRATCH_MAX_BYTES = 16 << 20
# Room beyond the chunk's array bytes for what codecs before zstd add (headers).
_SCRATCH_SLACK = 4096
# Buffers one write job may take from its arena; beyond them, fresh memory. Two
# serve a chunk of [bytes, conditional(...)]: its bytes in C order, and the header
# with the payload behind it.
ARENA_MAX_BUFFERS = 4

_thread = threading.local()


# -- reads ------------------------------------------------------------------------------


def decode_scratch(nbytes: int, source: np.ndarray) -> np.ndarray:
    """``nbytes`` of this thread's read scratch memory, not overlapping ``source``."""
    buffers: list[np.ndarray] | None = getattr(_thread, "decode_buffers", None)
    if buffers is None:
        buffers = _thread.decode_buffers = [np.empty(0, np.uint8), np.empty(0, np.uint8)]
    k = 1 if np.may_share_memory(buffers[0], source) else 0
    if buffers[k].nbytes < nbytes:
        buffers[k] = np.empty(nbytes, np.uint8)
    return buffers[k][:nbytes]


def read_scratch(nbytes: int) -> np.ndarray:
    """``nbytes`` of this thread's memory for a chunk file's bytes, apart from the
    decode buffers: valid until the thread reads its next chunk file."""
    return kept_memory("read_buffer", nbytes)


def kept_memory(use: str, nbytes: int, *, at_least: int = 0) -> np.ndarray:
    """``nbytes`` of the calling thread's memory for ``use``, kept from call to call
    (grown when too small, to ``at_least`` bytes or more): valid until the thread's
    next call for the same ``use``. Fresh memory would cost its pages' faults every
    time."""
    memory: np.ndarray | None = getattr(_thread, use, None)
    if memory is None or memory.nbytes < nbytes:
        memory = np.empty(max(nbytes, at_least), np.uint8)
        setattr(_thread, use, memory)
    return memory[:nbytes]


def decoded_bound(chunk_spec: ArraySpec) -> int | None:
    """Most bytes a bytes->bytes stage of a fixed-size chunk decodes to, if scratch fits."""
    try:
        return _cached_bound(chunk_spec)
    except TypeError:  # a fill value that cannot be hashed
        return _bound(chunk_spec)


def _bound(chunk_spec: ArraySpec) -> int | None:
    dtype = chunk_spec.dtype.to_native_dtype()
    if dtype.hasobject or dtype.kind == "T":  # variable-size elements
        return None
    bound = chunk_nbytes(chunk_spec) + _SCRATCH_SLACK
    return bound if bound <= SCRATCH_MAX_BYTES else None


_cached_bound = functools.lru_cache(maxsize=256)(_bound)


# -- writes -----------------------------------------------------------------------------


class _Arena:
    """A thread's write buffers; ``used`` of them are taken by the running job."""

    def __init__(self) -> None:
        self.buffers: list[np.ndarray] = []
        self.used = 0
        self.open = False


def encode_arena() -> AbstractContextManager[None]:
    """Let this thread's encoders write into its arena until the block ends.

    The caller promises what the module docstring says: the encoded bytes are
    copied out (written to a file) before the block ends, and no decision that
    keeps chunk bytes runs inside it. A block inside a block changes nothing.
    """
    return _ArenaBlock()


class _ArenaBlock:
    """:func:`encode_arena`'s block. A class, not a generator: a block is opened for
    every chunk, and a generator's context manager costs microseconds of Python
    (held GIL) each time."""

    __slots__ = ("_arena", "_opened")

    def __enter__(self) -> None:
        arena: _Arena | None = getattr(_thread, "arena", None)
        if arena is None:
            arena = _thread.arena = _Arena()
        self._arena, self._opened = arena, not arena.open
        if self._opened:
            arena.open, arena.used = True, 0

    def __exit__(self, *exc: object) -> None:
        if self._opened:
            self._arena.open, self._arena.used = False, 0


def arena_buffer(nbytes: int) -> np.ndarray | None:
    """``nbytes`` of the open arena that no other request of this job holds.

    None outside an arena, for more than :data:`SCRATCH_MAX_BYTES`, or once the
    job holds :data:`ARENA_MAX_BUFFERS`: the caller then allocates as usual.
    """
    arena: _Arena | None = getattr(_thread, "arena", None)
    if (
        arena is None
        or not arena.open
        or nbytes > SCRATCH_MAX_BYTES
        or arena.used >= ARENA_MAX_BUFFERS
    ):
        return None
    if arena.used == len(arena.buffers):
        arena.buffers.append(np.empty(0, np.uint8))
    if arena.buffers[arena.used].nbytes < nbytes:
        arena.buffers[arena.used] = np.empty(nbytes, np.uint8)
    buffer = arena.buffers[arena.used]
    arena.used += 1
    return buffer[:nbytes]


# -- codecs -----------------------------------------------------------------------------


# The highest zstd level whose compressor a codec thread keeps: a context holds tables
# that grow with its level and the chunk (small at the levels below, tens of megabytes
# at the high ones), and a kept one holds them as long as the thread lives.
ZSTD_LEVEL_KEPT_UP_TO = 5


def zstd_compressor(level: int, checksum: bool) -> zstandard.ZstdCompressor:
    """This thread's zstd compressor for ``level`` and ``checksum``, made once
    (python-zstandard's, which is not for two threads at once); for a level above
    :data:`ZSTD_LEVEL_KEPT_UP_TO`, a new one each time.

    Its frames are zstd's (content size written, as numcodecs does; a checksum when
    asked), not always the same bytes as numcodecs' older bundled zstd writes. It
    takes every level zarr's ``zstd`` does (below -131072 as -131072, as numcodecs).
    """
    # numcodecs' encoder (zarr's) makes a new compression context for every chunk:
    # a kept one (and a newer zstd) compresses shuffled float planes at level 1 in
    # about two thirds of its time (benchmarks/bench_convert.py).
    if level > ZSTD_LEVEL_KEPT_UP_TO:
        return zstandard.ZstdCompressor(
            level=level, write_checksum=checksum, write_content_size=True)
    kept: dict[tuple[int, bool], zstandard.ZstdCompressor] | None = getattr(
        _thread, "zstd_compressors", None)
    if kept is None:
        kept = _thread.zstd_compressors = {}
    compressor = kept.get((level, checksum))
    if compressor is None:
        compressor = kept[level, checksum] = zstandard.ZstdCompressor(
            level=level, write_checksum=checksum, write_content_size=True)
    return compressor


def plain_numbers(dtype: np.dtype[Any]) -> bool:
    """Whether values of ``dtype`` are fixed-size numbers (integers, floats, complex,
    booleans, dates and times) whose decoded bytes can be viewed as they are: no
    objects, strings or structured records."""
    return not dtype.hasobject and dtype.kind in "biufcmM"


def written_as_they_are(dtype: np.dtype[Any], endian: Literal["little", "big"] | None) -> bool:
    """Whether zarr's ``bytes`` codec configured with ``endian`` writes values of
    ``dtype`` in their own byte order (it converts them to ``endian`` otherwise)."""
    return dtype.itemsize == 1 or endian is None or dtype.newbyteorder(endian) == dtype


DecodeInto = Callable[[np.ndarray, np.ndarray], int | None]
"""Decodes a stored chunk's bytes (its first argument) into the second; the bytes
it decoded to, or None (:func:`zstd_decode_into`, :func:`blosc_decode_into`)."""


def decode_in_scratch(
    chunk_bytes: Buffer,
    chunk_spec: ArraySpec,
    decode_into: DecodeInto,
    otherwise: Callable[[Buffer, ArraySpec], Buffer],
) -> Buffer:
    """A chunk's stored bytes decoded by ``decode_into`` (:func:`zstd_decode_into`,
    :func:`blosc_decode_into`) into read scratch memory; where the chunk cannot be
    (bigger than the bound, not one whole frame, not this compressor's at all),
    ``otherwise(chunk_bytes, chunk_spec)``: zarr's decoder, its values or its errors."""
    bound = decoded_bound(chunk_spec)
    if bound is None:
        return otherwise(chunk_bytes, chunk_spec)
    source = chunk_bytes.as_numpy_array()
    out = decode_scratch(bound, source)
    size = decode_into(source, out)
    if size is None:
        return otherwise(chunk_bytes, chunk_spec)
    return chunk_spec.prototype.buffer.from_array_like(out[:size])


def zstd_decode_into(source: np.ndarray, target: np.ndarray) -> int | None:
    """Decode the zstd frame ``source`` holds into ``target`` (bytes) with this thread's
    kept decompressor (python-zstandard's); the bytes it decoded to, or None where
    ``source`` is not one whole frame whose header gives a size that ``target`` holds
    (several frames, a frame without its size, a damaged or cut frame, bytes after
    it): the caller's other decoder then decodes it or raises its error. The memory
    it takes follows the size the header states (checked first), not the window the
    frame asks for. ``target`` may be written either way.
    """
    # imagecodecs' decoder (into a given buffer, a new context each time) took about
    # a fifth longer for a 1 MiB float32 chunk (benchmarks/bench_peers.py).
    decompressor: zstandard.ZstdDecompressor | None = getattr(
        _thread, "zstd_decompressor", None)
    if decompressor is None:
        decompressor = _thread.zstd_decompressor = zstandard.ZstdDecompressor()
    try:
        data = memoryview(source)
        size = zstandard.frame_content_size(data)  # -1: not in the header
        if size < 0 or size > target.nbytes:
            return None
        view, got = memoryview(target)[:size], 0
        # across frames: bytes after this one are read (a second frame's values, or
        # an error for what is no frame), so that they are seen, not ignored
        with decompressor.stream_reader(data, read_across_frames=True) as reader:
            while got < size and (n := reader.readinto(view[got:])):
                got += n
            if got != size or reader.read(1):
                return None
    except (zstandard.ZstdError, ValueError, BufferError):  # not zstd; not one block
        return None
    return size


class ScratchZstdCodec(ZstdCodec):
    """zarr's ``zstd`` that decodes into read scratch memory with the thread's kept
    decompressor (:func:`zstd_decode_into`) and encodes with its kept compressor
    (:func:`zstd_compressor`).

    Only for the pipeline's chunk jobs (see the module docstring).
    """

    def encode_bytes(self, data: np.ndarray) -> bytes:
        """The zstd frame of ``data`` (one-dimensional ``uint8``): this codec's
        encoding without zarr's ``Buffer`` around it, as ``conditional`` applies it."""
        return zstd_compressor(self.level, self.checksum).compress(memoryview(data))

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        encoded = self.encode_bytes(chunk_bytes.as_numpy_array())
        return chunk_spec.prototype.buffer.from_bytes(encoded)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return decode_in_scratch(chunk_bytes, chunk_spec, zstd_decode_into,
                                 super()._decode_sync)


def blosc_decode_into(source: np.ndarray, target: np.ndarray) -> int | None:
    """Decode the blosc frame ``source`` holds into ``target`` (bytes) with imagecodecs'
    c-blosc, on the calling thread; the bytes it decoded to, or None where ``source``
    is not one whole frame (:func:`~zarrext.codecs.blosc_frames.check_blosc_frame`)
    whose header gives a size that ``target`` holds, or does not decode: the
    caller's other decoder then raises its error. ``target`` may be written either way.

    Two codec threads decoding 64 KiB chunks with numcodecs (0.17), as zarr does, take
    2.3 to 2.7 times as long each as one alone; with imagecodecs 1.3 to 1.4 times
    (``benchmarks/bench_blosc_reads.py`` prints both, for each chunk size).
    """
    try:
        nbytes = check_blosc_frame(source)
    except BloscFrameError:
        return None
    if nbytes > target.nbytes:
        return None
    try:
        _blosc_decode()(source, numthreads=1, out=memoryview(target)[:nbytes])
    except RuntimeError:  # imagecodecs' BloscError
        return None
    return nbytes


@functools.cache
def _blosc_decode() -> Any:
    import imagecodecs  # 60 ms to import: only where a blosc chunk is read

    return imagecodecs.blosc_decode


def numcodecs_decoder(compressor: Any) -> DecodeInto | None:
    """The decoder into given memory of a format 2 compressor's chunks: numcodecs'
    ``Blosc`` (also checked: :class:`~zarrext.codecs.blosc_frames.CheckedBlosc`) and
    ``Zstd``; None for any other."""
    codec_id = getattr(compressor, "codec_id", None)
    if isinstance(compressor, numcodecs.Blosc) and codec_id == "blosc":
        return blosc_decode_into
    if isinstance(compressor, numcodecs.Zstd) and codec_id == "zstd":
        return zstd_decode_into
    return None


class ScratchBloscCodec(CheckedBloscCodec):
    """zarr's ``blosc`` (each frame checked against its chunk) that decodes into read
    scratch memory (:func:`blosc_decode_into`); a chunk that does not, as zarr does
    (its values, or its error)."""

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return decode_in_scratch(chunk_bytes, chunk_spec, blosc_decode_into,
                                 super()._decode_sync)


class ScratchBytesCodec(BytesCodec):
    """zarr's ``bytes`` that, in an open arena, copies a chunk that is not one
    contiguous block (a chunk-shaped view of the caller's array) into the arena
    instead of a fresh buffer. Same bytes: C order, the configured endianness."""

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        array = chunk_array.as_ndarray_like()
        if (
            isinstance(array, np.ndarray)
            and not array.flags.c_contiguous
            and not array.dtype.hasobject
            and written_as_they_are(array.dtype, self.endian)
        ):
            out = arena_buffer(array.nbytes)
            if out is not None:
                np.copyto(out.view(array.dtype).reshape(array.shape), array)
                return chunk_spec.prototype.buffer.from_array_like(out)
        return super()._encode_sync(chunk_array, chunk_spec)


# -- a shard's encoded inner chunks ----------------------------------------------------
# Segments the staged inner chunks are copied into; at most _SEGMENTS_KEPT of them
# wait for the next shard between writes (SEGMENT_BYTES * _SEGMENTS_KEPT held).
SEGMENT_BYTES = 4 << 20
_SEGMENTS_KEPT = 8
_free_segments: list[np.ndarray] = []
_segments_lock = threading.Lock()


class Staging:
    """A shard's encoded inner chunks, kept from their encoding in a codec thread's
    arena until the shard is laid out (:class:`zarrext.pipeline.shard_encoder.ShardEncoder`).

    Encoding an inner chunk into fresh memory faults in its C-ordered bytes and
    its encoded bytes page by page (3 MiB for a 1 MiB ``conditional(zstd)``
    chunk); under an allocator that returns large blocks to the system at once
    (dask's workers start with ``MALLOC_TRIM_THRESHOLD_=65536``) that doubled a
    sharded write's CPU. Here a chunk is encoded in the thread's arena and only
    its encoded bytes are copied out, into segments that go back to a small
    process-wide pool when the shard is laid out (:meth:`release`).

    One ``Staging`` per job: not for several threads at once.
    """

    def __init__(self) -> None:
        self._segments: list[np.ndarray] = []
        self._used = SEGMENT_BYTES

    def reserve(self, nbytes: int) -> np.ndarray | None:
        """``nbytes`` of segment memory, valid until :meth:`release`; None for more
        than a segment holds."""
        if nbytes > SEGMENT_BYTES:
            return None
        if SEGMENT_BYTES - self._used < nbytes:
            with _segments_lock:
                segment = _free_segments.pop() if _free_segments else None
            self._segments.append(
                np.empty(SEGMENT_BYTES, np.uint8) if segment is None else segment
            )
            self._used = 0
        out = self._segments[-1][self._used : self._used + nbytes]
        self._used += nbytes
        return out

    def keep(self, data: np.ndarray) -> np.ndarray:
        """``data`` (bytes) itself when it is already this staging's memory (a
        codec wrote it there, :func:`staged_encoding`), else a copy in it; valid
        until :meth:`release`."""
        # A codec's slice of a segment has the segment as its base. Asking numpy
        # instead (may_share_memory) would release and retake the GIL per segment,
        # per chunk; a view it would catch and this misses is only copied.
        base = data.base
        if base is not None and any(base is segment for segment in self._segments):
            return data
        out = self.reserve(data.nbytes)
        if out is None:
            return data.copy()
        np.copyto(out, data)
        return out

    def holds(self, array: np.ndarray) -> bool:
        """Whether ``array`` may share memory with this staging's segments."""
        return any(np.may_share_memory(array, segment) for segment in self._segments)

    def release(self) -> None:
        """Give the segments back: nothing :meth:`keep` returned may be used after."""
        with _segments_lock:
            room = max(0, _SEGMENTS_KEPT - len(_free_segments))
            _free_segments.extend(self._segments[:room])
        self._segments = []
        self._used = SEGMENT_BYTES


def staged_encoding(staging: Staging) -> AbstractContextManager[None]:
    """Encode into this thread's arena (:func:`encode_arena`) until the block ends,
    except for the codecs that lay out a chunk's final bytes (``conditional``'s
    header and payload, ``pad``'s chunk and padding): they write them into
    ``staging``, so that when such a codec is the chain's last
    :meth:`Staging.keep` has nothing to copy."""
    return _StagedBlock(staging)


class _StagedBlock:
    """:func:`staged_encoding`'s block (a class, as :class:`_ArenaBlock`)."""

    __slots__ = ("_arena", "_previous", "_staging")

    def __init__(self, staging: Staging) -> None:
        self._staging = staging
        self._arena = _ArenaBlock()

    def __enter__(self) -> None:
        self._previous = getattr(_thread, "staging", None)
        _thread.staging = self._staging
        self._arena.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._arena.__exit__()
        _thread.staging = self._previous


def _arena_or_new(nbytes: int) -> np.ndarray:
    staging: Staging | None = getattr(_thread, "staging", None)
    out = staging.reserve(nbytes) if staging is not None else None
    if out is None:
        out = arena_buffer(nbytes)
    return np.empty(nbytes, np.uint8) if out is None else out


class ScratchConditionalCodec(ConditionalCodec):
    """``conditional`` whose header and payload go to one arena buffer in an open
    arena (else a new one, as :class:`ConditionalCodec`)."""

    def _encode_buffer(self, nbytes: int) -> np.ndarray:
        return _arena_or_new(nbytes)


class ScratchPadCodec(PadCodec):
    """``pad`` whose chunk and padding go to one arena buffer in an open arena (else
    a new one, as :class:`PadCodec`). A padding function is given a copy of the
    chunk's bytes, never arena memory."""

    def _encode_buffer(self, nbytes: int) -> np.ndarray:
        return _arena_or_new(nbytes)


def scratch_codecs(codecs: Iterable[Any]) -> tuple[Any, ...]:
    """``codecs`` with zstd, bytes, conditional and pad (also nested in
    ``conditional``, and in ``optional``'s values) as their scratch forms above.

    Not ``optional``'s mask codecs: the mask must outlive the values' decode.
    """
    return tuple(_scratch_form(codec) for codec in codecs)


def _scratch_form(codec: Any) -> Any:
    """``codec``'s scratch form, the codecs nested in it too (see :func:`scratch_codecs`)."""
    if type(codec) is ZstdCodec:
        return ScratchZstdCodec(level=codec.level, checksum=codec.checksum)
    if type(codec) is BytesCodec:
        return ScratchBytesCodec(endian=codec.endian)
    if type(codec) is CheckedBloscCodec:  # zarrext's pipelines hold the checked form
        return ScratchBloscCodec.of(codec)
    if type(codec) is PadCodec:
        return ScratchPadCodec(
            location=codec.location,
            nbytes=codec.nbytes,
            padding=codec.padding,
            padding_func=codec.padding_func,
            mismatch_said=codec.mismatch_said,
        )
    if isinstance(codec, OptionalCodec):
        return map_nested(codec, _scratch_form, chains=("data_codecs",))
    if type(codec) is ConditionalCodec:
        return ScratchConditionalCodec(
            codecs=scratch_codecs(nested_codecs(codec)),
            header_bits=codec.header_bits,
            decision=codec.decision,
            name=codec.name,
        )
    if isinstance(codec, ConditionalCodec):  # a subclass keeps its own header
        return map_nested(codec, _scratch_form)
    return codec


def keeps_no_chunk_bytes(codecs: Iterable[Any]) -> bool:
    """Whether no decision in ``codecs`` (nested too) may keep a chunk's bytes, so
    that a write job may encode into its arena."""
    return not any(
        isinstance(codec, ConditionalCodec) and codec.decision.keeps_chunk_bytes
        for codec in walk_codecs(codecs)
    )
