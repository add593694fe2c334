"""``zarrext info``: the tree of a store, per array its shape, data type, chunks, shards,
codecs and bytes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from math import prod
from typing import Annotated, Any

import typer

from zarrext._text import bytes_text, counted
from zarrext.cli.icechunk import in_icechunk
from zarrext.cli.opening import open_node
from zarrext.cli.options import PATH_HELP, STORAGE_OPTIONS

__all__ = ["register"]


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


def _grid_text(info: dict[str, Any]) -> str:
    """How many chunks (or shards, and chunks in each) the array's grid has, edges
    included, and how many of them are stored."""
    shards, chunks = info["shards"], info["chunks"]
    objects = prod(-(-s // c) for s, c in zip(info["shape"], shards or chunks, strict=True))
    stored = info["stored_objects"]
    if not shards:
        return f"{counted(objects, 'chunk')}, {stored} stored"
    # prod, not per axis: the inner chunks' axes may be permuted (a transpose before sharding)
    per_shard = counted(prod(shards) // prod(chunks), "chunk")
    return f"{counted(objects, 'shard')} of {per_shard}, {stored} stored"


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
        yield f"{pad}  grid: {_grid_text(info)}"
        yield f"{pad}  fill value: {info['fill_value']!r}" + (
            f"  dimensions: {', '.join(str(d) for d in dims)}" if dims else ""
        )
        if info.get("quantize"):
            yield f"{pad}  quantized: {_quantize_text(info['quantize'])}"
    if attributes:
        yield f"{pad}  attributes: {json.dumps(attributes, sort_keys=True, default=str)}"
    for member in info.get("members", ()):
        yield from _info_lines(member, depth + 1)


def register(app: typer.Typer) -> None:
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
        from zarrext.jobs.node_info import node_info

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
