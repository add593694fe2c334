"""``zarrext convert``: copying an array or a group into the encoding the user names.

:func:`~zarrext.jobs.convert.converting.convert` (the public ``zarrext.convert``)
plans each selected array's target, refusing what cannot be converted before
anything is written, then runs the conversion engine, which builds the output
under a temporary name and publishes it last. ``zarrext quantize``
(:mod:`zarrext.jobs.quantize`) is convert's quantizing form, planning its own
targets and running them through the same engine. One module per step, each
importing only the ones below it (the ``zarrext.jobs.convert`` contract in
``pyproject.toml``), from the top:

- :mod:`~zarrext.jobs.convert.converting`: ``zarrext.convert`` itself, and the dry run;
- :mod:`~zarrext.jobs.convert.running`: the engine,
  :func:`~zarrext.jobs.convert.running.run_conversion`;
- :mod:`~zarrext.jobs.convert.targets`: each array's target, planned and checked;
  :mod:`~zarrext.jobs.convert.groups` (beside it): a group's members, selected or
  copied as they are, format 2 metadata migrated to format 3;
- :mod:`~zarrext.jobs.convert.scanning`: a quantized array's value range and its
  filters, planned by :mod:`zarrext.quantization`;
- :mod:`~zarrext.jobs.convert.units`: the write units copied, in threads or as Dask
  tasks;
- :mod:`~zarrext.jobs.convert.shards`: whole shards written in the calling thread;
- :mod:`~zarrext.jobs.convert.source_chunks`: source chunks read and decoded in the
  calling thread;
- :mod:`~zarrext.jobs.convert.reports`: reports, progress and errors;
- :mod:`~zarrext.jobs.convert.sources` and :mod:`~zarrext.jobs.convert.plans`: the
  source opened and what it gives its copy; the encodings, quantizations and
  targets planned.

Layer: in :mod:`zarrext.jobs`; may import the other jobs' shared machinery
(:mod:`~zarrext.jobs.outputs`, :mod:`~zarrext.jobs.cluster`, ...), :mod:`zarrext.api`
and every layer below it. This package re-exports the names other modules use.
"""

from __future__ import annotations

from zarrext.jobs.convert.converting import convert
from zarrext.jobs.convert.groups import group_members
from zarrext.jobs.convert.plans import Encoding, Quantized, Target
from zarrext.jobs.convert.reports import (
    ArraySelectionError,
    ConversionError,
    ConvertProgress,
    ConvertReport,
)
from zarrext.jobs.convert.running import run_conversion
from zarrext.jobs.convert.shards import ShardWriter
from zarrext.jobs.convert.source_chunks import ChunkObjectReader
from zarrext.jobs.convert.sources import open_source, opened_store, source_parts
from zarrext.jobs.convert.targets import default_compressors, plan_targets
from zarrext.jobs.convert.units import (
    OutputUnitsRef,
    copy_units_on_worker,
    output_ref,
    source_ref,
    unit_slices,
    write_units,
)

__all__ = [
    "ArraySelectionError",
    "ChunkObjectReader",
    "ConversionError",
    "ConvertProgress",
    "ConvertReport",
    "Encoding",
    "OutputUnitsRef",
    "Quantized",
    "ShardWriter",
    "Target",
    "convert",
    "copy_units_on_worker",
    "default_compressors",
    "group_members",
    "open_source",
    "opened_store",
    "output_ref",
    "plan_targets",
    "run_conversion",
    "source_parts",
    "source_ref",
    "unit_slices",
    "write_units",
]
