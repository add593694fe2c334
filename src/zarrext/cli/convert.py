"""``zarrext convert PATH --out OUT``: copy an array or group into zarrext's encodings."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zarrext.cli._decision import decision_option
from zarrext.cli.failures import ExitCode, fail, failure, named_by_path, one_line
from zarrext.cli.icechunk import in_icechunk
from zarrext.cli.opening import refuse_non_zarr_file
from zarrext.cli.options import (
    OUT_OPTIONS,
    QUIET_HELP,
    SNAPSHOT_WITH_DRY_RUN,
    STORAGE_OPTIONS,
    SessionPath,
    storage_options_of,
)
from zarrext.cli.scheduler import SCHEDULER, dask_client
from zarrext.jobs.inspection import size_change

CONVERT_DECISION = decision_option(" Default: --like's, else compress_if_smaller.")

_LAYOUTS = {"fixed-slot": "fixed-slot", "append": "append", "dense": None}


def _shape(option: str, text: str | None) -> tuple[int, ...] | None:
    """``64,64`` as a shape; a bad one is a usage error (exit 2), before any read."""
    if text is None:
        return None
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(n <= 0 for n in shape):
        fail(f"{option} {text!r}: give positive integers separated by commas, e.g. 64,64",
             ExitCode.USAGE)
    return shape


def _codecs(text: str | None) -> list[dict[str, Any]] | None:
    if text is None:
        return None
    try:
        chain = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"--codecs: not JSON ({e})", ExitCode.USAGE)
    if isinstance(chain, dict):
        chain = [chain]
    if not isinstance(chain, list) or not all(isinstance(c, dict) for c in chain):
        fail('--codecs: give a JSON list of codecs, e.g. [{"name": "bytes"}, '
             '{"name": "zstd"}]', ExitCode.USAGE)
    return chain


@contextmanager
def _bars(console: Console) -> Iterator[tuple[Any, Any]]:
    """``progress(name, done, total)`` and ``scanning(name, done, total)``, drawing one
    bar per array's write units (and one per quantized array's scan), from the first, on
    ``console`` (stderr: stdout keeps the report)."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console,
                   # stdout keeps the report; on a file or pipe, no bar at all
                   disable=not console.is_interactive)
    tasks: dict[tuple[str, str], Any] = {}

    def drawn(verb: str) -> Any:
        def progress(name: str, done: int, total: int) -> None:
            if not tasks:
                bar.start()
            if (verb, name) not in tasks:
                what = "the array" if name in ("", "/") else name
                tasks[verb, name] = bar.add_task(f"{verb} {what}", total=total)
            bar.update(tasks[verb, name], completed=done, total=total)

        return progress

    try:
        yield drawn("converting"), drawn("scanning the value range of")
    finally:
        if tasks:
            bar.stop()


def _report_json(report: Any) -> dict[str, Any]:
    ratio = report.size_ratio
    return {
        "path": report.path,
        "becomes": report.becomes,
        "source_bytes": report.source_bytes,
        "output_bytes": report.output_bytes,
        "size_ratio": ratio if math.isfinite(ratio) else None,
        "seconds": report.seconds,
        "write_units": report.units,
        "total_write_units": report.total_units,
        "worst_error": report.worst_error,
    }


def _table(reports: list[Any], title: str, dry_run: bool) -> Table:
    table = Table(title=title)
    table.add_column("array", overflow="fold")
    table.add_column("becomes", overflow="fold")
    table.add_column("bytes before", justify="right")
    table.add_column("expected after" if dry_run else "after", justify="right")
    table.add_column("size", justify="right")
    table.add_column("time", justify="right")
    for r in reports:
        table.add_row(
            r.path or "/", r.becomes, f"{r.source_bytes:,}", f"{r.output_bytes:,}",
            size_change(r.source_bytes, r.output_bytes), f"{r.seconds:.2f} s",
        )
    if dry_run:
        table.caption = (
            "dry run: nothing written; sizes scaled from a sample of each array's "
            "write units"
        )
    return table


def _in_repository(path: SessionPath, inside: str | None, out: str | None,
                   options: str | None) -> tuple[Any, Any, bool]:
    """(source, output, in place) of a conversion in an icechunk repository.

    The output is a path in the branch's writable session; the source is read from
    the snapshot that session started from (a read-only session of it): so a
    conversion in place (--out the source's own path) reads the old arrays while it
    replaces them, and the commit holds the new ones alone.
    """
    import zarr
    from zarr.errors import NodeNotFoundError
    from zarr.storage import StorePath

    from zarrext.jobs.transactions import is_session_store, open_repository
    from zarrext.stores import parse_storage_options

    where = (inside or "").strip("/")
    session = path.store.session
    store = path.store
    if out is not None and is_session_store(store) and not session.read_only:
        repo = open_repository(str(path), storage_options=parse_storage_options(options))
        store = repo.readonly_session(snapshot_id=session.snapshot_id).store
    try:
        zarr.open(StorePath(store, where), mode="r")
    except (NodeNotFoundError, FileNotFoundError):
        fail(f"--icechunk-path {where or '/'}: no Zarr array or group there in {path}",
             ExitCode.USAGE)
    if out is None:
        return StorePath(store, where), None, False
    target = out.strip("/")
    return StorePath(store, where), StorePath(path.store, target), target == where


