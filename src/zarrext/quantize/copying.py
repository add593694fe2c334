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
import operator
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext import cluster
from zarrext.decisions import without_decision_record
from zarrext.quantize.planning import (
    QuantizationError,
    QuantizationPlan,
    float_dtype,
    plan_quantization,
)
from zarrext.quantize.verification import measured_error

if TYPE_CHECKING:
    from zarrext.store_refs import ArrayRef, StoreRef

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


def floating_arrays(
    group: Any, names: Sequence[str] | None = None, *, excluding: str | None = None
) -> list[Any]:
    """The arrays of ``group`` that quantize copies: the ones named, or every float one.

    ``names`` are paths relative to the group (``"temp"``, ``"sub/temp"``); the
    members at and under ``excluding`` (a path relative to the group) are left out. Without
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
        and not (excluding and (name == excluding or name.startswith(f"{excluding}/")))
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


@dataclass(frozen=True)
class _Range:
    """The finite range of some blocks, and which infinities occur in them."""

    lo: float = math.inf
    hi: float = -math.inf
    posinf: bool = False
    neginf: bool = False

    def __or__(self, other: _Range) -> _Range:
        return _Range(
            min(self.lo, other.lo), max(self.hi, other.hi),
            self.posinf or other.posinf, self.neginf or other.neginf,
        )

    def plan_arguments(self) -> dict[str, Any]:
        lo, hi = (self.lo, self.hi) if self.lo <= self.hi else (0.0, 0.0)
        return {"value_range": (lo, hi), "posinf": self.posinf, "neginf": self.neginf}


def _scan_block(src: Any, sl: tuple[slice, ...]) -> _Range:
    data = np.asarray(src[sl])
    finite = data[np.isfinite(data)]
    return _Range(
        float(finite.min()) if finite.size else math.inf,
        float(finite.max()) if finite.size else -math.inf,
        bool(np.any(data == np.inf)),
        bool(np.any(data == -np.inf)),
    )


def _copy_block(src: Any, dst: Any, sl: tuple[slice, ...]) -> float:
    """Write one block of ``src`` into ``dst``; the worst error read back from ``dst``.

    Idempotent: a block written again gets the same bytes.
    """
    data = np.asarray(src[sl])
    dst[sl] = data
    return measured_error(data, np.asarray(dst[sl]))


@dataclass(frozen=True)
class _OutputRef:
    """The output array as a Dask worker reopens it: its store's description, its
    path, and its ``zarr.json`` (on an object store it is not written until the end)."""

    store: StoreRef
    path: str
    metadata: bytes

    def open(self) -> Any:
        import zarr
        from zarr.core.buffer import default_buffer_prototype

        from zarrext.outputs import MetadataLastStore

        key = f"{self.path}/zarr.json" if self.path else "zarr.json"
        document = default_buffer_prototype().buffer.from_bytes(self.metadata)
        store = MetadataLastStore(self.store.open("r+"), pending={key: document})
        return zarr.open_array(store, path=self.path, mode="r+")


def _described(array: Any, what: str) -> StoreRef:
    from zarr.storage import ZipStore

    from zarrext.outputs import MetadataLastStore
    from zarrext.store_refs import store_ref
    from zarrext.stores import StoreOpenError

    store = array.store_path.store
    if isinstance(store, MetadataLastStore):
        store = store._store
    if isinstance(store, ZipStore):
        raise StoreOpenError(
            f"quantize on a Dask cluster: the {what} is a zip archive, which only this "
            "process can write; give a directory or URL, or leave out the client"
        )
    try:
        return store_ref(store)
    except StoreOpenError as e:
        raise StoreOpenError(f"quantize on a Dask cluster: the {what}: {e}") from None


def _scan_on_worker(
    source: ArrayRef, threads: int, batch: list[tuple[slice, ...]]
) -> tuple[int, _Range]:
    """One Dask task: the range of ``batch``'s blocks of the source."""
    from zarrext.api import with_runtime

    src = with_runtime(source.open())
    found = _Range()
    for each in cluster.on_threads(lambda sl: _scan_block(src, sl), batch, threads):
        found |= each
    return len(batch), found


def _copy_on_worker(
    source: ArrayRef, output: _OutputRef, threads: int, batch: list[tuple[slice, ...]]
) -> tuple[int, float]:
    """One Dask task: write ``batch``'s blocks quantized; the worst error read back.

    Idempotent (each block is its own chunks or shard): a task rerun after its
    worker died writes the same bytes again.
    """
    from zarrext.api import with_runtime

    src = with_runtime(source.open())
    dst = output.open()
    worst = 0.0
    for each in cluster.on_threads(lambda sl: _copy_block(src, dst, sl), batch, threads):
        worst = max(worst, each)
    return len(batch), worst


