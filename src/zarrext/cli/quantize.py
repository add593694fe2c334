"""``zarrext quantize PATH --max-abs-error E --out PATH2``: copy float arrays quantized."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
import zarr
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zarrext.cli.failures import ExitCode, fail, failure, named_by_path, one_line
from zarrext.cli.icechunk import in_icechunk
from zarrext.cli.opening import open_node
from zarrext.cli.options import (
    OUT_OPTIONS,
    QUIET_HELP,
    STORAGE_OPTIONS,
    SessionPath,
    storage_options_of,
)
from zarrext.cli.scheduler import SCHEDULER, dask_client
from zarrext.jobs.inspection import size_change


def _positive_bound(value: float) -> float:
    # Checked while the command line is parsed: a bad bound is a usage error (exit 2),
    # reported before any data is read.
    if not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value!r} must be a finite number > 0, e.g. 0.01")
    return value


@contextmanager
def _bars(console: Console) -> Iterator[Any]:
    """``progress(name, phase, done, total)`` drawing one bar per (array, phase).

    Bars appear with the first block read, so a refusal before any work (an
    existing --out, say) prints no bar.
    """
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_interactive,  # stdout keeps the report; no bar in a pipe
    )
    tasks: dict[tuple[str, str], Any] = {}
    verbs = {"scan": "scanning value range", "copy": "writing quantized blocks"}

    def progress(name: str, phase: str, done: int, total: int) -> None:
        if not tasks:
            bar.start()
        if (name, phase) not in tasks:
            label = verbs.get(phase, phase) + (f" of {name}" if name else "")
            tasks[name, phase] = bar.add_task(label, total=total)
        bar.update(tasks[name, phase], completed=done, total=total)

    try:
        yield progress
    finally:
        if tasks:  # stopping a bar never started still prints a blank line
            bar.stop()


def _report_json(report: Any) -> dict[str, Any]:
    plan = report.plan
    return {
        "dtype": str(plan.dtype),
        "stored_dtype": str(plan.stored_dtype),
        "scale": plan.scale,
        "offset": plan.offset,
        "reserved": {str(k): v for k, v in plan.reserved.items()},
        "source_bytes": report.source_bytes,
        "output_bytes": report.output_bytes,
        "size_ratio": report.size_ratio,
        "worst_error": report.worst_error,
    }


def _array_table(report: Any, title: str, bound: float) -> Table:
    plan = report.plan
    table = Table(title=title)
    table.add_column("")
    table.add_column("value", justify="right", overflow="fold")
    table.add_row("stored as", f"{plan.stored_dtype} (from {plan.dtype})")
    table.add_row("scale / offset", f"{plan.scale!r} / {plan.offset!r}")
    table.add_row("reserved codes", ", ".join(f"{k}={v}" for k, v in plan.reserved.items()))
    table.add_row("source bytes", f"{report.source_bytes:,}")
    table.add_row("output bytes", f"{report.output_bytes:,}")
    table.add_row("size", size_change(report.source_bytes, report.output_bytes))
    table.add_row("worst error", f"{report.worst_error:.6g} (bound {bound:g})")
    return table


def _group_table(reports: list[Any], title: str, bound: float) -> Table:
    table = Table(title=title)
    table.add_column("array", overflow="fold")
    table.add_column("stored as")
    table.add_column("bytes before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("size", justify="right")
    table.add_column("worst error", justify="right")
    for r in reports:
        table.add_row(
            r.path, f"{r.plan.stored_dtype}", f"{r.source_bytes:,}", f"{r.output_bytes:,}",
            size_change(r.source_bytes, r.output_bytes), f"{r.worst_error:.3g}",
        )
    table.caption = f"bound {bound:g}; every other object copied as it was"
    return table


def _open_in_repository(path: SessionPath, inside: str) -> zarr.Array | zarr.Group:
    """The group or array at ``inside`` in the repository's session, or one line."""
    from zarr.errors import NodeNotFoundError
    from zarr.storage import StorePath

    from zarrext.errors import naming_codec_holder

    where = inside.strip("/")
    try:
        with naming_codec_holder(array=where, store=str(path)):
            node = zarr.open(StorePath(path.store, where), mode="r")
    except (NodeNotFoundError, FileNotFoundError):
        fail(f"--icechunk-path {where or '/'}: no Zarr array or group there in {path}",
             ExitCode.USAGE)
    if node.metadata.zarr_format != 3:
        fail(f"{path}/{where}: Zarr format 2 nodes are not supported by zarrext")
    return node


