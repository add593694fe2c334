"""Shard write layouts for ``sharding_indexed``: fixed slots, append, compaction.

The shards stay zarr-python's ``sharding_indexed`` format; this package decides
where a writer puts inner chunks (:mod:`~zarrext.sharding.layout`), writes them in
place and crash-safely (:mod:`~zarrext.sharding.writer`), rewrites shards densely
or back into slots (:mod:`~zarrext.sharding.compact`), validates and repairs
(:mod:`~zarrext.sharding.check`), reports (:mod:`~zarrext.sharding.inspect`) and
ingests Dask arrays (:mod:`~zarrext.sharding.dask`, above :mod:`zarrext.api`, so not
imported here: :func:`zarrext.write_dask`).
"""

from __future__ import annotations

from zarrext.sharding.check import ShardCheck, check
from zarrext.sharding.compact import RewriteReport, compact, expand
from zarrext.sharding.inspect import ShardInfo, shard_report
from zarrext.sharding.layout import LAYOUTS, LayoutShardingCodec, ShardLayoutError, slot_bound

__all__ = [
    "LAYOUTS",
    "LayoutShardingCodec",
    "RewriteReport",
    "ShardCheck",
    "ShardInfo",
    "ShardLayoutError",
    "check",
    "compact",
    "expand",
    "shard_report",
    "slot_bound",
]
