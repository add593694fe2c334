"""Copying arrays and groups quantized (behind ``zarrext quantize``): the only part doing I/O.

:func:`copy_quantized` copies one floating-point array; :func:`copy_group_quantized`
copies a group, its floating-point arrays (or the ones named) quantized and every
other object byte for byte. Both refuse, before scanning any data, an output over
their input or one that exists (without ``overwrite``); both build the output under
a temporary name and move it into place only when it is complete and no larger
than its source (unless ``allow_larger``); both refresh the consolidated metadata
of the groups that hold the new output, so that readers trusting it (xarray) see it.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zarrext.quantize.planning import (
    QuantizationError,
    QuantizationPlan,
    float_dtype,
    plan_quantization,
)
from zarrext.quantize.verification import measured_error

__all__ = [
    "CopyReport",
    "LargerOutputError",
    "copy_group_quantized",
    "copy_quantized",
    "floating_arrays",
    "stored_bytes",
]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: ``phase`` is ``"scan"`` or ``"copy"``."""


class LargerOutputError(QuantizationError):
    """The quantized copy would take more bytes than its source: it was not written."""


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_quantized` did to one array.

    Attributes
    ----------
    plan : QuantizationPlan
    source_bytes, output_bytes : int
        Bytes of stored chunks (:func:`stored_bytes`) of the source and the output
        array: ``zarr.json`` is not counted, nor a shard's index or free space.
    worst_error : float
        Largest ``|output - source|`` over the finite values, read back from the
        output store block by block.
    blocks : int
        Number of blocks copied.
    path : str
        The array's path inside the group copied ("" for a lone array).
    """

    plan: QuantizationPlan
    source_bytes: int
    output_bytes: int
    worst_error: float
    blocks: int
    path: str = ""

    @property
    def size_ratio(self) -> float:
        """``source_bytes / output_bytes`` (how many times smaller the output is)."""
        return self.source_bytes / self.output_bytes if self.output_bytes else math.inf


def stored_bytes(array: Any) -> int:
    """Bytes of an array's stored chunks, as ``zarrext info`` and ``inspect`` count them."""
    from zarrext.inspection import inventory

    return inventory(array, read_masks=False).stored_bytes


def _blocks(shape: tuple[int, ...], block: tuple[int, ...]) -> list[tuple[slice, ...]]:
    ranges = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    return [
        tuple(slice(i, min(i + b, n)) for i, b, n in zip(start, block, shape, strict=True))
        for start in itertools.product(*ranges)
    ]


def _dimension_coordinate(name: str, array: Any) -> bool:
    """A 1-D array named after its own dimension (xarray's ``x``, ``time``, ``lat``)."""
    dims = getattr(array.metadata, "dimension_names", None)
    return dims is not None and tuple(dims) == (name.rsplit("/", 1)[-1],)


def floating_arrays(group: Any, names: Sequence[str] | None = None) -> list[Any]:
    """The arrays of ``group`` that quantize copies: the ones named, or every float one.

    ``names`` are paths relative to the group (``"temp"``, ``"sub/temp"``). Without
    names, every floating-point array but dimension coordinates (1-D arrays named
    after their dimension, whose values label positions and are not measurements)
    is chosen; name one to quantize it too.

    Raises
    ------
    ValueError
        If a name is not an array of the group, or not of a floating-point type, or
        (without names) the group holds no floating-point array.
    """
    import zarr

    arrays = {
        name: member
        for name, member in group.members(max_depth=None)
        if isinstance(member, zarr.Array)
    }
    where = group.path or str(group.store)
    if names is None:
        chosen = [
            a for name, a in sorted(arrays.items())
            if a.dtype.kind == "f" and not _dimension_coordinate(name, a)
        ]
        if not chosen:
            raise ValueError(f"group {where} holds no floating-point array to quantize")
        return chosen
    chosen = []
    for name in dict.fromkeys(n.strip("/") for n in names):
        if name not in arrays:
            known = ", ".join(sorted(arrays)) or "none"
            raise ValueError(f"no array {name!r} in group {where} (its arrays: {known})")
        try:
            float_dtype(arrays[name].dtype)
        except TypeError as e:
            raise ValueError(f"array {name!r}: {e}") from None
        chosen.append(arrays[name])
    return chosen


def _scan(src: Any, blocks: list[tuple[slice, ...]], progress: Progress | None) -> dict[str, Any]:
    """The finite range of ``src`` and which infinities occur, one block at a time."""
    lo, hi = math.inf, -math.inf
    posinf = neginf = False
    for i, sl in enumerate(blocks):
        data = np.asarray(src[sl])
        finite = data[np.isfinite(data)]
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
        posinf = posinf or bool(np.any(data == np.inf))
        neginf = neginf or bool(np.any(data == -np.inf))
        if progress is not None:
            progress("scan", i + 1, len(blocks))
    if lo > hi:
        lo = hi = 0.0
    return {"value_range": (lo, hi), "posinf": posinf, "neginf": neginf}


def _layout(src: Any) -> dict[str, Any]:
    if src.shards is None:
        return {"chunks": src.chunks}
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    # The filters go before (outside) the sharding codec: zarr-python 3.4.2
    # validates inner codecs with fill value 0, which a plan for a range that
    # excludes 0 cannot encode; outside, they see the real fill value.
    return {
        "chunks": src.shards,
        "serializer": ShardingCodec(chunk_shape=src.chunks, codecs=[BytesCodec(), ZstdCodec()]),
        "compressors": None,
    }


def _quantize_array(
    src: Any,
    store: Any,
    name: str | None,
    *,
    max_abs_error: float,
    allow_larger: bool,
    progress: Progress | None,
) -> CopyReport:
    """Scan ``src``, plan, write it quantized at ``name`` in ``store``, verify it."""
    import zarr

    label = src.path or "/"
    ftype = float_dtype(src.dtype)
    blocks = _blocks(tuple(src.shape), tuple(src.shards or src.chunks))
    fill = float(src.fill_value)
    planned = plan_quantization(
        max_abs_error=max_abs_error,
        dtype=ftype,
        fill_value=None if math.isnan(fill) else fill,
        **_scan(src, blocks, progress),
    )
    dst = zarr.create_array(
        store,
        name=name,
        shape=src.shape,
        dtype=ftype,
        fill_value=fill,
        filters=list(planned.filters),
        attributes=dict(src.attrs),
        dimension_names=getattr(src.metadata, "dimension_names", None),
        zarr_format=3,
        overwrite=True,
        **_layout(src),
    )
    worst = 0.0
    done = 0
    try:
        for sl in blocks:
            data = np.asarray(src[sl])
            dst[sl] = data
            worst = max(worst, measured_error(data, np.asarray(dst[sl])))
            done += 1
            if progress is not None:
                progress("copy", done, len(blocks))
    except BaseException as e:
        where = f" in {label}" if name else ""
        e.add_note(f"quantize stopped{where} after {done} of {len(blocks)} blocks")
        raise
    if worst > max_abs_error:
        raise QuantizationError(
            f"quantized copy of {label} exceeds max_abs_error={max_abs_error!r}: "
            f"worst error read back is {worst!r}"
        )
    report = CopyReport(
        plan=planned,
        source_bytes=stored_bytes(src),
        output_bytes=stored_bytes(dst),
        worst_error=worst,
        blocks=len(blocks),
        path=name or "",
    )
    if report.output_bytes > report.source_bytes and not allow_larger:
        from zarrext.inspection import size_change

        raise LargerOutputError(
            f"the quantized copy of {label} would be "
            f"{size_change(report.source_bytes, report.output_bytes)} than its source "
            f"({report.output_bytes:,} vs {report.source_bytes:,} bytes of chunks; "
            f"{planned.stored_dtype} codes for max_abs_error={max_abs_error!r}); "
            "raise the bound, or accept it with --allow-larger (allow_larger=True)"
        )
    return report


def _staged(output: Any, overwrite: bool, job: Callable[[Any], Any]) -> Any:
    """Run ``job(target)`` inside :func:`zarrext.outputs.staged_output`, noting failures."""
    from zarrext.outputs import staged_output

    # staged_output refuses an existing (or non-Zarr) output before yielding, so
    # that refusal comes before any block is read.
    with staged_output(output, overwrite=overwrite) as target:
        try:
            return job(target)
        except BaseException as e:
            e.add_note(f"nothing was written at {output}")
            raise


def copy_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    overwrite: bool = False,
    allow_larger: bool = False,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy a floating-point zarr array into a new one stored quantized.

    Two passes over the source, one block (shard, or chunk) at a time: the first
    finds the finite range and which of NaN/+Inf/-Inf occur, then the filters are
    planned for that range (:func:`plan_quantization`); the second writes each
    block and reads it back from the output store to measure the error.

    Parameters
    ----------
    source, output : store-like
        Paths or stores of the source array and of the array to create.
    max_abs_error : float
        The bound every finite value must meet.
    overwrite : bool
        Replace an existing Zarr array at ``output`` (a path that is not a Zarr
        node is never replaced).
    allow_larger : bool
        Keep a copy whose chunks take more bytes than the source's (by default
        it is discarded and :class:`LargerOutputError` raised).
    progress : callable, optional
        Called as ``progress(phase, done, total)`` after each block; ``phase`` is
        ``"scan"`` or ``"copy"``.

    The output is built under a temporary name and renamed into place at the end
    (:func:`zarrext.outputs.staged_output`): if the copy fails or is interrupted,
    nothing appears at ``output`` and the exception carries a note saying how far
    it got. Groups above ``output`` that hold consolidated metadata are
    consolidated again.

    Raises
    ------
    QuantizationError
        If no plan meets the bound, or a block read back exceeds it.
    LargerOutputError
        If the copy would be larger than the source and not ``allow_larger``.
    OutputConflictError
        If ``output`` is, is inside, or contains ``source``, or exists (without
        ``overwrite``).
    """
    from zarrext.api import open_array
    from zarrext.outputs import check_disjoint

    check_disjoint(source, output)
    # Read through zarrext's pipeline: a chunk it cannot decode fails with an error
    # naming the array, the chunk's key and the codec (zarr's names none of them).
    src = open_array(source, mode="r")
    float_dtype(src.dtype)
    report = _staged(
        output,
        overwrite,
        lambda target: _quantize_array(
            src, target, None, max_abs_error=max_abs_error, allow_larger=allow_larger,
            progress=progress,
        ),
    )
    consolidate_above(output)
    return report


def copy_group_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    arrays: Sequence[str] | None = None,
    overwrite: bool = False,
    allow_larger: bool = False,
    progress: Callable[[str, str, int, int], None] | None = None,
) -> list[CopyReport]:
    """Copy a zarr group with its floating-point arrays stored quantized.

    Every array named in ``arrays`` (paths relative to the group; default: every
    floating-point array) is copied as :func:`copy_quantized` copies one; every
    other object of the group (metadata, other arrays' chunks) is copied byte for
    byte. Consolidated metadata, in the copy and in the groups holding ``output``,
    is consolidated again.

    Parameters
    ----------
    source, output : store-like
        The group to copy, and where to create the copy.
    max_abs_error, overwrite, allow_larger
        As for :func:`copy_quantized`; the bound applies to every array quantized.
    arrays : sequence of str, optional
        Which arrays to quantize (:func:`floating_arrays`).
    progress : callable, optional
        ``progress(array_path, phase, done, total)`` after each block.

    Returns
    -------
    list of CopyReport
        One per array quantized, in the order of ``arrays`` (else sorted by path).

    Raises
    ------
    ValueError
        As :func:`floating_arrays` and :func:`copy_quantized` raise; nothing is written.
    """
    import zarr

    from zarrext.api import with_runtime
    from zarrext.outputs import check_disjoint

    check_disjoint(source, output)
    group = zarr.open_group(source, mode="r", use_consolidated=False)
    chosen = floating_arrays(group, arrays)

    def job(target: Any) -> list[CopyReport]:
        store = zarr.open_group(target, mode="w").store
        skip = [a.path[len(group.path):].strip("/") for a in chosen]
        _copy_objects(group, store, skip)
        reports = []
        for array in chosen:
            name = array.path[len(group.path):].strip("/")
            each: Progress | None = None
            if progress is not None:
                each = (lambda n: lambda phase, done, total: progress(n, phase, done, total))(
                    name
                )
            reports.append(
                _quantize_array(
                    # read through zarrext's pipeline: decode errors name the chunk
                    with_runtime(array), store, name, max_abs_error=max_abs_error,
                    allow_larger=allow_larger, progress=each,
                )
            )
        _consolidate_within(store)
        return reports

    reports: list[CopyReport] = _staged(output, overwrite, job)
    consolidate_above(output)
    return reports


def _copy_objects(group: Any, store: Any, skip: Iterable[str]) -> None:
    """Copy every object under ``group`` to the root of ``store``, but the ``skip`` arrays."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from zarrext.outputs import STAGING_MARKER

    source = group.store
    prefix = f"{group.path}/" if group.path else ""
    skipped = tuple(f"{s}/" for s in skip)
    prototype = default_buffer_prototype()

    async def keys() -> list[str]:
        return [k async for k in source.list_prefix(prefix)]

    for key in sync(keys()):
        relative = key[len(prefix):]
        if relative.startswith(skipped) or STAGING_MARKER in relative:
            continue
        value = sync(source.get(key, prototype))
        if value is not None:
            sync(store.set(relative, value))


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


def _consolidate_within(store: Any) -> None:
    """Consolidate again every group of ``store`` that had consolidated metadata."""
    import zarr

    root = zarr.open_group(store, mode="r", use_consolidated=False)
    groups = [""] + [p for p, m in root.members(max_depth=None) if isinstance(m, zarr.Group)]
    # Innermost first: a group's consolidated metadata embeds its subgroups' own.
    for path in sorted(groups, key=lambda p: -p.count("/") - bool(p)):
        if _consolidated(store, path):
            _consolidate(store, path)


def consolidate_above(output: Any) -> list[str]:
    """Consolidate again the groups above ``output`` that hold consolidated metadata.

    Readers that trust consolidated metadata (xarray's default) see a new array
    in such a group only once its parent's consolidated metadata lists it.
    Local directories and fsspec URLs or stores are followed up the tree while the
    parent is a Zarr group; other stores (zip archives, memory) have no parents.

    Returns
    -------
    list of str
        The groups consolidated again, innermost first.
    """
    from zarr.abc.store import Store
    from zarr.storage import LocalStore

    from zarrext import stores
    from zarrext.outputs import local_path

    if isinstance(output, str) and local_path(output) is None:
        output = stores.open_store(output, mode="r")
    parents: list[tuple[Any, str]] = []
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
