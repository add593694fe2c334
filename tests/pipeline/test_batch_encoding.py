"""Inner chunks encoded in batches (:mod:`zarrext.pipeline.batch_encoding`): each chunk's
bytes are the ones its chain writes for it alone, and follow the spec's layout."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
import zarrext.pipeline.batch_encoding
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.shuffle import ShuffleCodec
from zarrext.pipeline.batch_encoding import BatchEncoder
from zarrext.pipeline.scratch import Staging
from zarrext.pipeline.shard_encoder import ShardEncoder, WholeShards

INNER = (2, 3)
EVERY = [(i, j) for i in range(2) for j in range(2)]


def _encoder(where: Path, compressors: list[Any], dtype: str, fill: Any,
             write_empty_chunks: bool, inner: tuple[int, int] = INNER) -> ShardEncoder:
    shard = (inner[0] * 2, inner[1] * 2)
    array = zarrext.create_array(
        str(where / "a.zarr"), shape=(shard[0] * 2, shard[1] * 2), chunks=inner, shards=shard,
        dtype=dtype,
        fill_value=fill, serializer=BytesCodec(), compressors=compressors,
        config={"write_empty_chunks": write_empty_chunks})
    shards = WholeShards.of(array)
    assert shards is not None
    return ShardEncoder.of(array.async_array.codec_pipeline.array_bytes_codec, shards.spec)


def _chain(kind: str, level: int, checksum: bool, element_size: int, decision: str,
           header_bits: int) -> list[Any]:
    zstd = ZstdCodec(level=level, checksum=checksum)
    if kind == "zstd":
        return [zstd]
    nested = [zstd] if kind == "conditional(zstd)" else [
        ShuffleCodec(element_size=element_size), zstd]
    return [ConditionalCodec(nested, header_bits=header_bits, decision=decision)]


@st.composite
def chunks(draw: Any, dtype: np.dtype[Any], fill: Any) -> dict[tuple[int, int], np.ndarray]:
    """Each inner chunk of a shard: compressible, incompressible (zstd makes it
    longer), all the fill value, the fill value but its last element, or starting
    with the fill value."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = {}
    for coords in EVERY:
        kind = draw(st.sampled_from(["smooth", "noise", "fill", "fill but the last",
                                     "fill first"]))
        if kind == "noise":
            chunk = rng.integers(0, 256, INNER[0] * INNER[1] * dtype.itemsize, np.uint8)
            block = chunk.view(dtype).reshape(INNER).copy()
        else:
            block = np.full(INNER, 7, dtype)
            block[0, 0] = fill if kind == "fill first" else block[0, 0]
            if kind.startswith("fill") and kind != "fill first":
                block[...] = fill
                if kind == "fill but the last":
                    block[-1, -1] = 3
        values[coords] = block
    return values


@pytest.mark.parametrize("staged", [False, True], ids=["fresh memory", "staged"])
@pytest.mark.parametrize("kind", ["zstd", "conditional(zstd)", "conditional(shuffle, zstd)"])
@pytest.mark.parametrize("per_batch", [1, 2, 3, None],
                         ids=["batches of 1", "of 2", "of 3", "one batch"])
@settings(deadline=None, max_examples=10)
@given(data=st.data(), dtype=st.sampled_from(["<f4", "<f8", "<i2", "u1", "<u4"]),
       level=st.sampled_from([-3, 0, 1, 3, 19]), checksum=st.booleans(),
       element_size=st.sampled_from([1, 2, 3, 4, 8]),
       decision=st.sampled_from(["compress_if_smaller", "always_apply"]),
       header_bits=st.sampled_from([8, 16]), write_empty_chunks=st.booleans())