def register(app: typer.Typer) -> None:
    @app.command()
    @in_icechunk(
        "convert",
        settings=("icechunk_path", "out", "chunks", "shards", "layout", "codecs", "like",
                  "max_abs_error", "arrays", "allow_larger", "overwrite", "keep_attributes",
                  "decision"),
        writes=lambda arguments: not arguments["dry_run"],
        snapshot_help=SNAPSHOT_WITH_DRY_RUN,
    )
    def convert(
        path: Annotated[
            str,
            typer.Argument(help="A Zarr array or group, format 3 or 2 (path, .zip or URL)."),
        ],
        out: Annotated[
            str | None,
            typer.Option("--out", help="Where to write the copy (path, .zip or URL)."),
        ] = None,
        chunks: Annotated[
            str | None,
            typer.Option("--chunks", metavar="SHAPE",
                         help="Chunk shape, e.g. 64,64 (inner chunks with shards). "
                         "Default: the source's."),
        ] = None,
        shards: Annotated[
            str | None,
            typer.Option("--shards", metavar="SHAPE",
                         help="Shard shape, e.g. 256,256 (clipped to each array), 'auto' "
                         "(each array's from its chunks, up to 64 MiB decoded) or 'none'. "
                         "Default: the source's."),
        ] = None,
        layout: Annotated[
            str | None,
            typer.Option("--layout", metavar="LAYOUT",
                         help="Shard layout: fixed-slot, append or dense (default dense; "
                         "fixed-slot and append write a local directory only)."),
        ] = None,
        codecs: Annotated[
            str | None,
            typer.Option("--codecs", metavar="JSON",
                         help="The codecs inside a chunk as zarr's codec JSON. Default: "
                         "conditional([shuffle, zstd]) deciding compress_if_smaller."),
        ] = None,
        like: Annotated[
            str | None,
            typer.Option("--like", metavar="ARRAY",
                         help="Take chunks, shards, codecs, decision and layout from this "
                         "array (path or URL)."),
        ] = None,
        max_abs_error: Annotated[
            float | None,
            typer.Option("--max-abs-error", metavar="E",
                         help="Quantize float arrays within this bound (as quantize)."),
        ] = None,
        decision: Annotated[str | None, CONVERT_DECISION] = None,
        arrays: Annotated[
            list[str] | None,
            typer.Option("--arrays", "--array", metavar="NAME",
                         help="With a group: convert only this array (repeat for more); "
                         "the rest is copied as it is."),
        ] = None,
        overwrite: Annotated[
            bool,
            typer.Option(help="Replace the output that exists when the run starts (local: "
                         "in one step); anything put at --out during the run is left as it "
                         "is and the run fails. An output on an object store is never "
                         "replaced."),
        ] = False,
        allow_larger: Annotated[
            bool,
            typer.Option("--allow-larger",
                         help="Write the copy even when an array's chunks take more bytes "
                         "than the source's (by default nothing is written, exit code 1)."),
        ] = False,
        dry_run: Annotated[
            bool,
            typer.Option("--dry-run", help="Write nothing: encode a sample of each array "
                         "and print the expected size and what it becomes."),
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
        keep_attributes: Annotated[
            bool,
            typer.Option("--keep-attributes",
                         help="Keep a format 2 group's OME-Zarr 0.4 attributes as they are "
                         "(default: upgraded to OME-Zarr 0.5, as Zarr format 3 needs)."),
        ] = False,
        storage_options: Annotated[str | None, STORAGE_OPTIONS] = None,
        out_storage_options: Annotated[str | None, OUT_OPTIONS] = None,
        scheduler: Annotated[str | None, SCHEDULER] = None,
        icechunk_path: Annotated[
            str | None,
            typer.Option("--icechunk-path", metavar="NODE",
                         help="With --icechunk-branch: convert this group or array of the "
                         "repository (a path inside it), not its root."),
        ] = None,
    ) -> None:
        """Copy an array or group into zarrext's encodings (Zarr format 3).

        Every array (or those named with --arrays) is re-encoded: by default
        conditional([shuffle, zstd]) deciding compress_if_smaller, inside the
        source's chunks or shards; --codecs, --chunks, --shards, --layout, --like
        and --max-abs-error name another encoding. Groups, attributes (OME-Zarr,
        CF), dimension names and fill values are kept; consolidated metadata is
        written again. What cannot be converted is named before anything is
        written; a copy larger than its source (by over 5%: a filter it could not
        keep, codecs that compress less) is discarded unless --allow-larger, as
        quantize does. The output is published as quantize publishes its copy: nothing
        opens at --out until it is complete; an existing --out is replaced only
        with --overwrite, and never on an object store; whatever appears at --out
        during the run is never replaced. With --icechunk-branch,
        PATH is a repository and --out a path inside it: the conversion is one
        commit; --out the source's own path (the root: /) converts in place,
        replacing the arrays in that commit (earlier snapshots keep the old ones).
        """
        from zarrext.jobs.convert.converting import convert as run
        from zarrext.jobs.convert.reports import ArraySelectionError
        from zarrext.jobs.outputs import OutputConflictError
        from zarrext.stores import local_path, parse_storage_options

        if out is None and not dry_run:
            fail("give --out (where to write the copy), or --dry-run", ExitCode.USAGE)
        if layout is not None and layout not in _LAYOUTS:
            fail(f"--layout {layout!r}: give fixed-slot, append or dense", ExitCode.USAGE)
        if max_abs_error is not None and not (math.isfinite(max_abs_error) and max_abs_error > 0):
            fail(f"--max-abs-error {max_abs_error!r}: give a finite number > 0",
                 ExitCode.USAGE)
        source: Any = path
        output: Any = out if out is not None else ""
        in_place = False
        if icechunk_path is not None and not isinstance(path, SessionPath):
            fail("--icechunk-path names a group or array in an icechunk repository: "
                 "add --icechunk-branch (elsewhere, give the group's or array's own path)",
                 ExitCode.USAGE)
        if isinstance(path, SessionPath):
            if scheduler is not None and not dry_run:
                fail("--scheduler: a conversion into an icechunk repository runs in this "
                     "process (leave out --scheduler)", ExitCode.USAGE)
            source, output, in_place = _in_repository(path, icechunk_path, out,
                                                      storage_options)
        local = local_path(path) if not isinstance(path, SessionPath) else None
        if local is not None and not local.exists():
            fail(f"{path}: no such file or directory")
        if local is not None:
            refuse_non_zarr_file(path, local)
        source_options, output_options = storage_options_of(
            path, out, storage_options, out_storage_options)
        console = Console(quiet=as_json or quiet)
        shard_shape: Any = (False if shards == "none" else shards if shards == "auto"
                            else _shape("--shards", shards))
        with dask_client(None if dry_run else scheduler, "convert") as client, \
                _bars(Console(stderr=True, quiet=as_json or quiet)) as (progress, scanning):
            try:
                reports = run(
                    source, output, codecs=_codecs(codecs),
                    chunks=_shape("--chunks", chunks), shards=shard_shape,
                    shard_layout=_LAYOUTS.get(layout or "dense"),  # type: ignore[arg-type]
                    like=like, max_abs_error=max_abs_error, decision=decision, arrays=arrays,
                    overwrite=overwrite or in_place, dry_run=dry_run, progress=progress,
                    scan_progress=scanning, allow_larger=allow_larger,
                    storage_options=(None if isinstance(path, SessionPath)
                                     else parse_storage_options(source_options)),
                    output_storage_options=parse_storage_options(output_options),
                    client=client, ome_upgrade=not keep_attributes,
                )
            except OutputConflictError as e:
                fail(str(e), ExitCode.FAILED)
            except ArraySelectionError as e:
                fail(f"--arrays: {e}", ExitCode.FAILED)
            except (TypeError, ValueError, FileNotFoundError) as e:
                fail(*failure(named_by_path(e, path), [path, out]))
            except KeyboardInterrupt as e:
                fail(f"interrupted: {one_line(e) or 'convert stopped'}", ExitCode.INTERRUPTED)
        upgrade = next((r.ome_upgrade for r in reports if r.ome_upgrade is not None), None)
        if as_json:
            typer.echo(json.dumps({
                "source": path, "output": out, "dry_run": dry_run,
                "arrays": [_report_json(r) for r in reports],
                "ome_upgrade": upgrade.describe() if upgrade is not None else None,
            }))
            return
        title = f"{path} -> {out}" if not dry_run else f"{path} (dry run)"
        console.print(_table(reports, title, dry_run))
        before = sum(r.source_bytes for r in reports)
        after = sum(r.output_bytes for r in reports)
        console.print(f"{before:,} -> {after:,} bytes of chunks ({size_change(before, after)})")
        if upgrade is not None:
            console.print(f"{upgrade.describe()} (--keep-attributes keeps the 0.4 attributes)",
                          markup=False)