def _scan(
    src: Any,
    blocks: list[tuple[slice, ...]],
    progress: Progress | None,
    client: Any,
    source_ref: ArrayRef | None,
) -> _Range:
    """The finite range of ``src`` and which infinities occur (the first pass)."""
    return _run_blocks(
        "scan", lambda sl: _scan_block(src, sl), (_scan_on_worker, (source_ref,)), blocks,
        client=client, progress=progress, combine=operator.or_, start=_Range(),
    )


def _run_blocks[R](
    phase: str,
    local: Callable[[tuple[slice, ...]], R],
    remote: tuple[Callable[..., tuple[int, R]], tuple[Any, ...]] | None,
    blocks: list[tuple[slice, ...]],
    *,
    client: Any,
    progress: Progress | None,
    combine: Callable[[R, R], R],
    start: R,
    stopped: str | None = None,
) -> R:
    """Run a phase over ``blocks``: on threads here, or on ``client`` in batches.

    Blocks in flight: zarr's ``async.concurrency`` per process. ``progress(phase,
    done, total)`` after each block (here) or batch (on a cluster), in this thread.
    An error or Ctrl-C cancels the blocks not started and, with ``stopped``, gets
    the note ``"{stopped} after {done} of {total} blocks"``.
    """
    total = len(blocks)
    result = start
    done = 0
    threads = cluster.concurrency()
    batches: Iterator[tuple[int, R]]
    closers: list[object] = []
    if client is not None:
        assert remote is not None
        function, args = remote
        batches = cluster.on_client(
            client, function, cluster.batches(blocks), *args, threads,
            what="quantize on a Dask cluster",
        )
    else:
        each = cluster.on_threads(local, blocks, min(threads, total))
        batches = ((1, r) for r in each)
        closers.append(each)
    closers.insert(0, batches)
    try:
        for n, found in batches:
            result = combine(result, found)
            done += n
            if progress is not None:
                progress(phase, done, total)
    except BaseException as e:
        if stopped is not None:
            e.add_note(f"{stopped} after {done} of {total} blocks")
        raise
    finally:
        for generator in closers:  # blocks not started are cancelled, not run
            close = getattr(generator, "close", None)
            if close is not None:
                close()
    return result


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
    client: Any = None,
    report_path: str | None = None,
) -> CopyReport:
    """Scan ``src``, plan, write it quantized at ``name`` in ``store``, verify it.

    Both passes read the blocks (shards, or chunks) many at a time: zarr's
    ``async.concurrency`` blocks in flight, on threads here or in each task on a
    Dask ``client``. Memory per process (per worker thread on a cluster): about
    ``concurrency x 2 x`` a decoded block (the source's values and the ones read
    back), plus the encoded bytes in flight.
    """
    import zarr

    from zarrext.store_refs import ArrayRef

    label = src.path or "/"
    ftype = float_dtype(src.dtype)
    blocks = _blocks(tuple(src.shape), tuple(src.shards or src.chunks))
    source_ref = ArrayRef(_described(src, "source"), src.path, "r") if client else None
    found = _scan(src, blocks, progress, client, source_ref)
    fill = float(src.fill_value)
    planned = plan_quantization(
        max_abs_error=max_abs_error,
        dtype=ftype,
        fill_value=None if math.isnan(fill) else fill,
        **found.plan_arguments(),
    )
    dst = zarr.create_array(
        store,
        name=name,
        shape=src.shape,
        dtype=ftype,
        fill_value=fill,
        filters=list(planned.filters),
        # no conditional codec in the copy: a decision recorded for one would be untrue
        attributes=without_decision_record(src.attrs),
        dimension_names=getattr(src.metadata, "dimension_names", None),
        zarr_format=3,
        overwrite=True,
        **_layout(src),
    )
    output_ref = None
    if client is not None:
        from zarr.core.buffer import default_buffer_prototype

        document = dst.metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"]
        output_ref = _OutputRef(_described(dst, "output"), dst.path, document.to_bytes())
    where = f" in {label}" if name else ""
    worst = _run_blocks(
        "copy", lambda sl: _copy_block(src, dst, sl),
        (_copy_on_worker, (source_ref, output_ref)), blocks,
        client=client, progress=progress, combine=max, start=0.0,
        stopped=f"quantize stopped{where}",
    )
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
        path=report_path if report_path is not None else name or "",
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


