"""How the CLI and the demo show what library jobs report: rich tables and progress bars.

The library reports progress through plain callbacks (``progress(done, total)``)
and results as dataclasses; only this layer (``cli/`` and ``demo/``) turns them
into rich output, so ``import zarrext`` and its jobs never load rich.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from math import prod
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zarrext.codecs.decisions import format_mask
from zarrext.jobs.inspection import ArrayInventory, size_change
from zarrext.jobs.recompression import RecompressReport
from zarrext.jobs.shards.inspect import (
    MAX_SHARD_ROWS,
    ShardInfo,
    format_bytes,
    shard_report,
    summary_line,
    used_text,
    usual_writes,
    writes_text,
)

__all__ = [
    "array_progress_bar",
    "codec_names",
    "counts_text",
    "inventory_table",
    "label",
    "mask_name",
    "mask_names",
    "masks_by_shard",
    "progress_bar",
    "recompress_table",
    "render_shard_table",
    "sharded_report",
]


@contextmanager
def _bar(
    label: str, console: Console | None, enabled: bool
) -> Iterator[tuple[Progress, Any]]:
    console = console if console is not None else Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        # rich ends a bar on a file or pipe with a blank line: draw none there
        disable=not (enabled and console.is_interactive),
    ) as bar:
        yield bar, bar.add_task(label, total=None)


@contextmanager
def progress_bar(
    label: str, *, console: Console | None = None, enabled: bool = True
) -> Iterator[Callable[[int, int], None]]:
    """A transient progress bar, as the ``progress(done, total)`` callback jobs take.

    Parameters
    ----------
    label : str
        Shown before the bar.
    console : rich Console, optional
        Where to draw (default: stderr, so stdout keeps what scripts parse).
    enabled : bool
        ``False`` draws nothing (``--quiet``, ``--json``). Nothing is drawn either
        when the console is no terminal.

    Yields
    ------
    callable
        ``progress(done, total)``.
    """
    with _bar(label, console, enabled) as (bar, task):

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def array_progress_bar(
    job: str, *, console: Console | None = None, enabled: bool = True
) -> Iterator[Callable[[str, int, int], None]]:
    """As :func:`progress_bar`, for a job that reports array by array
    (``progress(array_path, done, total)``, e.g. :func:`zarrext.jobs.node_info.node_info`):
    one bar, labelled with the job and the array it is on."""
    with _bar(job, console, enabled) as (bar, task):

        def update(path: str, done: int, total: int) -> None:
            bar.update(task, description=f"{job} {path}", completed=done, total=total)

        yield update


def recompress_table(report: RecompressReport) -> Table:
    """A table of what :func:`zarrext.recompress` did to one array."""
    table = Table(title=f"recompress {report.path or '/'}")
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_row("chunks", str(report.chunks), str(report.chunks))
    table.add_row("bytes", f"{report.bytes_before:,}", f"{report.bytes_after:,}")
    masks = sorted(set(report.masks_before) | set(report.masks_after))
    for mask in masks:
        table.add_row(
            f"mask {report.mask_text(mask)}",
            str(report.masks_before.get(mask, 0)),
            str(report.masks_after.get(mask, 0)),
        )
    if report.damaged:  # not counted above: left as stored, named on stderr
        n = str(len(report.damaged))
        table.add_row("damaged, left as stored", n, n)
    change = size_change(report.bytes_before, report.bytes_after)
    table.caption = f"{change} in {report.seconds:.2f} s"
    return table


def render_shard_table(
    report: list[ShardInfo],
    console: Console,
    *,
    title: str = "shards",
    max_rows: int | None = MAX_SHARD_ROWS,
    masks: Mapping[str, str] | None = None,
) -> Table:
    """Print ``report`` (:func:`zarrext.sharding.shard_report`) on ``console``, a line a shard.

    A heading line says how writes reach the shards, once (shards of one array are
    alike); a shard that differs says its own in a ``note`` column. ``masks`` maps a
    shard's key to the conditional masks of its chunks (a column when given). Past
    ``max_rows`` shards (``None``: no limit) one line after the table sums up the
    rest. Heading and summary are lines of their own, not the table's title and
    caption, which rich would wrap to the table's width. Returns the table.
    """
    shown = report if max_rows is None else report[:max_rows]
    usual = usual_writes(report)
    notes = {info.key: writes_text(info) for info in shown if writes_text(info) != usual}
    # what the file system allocates, when a shard has holes (parts of fixed slots
    # no chunk fills): a column only then, so dense arrays keep a narrow table
    on_disk = any(
        info.allocated is not None and info.allocated < info.file_size for info in shown
    )
    rows = []
    for info in shown:
        row = [info.key, info.layout, used_text(info)]
        if on_disk:
            row.append("" if info.allocated is None else format_bytes(info.allocated))
        row.append(f"{info.empty_chunks}/{info.n_chunks}")
        row += [masks.get(info.key, "")] if masks is not None else []
        row += [notes.get(info.key, "")] if notes else []
        rows.append(row)
    names = ["shard", "layout", "stored of object", *(["on disk"] if on_disk else []), "empty"]
    names += ["masks"] if masks is not None else []
    names += ["note"] if notes else []
    table = Table(box=box.SIMPLE_HEAD)
    for i, name in enumerate(names):
        if name in ("masks", "note"):  # free text: shortened or wrapped to fit, never the rest
            masks_column = name == "masks"
            table.add_column(
                name, overflow="ellipsis" if masks_column else "fold", no_wrap=masks_column
            )
            continue
        # one line per shard, and these columns whole at any terminal width
        widest = max((len(row[i]) for row in rows), default=len(name))
        table.add_column(
            name, justify="left" if i < 2 else "right", no_wrap=True, min_width=widest
        )
    for row in rows:
        table.add_row(*row)
    console.print(f"{title}; writes: {usual}" if usual else title, highlight=False)
    console.print(table)
    if len(shown) < len(report):
        console.print(summary_line(report[len(shown) :]), highlight=False)
    return table


def sharded_report(array: Any) -> list[ShardInfo] | None:
    """:func:`~zarrext.sharding.shard_report` of a sharded Zarr format 3 array, else None."""
    from zarrext.cli.opening import is_sharded

    return shard_report(array) if is_sharded(array) else None


def label(given: Path | str, member: str) -> str:
    """An array as the user named it: the path given, then the member's path in it."""
    return f"{str(given).rstrip('/')}/{member}" if member else str(given)


