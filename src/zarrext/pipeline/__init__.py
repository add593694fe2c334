"""The codec pipeline: how chunks travel between a store and zarr-python's codecs.

:class:`ZarrextCodecPipeline` (``zarr.config.set({"codec_pipeline.path":
"zarrext.pipeline.ZarrextCodecPipeline"})``, or per array through
:func:`zarrext.open_array`) is zarr-python's batched pipeline with zarrext's paths:
codec threads (:mod:`~zarrext.pipeline.codec_threads`), a chunk's read as one job
(:mod:`~zarrext.pipeline.chunk_reads`), whole shards as one job
(:mod:`~zarrext.pipeline.whole_shards`), local chunk files read into
reused memory (:mod:`~zarrext.pipeline.chunk_io`, :mod:`~zarrext.pipeline.scratch`),
decoding straight into place (:mod:`~zarrext.pipeline.direct`), optional arrays split
into values and mask (:mod:`~zarrext.pipeline.optional_decode`,
:mod:`~zarrext.pipeline.masked_read`), object stores (:mod:`~zarrext.pipeline.remote`).

Layer: above the codecs, data types, formats and integration; below
:mod:`zarrext.sharding`, which reads shards through what
:mod:`~zarrext.pipeline.shard_protocols` declares. May import those lower layers and
the base modules, never :mod:`zarrext.sharding`, :mod:`zarrext.api` or a job.
"""

from __future__ import annotations

from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline, build_pipeline

__all__ = ["ZarrextCodecPipeline", "build_pipeline"]
