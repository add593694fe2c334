"""``zarrext inspect``: per array its stored chunks, bytes and conditional masks; per shard
its layout and bytes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from zarrext._text import counted
from zarrext.cli import plot as plotting
from zarrext.cli.damaged import damaged_json, name_damaged
from zarrext.cli.failures import fail
from zarrext.cli.icechunk import in_icechunk
from zarrext.cli.opening import iter_arrays, require_writable_file
from zarrext.cli.options import PATH_HELP, STORAGE_OPTIONS
from zarrext.cli.render import (
    codec_names,
    counts_text,
    inventory_table,
    label,
    mask_names,
    masks_by_shard,
)
from zarrext.jobs.inspection import ArrayInventory, array_chunks_per_shard, inventory
from zarrext.jobs.shards.inspect import ShardInfo, shard_json

__all__ = ["register"]


def register(app: typer.Typer) -> None:
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
            plot = plotting.plot_file(plot)
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
                    masks={k: counts_text(c, names) for k, c in by_shard.items()}
                    if inv.placement is not None else None,
                )
        if not inventories and not as_json:
            console.print(f"no arrays under {path}")
        shown = min(len(inventories), plotting.MAX_PLOTTED_ARRAYS)
        if plot is not None and inventories:
            plotting.plot_inventories(inventories, plot, path, shard_shapes)
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
            name_damaged(damaged, path)
            fail(f"{counted(len(damaged), 'damaged chunk')} under {path} (named above); zarrext "
                 "check --deep decodes every chunk")



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
        "damaged": damaged_json(inv.damaged),
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
