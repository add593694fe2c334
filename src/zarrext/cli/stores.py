"""``zarrext inspect`` and ``zarrext recompress``: jobs on every array of a store."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from zarrext._text import bytes_text, counted
from zarrext.cli._common import (
    DECISION,
    PATH_HELP,
    QUIET_HELP,
    SCHEDULER,
    SNAPSHOT_WITH_DRY_RUN,
    STORAGE_OPTIONS,
    CliError,
    ExitCode,
    dask_client,
    fail,
    in_icechunk,
    iter_arrays,
    open_node,
    require_writable,
    require_writable_file,
    run_each,
)
from zarrext.codecs.decisions import format_mask
from zarrext.jobs.inspection import (
    ArrayInventory,
    array_chunks_per_shard,
    inventory,
    size_change,
)
from zarrext.jobs.shards.inspect import ShardInfo, shard_json

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["iter_arrays", "register", "size_change"]


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


def _counts_text(counts: Counter[int], names: Sequence[str]) -> str:
    return ", ".join(f"{mask_name(m, names)}: {n}" for m, n in sorted(counts.items()))


def _inventory_json(
    inv: ArrayInventory, shards: list[ShardInfo] | None, decision: Any = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    by_shard = masks_by_shard(inv)
    return {
        "path": inv.path or "/",
        "shape": list(inv.shape),
        "chunk_shape": list(inv.chunk_shape),
        "grid_shape": list(inv.grid_shape),
        "stored_chunks": len(inv.chunks),
        "stored_bytes": inv.stored_bytes,
        "object_bytes": inv.object_bytes,
        # the encoded inner chunks: decoded shards' bytes when codecs follow sharding
        "chunk_bytes": inv.chunk_bytes,
        "raw_bytes": inv.raw_bytes,
        "conditional": inv.placement is not None,
        # recorded by zarrext.create_array, used by zarrext.open_array's writers
        "decision": decision,
        "mask_counts": {inv.mask_text(m): n for m, n in sorted(inv.mask_counts.items())},
        "mask_names": mask_names(inv),
        "damaged": _damaged_json(inv.damaged),
        # what a writer should know (pad padding that does not describe the chunks)
        "notes": list(notes),
        "shards": None if shards is None else [
            {
                **shard_json(info),
                "mask_counts": {
                    inv.mask_text(m): n for m, n in sorted(by_shard.get(info.key, {}).items())
                },
            }
            for info in shards
        ],
    }


MAX_PLOTTED_ARRAYS = 24
MAX_LEGEND_MASKS = 20  # tab20 has 20 colours


def mask_legend(inv: ArrayInventory) -> list[str]:
    """Every possible mask of the array in the one notation (``0b00`` ... ``0b11``)."""
    if inv.placement is None:
        return []
    return [inv.mask_text(m) for m in range(min(2**inv.n_codecs, MAX_LEGEND_MASKS))]


def plot_file(plot: Path) -> Path:
    """The file ``--plot`` writes: ``plot`` itself, or ``plot.png`` when it has no suffix.

    The suffix picks the image format (``.png``, ``.svg``, ``.pdf``, ...); one
    matplotlib cannot write is a usage error, before any work is done.
    """
    from zarrext._extras import needs

    with needs("plot", "zarrext inspect --plot"):
        from matplotlib.backend_bases import FigureCanvasBase

    if plot.is_dir():
        fail(f"--plot {plot}: is a directory; give an image file name such as grid.png",
             ExitCode.USAGE)
    if not plot.suffix:
        return plot.with_name(plot.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if plot.suffix[1:].lower() not in formats:
        known = ", ".join(f".{f}" for f in sorted(formats))
        fail(f"--plot {plot}: matplotlib cannot write {plot.suffix} files; use one of {known}",
             ExitCode.USAGE)
    return plot


NOT_WRITTEN = "lightgrey"  # chunks never written: the fill value, no bytes stored


GAP = np.inf
"""Image cells between the tiles of an N-D grid (drawn white; never 'not written')."""


def tile_layout(grid_shape: tuple[int, ...]) -> tuple[int, int]:
    """(tiles down, tiles across) of :func:`as_image`'s picture of a chunk grid.

    A grid of 3 or more axes is drawn as one tile per index of its leading axes
    (the last two axes in each), laid out near-square; a 1-D or 2-D grid is one.

    >>> tile_layout((4, 4)), tile_layout((8, 4, 4)), tile_layout((2, 1, 30))
    ((1, 1), (3, 3), (2, 1))
    """
    if len(grid_shape) < 3:
        return 1, 1
    tiles = prod(grid_shape[:-2])
    rows, columns = grid_shape[-2] + 1, grid_shape[-1] + 1  # with the gap
    across = max(1, min(tiles, round(np.sqrt(tiles * rows / columns))))
    return -(-tiles // across), across


def as_image(grid: np.ndarray) -> np.ndarray:
    """A chunk grid as rows x columns: a 1-D grid one row, a 2-D grid as it is, more
    axes as tiles of the last two (:func:`tile_layout`), :data:`GAP` between them, in
    C order of the leading axes, left to right, then down."""
    if grid.ndim == 0:
        return grid.reshape(1, 1)
    if grid.ndim < 3:
        return grid.reshape(-1, grid.shape[-1])
    rows, columns = grid.shape[-2:]
    down, across = tile_layout(grid.shape)
    image = np.full((down * (rows + 1) - 1, across * (columns + 1) - 1), GAP)
    for tile, values in enumerate(grid.reshape(-1, rows, columns)):
        top, left = (tile // across) * (rows + 1), (tile % across) * (columns + 1)
        image[top : top + rows, left : left + columns] = values
    return image


def shard_edges(
    grid_shape: tuple[int, ...], per_shard: tuple[int, ...]
) -> tuple[list[float], list[float]]:
    """Where shard boundaries fall in :func:`as_image`'s picture: (row edges, column edges).

    An edge at ``r - 0.5`` separates image rows ``r - 1`` and ``r`` (image coordinates
    put cell centres on integers); in a tiled picture, the boundaries of the last two
    axes inside each tile (tiles are apart: their leading indices label them).

    >>> shard_edges((8, 12), (4, 4))
    ([3.5], [3.5, 7.5])
    >>> shard_edges((2, 3, 4), (1, 2, 4))
    ([1.5, 5.5], [])
    """
    if not grid_shape:
        return [], []
    if len(grid_shape) == 1:
        return [], [c - 0.5 for c in range(per_shard[0], grid_shape[0], per_shard[0])]
    down, across = tile_layout(grid_shape)
    rows, columns = grid_shape[-2:]
    row_edges = [t * (rows + 1) + r - 0.5 for t in range(down)
                 for r in range(per_shard[-2], rows, per_shard[-2])]
    column_edges = [t * (columns + 1) + c - 0.5 for t in range(across)
                    for c in range(per_shard[-1], columns, per_shard[-1])]
    return [float(r) for r in row_edges], [float(c) for c in column_edges]


def plot_inventories(
    inventories: list[ArrayInventory],
    path: Path,
    given: Path | str | None = None,
    shards: Mapping[str, tuple[int, ...]] | None = None,
) -> Figure:
    """Draw each array's chunk grid coloured by conditional mask and by compression ratio.

    One row per array: the masks named by the codecs they applied (arrays with a
    conditional codec only) and raw/stored bytes on a log scale; chunks never written
    in grey; lines at shard boundaries (``shards`` maps an array's path to its inner
    chunks per shard). Writes ``path`` (format from its suffix) under a temporary name
    first, and returns the figure.
    """
    from zarrext._extras import needs

    with needs("plot", "zarrext inspect --plot"):
        from matplotlib.figure import Figure

    # One row of panels per array: past MAX_PLOTTED_ARRAYS the figure is unreadable and
    # slow to draw (170 arrays took 75 s and made a 68000-pixel-high PNG).
    inventories = inventories[:MAX_PLOTTED_ARRAYS]
    shards = shards or {}
    fig = Figure(figsize=(12, 4.5 * len(inventories)), layout="constrained")
    rows = fig.subfigures(len(inventories), 1, squeeze=False)[:, 0]
    for row, inv in zip(rows, inventories, strict=True):
        name = label(given, inv.path) if given is not None else inv.path or "/"
        per_shard = shards.get(inv.path)
        if inv.placement is not None:
            mask_ax, ratio_ax = row.subplots(1, 2)
            _mask_panel(mask_ax, inv, name, per_shard)
        else:  # no masks to show: the ratio panel alone, centred in its row
            ratio_ax = row.subplots(1, 1)
        _ratio_panel(ratio_ax, inv, name, per_shard)
    suffix = path.suffix[1:].lower() or "png"
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        fig.savefig(partial, format=suffix, dpi=100)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return fig


def _draw_grid(
    ax: Axes, image: np.ndarray, cmap: Any, norm: Any, per_shard: tuple[int, ...] | None,
    grid_shape: tuple[int, ...],
) -> Any:
    """Show a chunk grid (NaN: not written) with shard boundaries; the AxesImage."""
    rows, columns = image.shape
    # a long thin grid fills the panel instead of becoming a hairline
    aspect: Literal["equal", "auto"] = "equal" if 1 / 8 <= rows / columns <= 8 else "auto"
    drawn = ax.imshow(
        np.ma.masked_invalid(image), cmap=cmap.with_extremes(bad=NOT_WRITTEN), norm=norm,
        interpolation="nearest", aspect=aspect,
    )
    axis = len(grid_shape) - 1
    if per_shard is not None and axis < 2:
        row_edges, column_edges = shard_edges(grid_shape, per_shard)
        for y in row_edges:
            ax.axhline(y, color="black", linewidth=1.5, gid="shard boundary")
        for x in column_edges:
            ax.axvline(x, color="black", linewidth=1.5, gid="shard boundary")
    ax.set_xlabel(f"chunk index along axis {axis}")
    ax.set_ylabel("" if axis == 0 else f"chunk index along axis {axis - 1}")
    if axis < 2:
        ax.set_xticks(_index_ticks(columns))
        ax.set_yticks(_index_ticks(rows) if axis else [])
        return drawn
    # tiles: white gaps between them, each labelled with its leading axes' indices;
    # the ticks count chunks within the first tile (every tile has the same shape)
    from matplotlib.colors import ListedColormap

    gaps = np.ma.masked_where(~np.isinf(image), np.zeros(image.shape))
    ax.imshow(gaps, cmap=ListedColormap(["white"]), interpolation="nearest", aspect=aspect)
    tile_rows, tile_columns = grid_shape[-2:]
    _, across = tile_layout(grid_shape)
    row_edges, column_edges = ([], []) if per_shard is None else shard_edges(
        grid_shape[-2:], per_shard[-2:]  # one tile's: the same in every tile
    )
    for tile, leading in enumerate(np.ndindex(grid_shape[:-2])):
        top = (tile // across) * (tile_rows + 1)
        left = (tile % across) * (tile_columns + 1)
        ax.text(left - 0.5, top - 0.5, ",".join(map(str, leading)), fontsize="x-small",
                va="bottom", ha="left", gid="tile label")
        bottom, right = top + tile_rows - 0.5, left + tile_columns - 0.5
        for y in row_edges:  # shard boundaries inside the tile only, not across gaps
            ax.plot([left - 0.5, right], [top + y] * 2, color="black", linewidth=1.5,
                    gid="shard boundary")
        for x in column_edges:
            ax.plot([left + x] * 2, [top - 0.5, bottom], color="black", linewidth=1.5,
                    gid="shard boundary")
    ax.set_xticks(_index_ticks(tile_columns))
    ax.set_yticks(_index_ticks(tile_rows))
    leading_axes = "axis 0" if axis == 2 else f"axes 0-{axis - 2}"
    ax.set_xlabel(f"chunk index along axis {axis}; a tile per index along {leading_axes}, "
                  "labelled")
    return drawn


def _index_ticks(count: int) -> list[int]:
    """Chunk indices to label along an image side of ``count`` cells: whole numbers
    inside ``0..count-1`` only (a locator alone gives -0.5..0.5 for one chunk)."""
    from matplotlib.ticker import MaxNLocator

    ticks = MaxNLocator(nbins=8, integer=True).tick_values(0, max(count - 1, 0))
    return [int(t) for t in ticks if 0 <= t <= count - 1] or [0]


def _extra_handles(image: np.ndarray, per_shard: tuple[int, ...] | None) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    unwritten = int(np.isnan(image).sum())
    if unwritten:
        handles.append(
            Patch(color=NOT_WRITTEN, label=f"not written ({counted(unwritten, 'chunk')})")
        )
    if per_shard is not None:
        handles.append(Line2D([], [], color="black", linewidth=1.5, label="shard boundary"))
    return handles


def _mask_panel(
    ax: Axes, inv: ArrayInventory, name: str, per_shard: tuple[int, ...] | None
) -> None:
    from matplotlib import colormaps
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    names = codec_names(inv)
    counts = inv.mask_counts
    present = sorted(counts)
    palette = colormaps["tab10"]
    # a mask keeps its colour from array to array: colour by mask value, not by rank
    colours: list[Any] = [palette(m % palette.N) for m in present] or [NOT_WRITTEN]
    masks = as_image(inv.grid("mask"))
    rank = np.full(masks.shape, np.nan)
    rank[np.isinf(masks)] = GAP  # between tiles: not a chunk
    for i, m in enumerate(present):
        rank[masks == m] = i
    levels = len(colours)
    _draw_grid(
        ax, rank, ListedColormap(colours), BoundaryNorm(np.arange(levels + 1) - 0.5, levels),
        per_shard, inv.grid_shape,
    )
    handles: list[Any] = [
        Patch(color=c, label=f"{mask_name(m, names)} ({counted(counts[m], 'chunk')})")
        for m, c in zip(present, colours, strict=False)
    ]
    handles += _extra_handles(rank, per_shard)
    ax.legend(handles=handles, title="codecs applied", loc="upper left",
              bbox_to_anchor=(1.02, 1), borderaxespad=0, fontsize="small")
    ax.set_title(f"{name}: codecs applied per chunk")


def _ratio_panel(
    ax: Axes, inv: ArrayInventory, name: str, per_shard: tuple[int, ...] | None
) -> None:
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm

    ratios = as_image(inv.grid("ratio"))
    finite = ratios[np.isfinite(ratios)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 1.0)
    if high <= low * 1.01:  # one value: widen the scale so it has a middle colour
        low, high = low / 1.25, high * 1.25
    drawn = _draw_grid(
        ax, ratios, colormaps["viridis"], LogNorm(low, high), per_shard, inv.grid_shape
    )
    # the colour bar below, the legend to the right, as in the mask panel beside it
    bar = ax.figure.colorbar(
        drawn, ax=ax, location="bottom", shrink=0.6, aspect=30,
        label="raw / stored bytes (log scale)",
    )
    # A log axis labels its minor ticks when it spans less than a decade or two, and
    # on a short horizontal bar those labels run into each other: five labels, spaced
    # evenly on the log scale, and no minor ones.
    from matplotlib.ticker import NullLocator

    ticks = np.geomspace(low, high, 5)
    bar.set_ticks(list(ticks), labels=[f"{t:.3g}x" for t in ticks])
    bar.ax.xaxis.set_minor_locator(NullLocator())
    handles = _extra_handles(ratios, per_shard)
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1),
                  borderaxespad=0, fontsize="small")
    ax.set_title(f"{name}: compression ratio per chunk")


def register(app: typer.Typer) -> None:
    register_info(app)

    @app.command()
    @in_icechunk("inspect")
    def inspect(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        plot: Annotated[
            Path | None,
            typer.Option(
                help="Write a picture of the chunk grid(s) to this file (.png unless its "
                "suffix names another format: .svg, .pdf, ...)."
            ),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print per-array and per-shard data as JSON.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """Per array: stored chunks, bytes, conditional masks; per shard: layout and bytes."""
        from zarrext.cli.render import progress_bar, render_shard_table, sharded_report
        from zarrext.codecs.decisions import decision_record
        from zarrext.codecs.literal_padding import padding_notes

        console = Console()
        if plot is not None:
            plot = plot_file(plot)
            require_writable_file(plot)
        inventories = []
        documents = []
        shard_shapes = {}
        damaged: list[Any] = []
        for array in iter_arrays(path, storage_options=storage_options):
            with progress_bar(f"inspect {array.path or '/'}", enabled=not as_json) as progress:
                # the table, damaged chunks marked
                inv = inventory(array, on_damage="mark", progress=progress)
            damaged += inv.damaged
            inventories.append(inv)
            report = sharded_report(array)
            per_shard = array_chunks_per_shard(array)
            if per_shard is not None:
                shard_shapes[inv.path] = per_shard
            decision = decision_record(dict(array.attrs))
            notes = padding_notes(array.metadata)
            if as_json:
                documents.append(_inventory_json(inv, report, decision, notes))
                continue
            console.print(inventory_table(inv, path))
            for text in notes:
                console.print(f"note: {text}", highlight=False, soft_wrap=True)
            if inv.damaged:
                console.print(
                    f"damaged: {counted(len(inv.damaged), 'chunk')} whose header does not decode "
                    "(no mask counted; named on stderr)", highlight=False, soft_wrap=True,
                )
            if inv.placement is not None:
                console.print(
                    f"decision for zarrext's writers: {decision}" if decision is not None
                    else "no decision recorded: zarrext's writers store raw chunks unless "
                    "given decision= (zarrext.create_array(decision=...) records one)",
                    highlight=False, soft_wrap=True,
                )
            if report is not None:
                names = codec_names(inv)
                by_shard = masks_by_shard(inv)
                render_shard_table(
                    report, console, title=f"shards of {label(path, inv.path)}",
                    masks={k: _counts_text(c, names) for k, c in by_shard.items()}
                    if inv.placement is not None else None,
                )
        if not inventories and not as_json:
            console.print(f"no arrays under {path}")
        shown = min(len(inventories), MAX_PLOTTED_ARRAYS)
        if plot is not None and inventories:
            plot_inventories(inventories, plot, path, shard_shapes)
            if not as_json:
                console.print(
                    f"plot written to {plot}"
                    + (f" (first {shown} of {counted(len(inventories), 'array')})"
                       if shown < len(inventories) else ""),
                    highlight=False,
                )
        if as_json:
            document: dict[str, Any] = {"store": str(path), "arrays": documents}
            if plot is not None and inventories:
                document["plot"] = {"file": str(plot), "arrays": shown}
            typer.echo(json.dumps(document))
        if damaged:
            _name_damaged(damaged, path)
            fail(f"{counted(len(damaged), 'damaged chunk')} under {path} (named above); zarrext "
                 "check --deep decodes every chunk")

    @app.command()
    @in_icechunk(
        "recompress", settings=("decision",), writes=lambda a: not a["dry_run"],
        snapshot_help=SNAPSHOT_WITH_DRY_RUN,
    )
    def recompress(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        decision: Annotated[str, DECISION] = "compress_if_smaller",
        workers: Annotated[
            int | None, typer.Option(min=1, help="Threads in the local pool.")
        ] = None,
        scheduler: Annotated[str | None, SCHEDULER] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON report per array.")
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help=QUIET_HELP)
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Say what would be rewritten; write nothing.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """Rewrite every stored chunk with freshly decided conditional masks, in place."""
        from zarrext.cli.render import recompress_table
        from zarrext.jobs.inspection import conditional_placement
        from zarrext.jobs.recompression import recompress as run

        if not dry_run:
            require_writable(path, "recompress")
        arrays = list(
            iter_arrays(path, mode="r" if dry_run else "r+", storage_options=storage_options)
        )
        console = Console(quiet=quiet or as_json)
        damaged: list[Any] = []
        if dry_run:
            plans = []
            for array in arrays:
                if conditional_placement(array.metadata) is None:  # type: ignore[arg-type]
                    continue
                # Decodes and re-encodes in memory what the run would: the chunks
                # the run would leave as they are (damaged) are named here first.
                plan = run(array, decision=decision, workers=workers, dry_run=True,
                           on_damage="report")
                damaged += plan.damaged
                plans.append({"path": array.path or "/", "chunks": plan.chunks,
                              "objects": plan.objects, "stored_bytes": plan.bytes_before,
                              "bytes_after": plan.bytes_after,
                              "damaged": _damaged_json(plan.damaged)})
                left = (f"; {counted(len(plan.damaged), 'damaged chunk')} would be left as "
                        "stored" if plan.damaged else "")
                console.print(
                    f"would recompress {array.path or '/'}: {counted(plan.chunks, 'chunk')} in "
                    f"{counted(plan.objects, 'object')}, {plan.bytes_before:,} -> "
                    f"{plan.bytes_after:,} bytes{left}", highlight=False, soft_wrap=True,
                )
            if as_json:
                typer.echo(json.dumps({"store": str(path), "dry_run": True, "arrays": plans}))
            if not plans:
                fail(f"no array with a conditional codec under {path}")
            _fail_on_damage(damaged, path, dry_run=True)
            return
        reports = []
        with dask_client(scheduler, "recompress") as client:
            eligible = []
            for array in arrays:
                if conditional_placement(array.metadata) is None:  # type: ignore[arg-type]
                    console.print(f"skipping {array.path or '/'}: no conditional codec")
                else:
                    eligible.append(array)
            if not eligible:
                fail(f"no array with a conditional codec under {path}")
            skipped = None
            try:
                for _, report in run_each(
                    eligible,
                    lambda a: _recompress_one(
                        a, run, decision=decision, client=client, workers=workers,
                        quiet=quiet, on_damage="report",
                    ),
                    path=path, verb="recompress",
                    # each chunk is replaced whole, so a half-done array reads correctly
                    on_interrupt="every chunk still reads correctly, rerun the same command "
                    "to finish",
                ):
                    reports.append(_recompress_json(report))
                    console.print(recompress_table(report))
                    damaged += report.damaged
            except CliError as e:  # some arrays skipped: report the others first
                skipped = e
            if as_json:
                typer.echo(json.dumps({"store": str(path), "arrays": reports}))
            _fail_on_damage(damaged, path, dry_run=False, then=skipped)
            if skipped is not None:
                raise skipped


def _fail_on_damage(
    damaged: list[Any], path: str, *, dry_run: bool, then: CliError | None = None
) -> None:
    """Name every damaged chunk on stderr, one a line, then fail with a summary."""
    if not damaged:
        return
    _name_damaged(damaged, path)
    n = len(damaged)
    if dry_run:
        summary = (f"recompress would leave {counted(n, 'damaged chunk')} under {path} as stored "
                   "(named above) and rewrite the others")
    else:
        summary = (f"recompress left {counted(n, 'damaged chunk')} under {path} as stored (named "
                   "above); every other chunk was rewritten. Restore or rewrite them "
                   "(zarrext check --deep lists them too)")
    if then is not None:
        summary += f"; {then}"
    fail(summary)


def _name_damaged(damaged: list[Any], path: str) -> None:
    """One ``zarrext: damaged:`` line per damaged chunk on stderr, named from ``path``."""
    import sys

    from zarrext.cli._common import named_by_path

    for error in damaged:
        print(f"zarrext: damaged: {named_by_path(error, path)}", file=sys.stderr)


def _damaged_json(damaged: list[Any]) -> list[dict[str, Any]]:
    return [
        {"array": e.array or "/", "key": e.key, "inner": None if e.inner is None else list(e.inner),
         "codec": e.codec, "reason": e.reason}
        for e in damaged
    ]


def _recompress_one(array: Any, run: Any, *, quiet: bool, **options: Any) -> Any:
    """Recompress one array with a progress bar on stderr (stdout keeps the JSON)."""
    from zarrext.cli.render import progress_bar

    with progress_bar(f"recompress {array.path or '/'}", enabled=not quiet) as progress:
        return run(array, progress=progress, **options)


def _recompress_json(report: Any) -> dict[str, Any]:
    return {
        "path": report.path or "/",
        "chunks": report.chunks,
        "objects": report.objects,
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
        "masks_before": {report.mask_text(m): n for m, n in sorted(report.masks_before.items())},
        "masks_after": {report.mask_text(m): n for m, n in sorted(report.masks_after.items())},
        "seconds": report.seconds,
        "damaged": _damaged_json(report.damaged),
    }


def _quantize_text(quantize: dict[str, Any]) -> str:
    """One line for ``node_info``'s ``quantize``: the plan, its headroom, what is stored."""
    lo, hi = quantize["storable_range"]
    reserved = ", ".join(f"{k}={v}" for k, v in quantize["reserved"].items()) or "none"
    stores = f"{quantize['stored_as']} codes for [{lo:.7g}, {hi:.7g}] (reserved: {reserved})"
    planned = quantize["planned"]
    if planned is None:
        return (f"{stores}; no plan recorded: zarrext's writers refuse reserved and "
                "out-of-range codes")
    (plo, phi), (below, above) = planned["range"], planned["headroom"]
    return (
        f"planned for [{plo:.7g}, {phi:.7g}] within {planned['max_abs_error']:g}, headroom "
        f"{below:.3g} below and {above:.3g} above; {stores}"
    )


