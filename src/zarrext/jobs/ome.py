"""OME-Zarr 0.4 metadata upgraded to OME-Zarr 0.5 when convert changes the format.

OME-Zarr 0.4 lives in Zarr format 2 only, and 0.5 in format 3 only: a format 2
group converted to format 3 with its 0.4 attributes kept is valid as neither. So
a conversion of a format 2 group moves each group's OME-Zarr metadata under the
``ome`` key with ``"version": "0.5"`` and gives each image array the
``dimension_names`` its axes name, as the OME-NGFF 0.5 specification has them:

- ``multiscales`` (each one's ``version`` dropped) and ``omero`` (its ``version``
  dropped) of an image;
- ``image-label`` of a label image (its ``version`` dropped), and the ``labels``
  list of a labels group;
- ``plate`` (its ``version`` set to 0.5, as ome-zarr-py writes it and
  ome-zarr-models expects it) and ``well`` (its ``version`` dropped);
- ``bioformats2raw.layout`` of a bioformats2raw container, and ``series`` of its
  ``OME`` group.

Only what 0.5 places under ``ome`` moves; other attributes stay where they are.
A group whose OME-Zarr metadata names another version than 0.4 (0.1 to 0.3 place
axes and transformations differently) is left as it is, and the plan says so.
:func:`planned_upgrade` reads the source's attributes (before anything is
written); :func:`apply_upgrade` rewrites the output's metadata documents, once
every array is written and before the consolidated metadata is made again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OmeUpgrade", "apply_upgrade", "planned_upgrade"]

SOURCE_VERSION = "0.4"
TARGET_VERSION = "0.5"

# the keys that make a group an OME-Zarr node, and the JSON type each has
_NODE_KEYS: dict[str, type | tuple[type, ...]] = {
    "multiscales": list, "image-label": dict, "labels": list, "plate": dict, "well": dict,
    "bioformats2raw.layout": (int, float), "series": list,
}


@dataclass(frozen=True)
class OmeUpgrade:
    """The OME-Zarr metadata a conversion upgrades from 0.4 to 0.5.

    Attributes
    ----------
    groups : mapping of str to dict
        Each upgraded group's path in the converted group ("" for itself) and its
        new attributes.
    dimension_names : mapping of str to tuple of str
        Each image array's path and the names of its multiscale's axes.
    kept : mapping of str to str
        Groups whose OME-Zarr metadata names another version, left as they are.
    """

    groups: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    dimension_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kept: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """What the upgrade does, in one line."""
        parts = []
        if self.groups:
            names = ", ".join(p or "/" for p in self.groups)
            parts.append(
                f"OME-Zarr metadata upgraded from {SOURCE_VERSION} to {TARGET_VERSION} "
                f"(Zarr format 3 needs it) in {len(self.groups)} group(s) ({names}), "
                f"dimension_names from the axes on {len(self.dimension_names)} array(s)"
            )
        if self.kept:
            names = ", ".join(f"{p or '/'} ({v})" for p, v in self.kept.items())
            parts.append(f"OME-Zarr metadata of another version than {SOURCE_VERSION} "
                         f"kept as it is: {names}")
        return "; ".join(parts)


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _versions(attributes: Mapping[str, Any]) -> set[str]:
    """The OME-Zarr versions a group's attributes name (none: the keys 0.4 left
    without one, ``labels`` and bioformats2raw's)."""
    found: list[Any] = []
    multiscales = attributes.get("multiscales")
    if isinstance(multiscales, list):
        found += [m.get("version") for m in multiscales if isinstance(m, dict)]
    for key in ("image-label", "plate", "well"):
        if isinstance(attributes.get(key), dict):
            found.append(attributes[key].get("version"))
    return {str(v) for v in found if v is not None}


def _ome_keys(path: str, attributes: Mapping[str, Any], members: Mapping[str, Any],
              parent: Mapping[str, Any] | None) -> list[str]:
    """The keys of a group's attributes that are OME-Zarr 0.4 metadata, each of its
    type: ``labels`` only as a list naming subgroups of the group, ``series`` only in
    the ``OME`` group of a bioformats2raw container, ``omero`` only beside
    ``multiscales`` (elsewhere such keys may mean something else)."""
    import zarr

    keys = []
    for key, kind in _NODE_KEYS.items():
        value = attributes.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            continue
        if key == "labels" and not (
            isinstance(value, list) and value
            and all(isinstance(v, str)
                    and isinstance(members.get(_join(path, v)), zarr.Group) for v in value)
        ):
            continue
        if key == "series" and not (
            path.rsplit("/", 1)[-1] == "OME" and parent is not None
            and "bioformats2raw.layout" in parent
        ):
            continue
        keys.append(key)
    if "multiscales" in keys and isinstance(attributes.get("omero"), dict):
        keys.append("omero")
    return keys


