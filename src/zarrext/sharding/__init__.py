"""Shard write layouts for ``sharding_indexed``: the mechanism.

The shards stay zarr-python's ``sharding_indexed`` format; this package decides
where a writer puts inner chunks (:mod:`~zarrext.sharding.layout`, with
:mod:`~zarrext.sharding.geometry`, :mod:`~zarrext.sharding.bounds` and
:mod:`~zarrext.sharding.allocator`), writes them in place and crash-safely
(:mod:`~zarrext.sharding.writer`, :mod:`~zarrext.sharding.journal`), reads them
(:mod:`~zarrext.sharding.reader`, :mod:`~zarrext.sharding.state`) and rewrites one
shard (:mod:`~zarrext.sharding.transcode`); :mod:`~zarrext.sharding.codec` is the
runtime sharding codec the pipeline drives. What a job knows of an array's shards
(codecs, specs, geometry, keys) is read from its metadata in one place,
:class:`~zarrext.sharding.array_shards.ArrayShards`.

Layer: above :mod:`zarrext.pipeline` and what lies below it; below
:mod:`zarrext.api` and the jobs. The jobs on shards (check, compact, inspect, Dask
writes) live in :mod:`zarrext.jobs.shards`.
"""

from __future__ import annotations

from zarrext.sharding.bounds import slot_bound
from zarrext.sharding.geometry import ShardLayoutError
from zarrext.sharding.layout import LAYOUTS, LayoutShardingCodec

__all__ = ["LAYOUTS", "LayoutShardingCodec", "ShardLayoutError", "slot_bound"]
