"""Read N5 in place: write ``zarr.json`` beside N5's ``attributes.json``.

N5 keeps blocks at ``<dataset>/<i0>/<i1>/...`` with the first dimension first, in
column-major order, big-endian, after a small header. A ``zarr.json`` that keeps
N5's dimension order therefore needs

- the v2 chunk key encoding with separator ``/`` (``i0/i1/...``, the N5 path);
- a full ``transpose`` (order ``[N-1, ..., 0]``) then ``bytes`` (big endian), or
  non-square data reads transposed;
- the N5 compressor's zarr equivalent;
- something that skips the block header: ``pad`` (a fixed-size skip; right only
  when every block holds a full block) or ``n5_default`` (reads the header and
  handles the truncated edge blocks that the Java N5 library writes).

:func:`write_zarr_metadata` picks between the two by looking at the edge blocks
that exist, and says why. No block is copied or rewritten.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from zarr.core.metadata.v3 import ArrayV3Metadata

from zarrext._text import counted
from zarrext.codecs.n5_default import (
    N5_DATA_TYPES,
    N5DefaultCodecError,
    header_nbytes,
    parse_header,
)

__all__ = [
    "CodecChoice",
    "Conversion",
    "EdgeScan",
    "N5ConversionError",
    "array_metadata",
    "choose_codec",
    "compression_codec",
    "convert_array",
    "scan_edge_blocks",
    "write_zarr_metadata",
    "written_by_n5",
]

CodecChoice = Literal["pad", "n5_default"]
ATTRIBUTES = "attributes.json"
ZARR_JSON = "zarr.json"
# Keys of attributes.json that describe the dataset itself, not user attributes.
N5_KEYS = frozenset(["dimensions", "blockSize", "dataType", "compression", "compressionType", "n5"])
# Edge blocks whose headers are read to choose a codec; past this, n5_default
# (which reads both forms) is chosen without looking further.
MAX_EDGE_SCAN = 4096
_OVERWRITE_HINT = "(pass overwrite=True, or --overwrite, to replace it)"
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


class N5ConversionError(ValueError):
    """N5 metadata or data that cannot be described by ``zarr.json``."""


@dataclass(frozen=True)
class EdgeScan:
    """What the edge blocks of a dataset look like.

    Attributes
    ----------
    n_edge_blocks : int
        Edge blocks the grid has (blocks that reach past the array's end).
    present : int
        How many of them were found and read.
    truncated : tuple of (block path, header shape)
        Edge blocks stored smaller than a full block.
    complete : bool
        False when the scan stopped at ``MAX_EDGE_SCAN`` blocks.
    """

    n_edge_blocks: int
    present: int = 0
    truncated: tuple[tuple[str, tuple[int, ...]], ...] = ()
    complete: bool = True


@dataclass(frozen=True)
class Conversion:
    """One ``zarr.json`` written (or that would be written)."""

    path: Path
    node_type: Literal["array", "group"]
    metadata: dict[str, Any]
    codec: CodecChoice | None = None
    reason: str = ""
    compression: str = ""
    scan: EdgeScan | None = field(default=None, repr=False)


def _load_attributes(path: Path) -> dict[str, Any] | None:
    file = path / ATTRIBUTES
    if not file.is_file():
        return None
    try:
        attrs = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise N5ConversionError(f"n5: {file} is not valid JSON: {e}") from e
    if not isinstance(attrs, dict):
        raise N5ConversionError(f"n5: {file} must hold a JSON object")
    return attrs


def is_dataset(attrs: Mapping[str, Any] | None) -> bool:
    """Whether N5 attributes describe a dataset (an array) rather than a group."""
    return attrs is not None and all(k in attrs for k in ("dimensions", "blockSize", "dataType"))


def _compression(attrs: Mapping[str, Any]) -> dict[str, Any]:
    compression = attrs.get("compression")
    if compression is None:
        # N5 before 1.0 wrote a bare "compressionType" string.
        return {"type": attrs.get("compressionType", "raw")}
    if not isinstance(compression, dict) or "type" not in compression:
        raise N5ConversionError(f"n5: compression must be an object with 'type', got {compression}")
    return compression


def _int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise N5ConversionError(f"n5: compression {key!r} must be an integer, got {value!r}")
    return value


def compression_codec(compression: Mapping[str, Any], dtype: str) -> dict[str, Any] | None:
    """The zarr bytes->bytes codec (as JSON) that decodes N5 ``compression``.

    Returns ``None`` for ``raw``. Raises :class:`N5ConversionError` for a
    compressor with no equivalent zarr codec.
    """
    kind = compression.get("type")
    if kind == "raw":
        return None
    if kind == "gzip":
        level = _int(compression, "level", -1)
        # -1 is zlib's "default", which is level 6; the level only matters when writing.
        level = 6 if not 0 <= level <= 9 else level
        if compression.get("useZlib", False):
            return {"name": "numcodecs.zlib", "configuration": {"level": level}}
        return {"name": "gzip", "configuration": {"level": level}}
    if kind == "zstd":
        return {
            "name": "zstd",
            "configuration": {"level": _int(compression, "level", 3), "checksum": False},
        }
    if kind == "blosc":
        shuffle = _int(compression, "shuffle", 1)
        if shuffle not in _BLOSC_SHUFFLE:
            raise N5ConversionError(f"n5: blosc shuffle must be 0, 1 or 2, got {shuffle}")
        return {
            "name": "blosc",
            "configuration": {
                "cname": compression.get("cname", "lz4"),
                "clevel": _int(compression, "clevel", 5),
                "shuffle": _BLOSC_SHUFFLE[shuffle],
                "typesize": np.dtype(dtype).itemsize,
                "blocksize": _int(compression, "blocksize", 0),
            },
        }
    if kind == "bzip2":
        level = _int(compression, "blockSize", 9)
        return {"name": "numcodecs.bz2", "configuration": {"level": level}}
    if kind == "xz":
        return {
            "name": "numcodecs.lzma",
            "configuration": {"format": 1, "check": -1, "preset": _int(compression, "preset", 6)},
        }
    if kind == "lz4":
        raise N5ConversionError(
            "n5: N5's lz4 compression uses the Java LZ4 block-stream framing, which no zarr "
            "codec decodes (numcodecs' lz4 has another framing); convert the data instead"
        )
    raise N5ConversionError(f"n5: compression {kind!r} has no equivalent zarr codec")


def _dataset_fields(attrs: Mapping[str, Any], where: Path) -> tuple[list[int], list[int], str]:
    shape, blocks, dtype = attrs["dimensions"], attrs["blockSize"], attrs["dataType"]
    ok = (
        isinstance(shape, list)
        and isinstance(blocks, list)
        and len(shape) == len(blocks) >= 1
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
        and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in blocks)
    )
    if not ok:
        raise N5ConversionError(
            f"n5: {where / ATTRIBUTES}: dimensions {shape!r} and blockSize {blocks!r} must be "
            "lists of the same length of non-negative (block sizes: positive) integers"
        )
    if dtype not in N5_DATA_TYPES:
        raise N5ConversionError(
            f"n5: {where / ATTRIBUTES}: dataType {dtype!r} is not one of {sorted(N5_DATA_TYPES)}"
        )
    return shape, blocks, dtype


def _names_from_axes(attrs: Mapping[str, Any]) -> tuple[list[str] | None, str]:
    """N5's ``axes`` as ``dimension_names``, or ``None`` and why not.

    The ``zarr.json`` written here keeps N5's dimension order (``dimensions`` as
    listed, blocks read through a full ``transpose``), and N5 lists ``axes`` in
    that same order (tensorstore's labels are ``axes`` as they are), so ``axes[i]``
    names dimension ``i``: nothing is reversed.
    """
    axes, ndim = attrs.get("axes"), len(attrs["dimensions"])
    if axes is None:
        return None, ""
    if not (
        isinstance(axes, list)
        and len(axes) == ndim
        and all(isinstance(a, str) and a for a in axes)
        and len(set(axes)) == ndim
    ):
        return None, (
            f"axes {axes!r} are not {ndim} distinct names, so no dimension_names "
            "(give them with dimension_names=, or --dimension-names)"
        )
    return list(axes), ""


def _caller_names(names: Sequence[str], ndim: int, where: Path) -> list[str]:
    if isinstance(names, str):
        raise N5ConversionError(
            f"n5: dimension names must be a sequence of names such as ['z', 'y', 'x'], "
            f"not the string {names!r}"
        )
    out = [str(n) for n in names]
    if len(out) != ndim or not all(out):
        raise N5ConversionError(
            f"n5: {where} has {ndim} dimensions, but dimension names {out} are {len(out)} "
            f"names; give {ndim} non-empty names"
        )
    if len(set(out)) != len(out):
        raise N5ConversionError(
            f"n5: dimension names {out} for {where} repeat a name; xarray needs distinct names"
        )
    return out


def array_metadata(
    attrs: Mapping[str, Any],
    codec: CodecChoice,
    dimension_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The ``zarr.json`` document that reads an N5 dataset in place.

    Parameters
    ----------
    attrs : mapping
        The dataset's ``attributes.json``.
    codec : {"pad", "n5_default"}
        How block headers are read: skipped (``pad``) or parsed (``n5_default``).
    dimension_names : sequence of str, optional
        Names of the dimensions, in N5's ``dimensions`` order (the order zarr
        reads the array in). Default: N5's ``axes``, when it names every
        dimension once; else none.
    """
    shape, blocks, dtype = _dataset_fields(attrs, Path("."))
    ndim = len(shape)
    if dimension_names is None:
        names, _ = _names_from_axes(attrs)
    else:
        names = _caller_names(dimension_names, ndim, Path("."))
    compressor = compression_codec(_compression(attrs), dtype)
    inner: list[dict[str, Any]] = [
        {"name": "transpose", "configuration": {"order": list(range(ndim - 1, -1, -1))}},
        {"name": "bytes", "configuration": {"endian": "big"}},
    ]
    if compressor is not None:
        inner.append(compressor)
    if codec == "pad":
        codecs = [
            *inner,
            {"name": "pad", "configuration": {"location": "start", "nbytes": header_nbytes(ndim)}},
        ]
    elif codec == "n5_default":
        codecs = [{"name": "n5_default", "configuration": {"codecs": inner}}]
    else:
        raise N5ConversionError(f"n5: codec must be 'pad' or 'n5_default', got {codec!r}")
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": blocks}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}},
        # N5 has no fill value; absent blocks read as zeros by convention.
        "fill_value": 0,
        "codecs": codecs,
        "attributes": {k: v for k, v in attrs.items() if k not in N5_KEYS},
        **({} if names is None else {"dimension_names": names}),
    }


