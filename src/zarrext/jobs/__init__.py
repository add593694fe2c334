"""Whole-store jobs and what they share.

Conversion (:mod:`zarrext.jobs.convert`, behind ``zarrext.convert``) and its
quantizing form (:mod:`zarrext.jobs.quantize`), recompression
(:mod:`~zarrext.jobs.recompression`), reports (:mod:`~zarrext.jobs.inspection`), the
jobs on shards (:mod:`zarrext.jobs.shards`:
check, compact and expand, inspect, Dask writes), and their common machinery:
outputs built under a temporary name and published last
(:mod:`~zarrext.jobs.outputs`) and the consolidated metadata of the groups
around them (:mod:`~zarrext.jobs.group_metadata`), icechunk transactions
(:mod:`~zarrext.jobs.transactions`), Dask clusters (:mod:`~zarrext.jobs.cluster`),
store references that travel to workers (:mod:`~zarrext.jobs.store_refs`) and
progress (:mod:`~zarrext.jobs.progress`).

Layer: above :mod:`zarrext.api` and everything below it; below
:mod:`zarrext.quantize`, :mod:`zarrext.xarray`, the CLI and the demo. Draws nothing:
rich, typer and matplotlib belong to :mod:`zarrext.cli` and :mod:`zarrext.demo`.
"""
