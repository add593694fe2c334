"""The one shard encoder (:mod:`zarrext.pipeline.shard_encoder`): every way it encodes a
whole shard gives zarr-python's bytes for it (the inner chunks here are small enough
that the pipeline's zstd build and numcodecs' write the same frames)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrext
import zarrext.pipeline.codec_pipeline
from zarrext.pipeline.chunk_io import joined
from zarrext.pipeline.shard_encoder import ShardEncoder, WholeShards

SHAPE, SHARD, INNER = (8, 12), (4, 6), (2, 3)


def _blocks(draw: Any, fill: float) -> np.ndarray:
    """A shard of values whose inner chunks are each random, all the fill value, or
    the fill value but one element."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.standard_normal(SHARD).astype("f4")
    for i in range(SHARD[0] // INNER[0]):
        for j in range(SHARD[1] // INNER[1]):
            block = values[i * INNER[0]:(i + 1) * INNER[0], j * INNER[1]:(j + 1) * INNER[1]]
            kind = draw(st.sampled_from(["values", "fill", "fill but the last"]))
            if kind != "values":
                last = block[-1, -1]
                block[...] = fill
                if kind == "fill but the last":
                    block[-1, -1] = last
    return values


@st.composite
def shards(draw: Any) -> tuple[float, np.ndarray]:
    fill = draw(st.sampled_from([0.0, -0.0, 1.5, float("nan")]))
    return fill, _blocks(draw, fill)


@pytest.mark.parametrize("compressors", [[ZstdCodec(level=1)], []], ids=["zstd", "raw"])
@pytest.mark.parametrize("staged", [False, True], ids=["fresh memory", "staged"])
@settings(deadline=None, max_examples=15)
@given(case=shards(), groups=st.integers(1, 5))
def test_jobs_and_chunks_one_at_a_time_give_zarrs_bytes(
    tmp_path_factory: pytest.TempPathFactory, compressors: list[Any], staged: bool,
    case: tuple[float, np.ndarray], groups: int,
) -> None:
    """:meth:`ShardEncoder.jobs` (any number of jobs, run in any order) and
    :meth:`ShardEncoder.encode_from_chunks` (each inner chunk in memory the caller
    reuses) store zarr-python's bytes for a shard, in fresh memory and staged;
    a shard of fill values only is not stored."""
    fill, values = case
    where: Path = tmp_path_factory.mktemp("shard")
    options: dict[str, Any] = {
        "shape": SHAPE, "chunks": INNER, "shards": SHARD, "dtype": "f4", "fill_value": fill,
        "serializer": BytesCodec(), "compressors": compressors,
    }
    plain = zarr.create_array(zarr.storage.MemoryStore(), **options)
    plain[: SHARD[0], : SHARD[1]] = values
    expected = sync(plain.store_path.store.get("c/0/0", default_buffer_prototype()))
    array = zarrext.create_array(str(where / "a.zarr"), **options)
    shards_of = WholeShards.of(array)
    assert shards_of is not None
    encoder = ShardEncoder.of(array.async_array.codec_pipeline.array_bytes_codec, shards_of.spec)
    nd = shards_of.spec.prototype.nd_buffer
    arena = 0 if staged else 1 << 40
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zarrext.pipeline.codec_pipeline, "ARENA_MIN_BYTES", arena)
        assert encoder.inner.encodes_into_arena_for(encoder.chunk_spec) is staged
        jobs, lay_out = encoder.jobs(nd.from_ndarray_like(values.copy()), groups=groups)
        assert 1 <= len(jobs) <= min(groups, 4)
        for job in reversed(jobs):  # in any order
            job()
        shard = lay_out(lambda parts: None if parts is None else joined(parts))
        stored: list[Any] = []
        reused = np.empty(INNER, "f4")  # the caller's memory, reused for every chunk

        def chunk_values(coords: tuple[int, ...]) -> Any:
            i, j = coords
            reused[...] = values[i * INNER[0]:(i + 1) * INNER[0], j * INNER[1]:(j + 1) * INNER[1]]
            return nd.from_ndarray_like(reused)

        encoder.encode_from_chunks(
            chunk_values, lambda parts: stored.append(None if parts is None else
                                                      joined(parts).to_bytes()))
    got = None if shard is None else shard.to_bytes()
    want = None if expected is None else expected.to_bytes()
    assert got == want
    assert stored == [want]
