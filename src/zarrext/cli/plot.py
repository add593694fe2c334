"""The picture ``zarrext inspect --plot`` draws: each array's chunk grid, by mask and by
compression ratio."""

from __future__ import annotations

import os
from collections.abc import Mapping
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from zarrext._text import counted
from zarrext.cli.failures import ExitCode, fail
from zarrext.cli.render import codec_names, label, mask_name
from zarrext.jobs.inspection import ArrayInventory

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "MAX_PLOTTED_ARRAYS",
    "as_image",
    "mask_legend",
    "plot_file",
    "plot_inventories",
    "shard_edges",
    "tile_layout",
]


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