def group_metadata(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``zarr.json`` of an N5 group (its user attributes kept)."""
    attributes = {k: v for k, v in (attrs or {}).items() if k not in N5_KEYS}
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def _edge_indices(shape: list[int], blocks: list[int]) -> Iterator[tuple[int, ...]]:
    grid = [math.ceil(s / b) for s, b in zip(shape, blocks, strict=True)]
    edge_dims = [d for d, (s, b) in enumerate(zip(shape, blocks, strict=True)) if s % b]
    seen: set[tuple[int, ...]] = set()
    for d in edge_dims:
        ranges = [range(g) for g in grid]
        ranges[d] = range(grid[d] - 1, grid[d])
        for index in itertools.product(*ranges):
            if index not in seen:
                seen.add(index)
                yield index


def _n_edge_blocks(shape: list[int], blocks: list[int]) -> int:
    grid = [math.ceil(s / b) for s, b in zip(shape, blocks, strict=True)]
    interior = [g - 1 if s % b else g for g, s, b in zip(grid, shape, blocks, strict=True)]
    return math.prod(grid) - math.prod(interior)


def scan_edge_blocks(path: str | os.PathLike[str], attrs: Mapping[str, Any]) -> EdgeScan:
    """Read the headers of a dataset's edge blocks; report the truncated ones.

    Raises :class:`N5ConversionError` naming the block when a header is not a
    default-mode header of the dataset's dimensionality.
    """
    root = Path(path)
    shape, blocks, _ = _dataset_fields(attrs, root)
    ndim = len(shape)
    n = header_nbytes(ndim)
    present = 0
    truncated: list[tuple[str, tuple[int, ...]]] = []
    for scanned, index in enumerate(_edge_indices(shape, blocks)):
        if scanned >= MAX_EDGE_SCAN:
            return EdgeScan(_n_edge_blocks(shape, blocks), present, tuple(truncated), False)
        key = "/".join(str(i) for i in index)
        file = root / key
        if not file.is_file():
            continue
        present += 1
        with file.open("rb") as f:
            head = f.read(n)
        try:
            header = parse_header(head, ndim, f"block {key} of {root}")
        except N5DefaultCodecError as e:
            raise N5ConversionError(str(e)) from e
        if header.shape != tuple(blocks):
            truncated.append((key, header.shape))
    return EdgeScan(_n_edge_blocks(shape, blocks), present, tuple(truncated))


def choose_codec(
    path: str | os.PathLike[str], attrs: Mapping[str, Any]
) -> tuple[CodecChoice, str, EdgeScan]:
    """Pick ``pad`` or ``n5_default`` for a dataset, with the reason."""
    scan = scan_edge_blocks(path, attrs)
    n = header_nbytes(len(attrs["dimensions"]))
    if scan.n_edge_blocks == 0:
        return (
            "pad",
            f"no edge blocks (shape is a multiple of blockSize): skip the {n}-byte header",
            scan,
        )
    if scan.truncated:
        key, shape = scan.truncated[0]
        return (
            "n5_default",
            f"{counted(len(scan.truncated), 'truncated edge block')}, e.g. {key} stored as "
            f"{list(shape)}: "
            "the block shape must be read from each header",
            scan,
        )
    if not scan.complete:
        return (
            "n5_default",
            f"more than {MAX_EDGE_SCAN} edge blocks, not all checked: n5_default reads "
            "padded and truncated blocks alike",
            scan,
        )
    if scan.present == 0:
        return (
            "n5_default",
            "no edge block written yet, so their form is unknown: n5_default reads both",
            scan,
        )
    return (
        "pad",
        f"{'the' if scan.present == 1 else 'all'} {counted(scan.present, 'edge block')} "
        f"present {'is' if scan.present == 1 else 'are'} full-size (padded): skip the "
        f"{n}-byte header",
        scan,
    )


def written_by_n5(document: Any) -> bool:
    """Whether a ``zarr.json`` document has the form this module writes.

    A group document with no more than ``zarr_format``, ``node_type`` and
    ``attributes``, or an array document with the v2 ``/`` chunk keys and the
    N5 header skip (``n5_default`` first, or a ``transpose`` + big-endian
    ``bytes`` chain ending in ``pad``). Anything else was written by someone else
    and is never replaced, even with ``overwrite``.
    """
    if not isinstance(document, dict) or document.get("zarr_format") != 3:
        return False
    if document.get("node_type") == "group":
        return set(document) <= {"zarr_format", "node_type", "attributes"}
    if document.get("node_type") != "array":
        return False
    keys = document.get("chunk_key_encoding")
    codecs = document.get("codecs")
    if keys != {"name": "v2", "configuration": {"separator": "/"}} or not isinstance(codecs, list):
        return False
    names = [c.get("name") if isinstance(c, dict) else None for c in codecs]
    return names[:1] == ["n5_default"] or (
        names[:2] == ["transpose", "bytes"] and names[-1] == "pad"
    )


def _check_replaceable(file: Path, overwrite: bool) -> None:
    """Refuse to replace a ``zarr.json`` unless ``overwrite`` and it is one of ours."""
    if not file.exists():
        return
    try:
        ours = written_by_n5(json.loads(file.read_text()))
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise N5ConversionError(
            f"n5: {file} exists and was not written by zarrext n5; refusing to replace it"
        )
    if not overwrite:
        raise N5ConversionError(f"n5: {file} already exists {_OVERWRITE_HINT}")


def _write(path: Path, metadata: dict[str, Any], overwrite: bool) -> None:
    file = path / ZARR_JSON
    _check_replaceable(file, overwrite)
    # Written whole under a temporary name, then renamed: a killed run leaves
    # either the old document or the new one, never half of one.
    temp = file.with_name(f".{ZARR_JSON}.zarrext-tmp-{os.getpid()}")
    temp.write_text(json.dumps(metadata, indent=2) + "\n")
    os.replace(temp, file)


def _enclosing_dataset(path: Path) -> Path | None:
    """The N5 dataset directory ``path`` lies inside (a block directory), if any."""
    for parent in path.resolve().parents:
        try:
            attrs = _load_attributes(parent)
        except N5ConversionError:
            return None
        if is_dataset(attrs):
            return parent
    return None


def _compression_name(attrs: Mapping[str, Any]) -> str:
    c = _compression(attrs)
    extra = "/zlib" if c.get("type") == "gzip" and c.get("useZlib") else ""
    return f"{c.get('type')}{extra}"


def convert_array(
    path: str | os.PathLike[str],
    *,
    codec: CodecChoice | Literal["auto"] = "auto",
    overwrite: bool = False,
    write: bool = True,
    dimension_names: Sequence[str] | None = None,
) -> Conversion:
    """Write the ``zarr.json`` of one N5 dataset.

    Parameters
    ----------
    path : path
        The dataset directory (holding ``attributes.json``).
    codec : {"auto", "pad", "n5_default"}
        How block headers are read; ``"auto"`` decides from the edge blocks.
    overwrite : bool
        Replace an existing ``zarr.json``.
    write : bool
        False to only compute the metadata.
    dimension_names : sequence of str, optional
        The ``dimension_names`` to write, in N5's ``dimensions`` order (the
        order zarr reads the array in). Default: N5's ``axes``, when it names
        every dimension once (xarray needs names to open the array).
    """
    root = Path(path)
    attrs = _load_attributes(root)
    if not is_dataset(attrs):
        raise N5ConversionError(f"n5: {root} has no N5 dataset attributes.json")
    assert attrs is not None
    shape, _, _ = _dataset_fields(attrs, root)
    names_note = ""
    if dimension_names is not None:
        dimension_names = _caller_names(dimension_names, len(shape), root)
    else:
        _, names_note = _names_from_axes(attrs)
    scan: EdgeScan | None
    if codec == "auto":
        chosen, reason, scan = choose_codec(root, attrs)
    else:
        chosen, reason, scan = codec, "chosen by the caller", None
    metadata = array_metadata(attrs, chosen, dimension_names)
    if names_note:
        reason = f"{reason}; {names_note}"
    # zarr-python must accept what is written; fail before touching the directory.
    ArrayV3Metadata.from_dict(json.loads(json.dumps(metadata)))
    if write:
        _write(root, metadata, overwrite)
    return Conversion(root, "array", metadata, chosen, reason, _compression_name(attrs), scan)


def write_zarr_metadata(
    path: str | os.PathLike[str],
    *,
    codec: CodecChoice | Literal["auto"] = "auto",
    overwrite: bool = False,
    write: bool = True,
    dimension_names: Sequence[str] | None = None,
) -> list[Conversion]:
    """Make an N5 dataset, or a whole N5 container, readable by zarr-python in place.

    A dataset gets an array ``zarr.json``; a container gets a group ``zarr.json`` in
    every group directory and an array ``zarr.json`` in every dataset. Block files
    are neither read in full nor changed.

    Parameters
    ----------
    path : path
        An N5 dataset or container (group) directory.
    codec, overwrite, write
        See :func:`convert_array`.
    dimension_names : sequence of str, optional
        The names of every dataset's dimensions (see :func:`convert_array`); a
        dataset with another number of dimensions fails the whole conversion.

    Returns
    -------
    list of Conversion
        One per ``zarr.json``, parents first.
    """
    root = Path(path)
    if not root.is_dir():
        raise N5ConversionError(f"n5: {root} is not a directory")
    dataset = _enclosing_dataset(root)
    if dataset is not None:
        raise N5ConversionError(
            f"n5: {root} is a block directory of the N5 dataset {dataset}; "
            f"run n5 on the dataset or its container"
        )
    # Everything is computed (and every block header checked) before anything is
    # written, so a bad dataset deep in a container leaves the container untouched.
    results: list[Conversion] = []
    if is_dataset(_load_attributes(root)):
        results.append(
            convert_array(root, codec=codec, write=False, dimension_names=dimension_names)
        )
    else:
        groups: list[Conversion] = []
        for dirpath, dirnames, _ in os.walk(root):
            here = Path(dirpath)
            here_attrs = _load_attributes(here)
            if is_dataset(here_attrs):
                dirnames.clear()  # the rest are block directories
                results.append(
                    convert_array(
                        here, codec=codec, write=False, dimension_names=dimension_names
                    )
                )
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            groups.append(Conversion(here, "group", group_metadata(here_attrs)))
        if not results:
            raise N5ConversionError(
                f"n5: no N5 dataset (an attributes.json with dimensions, blockSize and "
                f"dataType) under {root}; nothing to convert"
            )
        # A group is a directory on the way to a dataset; other directories are
        # not N5 and get nothing.
        arrays = [r.path for r in results]
        results += [g for g in groups if any(g.path in a.parents for a in arrays)]
        results.sort(key=lambda r: (len(r.path.parts), r.path.parts))
    if write:
        for r in results:  # all refusals before the first write
            _check_replaceable(r.path / ZARR_JSON, overwrite)
        for r in results:
            _write(r.path, r.metadata, overwrite=True)
    return results