def _staged(
    output: Any,
    overwrite: bool,
    storage_options: Mapping[str, Any] | None,
    job: Callable[[Any], Any],
) -> Any:
    """Run ``job(target)`` inside :func:`zarrext.outputs.staged_output`, noting failures."""
    from zarrext.outputs import staged_output

    # staged_output refuses an existing (or non-Zarr) output before yielding, so
    # that refusal comes before any block is read.
    with staged_output(output, overwrite=overwrite, storage_options=storage_options) as target:
        try:
            return job(target)
        except BaseException as e:
            e.add_note(f"nothing was written at {output}")
            raise


def _opened(location: Any, storage_options: Mapping[str, Any] | None) -> Any:
    """A path or URL as a read-only store (with ``storage_options``); other store-likes as given."""
    import os

    from zarrext.stores import open_store

    if isinstance(location, str | os.PathLike):
        return open_store(os.fspath(location), mode="r", storage_options=storage_options)
    return location


def copy_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    overwrite: bool = False,
    allow_larger: bool = False,
    progress: Progress | None = None,
    client: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    output_storage_options: Mapping[str, Any] | None = None,
) -> CopyReport:
    """Copy a floating-point zarr array into a new one stored quantized.

    Two passes over the source, by block (shard, or chunk): the first finds the
    finite range and which of NaN/+Inf/-Inf occur, then the filters are planned
    for that range (:func:`plan_quantization`); the second writes each block and
    reads it back from the output store to measure the error. Blocks are read
    and written many at a time (zarr's ``async.concurrency``), each output block
    once.

    Parameters
    ----------
    source, output : store-like
        Paths, URLs or stores of the source array and of the array to create.
    max_abs_error : float
        The bound every finite value must meet.
    overwrite : bool
        Replace an existing Zarr array at ``output`` (a path that is not a Zarr
        node is never replaced, nor an output on an object store: there a
        replacement could not keep the old output readable until the new one is
        complete, so write to a new prefix instead).
    allow_larger : bool
        Keep a copy whose chunks take more bytes than the source's (by default
        it is discarded and :class:`LargerOutputError` raised).
    progress : callable, optional
        Called as ``progress(phase, done, total)`` as blocks finish; ``phase`` is
        ``"scan"`` or ``"copy"``.
    client : dask.distributed.Client, optional
        Run both passes on this Dask cluster: one task per batch of blocks (at most
        :data:`zarrext.cluster.TASKS`), each reopening the source and the output
        from their descriptions (:mod:`zarrext.store_refs`: a local directory the
        workers reach, or a URL and its options); tasks are idempotent, so a task
        rerun after its worker died writes the same bytes. The error bound is
        checked on what the workers read back.
    storage_options : mapping, optional
        For ``source`` and ``output`` given as URLs (endpoint, credentials...).
    output_storage_options : mapping, optional
        For an ``output`` URL whose store wants other options than the source's
        (another endpoint or account); by default ``storage_options``.

    Where the output is built (:func:`zarrext.outputs.staged_output`): a local
    directory or zip archive under a temporary name, renamed into place at the
    end; a new output on an object store at its final keys, its ``zarr.json``
    written last; in an icechunk session, in place (the commit publishes it).
    If the copy fails or is interrupted, nothing opens at ``output`` and the
    exception carries a note saying how far it got. Groups above ``output`` that
    hold consolidated metadata are consolidated again.

    Raises
    ------
    QuantizationError
        If no plan meets the bound, or a block read back exceeds it.
    LargerOutputError
        If the copy would be larger than the source and not ``allow_larger``.
    OutputConflictError
        If ``output`` is, is inside, or contains ``source``, or exists (without
        ``overwrite``, or on an object store).
    """
    from zarrext.api import open_array
    from zarrext.outputs import check_disjoint
    from zarrext.stores import refuse_read_only

    refuse_read_only(output, "quantize")  # a store or StorePath given read-only
    check_disjoint(source, output)
    # Read through zarrext's pipeline: a chunk it cannot decode fails with an error
    # naming the array, the chunk's key and the codec (zarr's names none of them).
    src = open_array(_opened(source, storage_options), mode="r")
    float_dtype(src.dtype)
    out_options = storage_options if output_storage_options is None else output_storage_options
    report = _staged(
        output,
        overwrite,
        out_options,
        lambda target: _quantize_array(
            src, target, None, max_abs_error=max_abs_error, allow_larger=allow_larger,
            progress=progress, client=client,
        ),
    )
    consolidate_above(output, storage_options=out_options)
    return report


