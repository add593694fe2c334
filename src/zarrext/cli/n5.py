"""``zarrext n5 PATH``: make an N5 dataset or container readable by zarr-python in place."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from zarrext._text import counted
from zarrext.cli.failures import ExitCode, fail
from zarrext.cli.options import QUIET_HELP


class CodecOption(StrEnum):
    auto = "auto"
    pad = "pad"
    n5_default = "n5_default"


def register(app: typer.Typer) -> None:
    @app.command()
    def n5(
        path: Annotated[Path, typer.Argument(help="An N5 dataset or container directory.")],
        codec: Annotated[
            CodecOption,
            typer.Option(
                help="How block headers are read: 'pad' skips them (full-size blocks only), "
                "'n5_default' parses them (also truncated edge blocks); 'auto' decides "
                "from the edge blocks."
            ),
        ] = CodecOption.auto,
        overwrite: Annotated[
            bool, typer.Option(help="Replace zarr.json files that already exist.")
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Show what would be written; write nothing.")
        ] = False,
        dimension_names: Annotated[
            str | None,
            typer.Option(
                "--dimension-names",
                help="Comma-separated names of every dataset's dimensions, in N5's "
                "'dimensions' order (the shape shown), e.g. x,y,z. Default: N5's 'axes'.",
            ),
        ] = None,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help=QUIET_HELP)
        ] = False,
    ) -> None:
        """Write zarr.json beside N5 attributes.json files; no block is copied."""
        from zarrext.formats.n5 import N5ConversionError, write_zarr_metadata

        names = None if dimension_names is None else dimension_names.split(",")
        if names is not None and not all(n.strip() for n in names):
            fail(f"--dimension-names {dimension_names!r}: expected names like x,y,z",
                 code=ExitCode.USAGE)
        console = Console(quiet=quiet)
        try:
            results = write_zarr_metadata(
                path,
                codec=codec.value,
                overwrite=overwrite,
                write=not dry_run,
                dimension_names=None if names is None else [n.strip() for n in names],
            )
        except N5ConversionError as e:
            fail(str(e))
        table = Table(title=f"N5 -> zarr.json in {path}" + (" (dry run)" if dry_run else ""))
        columns = (
            "node", "type", "shape", "dims", "dtype", "blocks", "compression", "codec", "why"
        )
        for column in columns:
            table.add_column(column, overflow="fold")
        for r in results:
            rel = str(r.path.relative_to(path)) if r.path != path else "."
            if r.node_type == "group":
                table.add_row(rel, "group", *[""] * (len(columns) - 2))
                continue
            m = r.metadata
            table.add_row(
                rel,
                "array",
                "x".join(map(str, m["shape"])),
                ",".join(m.get("dimension_names") or ()),
                m["data_type"],
                "x".join(map(str, m["chunk_grid"]["configuration"]["chunk_shape"])),
                r.compression,
                str(r.codec),
                r.reason,
            )
        console.print(table)
        if not dry_run:
            console.print(
                f"wrote {counted(len(results), 'zarr.json file')}; "
                f"open with zarr.open({str(path)!r})"
            )
