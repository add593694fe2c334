"""Arrays built the way users build them, across the space zarr-python accepts.

A hypothesis strategy (:func:`configurations`) draws the keyword arguments of
``zarr.create_array``/``zarrext.create_array``: sharded through ``shards=`` or
through ``serializer=ShardingCodec(...)`` (with zarr's default ``zstd`` after it
when ``compressors=`` is not given), nested shards, or not sharded; filters
(``transpose``, the ``scale_offset`` + ``cast_value`` that ``zarrext.quantize.plan``
makes); inner and outer compressors (zstd, gzip, blosc, crc32c, conditional, shuffle);
plain and ``optional`` data types; shapes with partial edge chunks and shards.

Shared by ``tests/sharding/test_configurations.py`` (a fast profile in ``make test``, a long
one in ``make test-slow``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

import zarrext
from zarrext import ConditionalCodec, OptionalDType, ShuffleCodec

# Inner (inside the shard) and outer (after the serializer) bytes->bytes chains.
COMPRESSORS: dict[str, Any] = {
    "none": lambda item: [],
    "zstd": lambda item: [ZstdCodec(level=1)],
    "gzip": lambda item: [GzipCodec(level=1)],
    "blosc": lambda item: [BloscCodec(cname="lz4", clevel=1)],
    "crc32c": lambda item: [Crc32cCodec()],
    "conditional": lambda item: [ConditionalCodec([ZstdCodec(level=1)])],
    "shuffle-zstd": lambda item: [ShuffleCodec(element_size=item), ZstdCodec(level=1)],
    "conditional-crc32c": lambda item: [ConditionalCodec([ZstdCodec(level=1)]), Crc32cCodec()],
}
# What zarr-python puts after a ShardingCodec serializer when compressors= is not given.
DEFAULT = "default"


@dataclass(frozen=True)
class Configuration:
    """One array as a user creates it, and how to make its values."""

    route: str  # "shards", "serializer", "nested" or "chunks" (not sharded)
    shape: tuple[int, int]
    shard: tuple[int, int]  # the stored object's shape (the chunk, when not sharded)
    inner: tuple[int, int]  # the inner chunk, in the sharding codec's axes
    dtype: str  # "int32", "uint16", "float32" or "optional-int16"
    filters: str  # "none", "transpose" or "quantize"
    inner_codecs: str
    outer_codecs: str
    seed: int
    kwargs: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)

    @property
    def sharded(self) -> bool:
        return self.route != "chunks"

    @property
    def outer(self) -> bool:
        """Whether bytes->bytes codecs stand after the sharding codec."""
        if self.outer_codecs == DEFAULT:
            # zarr's default compressors: zstd, but none for the optional type (its
            # codec's mask and data chains carry their own zstd)
            return self.dtype != "optional-int16"
        return self.sharded and self.outer_codecs != "none"

    @property
    def conditional(self) -> bool:
        return "conditional" in self.inner_codecs or "conditional" in self.outer_codecs

    def values(self, salt: int = 0) -> np.ndarray:
        """Values to write (different for each ``salt``)."""
        rng = np.random.default_rng(self.seed + 7919 * salt)
        if self.dtype == "optional-int16":
            out = np.zeros(self.shape, _dtype(self.dtype).to_native_dtype())
            out["value"] = rng.integers(-300, 300, self.shape)
            out["valid"] = rng.random(self.shape) < 0.7
            out["value"][~out["valid"]] = 0
            return out
        if self.dtype == "float32":
            # smooth, so compressors compress; inside the quantization plan's range
            base = np.add.outer(np.arange(self.shape[0]), np.arange(self.shape[1]))
            return (np.sin(base / 7.0 + salt) * 40 + rng.normal(0, 1, self.shape)).astype(
                "float32")
        info = np.iinfo(self.dtype)
        low, high = max(info.min, -1000), min(info.max, 1000)
        return rng.integers(low, high, self.shape).astype(self.dtype)

    def codec_shard(self) -> tuple[int, int]:
        """The shard's shape in the sharding codec's axes."""
        return _to_array_axes(self.shard, self.filters)


def _to_array_axes(shape: tuple[int, int], filters: str) -> tuple[int, int]:
    """A shape in the sharding codec's axes in the array's (a transpose swaps them;
    swapping is its own inverse)."""
    return (shape[1], shape[0]) if filters == "transpose" else shape


def _dtype(name: str) -> Any:
    if name == "optional-int16":
        from zarr.core.dtype import Int16

        return OptionalDType(Int16())
    return name


def _item_size(name: str) -> int:
    return {"int32": 4, "uint16": 2, "float32": 4, "optional-int16": 2}[name]


@st.composite
def configurations(draw: st.DrawFn, *, sharded_only: bool = False) -> Configuration:
    """A :class:`Configuration` and its ``create_array`` keyword arguments."""
    routes = ["shards", "serializer", "nested"] if sharded_only else [
        "shards", "serializer", "nested", "chunks"]
    route = draw(st.sampled_from(routes))
    dtype = draw(st.sampled_from(["int32", "uint16", "float32", "optional-int16"]))
    filters = "none"
    if dtype != "optional-int16":
        filters = draw(st.sampled_from(["none", "transpose", "quantize"] if dtype == "float32"
                                       else ["none", "transpose"]))
    inner_names = ["none", "zstd", "gzip", "blosc", "crc32c", "conditional", "shuffle-zstd",
                   "conditional-crc32c"]
    if dtype == "optional-int16":
        inner_names = ["none"]  # the optional codec is the serializer and nests its own
    inner_codecs = draw(st.sampled_from(inner_names))
    outer_codecs = "none"
    if route in ("serializer", "nested"):
        # half the arrays store bare shards (what layouts write), half have codecs after
        outer_codecs = draw(st.sampled_from(["none", DEFAULT, "none", "zstd", "crc32c",
                                             "none", "gzip", "none"]))
    # Inner chunks of 4..12 and shards of 1..3 inner chunks per axis, in the axes the
    # sharding codec sees (a transpose before it swaps them); shapes of 1..3 shards
    # per axis with partial edges.
    inner = (draw(st.integers(4, 12)), draw(st.integers(4, 12)))
    per_shard = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    if route != "chunks" and filters == "transpose":
        # zarr checks the sharding codec's chunk shape against the shard in the
        # array's axes, while the codec sees the transposed shard: zarr accepts only
        # shapes that agree in both orders
        inner, per_shard = (inner[0], inner[0]), (per_shard[0], per_shard[0])
    codec_shard = (inner[0] * per_shard[0], inner[1] * per_shard[1])
    if route == "nested":  # outer shards of 2 inner shards along the first axis
        codec_shard = (codec_shard[0] * 2, codec_shard[1])
    if route == "chunks":
        codec_shard = inner
    shard = _to_array_axes(codec_shard, filters)
    shape = tuple(
        draw(st.integers(max(1, s - s // 2), 3 * s)) for s in shard
    )
    seed = draw(st.integers(0, 2**16))
    return configuration(route, (shape[0], shape[1]), shard, inner, dtype, filters,
                         inner_codecs, outer_codecs, seed)


def configuration(*fields: Any) -> Configuration:
    """The :class:`Configuration` of these fields, with the keyword arguments of
    ``zarr.create_array`` that make it (to pin an example)."""
    config = Configuration(*fields)
    return Configuration(**{**config.__dict__, "kwargs": _kwargs(config)})


def _kwargs(config: Configuration) -> dict[str, Any]:
    item = _item_size(config.dtype)
    dtype = _dtype(config.dtype)
    fill: Any = 0
    if config.dtype == "optional-int16":
        fill = None
    kwargs: dict[str, Any] = {"shape": config.shape, "dtype": dtype, "fill_value": fill}
    if config.filters == "transpose":
        kwargs["filters"] = [TransposeCodec(order=(1, 0))]
    elif config.filters == "quantize":
        kwargs["filters"] = zarrext.quantize.plan(
            value_range=(-60.0, 60.0), max_abs_error=0.01, dtype="float32", fill_value=0.0
        )
        kwargs["fill_value"] = 0.0
    inner_bb = COMPRESSORS[config.inner_codecs](item)
    serializer: Any = "auto"
    if config.dtype == "optional-int16":
        serializer = zarrext.OptionalCodec.default_for(dtype)
    if config.route == "chunks":
        kwargs.update(chunks=config.shard, compressors=inner_bb, serializer=serializer)
        return kwargs
    if config.route == "shards":
        kwargs.update(chunks=config.inner, shards=config.shard, compressors=inner_bb,
                      serializer=serializer)
        return kwargs
    inner_serializer = BytesCodec() if serializer == "auto" else serializer
    inner_codecs = [inner_serializer, *inner_bb]
    if config.route == "nested":
        inner_shard = (config.codec_shard()[0] // 2, config.codec_shard()[1])
        inner_codecs = [ShardingCodec(chunk_shape=config.inner, codecs=inner_codecs)]
        sharding = ShardingCodec(chunk_shape=inner_shard, codecs=inner_codecs)
    else:
        sharding = ShardingCodec(chunk_shape=config.inner, codecs=inner_codecs)
    kwargs.update(chunks=config.shard, serializer=sharding)
    if config.outer_codecs != DEFAULT:  # else zarr adds its default zstd after it
        kwargs["compressors"] = COMPRESSORS[config.outer_codecs](item)
    return kwargs


def write_unit(config: Configuration) -> tuple[int, int]:
    """The blocks concurrent layout writers take apart: the inner chunks of the
    outermost shard (inner shards, when shards nest), in the array's axes."""
    unit = config.inner
    if config.route == "nested":
        unit = (config.codec_shard()[0] // 2, config.codec_shard()[1])
    return _to_array_axes(unit, config.filters)


def bands(shape: tuple[int, int], cuts: list[int]) -> list[tuple[slice, slice]]:
    """Row bands of ``shape`` between sorted cut points (any rows: inner chunks are
    cut through, so writers share partial inner chunks)."""
    edges = [0, *sorted({c for c in cuts if 0 < c < shape[0]}), shape[0]]
    return [(slice(a, b), slice(0, shape[1])) for a, b in itertools.pairwise(edges)]