def _excluded_output(source: Any, output: Any) -> str | None:
    """The output's path relative to ``source`` when both are in one icechunk session
    and the output is inside the source group (its copy leaves the output out)."""
    from zarrext.outputs import _in_session

    ss, so = _in_session(source), _in_session(output)
    if ss is None or so is None or ss[0] != so[0]:
        return None
    inside = f"{ss[1]}/" if ss[1] else ""
    if so[1] == ss[1] or not so[1].startswith(inside):
        return None
    return so[1][len(inside):]


def copy_group_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    arrays: Sequence[str] | None = None,
    overwrite: bool = False,
    allow_larger: bool = False,
    progress: Callable[[str, str, int, int], None] | None = None,
    client: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    output_storage_options: Mapping[str, Any] | None = None,
) -> list[CopyReport]:
    """Copy a zarr group with its floating-point arrays stored quantized.

    Every array named in ``arrays`` (paths relative to the group; default: every
    floating-point array) is copied as :func:`copy_quantized` copies one; every
    other object of the group (metadata, other arrays' chunks) is copied byte for
    byte. Consolidated metadata, in the copy and in the groups holding ``output``,
    is consolidated again. In an icechunk session the output may be inside the
    source group (``StorePath(session.store, "q")`` for the session's root group):
    the copy then holds every member but the output itself.

    Parameters
    ----------
    source, output : store-like
        The group to copy, and where to create the copy.
    max_abs_error, overwrite, allow_larger, client, storage_options, output_storage_options
        As for :func:`copy_quantized`; the bound applies to every array quantized.
    arrays : sequence of str, optional
        Which arrays to quantize (:func:`floating_arrays`).
    progress : callable, optional
        ``progress(array_path, phase, done, total)`` as blocks finish.

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
    from zarrext.stores import refuse_read_only

    refuse_read_only(output, "quantize")  # a store or StorePath given read-only
    excluded = _excluded_output(source, output)
    if excluded is None:
        check_disjoint(source, output)
    group = zarr.open_group(_opened(source, storage_options), mode="r", use_consolidated=False)
    chosen = [
        a for a in floating_arrays(group, arrays, excluding=excluded)
    ]

    def job(target: Any) -> list[CopyReport]:
        made = zarr.open_group(target, mode="w")
        store, base = made.store, made.path
        names = [a.path[len(group.path):].strip("/") for a in chosen]
        _copy_objects(group, store, base, [*names, *([excluded] if excluded else [])])
        reports = []
        for array, name in zip(chosen, names, strict=True):
            each: Progress | None = None
            if progress is not None:
                each = (lambda n: lambda phase, done, total: progress(n, phase, done, total))(
                    name
                )
            reports.append(
                _quantize_array(
                    # read through zarrext's pipeline: decode errors name the chunk
                    with_runtime(array), store, f"{base}/{name}" if base else name,
                    max_abs_error=max_abs_error, allow_larger=allow_larger, progress=each,
                    client=client, report_path=name,
                )
            )
        _consolidate_within(store, base)
        return reports

    out_options = storage_options if output_storage_options is None else output_storage_options
    reports: list[CopyReport] = _staged(output, overwrite, out_options, job)
    consolidate_above(output, storage_options=out_options)
    return reports


def _copy_objects(group: Any, store: Any, base: str, skip: Iterable[str]) -> None:
    """Copy every object under ``group`` to ``base`` in ``store``, but the ``skip`` nodes.

    Many objects in flight at once (zarr's ``async.concurrency``).
    """
    import asyncio

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from zarrext.outputs import STAGING_MARKER

    source = group.store
    prefix = f"{group.path}/" if group.path else ""
    into = f"{base}/" if base else ""
    skipped = tuple(f"{s}/" for s in skip)
    prototype = default_buffer_prototype()

    async def copy_all() -> None:
        limit = asyncio.Semaphore(cluster.concurrency())

        async def copy(key: str) -> None:
            async with limit:
                value = await source.get(key, prototype)
                if value is not None:
                    await store.set(f"{into}{key[len(prefix):]}", value)

        keys = [
            k async for k in source.list_prefix(prefix)
            if not k[len(prefix):].startswith(skipped) and STAGING_MARKER not in k[len(prefix):]
        ]
        await asyncio.gather(*(copy(k) for k in keys))

    sync(copy_all())


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
