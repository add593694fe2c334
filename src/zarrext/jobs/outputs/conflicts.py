"""What a job's output refusals raise and warn: an output the job must not touch, an
object store that ignores conditional writes, a temporary output it cannot prove a
killed job's, an output inside a Zarr format 2 group."""

from __future__ import annotations

from typing import Any

__all__ = [
    "OutputConflictError",
    "OutputLeftoverWarning",
    "UnconditionalStoreWarning",
    "refuse_inside_format_2",
]


class OutputConflictError(ValueError):
    """An output that would overwrite or overlap what the job must not touch."""


class UnconditionalStoreWarning(UserWarning):
    """An output's object store ignores conditional writes: another writer putting
    objects at the output during the run is not detected."""


class OutputLeftoverWarning(UserWarning):
    """A temporary output beside an output that a job cannot prove its own: left in place."""


def refuse_inside_format_2(output: Any, group: str | None) -> None:
    """Refuse an output inside the Zarr format 2 group ``group`` (None: it is not).

    The output is a format 3 array or group; its readers (xarray, zarr-python) open
    a format 2 group as format 2 and find its members by their ``.zarray`` or
    ``.zgroup`` (or through its ``.zmetadata``, which holds only format 2
    documents): the output would be no member they see, a member it replaced would
    read as missing (or, through the old ``.zmetadata``, as fill values).
    """
    if group is not None:
        raise OutputConflictError(
            f"{group} is a Zarr format 2 group: {output} inside it would be a format 3 "
            "node that its readers (xarray, zarr-python) do not see as a member, and its "
            f".zmetadata would go on describing the old one; convert the whole group "
            f"(zarrext convert {group} --out NEW) or write the output outside it"
        )
