"""How the CLI and the demo show what library jobs report: rich tables and progress bars.

The library reports progress through plain callbacks (``progress(done, total)``)
and results as dataclasses; only this layer (``cli/`` and ``demo/``) turns them
into rich output, so ``import zarrext`` and its jobs never load rich.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zarrext.inspection import size_change
from zarrext.recompression import RecompressReport
from zarrext.sharding.inspect import (
    MAX_SHARD_ROWS,
    ShardInfo,
    format_bytes,
    shard_report,
    summary_line,
    writes_text,
)

__all__ = ["progress_bar", "recompress_table", "render_shard_table", "render_sharded"]


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
        ``False`` draws nothing (``--quiet``).

    Yields
    ------
    callable
        ``progress(done, total)``.
    """
    console = console if console is not None else Console(stderr=True)
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        # rich ends a bar on a file or pipe with a blank line: draw none there
        disable=not (enabled and console.is_interactive),
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

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
    change = size_change(report.bytes_before, report.bytes_after)
    table.caption = f"{change} in {report.seconds:.2f} s"
    return table


def render_shard_table(
    report: list[ShardInfo],
    console: Console,
    *,
    title: str = "shards",
    max_rows: int | None = MAX_SHARD_ROWS,
) -> Table:
    """Print ``report`` (:func:`zarrext.sharding.shard_report`) as a table on ``console``.

    Past ``max_rows`` shards (``None``: no limit) the rest are summed up in one line.
    Returns the table.
    """
    shown = report if max_rows is None else report[:max_rows]
    table = Table(title=title)
    for name in ("shard", "layout", "used", "file size", "used %", "empty chunks", "writes"):
        left = name in ("shard", "layout", "writes")
        table.add_column(name, justify="left" if left else "right")
    if len(shown) < len(report):
        table.caption = summary_line(report[len(shown) :])
    for info in shown:
        pct = 100.0 * info.bytes_used / info.file_size if info.file_size else 0.0
        table.add_row(
            info.key,
            info.layout,
            format_bytes(info.bytes_used),
            format_bytes(info.file_size),
            f"{pct:.0f}%",
            f"{info.empty_chunks}/{info.n_chunks}",
            writes_text(info),
        )
    console.print(table)
    return table


def render_sharded(array: Any, console: Console) -> None:
    """Print the shard table of ``array`` if it is a sharded Zarr format 3 array."""
    from zarr.core.metadata import ArrayV3Metadata

    from zarrext.sharding.layout import sharding_codec_of

    metadata = array.metadata
    if isinstance(metadata, ArrayV3Metadata) and sharding_codec_of(metadata) is not None:
        render_shard_table(shard_report(array), console, title=f"shards of {array.path or '/'}")
