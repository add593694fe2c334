"""The consolidated metadata of the groups that hold a job's output.

A group's consolidated metadata (the ``consolidated_metadata`` field of its
``zarr.json``) holds a copy of every member's ``zarr.json``; zarr-python and xarray
(by default) read a member through that copy, never through the member's own
document. Replacing a member therefore makes the copy wrong until it is written
again, and there is no copy right for both versions (their scale and offset, data
type, chunks differ). Two ways of leaving it out do not work either:

- a member missing from the copy reads as absent: zarr-python trusts the copy and
  does not look in the store (``group["q"]`` raises ``KeyError``, xarray's dataset
  lacks the variable);
- a group whose ``zarr.json`` has no ``consolidated_metadata`` at all is read
  member by member from the store, each member through its own ``zarr.json``: the
  member as it is stored, old or new, whole. xarray's default falls back to that
  too (with a warning that it is slower).

So :mod:`zarrext.jobs.outputs` withdraws the consolidated metadata of the groups above an
output (:func:`withdraw`) before it swaps the output in, and consolidates them again
(:func:`consolidate`) after. An output that is new (no old version) needs no
withdrawal: the copy without it reads as the group did before.

Temporary outputs (names holding :data:`STAGING_MARKER`) are never members of any
consolidated metadata written here: :func:`consolidate` and
:func:`consolidate_within` list the store without them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import WrapperStore

__all__ = [
    "STAGING_MARKER",
    "consolidate",
    "consolidate_within",
    "group_document",
    "is_consolidated",
    "is_staging",
    "withdraw",
]

# Temporary outputs carry this in their name; ``check`` recognises leftovers by it.
STAGING_MARKER = ".zarrext-tmp-"


def is_staging(key: str) -> bool:
    """Whether a store key (or a path relative to a group) is in a temporary output."""
    return any(STAGING_MARKER in part for part in key.split("/"))


class _WithoutStaging(WrapperStore[Store]):
    """A store whose listings leave out temporary outputs (and what is inside them).

    zarr's group walk lists a group's children and opens each: a temporary output
    listed would become a member of the consolidated metadata written from the walk
    (an older zarrext's temporary copies are whole arrays), and zarr warns about one
    that does not open (zarrext's, which has no ``zarr.json`` at its root).
    """

    @property
    def supports_consolidated_metadata(self) -> bool:
        return self._store.supports_consolidated_metadata

    async def _kept(self, listed: AsyncIterator[str]) -> AsyncIterator[str]:
        async for key in listed:
            if not is_staging(key):
                yield key

    def list(self) -> AsyncIterator[str]:
        return self._kept(self._store.list())

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        return self._kept(self._store.list_prefix(prefix))

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        return self._kept(self._store.list_dir(prefix))


def _document_key(path: str) -> str:
    return f"{path}/zarr.json" if path else "zarr.json"


def group_document(store: Any, path: str) -> dict[str, Any] | None:
    """The zarr.json of the group at ``path`` of ``store``, or None if no group is there."""
    # Read as JSON: zarr's open(use_consolidated=False) drops consolidated_metadata.
    try:
        raw = sync(store.get(_document_key(path), default_buffer_prototype()))
        document = json.loads(raw.to_bytes()) if raw is not None else None
    except (OSError, ValueError):  # unreadable or not JSON: not a group we can refresh
        return None
    if isinstance(document, dict) and document.get("node_type") == "group":
        return document
    return None


def is_consolidated(store: Any, path: str) -> bool:
    """Whether the group at ``path`` of ``store`` holds consolidated metadata."""
    document = group_document(store, path)
    return document is not None and document.get("consolidated_metadata") is not None


def withdraw(store: Any, path: str) -> None:
    """Rewrite the group's ``zarr.json`` without its consolidated metadata.

    Readers then read each member through the member's own ``zarr.json``. One
    write of one object (zarr's local store writes a file under another name and
    renames it): a reader sees the document before or after, never a mix.
    """
    document = group_document(store, path)
    if document is None or document.pop("consolidated_metadata", None) is None:
        return
    text = json.dumps(document, indent=2)
    sync(store.set(_document_key(path),
                   default_buffer_prototype().buffer.from_bytes(text.encode())))


def consolidate(store: Any, path: str) -> None:
    """Write the consolidated metadata of the group at ``path`` from its members as
    they are stored now, temporary outputs left out."""
    import zarr
    from zarr.errors import ZarrUserWarning

    with warnings.catch_warnings():
        # "consolidated metadata is not part of the Zarr format 3 spec": the group
        # had it; we only bring it up to date.
        warnings.simplefilter("ignore", ZarrUserWarning)
        zarr.consolidate_metadata(_WithoutStaging(store), path=path or None, zarr_format=3)


def consolidate_within(store: Any, base: str = "") -> None:
    """Consolidate again every group at and under ``base`` that had consolidated metadata."""
    import zarr

    root = zarr.open_group(_WithoutStaging(store), path=base, mode="r", use_consolidated=False)
    inside = f"{base}/" if base else ""
    groups = [base] + [
        f"{inside}{p}" for p, m in root.members(max_depth=None) if isinstance(m, zarr.Group)
    ]
    # Innermost first: a group's consolidated metadata embeds its subgroups' own.
    for path in sorted(groups, key=lambda p: -p.count("/") - bool(p)):
        if is_consolidated(store, path):
            consolidate(store, path)