def test_each_chunk_as_its_chain_writes_it_alone(
    tmp_path_factory: pytest.TempPathFactory, staged: bool, kind: str, per_batch: int | None,
    data: Any,
    dtype: str, level: int, checksum: bool, element_size: int, decision: str,
    header_bits: int, write_empty_chunks: bool,
) -> None:
    """Batches (of any size, a shard in several) store each inner chunk's bytes as the
    chunk encoded alone does: fill-value chunks unstored, chunks zstd grows stored
    as the decision stores them, frames with the level and checksum asked for."""
    native = np.dtype(dtype)
    fill = data.draw(st.sampled_from([0, 7]), label="fill")
    values = data.draw(chunks(native, fill), label="values")
    chunk_bytes = INNER[0] * INNER[1] * native.itemsize
    with pytest.MonkeyPatch.context() as patch:
        if per_batch is not None:
            patch.setattr(zarrext.pipeline.batch_encoding, "BATCH_BYTES", chunk_bytes * per_batch)
            patch.setattr(zarrext.pipeline.batch_encoding, "MIN_CHUNKS_PER_BATCH", 2)
        encoder = _encoder(tmp_path_factory.mktemp("batch"), _chain(
            kind, level, checksum, element_size, decision, header_bits), dtype, fill,
            write_empty_chunks)
        batch = BatchEncoder.of(tuple(encoder.inner.transform.codecs), encoder.chunk_spec)
        whole_elements = kind != "conditional(shuffle, zstd)" or chunk_bytes % element_size == 0
        assert (batch is not None) is (whole_elements and (per_batch or 2) > 1)
        nd = encoder.chunk_spec.prototype.nd_buffer
        reused = np.empty(INNER, native)  # the caller's memory, reused for every chunk

        def chunk_values(coords: tuple[int, int]) -> Any:
            reused[...] = values[coords]
            return nd.from_ndarray_like(reused)

        staging = Staging() if staged else None
        batched = encoder.encode_chunks(EVERY, chunk_values, staging, reused=True)
        gc.collect()  # the frames' memory outlives the batch that made it
        alone = {c: encoder.encode_chunk(c, nd.from_ndarray_like(values[c]), None, reused=True)
                 for c in EVERY}
        assert list(batched) == EVERY
        assert {c: None if b is None else b.to_bytes() for c, b in batched.items()} == {
            c: None if b is None else b.to_bytes() for c, b in alone.items()}
        if staging is not None:
            if kind != "zstd":  # laid out in the segments, as chunk by chunk
                assert all(staging.holds(b.as_numpy_array()) for b in batched.values()
                           if b is not None)
            staging.release()


def test_default_chunks_follow_the_specs_layout(tmp_path: Path) -> None:
    """convert's default chain, batched: the header byte 0b11 (spec 000, bit i for
    nested codec i), then zstd's frame of the chunk's byte planes (byte j of every
    float32 in plane j), built here with numpy and read with zstandard."""
    inner = (64, 64)
    encoder = _encoder(tmp_path, _chain("conditional(shuffle, zstd)", 1, False, 4,
                                        "compress_if_smaller", 8), "<f4", 0.0, False, inner)
    rng = np.random.default_rng(5)
    values = {c: np.cumsum(rng.standard_normal(inner), axis=1).astype("<f4") + 100
              for c in EVERY}
    nd = encoder.chunk_spec.prototype.nd_buffer
    stored = encoder.encode_chunks(EVERY, lambda c: nd.from_ndarray_like(values[c]), None,
                                   reused=False)
    for coords in EVERY:
        chunk = stored[coords]
        assert chunk is not None
        raw = chunk.to_bytes()
        planes = values[coords].reshape(-1).view(np.uint8).reshape(-1, 4).T.tobytes()
        assert raw[0] == 0b11
        assert zstandard.ZstdDecompressor().decompress(raw[1:]) == planes


@pytest.mark.parametrize(("inner", "batched"), [((256, 256), True), ((512, 512), False)],
                         ids=["256 KiB chunks", "1 MiB chunks"])
def test_only_chunks_that_gain_are_batched(tmp_path: Path, inner: tuple[int, int],
                                           batched: bool) -> None:
    """Chunks of 1 MiB keep the chunk-by-chunk path (a batch of them gains nothing);
    256 KiB ones are batched, 16 to a batch."""
    encoder = _encoder(tmp_path, _chain("conditional(shuffle, zstd)", 1, False, 4,
                                        "compress_if_smaller", 8), "<f4", 0.0, False, inner)
    batch = BatchEncoder.of(tuple(encoder.inner.transform.codecs), encoder.chunk_spec)
    assert (batch is not None) is batched
    if batch is not None:
        assert batch.per_batch == 16
