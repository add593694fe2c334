"""Consolidating again the consolidated metadata that a new output makes stale.

Readers that trust consolidated metadata (xarray's default) see a new array only
once the consolidated metadata of the groups holding it lists it:
:func:`_consolidate_within` refreshes the groups inside a copied group,
:func:`consolidate_above` the groups above an output. Only groups that already
hold consolidated metadata are consolidated again.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["consolidate_above"]

def _group_document(store: Any, path: str) -> dict[str, Any] | None:
    """The zarr.json of the group at ``path`` of ``store``, or None if no group is there."""
    import json

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    # Read as JSON: zarr's open(use_consolidated=False) drops consolidated_metadata.
    key = f"{path}/zarr.json" if path else "zarr.json"
    try:
        raw = sync(store.get(key, default_buffer_prototype()))
        document = json.loads(raw.to_bytes()) if raw is not None else None
    except (OSError, ValueError):  # unreadable or not JSON: not a group we can refresh
        return None
    if isinstance(document, dict) and document.get("node_type") == "group":
        return document
    return None


def _consolidated(store: Any, path: str) -> bool:
    document = _group_document(store, path)
    return document is not None and document.get("consolidated_metadata") is not None


def _consolidate(store: Any, path: str) -> None:
    import zarr
    from zarr.errors import ZarrUserWarning

    with warnings.catch_warnings():
        # "consolidated metadata is not part of the Zarr format 3 spec": the group
        # already had it; we only bring it up to date.
        warnings.simplefilter("ignore", ZarrUserWarning)
        zarr.consolidate_metadata(store, path=path or None, zarr_format=3)


def _consolidate_within(store: Any, base: str = "") -> None:
    """Consolidate again every group at and under ``base`` that had consolidated metadata."""
    import zarr

    root = zarr.open_group(store, path=base, mode="r", use_consolidated=False)
    inside = f"{base}/" if base else ""
    groups = [base] + [
        f"{inside}{p}" for p, m in root.members(max_depth=None) if isinstance(m, zarr.Group)
    ]
    # Innermost first: a group's consolidated metadata embeds its subgroups' own.
    for path in sorted(groups, key=lambda p: -p.count("/") - bool(p)):
        if _consolidated(store, path):
            _consolidate(store, path)


def consolidate_above(
    output: Any, *, storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """Consolidate again the groups above ``output`` that hold consolidated metadata.

    Readers that trust consolidated metadata (xarray's default) see a new array
    in such a group only once its parent's consolidated metadata lists it.
    Local directories, object stores (URLs or stores) and paths in an icechunk
    session are followed up the tree while the parent is a Zarr group; other
    stores (zip archives, memory) have no parents.

    Returns
    -------
    list of str
        The groups consolidated again, innermost first.
    """
    from zarr.abc.store import Store
    from zarr.storage import LocalStore

    from zarrext import stores
    from zarrext.outputs import _in_session, local_path

    if isinstance(output, str) and local_path(output) is None:
        output = stores.open_store(output, mode="r+", storage_options=storage_options)
    parents: list[tuple[Any, str]] = []
    session = _in_session(output)
    if session is not None:  # the groups above, in the same session's store
        store, inner = session
        parts = inner.split("/") if inner else []
        for n in range(len(parts) - 1, -1, -1):
            above = "/".join(parts[:n])
            if _group_document(store, above) is None:
                break
            if _consolidated(store, above):
                _consolidate(store, above)
                parents.append((store, above or "/"))
        return [name for _, name in parents]
    remote = stores.remote_location(output) if isinstance(output, Store) else None
    if remote is not None:
        parts = remote[1].split("/")
        for n in range(len(parts) - 1, 0, -1):
            prefix = "/".join(parts[:n])
            parents.append((stores.remote_store_at(output, prefix), prefix))
    else:
        path = local_path(output)
        if path is None or path.suffix == ".zip":
            return []
        for parent in Path(path).resolve().parents:
            parents.append((LocalStore(parent), str(parent)))
    done = []
    for store, name in parents:
        if _group_document(store, "") is None:  # the top of the hierarchy was passed
            break
        if _consolidated(store, ""):
            _consolidate(store, "")
            done.append(name)
    return done
