"""Files a killed writer left beside an array's chunks: zarrext's temporary files
(``*.zarrext-tmp-<pid>-*``, stale once that process is gone) and zarr-python's
(``<key>.<hex>.partial``, stale once untouched for :data:`STALE_AFTER` seconds).

Recognising them only; :func:`zarrext.jobs.shards.check.check` reports (and, with
``repair``, deletes) them.
"""

from __future__ import annotations

import re
from pathlib import Path

from zarrext.sharding.journal import HOST, TMP_MARK, process_alive, temp_owner

__all__ = ["STALE_AFTER"]

_TMP_PID = re.compile(re.escape(TMP_MARK) + r"(\d+)-")
# zarr-python's LocalStore writes ``path.with_suffix(f".{uuid4().hex}.partial")``.
_ZARR_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")
STALE_AFTER = 60.0
"""Seconds after which an untouched zarr-python ``*.partial`` file counts as left behind."""


def leftover(path: Path, now: float, stale_after: float) -> tuple[str, str] | None:
    """``(target name, description)`` of a file a killed writer left, if ``path`` is one."""
    name = path.name
    match = _TMP_PID.search(name)
    owner = temp_owner(name)
    if match is not None and owner is not None:
        pid, host = owner
        if process_alive(pid) or host not in (None, HOST):
            return None  # alive, or another host's process (not visible here)
        return name[: match.start()], f"stale temporary file {name} (its process is gone)"
    if _ZARR_PARTIAL.search(name):
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            return None
        if age < stale_after:
            return None  # a zarr-python writer may still be writing it
        return name[: -len(".partial") - 33], (
            f"stale temporary file {name} (zarr-python, untouched for {age:.0f} s)"
        )
    return None
