"""``zarrext compact``, ``zarrext expand`` and ``zarrext check``: jobs on shard files."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
import zarr
from rich.console import Console

from zarrext._text import bytes_text, counted
from zarrext.cli.failures import fail, run_each
from zarrext.cli.icechunk import in_icechunk
from zarrext.cli.opening import require_writable
from zarrext.cli.options import (
    ICECHUNK_SNAPSHOT_HELP,
    PATH_HELP,
    QUIET_HELP,
    SNAPSHOT_WITH_DRY_RUN,
    STORAGE_OPTIONS,
    SessionPath,
)
from zarrext.cli.scheduler import SCHEDULER, dask_client


def _sharded_arrays(path: str, mode: str, storage_options: str | None) -> list[zarr.Array]:
    from zarrext.cli.opening import is_sharded, iter_arrays

    return [
        a for a in iter_arrays(path, mode=mode, storage_options=storage_options) if is_sharded(a)
    ]


def checked_text(array: Any, *, sharded: bool, deep: bool, sizes: Any) -> str:
    """What a check of ``array`` that found nothing looked at, and what it did not:
    ``every chunk validates`` only where every chunk was decoded; and the bytes its
    ``sizes`` (:func:`zarrext.jobs.inspection.inventory`, totals) count, as info and
    inspect count them."""
    from zarr.storage import LocalStore

    n = sizes.store_keys
    noun = "shard" if sharded else "chunk"
    stored = bytes_text(sizes.stored_bytes, sizes.object_bytes)
    if deep:
        return (f"every {noun} validates: {counted(n, noun)} read, every chunk in them "
                f"decoded; {stored}")
    leftovers = (", no interrupted writes left behind"
                 if isinstance(array.store_path.store, LocalStore) else "")
    if sharded:
        done = (f"every shard validates: {counted(n, 'shard index', 'shard indexes')} read, "
                "chunks' byte ranges checked")
    else:
        done = f"{counted(n, 'chunk')} listed"
    return f"{done}{leftovers}; chunk contents not decoded (--deep decodes them); {stored}"


def _print_findings(
    name: str, findings: list[Any], *, sharded: bool, unverified: str | None = None,
    checked: str = "",
) -> None:
    """Each key once, then per problem what it is and what --repair did or can do;
    with ``unverified`` (a deep check of chunks without checksums), why chunks that
    decode are not known to be good; with no findings, ``checked``: what was checked."""
    if unverified is not None:
        typer.echo(f"{name}: cannot verify the chunks that decode: {unverified}")
    elif not findings:
        typer.echo(f"{name}: {checked}")
    for finding in findings:
        typer.echo(f"{name} {finding.key}:")
        _print_problems(finding)


def _print_problems(finding: Any) -> None:
    for problem in finding.details:
        typer.echo(f"  problem: {problem.text}")
        if problem.repaired:
            typer.echo(f"    repaired: {problem.fix}")
        elif problem.fix is not None:
            typer.echo("    --repair fixes this")
        else:
            typer.echo(f"    --repair cannot fix this: {problem.advice}")


def _interrupted_outputs(
    location: str, *, repair: bool, storage_options: str | None = None
) -> list[Any]:
    """The temporary outputs killed jobs left beside and inside a local array or group
    (:func:`zarrext.jobs.outputs.find_leftovers`), as findings of kind ``interrupted_output``
    keyed by their path (as ``location`` is given), saying whose and their size; on an
    object store, the unfinished outputs under it (:func:`_unfinished_remote_outputs`).

    With ``repair``, a killed job's (its process gone, on this host) is removed once
    what its publication had left undone is done (:func:`zarrext.jobs.outputs.remove_leftover`);
    one not provably a killed job's (another host's, an earlier zarrext's) is left,
    with advice; a running job's is not reported. Nothing for a zip archive.
    """
    from zarrext.jobs.outputs import find_leftovers, remove_leftover
    from zarrext.jobs.shards.check_report import ShardCheck
    from zarrext.stores import local_path

    given = local_path(location)
    if given is None:
        return _unfinished_remote_outputs(location, storage_options)
    if given.suffix == ".zip":
        return []
    base = given.parent.resolve()
    found = []
    for leftover in find_leftovers(given):
        if leftover.running:
            continue  # a job at work: nothing left behind (yet)
        finding = ShardCheck((given.parent / leftover.path.relative_to(base)).as_posix())
        removable = leftover.kept is None
        if repair and removable:
            remove_leftover(leftover)
        finding.problem(
            "interrupted_output", leftover.describe(),
            fix="deleted it, its output's publication finished" if removable else None,
            advice=None if removable else (
                f"delete it once no zarrext job is writing {leftover.output.name}"
            ),
            repaired=repair,
        )
        found.append(finding)
    return found


def _unfinished_remote_outputs(location: str, storage_options: str | None) -> list[Any]:
    """The outputs under an object-store ``location`` that a zarrext job did not finish
    (:func:`zarrext.jobs.outputs.find_remote_leftovers`), as findings of kind
    ``interrupted_output`` keyed by their URL. Never removed by --repair: an object
    store keeps no process to ask whether the job that writes one still runs."""
    from zarrext.jobs.outputs import find_remote_leftovers
    from zarrext.jobs.shards.check_report import ShardCheck
    from zarrext.stores import open_store, parse_storage_options

    store = open_store(location, mode="r", storage_options=parse_storage_options(storage_options))
    found = []
    for leftover in find_remote_leftovers(store):
        url = f"{location.rstrip('/')}/{leftover.prefix}" if leftover.prefix else location
        finding = ShardCheck(url)
        finding.problem(
            "interrupted_output", leftover.describe(), fix=None,
            advice=(f"rerun the job that writes {url} (it replaces them), or delete {url} "
                    "once no zarrext job is writing it"),
        )
        found.append(finding)
    return found


def _print_leftovers(findings: list[Any]) -> None:
    """Each temporary output a killed job left (its path): whose, its size, what
    --repair does."""
    for finding in findings:
        typer.echo(f"{finding.key}:")
        _print_problems(finding)


def register(app: typer.Typer) -> None:
    @app.command()
    @in_icechunk(
        "compact", settings=("expand",), writes=lambda a: not a["dry_run"],
        snapshot_help=SNAPSHOT_WITH_DRY_RUN,
    )
    def compact(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        workers: Annotated[
            int | None, typer.Option(min=1, help="Shards rewritten at once.")
        ] = None,
        expand: Annotated[
            bool, typer.Option("--expand", help="Rewrite into fixed slots instead (fast ingest).")
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Say what would be rewritten; write nothing.")
        ] = False,
            quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help=QUIET_HELP)
        ] = False,
        storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
        scheduler: Annotated[str | None, SCHEDULER] = None,
) -> None:
        """Rewrite every shard densely (or, with --expand, into fixed slots), atomically."""
        from zarrext.cli.render import progress_bar
        from zarrext.jobs.shards.compact import READER_NOTE, RewriteReport, rewrite_refusal
        from zarrext.jobs.shards.compact import compact as run_compact
        from zarrext.jobs.shards.compact import expand as run_expand
        from zarrext.jobs.shards.inspect import format_bytes
        from zarrext.sharding.array_shards import ArrayShards

        console = Console(quiet=quiet)
        if dry_run:
            from zarrext.jobs.inspection import inventory

            for array in _sharded_arrays(path, "r", storage_options):
                inv = inventory(array, read_masks=False)
                console.print(
                    f"would {'expand' if expand else 'compact'} {array.path or '/'}: "
                    f"{counted(inv.store_keys, 'shard')}, "
                    f"{bytes_text(inv.stored_bytes, inv.object_bytes)}",
                    highlight=False,
                )
            return
        require_writable(path, "expand" if expand else "compact")
        if expand and scheduler is not None:
            fail("--scheduler: expand runs on this machine (fixed slots are for a local "
                 "directory, written in place); leave out --scheduler", code=2)
        arrays = []
        left = 0
        for array in _sharded_arrays(path, "r+", storage_options):
            refusal = rewrite_refusal(ArrayShards.of(array), "fixed-slot" if expand else "dense")
            if refusal is not None and not expand:  # nothing to compact there: no error
                left += 1
                console.print(f"{array.path or '/'}: left as it is: {refusal}",
                              highlight=False, soft_wrap=True)
            else:  # expand refuses such an array with one line, as any error of the job
                arrays.append(array)
        if not arrays and not left:
            console.print(f"no sharded arrays under {path}")
        verb = "expanding" if expand else "compacting"
        form = "in fixed slots" if expand else "dense"

        def one(array: zarr.Array) -> RewriteReport:
            with progress_bar(f"{verb} {array.path or '/'}", enabled=not quiet) as progress:
                if expand:
                    return run_expand(array, workers=workers, progress=progress)
                return run_compact(array, workers=workers, progress=progress, client=client)

        rewritten = 0
        with dask_client(scheduler, "compact") as client:
            for array, report in run_each(
                arrays, one, path=path,
                verb="expand" if expand else "compact",
                on_interrupt="each shard is replaced whole; rerun the same command to finish",
            ):
                name = array.path or "/"
                rewritten += report.rewritten
                if not report.rewritten:
                    single = report.shards == 1
                    console.print(f"{name}: {counted(report.shards, 'shard')}, "
                                  f"{'' if single else 'all '}already {form}: left as "
                                  f"{'it is' if single else 'they are'}", highlight=False)
                    continue
                what = (
                    f"{counted(report.shards, 'shard')}, {report.rewritten} rewritten "
                    f"({report.unchanged} already {form}, left as they are)" if report.unchanged
                    else f"{counted(report.shards, 'shard')} rewritten"
                )
                # the objects' sizes change; the chunks in them (bytes stored) do not
                console.print(
                    f"{name}: {what}, objects {format_bytes(report.bytes_before)} -> "
                    f"{format_bytes(report.bytes_after)}", highlight=False,
                )
        # after the run: a job that failed or rewrote nothing had no readers to warn
        if rewritten and not isinstance(path, SessionPath):  # icechunk: readers see snapshots
            console.print(f"note: {READER_NOTE}", highlight=False, soft_wrap=True)

    @app.command(name="expand")
    @in_icechunk("expand", writes=lambda a: True, snapshot_help=None)
    def expand_command(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        workers: Annotated[
            int | None, typer.Option(min=1, help="Shards rewritten at once.")
        ] = None,
            quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help=QUIET_HELP)
        ] = False,
        storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
) -> None:
        """Rewrite every shard into fixed slots (fast in-place ingest), atomically."""
        compact(
            path, workers=workers, expand=True, dry_run=False, quiet=quiet,
            storage_options=storage_options,
        )

    @app.command()
    @in_icechunk(
        "check", settings=("repair", "deep"), writes=lambda a: a["repair"],
        snapshot_help=f"{ICECHUNK_SNAPSHOT_HELP} Not with --repair: snapshots never change.",
    )
    def check(
        path: Annotated[str, typer.Argument(help=PATH_HELP)],
        repair: Annotated[
            bool, typer.Option("--repair", help="Roll back interrupted writes, fix what can be.")
        ] = False,
        deep: Annotated[
            bool, typer.Option("--deep", help="Also decode every chunk (checksums, headers).")
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the findings as JSON.")
        ] = False,
            storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
        scheduler: Annotated[str | None, SCHEDULER] = None,
) -> None:
        """Validate every chunk and shard (indexes, bounds, overlaps, interrupted writes)
        and that the fill value survives the filters."""
        from zarrext.cli.opening import is_sharded, iter_arrays
        from zarrext.cli.render import progress_bar
        from zarrext.jobs.inspection import inventory
        from zarrext.jobs.shards.check import check as run_check
        from zarrext.jobs.shards.check import unverifiable

        if repair:
            require_writable(path, "check --repair")
        unrepaired = 0
        report = []
        arrays = list(
            iter_arrays(path, mode="r+" if repair else "r", storage_options=storage_options)
        )
        findings_of = []
        sizes_of = []
        with dask_client(scheduler, "check") as client:
            for array in arrays:
                label = f"check {array.path or '/'}"
                with progress_bar(label, enabled=not as_json) as progress:
                    findings_of.append(run_check(
                        array, repair=repair, deep=deep, client=client, progress=progress
                    ))
                # the bytes as info and inspect count them (after any repair)
                sizes_of.append(inventory(array, read_masks=False, list_chunks=False,
                                          on_damage="mark"))
        for array, findings, sizes in zip(arrays, findings_of, sizes_of, strict=True):
            name = array.path or "/"
            unverified = unverifiable(array) if deep else None
            entry: dict[str, Any] = {
                "array": name, "findings": [f.to_json() for f in findings],
                "stored_bytes": sizes.stored_bytes, "object_bytes": sizes.object_bytes,
            }
            if deep:
                entry["unverified"] = unverified
            report.append(entry)
            unrepaired += sum(1 for f in findings if not f.ok or not repair)
            if not as_json:
                sharded = is_sharded(array)  # run_check refused arrays not in format 3
                checked = "" if findings or unverified is not None else checked_text(
                    array, sharded=sharded, deep=deep, sizes=sizes)
                _print_findings(name, findings, sharded=sharded, unverified=unverified,
                                checked=checked)
        # temporary outputs killed jobs left in the groups (and beside PATH)
        left = [] if isinstance(path, SessionPath) else _interrupted_outputs(
            path, repair=repair, storage_options=storage_options)
        unrepaired += sum(1 for f in left if not f.ok or not repair)
        if as_json:
            typer.echo(json.dumps({"store": str(path), "arrays": report,
                                   "leftovers": [f.to_json() for f in left],
                                   "ok": not unrepaired}))
        else:
            if not arrays:
                typer.echo(f"no arrays under {path}")
            _print_leftovers(left)
        if unrepaired:
            raise typer.Exit(code=1)