def _info_lines(info: dict[str, Any], depth: int = 0) -> Iterator[str]:
    pad = "  " * depth
    name = info["path"].rsplit("/", 1)[-1] or "/"
    attributes = info["attributes"]
    sizes = bytes_text(info["stored_bytes"], info["object_bytes"], info.get("allocated_bytes"))
    if info["type"] == "group":
        yield f"{pad}{name.rstrip('/')}/  group: {counted(info['arrays'], 'array')}, {sizes}"
    else:
        shards = "x".join(map(str, info["shards"])) if info["shards"] else "none"
        dims = info["dimension_names"]
        yield (
            f"{pad}{name}  array {'x'.join(map(str, info['shape'])) or '()'} {info['dtype']}"
            f"  chunks {'x'.join(map(str, info['chunks']))}  shards {shards}  {sizes}"
        )
        if info.get("damaged"):
            yield (f"{pad}  {counted(info['damaged'], 'shard')} whose index does not decode: "
                   "its chunks are not counted (zarrext check names it)")
        yield f"{pad}  codecs: {' -> '.join(info['codecs'])}"
        yield f"{pad}  fill value: {info['fill_value']!r}" + (
            f"  dimensions: {', '.join(str(d) for d in dims)}" if dims else ""
        )
        if info.get("quantize"):
            yield f"{pad}  quantized: {_quantize_text(info['quantize'])}"
    if attributes:
        yield f"{pad}  attributes: {json.dumps(attributes, sort_keys=True, default=str)}"
    for member in info.get("members", ()):
        yield from _info_lines(member, depth + 1)


def register_info(app: typer.Typer) -> None:
    @app.command()
    @in_icechunk("info")
    def info(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the tree as JSON.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """The tree of a store: per array shape, dtype, chunks, shards, codecs, bytes.

        Bytes stored are the encoded chunks' bytes (a sharded array's inner chunks),
        as inspect, check and quantize count them: zarr.json, a shard's index and its
        free space are not counted (a shard compressed whole by codecs after
        sharding_indexed counts whole). "In objects" is the objects' sizes as the
        store holds them, index and free space included; "on disk" what a local
        file system allocates for them, where holes make it less.
        """
        from zarrext.cli.render import array_progress_bar
        from zarrext.jobs.inspection import node_info

        node = open_node(path, storage_options=storage_options)
        with array_progress_bar("info", enabled=not as_json) as progress:
            tree = node_info(node, progress=progress)
        tree["store"] = str(path)
        if as_json:
            typer.echo(json.dumps(tree, indent=2, default=str))
            return
        typer.echo(f"{path}")
        for line in _info_lines(tree):
            typer.echo(line)
