"""``zarrext inspect`` and ``zarrext recompress``: jobs on every array of a store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from math import prod
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from zarrext.cli._common import (
    PATH_HELP,
    STORAGE_OPTIONS,
    CliError,
    check_scheduler,
    fail,
    iter_arrays,
    open_node,
    require_writable,
    require_writable_file,
    run_each,
)
from zarrext.inspection import ArrayInventory, inventory, size_change

__all__ = ["iter_arrays", "register", "size_change"]


def label(given: Path | str, member: str) -> str:
    """An array as the user named it: the path given, then the member's path in it."""
    return f"{str(given).rstrip('/')}/{member}" if member else str(given)


def inventory_table(inv: ArrayInventory, given: Path | str | None = None) -> Table:
    """One array's stored chunks, bytes and mask counts."""
    name = label(given, inv.path) if given is not None else inv.path or "/"
    table = Table(title=f"array {name}  shape={inv.shape} chunks={inv.chunk_shape}")
    table.add_column("stored chunks", justify="right")
    table.add_column("of", justify="right")
    table.add_column("stored bytes", justify="right")
    table.add_column("raw bytes", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("masks (chunks)")
    masks = ", ".join(f"{inv.mask_text(m)}: {n}" for m, n in sorted(inv.mask_counts.items()))
    ratio = size_change(inv.raw_bytes, inv.stored_bytes)
    table.add_row(
        str(len(inv.chunks)),
        str(prod(inv.grid_shape)),
        f"{inv.stored_bytes:,}",
        f"{inv.raw_bytes:,}",
        ratio,
        masks if inv.placement is not None else "(no conditional codec)",
    )
    return table


def _inventory_json(inv: ArrayInventory) -> dict[str, Any]:
    return {
        "path": inv.path or "/",
        "shape": list(inv.shape),
        "chunk_shape": list(inv.chunk_shape),
        "grid_shape": list(inv.grid_shape),
        "stored_chunks": len(inv.chunks),
        "stored_bytes": inv.stored_bytes,
        "raw_bytes": inv.raw_bytes,
        "conditional": inv.placement is not None,
        "mask_counts": {inv.mask_text(m): n for m, n in sorted(inv.mask_counts.items())},
    }


MAX_PLOTTED_ARRAYS = 24
MAX_LEGEND_MASKS = 20  # tab20 has 20 colours


def mask_legend(inv: ArrayInventory) -> list[str]:
    """The mask panel's colour-bar labels: every possible mask, in the one notation."""
    if inv.placement is None:
        return []
    return [inv.mask_text(m) for m in range(min(2**inv.n_codecs, MAX_LEGEND_MASKS))]


def plot_inventories(
    inventories: list[ArrayInventory], path: Path, given: Path | str | None = None
) -> None:
    """Draw each array's chunk grid coloured by mask and by compression ratio."""
    from zarrext._extras import needs

    with needs("plot", "zarrext inspect --plot"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    import numpy as np

    # One row of panels per array: past MAX_PLOTTED_ARRAYS the figure is unreadable and
    # slow to draw (170 arrays took 75 s and made a 68000-pixel-high PNG).
    inventories = inventories[:MAX_PLOTTED_ARRAYS]
    fig, axes = plt.subplots(
        len(inventories), 2, figsize=(10, 4 * len(inventories)), squeeze=False
    )
    for row, inv in zip(axes, inventories, strict=True):
        name = label(given, inv.path) if given is not None else inv.path or "/"
        legend = mask_legend(inv)
        n_masks = max(len(legend), 1)
        panels: list[tuple[Any, str, Any, float | None, float | None]] = [
            (row[1], "ratio", plt.get_cmap("viridis"), None, None)
        ]
        if inv.placement is not None:
            panels.insert(0, (row[0], "mask", plt.get_cmap("tab20", n_masks), -0.5, n_masks - 0.5))
        else:
            row[0].set_axis_off()
            row[0].set_title(f"{name}: no conditional codec")
        for ax, attribute, cmap, vmin, vmax in panels:
            grid = inv.grid(attribute)
            if grid.ndim == 1:
                grid = grid[np.newaxis, :]
            elif grid.ndim > 2:
                grid = grid.reshape(-1, grid.shape[-1])
            image = ax.imshow(
                np.ma.masked_invalid(grid), cmap=cmap, vmin=vmin, vmax=vmax,
                interpolation="nearest",
            )
            bar = fig.colorbar(image, ax=ax, label=attribute)
            if attribute == "mask":
                bar.set_ticks(range(n_masks))
                bar.set_ticklabels(legend)
            ax.set_title(f"{name}: {attribute} per chunk")
            ax.set_xlabel("chunk (last axis)")
            ax.set_ylabel("chunk (other axes)")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.yaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    register_info(app)

    @app.command()
    def inspect(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        plot: Annotated[
            Path | None, typer.Option(help="Write a PNG of the chunk grid(s) to this file.")
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print per-array totals as JSON.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """Per array: stored chunks, bytes, and how many chunks used each conditional mask."""
        from zarrext.cli.render import render_sharded

        console = Console()
        if plot is not None:
            require_writable_file(plot)
        inventories = []
        for array in iter_arrays(path, storage_options=storage_options):
            inv = inventory(array)
            inventories.append(inv)
            if not as_json:
                console.print(inventory_table(inv, path))
                render_sharded(array, console)
        if as_json:
            arrays = [_inventory_json(i) for i in inventories]
            typer.echo(json.dumps({"store": str(path), "arrays": arrays}))
        elif not inventories:
            console.print(f"no arrays under {path}")
        if plot is not None and inventories:
            plot_inventories(inventories, plot, path)
            if not as_json:
                shown = min(len(inventories), MAX_PLOTTED_ARRAYS)
                console.print(
                    f"plot written to {plot}"
                    + (f" (first {shown} of {len(inventories)} arrays)"
                       if shown < len(inventories) else ""),
                    highlight=False,
                )

    @app.command()
    def recompress(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        decision: Annotated[
            str, typer.Option(help="Built-in decision for the conditional codec(s).")
        ] = "compress_if_smaller",
        workers: Annotated[
            int | None, typer.Option(min=1, help="Threads in the local pool.")
        ] = None,
        scheduler: Annotated[
            str | None, typer.Option(help="Address of a dask.distributed scheduler to run on.")
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON report per array.")
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Say what would be rewritten; write nothing.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """Rewrite every stored chunk with freshly decided conditional masks, in place."""
        from zarrext.cli.render import recompress_table
        from zarrext.decisions import BUILTIN_DECISIONS
        from zarrext.inspection import conditional_placement
        from zarrext.recompression import recompress as run

        if decision not in BUILTIN_DECISIONS:
            known = ", ".join(BUILTIN_DECISIONS)
            fail(f"--decision {decision!r} is unknown; choose one of {known}")
        if not dry_run:
            require_writable(path, "recompress")
        arrays = list(
            iter_arrays(path, mode="r" if dry_run else "r+", storage_options=storage_options)
        )
        console = Console(quiet=quiet or as_json)
        if dry_run:
            plans = []
            for array in arrays:
                if conditional_placement(array.metadata) is None:  # type: ignore[arg-type]
                    continue
                # Decodes and re-encodes in memory what the run would: a chunk the
                # run cannot decode fails here, with the same error.
                plan = run(array, decision=decision, workers=workers, dry_run=True)
                plans.append({"path": array.path or "/", "chunks": plan.chunks,
                              "objects": plan.objects, "stored_bytes": plan.bytes_before,
                              "bytes_after": plan.bytes_after})
                console.print(
                    f"would recompress {array.path or '/'}: {plan.chunks} chunks in "
                    f"{plan.objects} objects, {plan.bytes_before:,} -> "
                    f"{plan.bytes_after:,} bytes", highlight=False,
                )
            if as_json:
                typer.echo(json.dumps({"store": str(path), "dry_run": True, "arrays": plans}))
            if not plans:
                fail(f"no array with a conditional codec under {path}")
            return
        reports = []
        client = None
        if scheduler is not None:
            from zarrext._extras import needs

            with needs("dask", "zarrext recompress --scheduler"):
                from dask.distributed import Client

            check_scheduler(scheduler)
            client = Client(scheduler, timeout="10s")
        try:
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
                        quiet=quiet,
                    ),
                    path=path, verb="recompress",
                    # each chunk is replaced whole, so a half-done array reads correctly
                    on_interrupt="every chunk still reads correctly, rerun the same command "
                    "to finish",
                ):
                    reports.append(_recompress_json(report))
                    console.print(recompress_table(report))
            except CliError as e:  # some arrays skipped: report the others first
                skipped = e
            if as_json:
                typer.echo(json.dumps({"store": str(path), "arrays": reports}))
            if skipped is not None:
                raise skipped
        finally:
            if client is not None:
                client.close()


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
    }


def _info_lines(info: dict[str, Any], depth: int = 0) -> Iterator[str]:
    pad = "  " * depth
    name = info["path"].rsplit("/", 1)[-1] or "/"
    attributes = info["attributes"]
    if info["type"] == "group":
        yield (
            f"{pad}{name.rstrip('/')}/  group: {info['arrays']} array(s), "
            f"{info['stored_bytes']:,} bytes stored"
        )
    else:
        shards = "x".join(map(str, info["shards"])) if info["shards"] else "none"
        dims = info["dimension_names"]
        yield (
            f"{pad}{name}  array {'x'.join(map(str, info['shape'])) or '()'} {info['dtype']}"
            f"  chunks {'x'.join(map(str, info['chunks']))}  shards {shards}"
            f"  {info['stored_bytes']:,} bytes stored"
        )
        yield f"{pad}  codecs: {' -> '.join(info['codecs'])}"
        yield f"{pad}  fill value: {info['fill_value']!r}" + (
            f"  dimensions: {', '.join(str(d) for d in dims)}" if dims else ""
        )
    if attributes:
        yield f"{pad}  attributes: {json.dumps(attributes, sort_keys=True, default=str)}"
    for member in info.get("members", ()):
        yield from _info_lines(member, depth + 1)


def register_info(app: typer.Typer) -> None:
    @app.command()
    def info(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the tree as JSON.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """The tree of a store: per array shape, dtype, chunks, shards, codecs, bytes."""
        from zarrext.inspection import node_info

        tree = node_info(open_node(path, storage_options=storage_options))
        tree["store"] = str(path)
        if as_json:
            typer.echo(json.dumps(tree, indent=2, default=str))
            return
        typer.echo(f"{path}")
        for line in _info_lines(tree):
            typer.echo(line)