def register(app: typer.Typer) -> None:
    @app.command()
    @in_icechunk(
        "quantize",
        settings=(
            "icechunk_path", "max_abs_error", "out", "array", "allow_larger", "overwrite"
        ),
        writes=lambda arguments: True,
        snapshot_help=None,
    )
    def quantize(
        path: Annotated[
            str,
            typer.Argument(
                help="A Zarr array of float16/32/64 values, or a group (path, .zip or URL)."
            ),
        ],
        max_abs_error: Annotated[
            float,
            typer.Option(
                "--max-abs-error", callback=_positive_bound,
                help="Every finite value must decode within this error (> 0).",
            ),
        ],
        out: Annotated[
            str,
            typer.Option(
                "--out",
                help="Where to write the quantized copy (path, .zip or URL; with "
                "--icechunk-branch, a path inside the repository).",
            ),
        ],
        array: Annotated[
            list[str] | None,
            typer.Option(
                "--array",
                metavar="ARRAY",
                help="With a group: quantize only this array (a path in the group; "
                "repeat for more). Default: every floating-point array. The rest of the "
                "group is copied as it is: to copy less, give a subgroup's path (in an "
                "icechunk repository, --icechunk-path).",
            ),
        ] = None,
        allow_larger: Annotated[
            bool,
            typer.Option(
                "--allow-larger",
                help="Write the copy even when its chunks take more bytes than the source's "
                "(by default nothing is written and the exit code is 1).",
            ),
        ] = False,
        overwrite: Annotated[
            bool,
            typer.Option(
                help="Replace the array or group at --out (a directory or .zip) that exists "
                "when the run starts; anything put there during the run is left as it is "
                "and the run fails. An output on an object store is never replaced: write "
                "to a new prefix.",
            ),
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the plan and the result as JSON.")
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help=QUIET_HELP)
        ] = False,
        storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
        out_storage_options: Annotated[str | None, OUT_OPTIONS] = None,
        scheduler: Annotated[str | None, SCHEDULER] = None,
        icechunk_path: Annotated[
            str | None,
            typer.Option(
                "--icechunk-path",
                metavar="NODE",
                help="With --icechunk-branch: quantize this group or array of the "
                "repository (a path inside it, e.g. clim or clim/temp), not its root.",
            ),
        ] = None,
    ) -> None:
        """Copy float arrays stored as integers (scale_offset + cast_value) within a bound.

        A group is copied whole: its floating-point arrays (or those named with
        --array) quantized, every other object as it was. Bytes are those of stored
        chunks, as info and inspect count them (zarr.json not included). Groups
        holding consolidated metadata, in the copy and above --out, are
        consolidated again.

        On an object store a new --out is written once, its zarr.json last (nothing
        opens there until the copy is complete), and an existing one is never
        replaced, even with --overwrite (it would not stay readable until the new
        one is complete): write to a new prefix. A rerun after a killed run
        replaces what that run left. With --icechunk-branch, PATH is a
        repository and --out a path inside it; the copy is one commit (a group
        copy then leaves --out itself out). The copy is of the repository's root
        group, or of the group or array named by --icechunk-path: only that.
        """
        from zarr.storage import StorePath

        from zarrext import quantize as jobs
        from zarrext.stores import parse_storage_options

        # Opened once here for one-line errors (missing, not Zarr); the
        # store goes to the job, so a URL's storage options reach it.
        source_options, output_options = storage_options_of(path, out, storage_options,
                                                            out_storage_options)
        if icechunk_path is not None and not isinstance(path, SessionPath):
            fail("--icechunk-path names a group or array in an icechunk repository: "
                 "add --icechunk-branch (elsewhere, give the group's or array's own path)",
                 ExitCode.USAGE)
        node = (
            _open_in_repository(path, icechunk_path)
            if isinstance(path, SessionPath) and icechunk_path is not None
            # a format 2 source too: its copy is format 3, as convert makes it
            else open_node(path, storage_options=source_options, format_2=True)
        )
        if isinstance(node, zarr.Group):
            try:
                jobs.floating_arrays(node, array)
            except ValueError as e:
                # what the group holds, as for `quantize GROUP/ARRAY`: the job refuses
                said = named_by_path(e, path)
                fail(str(said) if array is None else f"--array: {said}", ExitCode.FAILED)
        elif array:
            fail(f"--array names arrays of a group, and {path} is an array", ExitCode.USAGE)
        # In a repository the node may be a group or array below its root: a StorePath.
        source: object = node.store_path if isinstance(path, SessionPath) else node.store_path.store
        output: object = out
        if isinstance(path, SessionPath):  # --out is a path inside the repository
            output = StorePath(path.store, out.strip("/"))
        console = Console(quiet=as_json or quiet)
        options: dict[str, Any] = {
            "max_abs_error": max_abs_error, "overwrite": overwrite, "allow_larger": allow_larger,
            "storage_options": parse_storage_options(output_options),
        }
        bars = Console(stderr=True, quiet=as_json or quiet)
        with dask_client(scheduler, "quantize") as client, _bars(bars) as progress:
            try:
                if isinstance(node, zarr.Group):
                    reports = jobs.copy_group_quantized(
                        source, output, arrays=array, progress=progress, client=client,
                        **options,
                    )
                else:
                    reports = [
                        jobs.copy_quantized(
                            source, output, client=client,
                            progress=lambda phase, done, total: progress("", phase, done, total),
                            **options,
                        )
                    ]
            except (TypeError, ValueError, FileNotFoundError) as e:
                fail(*failure(named_by_path(e, path), [path, out]))
            except KeyboardInterrupt as e:
                fail(f"interrupted: {one_line(e) or 'quantize stopped'}", 130)
        title = f"{path} -> {out} (quantized)"
        if isinstance(node, zarr.Group):
            if as_json:
                typer.echo(json.dumps({
                    "source": str(path), "output": str(out), "max_abs_error": max_abs_error,
                    "arrays": [{"path": r.path, **_report_json(r)} for r in reports],
                    "ome_upgrade": next((r.ome_upgrade.describe() for r in reports
                                         if r.ome_upgrade is not None), None),
                }, default=float))
                return
            console.print(_group_table(reports, title, max_abs_error))
            upgrade = next((r.ome_upgrade for r in reports if r.ome_upgrade is not None), None)
            if upgrade is not None:
                console.print(upgrade.describe())
            return
        report = reports[0]
        if as_json:
            typer.echo(json.dumps({
                "source": str(path), "output": str(out), **_report_json(report),
                "max_abs_error": max_abs_error,
            }, default=float))
            return
        console.print(_array_table(report, title, max_abs_error))
        console.print(
            f"size ratio {report.size_ratio:.3f}; worst error seen {report.worst_error!r}"
        )
