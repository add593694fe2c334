"""``zarrext quantize PATH --max-abs-error E --out PATH2``: copy a float array quantized."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zarrext.cli._common import STORAGE_OPTIONS, fail, one_line, open_node


def register(app: typer.Typer) -> None:
    @app.command()
    def quantize(
        path: Annotated[
            str, typer.Argument(help="A zarr array of float16/32/64 values (path, .zip or URL).")
        ],
        max_abs_error: Annotated[
            float,
            typer.Option(
                "--max-abs-error", help="Every finite value must decode within this error."
            ),
        ],
        out: Annotated[
            str,
            typer.Option("--out", help="Where to write the quantized copy (path, .zip or URL)."),
        ],
        overwrite: Annotated[
            bool, typer.Option(help="Replace an existing array at --out.")
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the plan and the result as JSON.")
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")
        ] = False,
        storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
    ) -> None:
        """Copy an array stored as integers (scale_offset + cast_value) within an error bound."""
        from zarrext.quantize import QuantizationError, copy_quantized
        from zarrext.stores import local_path, open_store, parse_storage_options

        # Opened once here for one-line errors (missing, not Zarr, format 2); the
        # store goes to the job, so a URL's storage options reach it.
        source = open_node(path, storage_options=storage_options).store_path.store
        output: object = out
        if local_path(out) is None:
            output = open_store(
                out, mode="w", storage_options=parse_storage_options(storage_options)
            )
        console = Console(quiet=as_json or quiet)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            tasks = {
                "scan": bar.add_task("scanning value range", total=None),
                "copy": bar.add_task("writing quantized blocks", total=None),
            }

            def progress(phase: str, done: int, total: int) -> None:
                bar.update(tasks[phase], completed=done, total=total)

            try:
                report = copy_quantized(
                    source, output, max_abs_error=max_abs_error, overwrite=overwrite,
                    progress=progress,
                )
            except (QuantizationError, TypeError, ValueError, FileNotFoundError) as e:
                bar.stop()
                fail(one_line(e))
            except KeyboardInterrupt as e:
                bar.stop()
                fail(f"interrupted: {one_line(e) or 'quantize stopped'}", 130)
        plan = report.plan
        if as_json:
            typer.echo(json.dumps({
                "source": str(path),
                "output": str(out),
                "dtype": str(plan.dtype),
                "stored_dtype": str(plan.stored_dtype),
                "scale": plan.scale,
                "offset": plan.offset,
                "reserved": {str(k): v for k, v in plan.reserved.items()},
                "source_bytes": report.source_bytes,
                "output_bytes": report.output_bytes,
                "size_ratio": report.size_ratio,
                "worst_error": report.worst_error,
                "max_abs_error": max_abs_error,
            }, default=float))
            return
        table = Table(title=f"{path} -> {out} (quantized)")
        table.add_column("")
        table.add_column("value", justify="right")
        table.add_row("stored as", f"{plan.stored_dtype} (from {plan.dtype})")
        table.add_row("scale / offset", f"{plan.scale!r} / {plan.offset!r}")
        table.add_row("reserved codes", ", ".join(f"{k}={v}" for k, v in plan.reserved.items()))
        table.add_row("source bytes", f"{report.source_bytes:,}")
        table.add_row("output bytes", f"{report.output_bytes:,}")
        table.add_row("size ratio", f"{report.size_ratio:.2f}x smaller")
        table.add_row("worst error", f"{report.worst_error:.6g} (bound {max_abs_error:g})")
        console.print(table)
        console.print(
            f"size ratio {report.size_ratio:.3f}; worst error seen {report.worst_error!r}"
        )