def codec_names(inv: ArrayInventory) -> list[str]:
    """Names of the conditional codec's nested codecs, in the order they apply (bit order)."""
    if inv.placement is None:
        return []
    return [str(c.to_dict().get("name", type(c).__name__)) for c in inv.placement.codec.codecs]


def mask_name(mask: int, names: Sequence[str]) -> str:
    """A mask in words: the codecs it applied joined by ``+``, or ``raw`` for none.

    >>> mask_name(0, ["shuffle", "zstd"]), mask_name(0b11, ["shuffle", "zstd"])
    ('raw', 'shuffle+zstd')
    >>> mask_name(0b100, ["zstd"])
    'invalid 0b100'
    """
    if mask >> len(names):
        return f"invalid {format_mask(mask, len(names))}"
    applied = [name for bit, name in enumerate(names) if mask >> bit & 1]
    return "+".join(applied) or "raw"


def mask_names(inv: ArrayInventory) -> dict[str, str]:
    """The masks the array's chunks hold, notation to words: ``{"0b11": "shuffle+zstd"}``."""
    names = codec_names(inv)
    return {inv.mask_text(m): mask_name(m, names) for m in sorted(inv.mask_counts)}


def inventory_table(inv: ArrayInventory, given: Path | str | None = None) -> Table:
    """One array's stored chunks, bytes and mask counts (the masks named in the caption)."""
    name = label(given, inv.path) if given is not None else inv.path or "/"
    table = Table(title=f"array {name}  shape={inv.shape} chunks={inv.chunk_shape}")
    table.add_column("stored chunks", justify="right")
    table.add_column("of", justify="right")
    table.add_column("stored bytes", justify="right")
    table.add_column("raw bytes", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("masks (chunks)")
    if inv.damaged:
        table.add_column("damaged", justify="right", style="bold red")
    masks = ", ".join(f"{inv.mask_text(m)}: {n}" for m, n in sorted(inv.mask_counts.items()))
    ratio = size_change(inv.raw_bytes, inv.stored_bytes)
    table.add_row(
        str(len(inv.chunks)),
        str(prod(inv.grid_shape)),
        f"{inv.stored_bytes:,}",
        f"{inv.raw_bytes:,}",
        ratio,
        masks if inv.placement is not None else "(no conditional codec)",
        *([str(len(inv.damaged))] if inv.damaged else []),
    )
    if inv.mask_counts:
        table.caption = "masks: " + ", ".join(f"{k} {v}" for k, v in mask_names(inv).items())
    return table


def masks_by_shard(inv: ArrayInventory) -> dict[str, Counter[int]]:
    """How many of each shard's stored chunks hold each mask, by shard key.

    Keys are relative to the array, as :class:`~zarrext.jobs.shards.inspect.ShardInfo`'s.
    """
    prefix = f"{inv.path}/" if inv.path else ""
    out: dict[str, Counter[int]] = defaultdict(Counter)
    for chunk in inv.chunks:
        if chunk.mask is not None:
            out[chunk.key.removeprefix(prefix)][chunk.mask] += 1
    return dict(out)


def counts_text(counts: Counter[int], names: Sequence[str]) -> str:
    return ", ".join(f"{mask_name(m, names)}: {n}" for m, n in sorted(counts.items()))
