"""``zarrext recompress``: every stored chunk rewritten with freshly decided conditional
masks, in place."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from zarrext._text import counted
from zarrext.cli._decision import DECISION
from zarrext.cli.damaged import damaged_json, name_damaged
from zarrext.cli.failures import CliError, fail, run_each
from zarrext.cli.icechunk import in_icechunk
from zarrext.cli.opening import iter_arrays, require_writable
from zarrext.cli.options import PATH_HELP, QUIET_HELP, SNAPSHOT_WITH_DRY_RUN, STORAGE_OPTIONS
from zarrext.cli.scheduler import SCHEDULER, dask_client

__all__ = ["register"]


def register(app: typer.Typer) -> None:
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
                              "damaged": damaged_json(plan.damaged)})
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
    name_damaged(damaged, path)
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
        "damaged": damaged_json(report.damaged),
    }
