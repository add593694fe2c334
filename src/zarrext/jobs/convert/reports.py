"""What a conversion tells its caller: a report per array, progress, and its errors.

:class:`ConvertReport` is one array's outcome, its bytes counted as ``zarrext info``
counts them (:func:`stored_bytes`); :data:`ConvertProgress` the form of the progress
callback; :class:`ConversionError` and :class:`ArraySelectionError` what is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zarrext.jobs import cluster
from zarrext.jobs.convert.sources import V2_METADATA

if TYPE_CHECKING:
    from zarrext.jobs.ome import OmeUpgrade

__all__ = [
    "ArraySelectionError",
    "ConversionError",
    "ConvertProgress",
    "ConvertReport",
    "stored_bytes",
]

ConvertProgress = Callable[[str, int, int], None]
"""``progress(array_path, done, total)`` as write units finish."""


class ConversionError(ValueError):
    """An array cannot be converted as asked; nothing was written."""


class ArraySelectionError(ConversionError):
    """The arrays selected (``arrays=``) are not arrays of the group converted."""


@dataclass(frozen=True)
class ConvertReport:
    """What :func:`zarrext.convert` did (or, with ``dry_run``, expects to do) to one array.

    Attributes
    ----------
    path : str
        The array's path in the group converted ("" for a lone array).
    becomes : str
        Its new encoding (:meth:`~zarrext.jobs.convert.plans.Target.describe`), or
        ``"copied as it is"``.
    source_bytes, output_bytes : int
        Stored bytes of chunks (:func:`zarrext.jobs.inspection.inventory`'s
        ``stored_bytes``; for a format 2 source, its chunk objects' sizes). With
        ``dry_run``, ``output_bytes`` is the sample's bytes scaled to the array.
    seconds : float
        Time spent on the array's write units (on the sample's, with ``dry_run``).
    units : int
        Write units written (sampled, with ``dry_run``) out of ``total_units``.
    worst_error : float, optional
        For a quantized array, the largest ``|output - source|`` read back.
    ome_upgrade : OmeUpgrade, optional
        The conversion's upgrade of OME-Zarr 0.4 metadata to 0.5 (the same in
        every report of one conversion; :mod:`zarrext.jobs.ome`), if it made one.
    """

    path: str
    becomes: str
    source_bytes: int
    output_bytes: int
    seconds: float
    units: int
    total_units: int
    converted: bool = True
    dry_run: bool = False
    worst_error: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    ome_upgrade: OmeUpgrade | None = field(default=None, compare=False)

    @property
    def size_ratio(self) -> float:
        """``source_bytes / output_bytes`` (how many times smaller the output is)."""
        return self.source_bytes / self.output_bytes if self.output_bytes else math.inf


def stored_bytes(array: Any) -> int:
    """Stored bytes of chunks, as ``zarrext info`` counts them (format 2: the sizes of
    the array's objects but its metadata, chunks in nested directories too)."""
    from zarr.core.common import concurrent_map
    from zarr.core.sync import sync

    from zarrext.jobs.inspection import chunk_prefix, inventory
    from zarrext.stores import list_keys, object_sizes

    if array.metadata.zarr_format == 3:
        # the totals alone: of a shard its index only, not its bytes (reading every
        # shard whole was a third of a 256 MiB convert's time in bench_convert)
        return inventory(array, read_masks=False, list_chunks=False).stored_bytes
    store, prefix = array.store_path.store, chunk_prefix(array)
    sizes = object_sizes(store, prefix)
    if sizes is None:  # a store that cannot list sizes: asked key by key
        keys = list_keys(store, prefix)
        found = sync(concurrent_map([(k,) for k in keys], store.getsize, cluster.concurrency()))
        sizes = dict(zip(keys, found, strict=True))
    return sum(size for key, size in sizes.items()
               if key.rsplit("/", 1)[-1] not in V2_METADATA)
