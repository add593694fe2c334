"""Outputs of whole-store jobs: never over their input, never seen half-built.

A job that writes a new array (``zarrext quantize --out``) builds it under a
temporary sibling name and renames it into place only when it is complete, so an
interrupted job (Ctrl-C, an error, kill -9) never leaves something that opens as a
finished array. The old output, if the caller asked to replace one, is moved
aside first and removed last.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "OutputConflictError",
    "STAGING_MARKER",
    "check_disjoint",
    "local_path",
    "staged_output",
]

# Temporary outputs carry this in their name; ``check`` recognises leftovers by it.
STAGING_MARKER = ".zarrext-tmp-"


class OutputConflictError(ValueError):
    """An output that would overwrite or overlap what the job must not touch."""


def local_path(store_like: Any) -> Path | None:
    """The local directory a store-like names, or None for stores and remote URLs."""
    if isinstance(store_like, os.PathLike):
        return Path(store_like)
    if isinstance(store_like, str):
        if store_like.startswith("file://"):
            return Path(store_like.removeprefix("file://"))
        return None if "://" in store_like or store_like.endswith(".zip") else Path(store_like)
    return None


def check_disjoint(source: Any, output: Any) -> None:
    """Refuse an output equal to, inside, or containing the source (local paths)."""
    src, out = local_path(source), local_path(output)
    if src is None or out is None:
        return
    src, out = src.resolve(), out.resolve()
    if out == src:
        raise OutputConflictError(f"the output {output} is the input; choose another --out")
    if src in out.parents:
        raise OutputConflictError(f"the output {output} is inside the input {source}")
    if out in src.parents:
        raise OutputConflictError(f"the output {output} contains the input {source}")


def _is_zarr_node(path: Path) -> bool:
    return any((path / name).is_file() for name in ("zarr.json", ".zarray", ".zgroup"))


@contextlib.contextmanager
def staged_output(output: Any, *, overwrite: bool) -> Iterator[Any]:
    """Yield where to build ``output``; it appears at ``output`` only on success.

    For a local path the job writes to a temporary sibling, renamed into place at
    the end; on any exception (KeyboardInterrupt included) the temporary copy is
    removed and nothing at ``output`` changes. Other stores are written in place.

    Raises
    ------
    OutputConflictError
        If ``output`` exists and ``overwrite`` is false, or it exists and is not a
        Zarr array or group (never replaced, whatever ``overwrite`` says).
    """
    path = local_path(output)
    if path is None:
        yield output
        return
    if path.exists():
        if not overwrite:
            raise OutputConflictError(f"{output} already exists (pass --overwrite to replace it)")
        if not path.is_dir() or not _is_zarr_node(path):
            raise OutputConflictError(
                f"{output} exists and is not a Zarr array or group; refusing to replace it"
            )
    token = uuid.uuid4().hex[:12]
    temp = path.with_name(f".{path.name}{STAGING_MARKER}{token}")
    try:
        yield temp
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}{STAGING_MARKER}old-{token}")
    if path.exists():
        os.replace(path, old)
    os.replace(temp, path)
    shutil.rmtree(old, ignore_errors=True)