def _without_version(value: Any) -> Any:
    return {k: v for k, v in value.items() if k != "version"} if isinstance(value, dict) \
        else value


def _upgraded(attributes: Mapping[str, Any], keys: list[str]) -> dict[str, Any]:
    ome: dict[str, Any] = {"version": TARGET_VERSION}
    for key in keys:
        value = attributes[key]
        if key == "multiscales":
            value = [_without_version(m) for m in value]
        elif key in ("image-label", "well", "omero"):
            value = _without_version(value)
        elif key == "plate" and isinstance(value, dict):
            value = {**value, "version": TARGET_VERSION}
        ome[key] = value
    rest = {k: v for k, v in attributes.items() if k not in keys}
    return {**rest, "ome": ome}


def _axis_names(multiscale: Any) -> tuple[str, ...] | None:
    axes = multiscale.get("axes") if isinstance(multiscale, dict) else None
    if not isinstance(axes, list):
        return None
    names = [a.get("name") if isinstance(a, dict) else None for a in axes]
    return tuple(str(n) for n in names) if all(isinstance(n, str) for n in names) else None


def _dimension_names(path: str, multiscales: Any,
                     members: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The axes' names of each array a group's ``multiscales`` lists (by its path)."""
    import zarr

    dims = {}
    for multiscale in multiscales if isinstance(multiscales, list) else []:
        names = _axis_names(multiscale)
        datasets = multiscale.get("datasets") if names is not None else None
        for dataset in datasets if isinstance(datasets, list) else []:
            if not isinstance(dataset, dict):
                continue
            array_path = _join(path, str(dataset.get("path", "")).strip("/"))
            array = members.get(array_path)
            if names is not None and isinstance(array, zarr.Array) and array.ndim == len(names):
                dims[array_path] = names
    return dims


def planned_upgrade(group: Any, members: Mapping[str, Any]) -> OmeUpgrade | None:
    """The upgrade of a format 2 ``group`` and its ``members`` (by path, as
    :func:`zarrext.jobs.convert.groups.group_members` gives them), or ``None`` where there
    is no OME-Zarr metadata to upgrade (a format 3 group, an array, no OME keys)."""
    import zarr

    if not isinstance(group, zarr.Group) or group.metadata.zarr_format != 2:
        return None
    nodes = {"": group, **{p: m for p, m in members.items() if isinstance(m, zarr.Group)}}
    attributes = {p: g.attrs.asdict() for p, g in nodes.items()}
    groups: dict[str, dict[str, Any]] = {}
    dims: dict[str, tuple[str, ...]] = {}
    kept: dict[str, str] = {}
    for path, attrs in attributes.items():
        if "ome" in attrs:  # already under the 0.5 key: not ours to move
            continue
        parent = attributes.get(path.rsplit("/", 1)[0] if "/" in path else "") \
            if path else None
        keys = _ome_keys(path, attrs, members, parent)
        if not keys:
            continue
        versions = _versions(attrs)
        if versions - {SOURCE_VERSION}:
            kept[path] = ", ".join(sorted(versions))
            continue
        groups[path] = _upgraded(attrs, keys)
        if "multiscales" in keys:
            dims |= _dimension_names(path, attrs["multiscales"], members)
    if not groups and not kept:
        return None
    return OmeUpgrade(groups, dims, kept)


def apply_upgrade(upgrade: OmeUpgrade, store: Any, base: str) -> None:
    """Rewrite the converted group's metadata documents (at ``base`` in ``store``)
    as ``upgrade`` plans: the groups' attributes, the arrays' dimension names."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    prototype = default_buffer_prototype()

    def rewrite(path: str, change: Any) -> None:
        key = _join(base, path, "zarr.json")
        stored = sync(store.get(key, prototype=prototype))
        if stored is None:  # not in the output (e.g. a staging copy left out)
            return
        document = json.loads(stored.to_bytes())
        change(document)
        sync(store.set(key, prototype.buffer.from_bytes(json.dumps(document, indent=2).encode())))

    for path, attributes in upgrade.groups.items():
        rewrite(path, lambda d, a=attributes: d.__setitem__("attributes", a))
    for path, names in upgrade.dimension_names.items():
        def named(document: dict[str, Any], names: tuple[str, ...] = names) -> None:
            document["dimension_names"] = list(names)
            document.get("attributes", {}).pop("_ARRAY_DIMENSIONS", None)
        rewrite(path, named)
