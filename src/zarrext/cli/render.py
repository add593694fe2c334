"""How the CLI and the demo show what library jobs report: rich tables and progress bars.

The library reports progress through plain callbacks (``progress(done, total)``)
and results as dataclasses; only this layer (``cli/`` and ``demo/``) turns them
into rich output, so ``import zarrext`` and its jobs never load rich.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zarrext.jobs.inspection import size_change
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
    "progress_bar", "recompress_table", "render_shard_table", "sharded_report"]


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
    (``progress(array_path, done, total)``, e.g. :func:`zarrext.jobs.inspection.node_info`):
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
    from zarrext.cli._common import is_sharded

    return shard_report(array) if is_sharded(array) else None
