"""What every command shares: opening the store a user named, and failing in one line.

An expected failure (a path that is not a Zarr store, a Zarr format 2 array, bad
metadata, a read-only store, a bad option) ends the command with one line on
stderr saying what went wrong, where, and what to do, and a non-zero exit code;
``zarrext.cli.main`` turns :class:`CliError` and the library's ``ValueError``
and ``OSError`` families into that line. Set ``ZARREXT_TRACEBACK=1`` to see the
traceback instead.

The pieces live by concern: :mod:`zarrext.cli.failures` (exit codes, one-line errors),
:mod:`zarrext.cli.options` (shared options), :mod:`zarrext.cli.icechunk`,
:mod:`zarrext.cli.opening` (the store a user named) and :mod:`zarrext.cli.scheduler`;
this module re-exports them, and ``--decision`` (:mod:`zarrext.cli._decision`), for the
commands.
"""

from __future__ import annotations

from zarrext.cli._decision import DECISION
from zarrext.cli.failures import (
    EXIT_CODES_HELP,
    CliError,
    ExitCode,
    describe,
    fail,
    failure,
    named_by_path,
    one_line,
    run_each,
)
from zarrext.cli.icechunk import (
    LOCAL_REPOSITORY_NOTE,
    in_icechunk,
)
from zarrext.cli.opening import (
    is_sharded,
    iter_arrays,
    open_node,
    refuse_non_zarr_file,
    require_writable,
    require_writable_file,
)
from zarrext.cli.options import (
    ICECHUNK_BRANCH,
    ICECHUNK_SNAPSHOT,
    ICECHUNK_SNAPSHOT_HELP,
    OUT_OPTIONS,
    PATH_HELP,
    QUIET_HELP,
    SNAPSHOT_WITH_DRY_RUN,
    STORAGE_OPTIONS,
    SessionPath,
    icechunk_snapshot_option,
    storage_options_of,
    valid_storage_options,
)
from zarrext.cli.scheduler import (
    SCHEDULER,
    SCHEDULER_TIMEOUT_ENV,
    check_scheduler,
    dask_client,
    scheduler_timeout,
)

__all__ = [
    "DECISION",
    "check_scheduler",
    "CliError",
    "dask_client",
    "describe",
    "EXIT_CODES_HELP",
    "ExitCode",
    "fail",
    "failure",
    "ICECHUNK_BRANCH",
    "ICECHUNK_SNAPSHOT",
    "ICECHUNK_SNAPSHOT_HELP",
    "icechunk_snapshot_option",
    "in_icechunk",
    "is_sharded",
    "iter_arrays",
    "LOCAL_REPOSITORY_NOTE",
    "named_by_path",
    "one_line",
    "open_node",
    "OUT_OPTIONS",
    "PATH_HELP",
    "QUIET_HELP",
    "refuse_non_zarr_file",
    "require_writable",
    "require_writable_file",
    "run_each",
    "SCHEDULER",
    "scheduler_timeout",
    "SCHEDULER_TIMEOUT_ENV",
    "SessionPath",
    "SNAPSHOT_WITH_DRY_RUN",
    "STORAGE_OPTIONS",
    "storage_options_of",
    "valid_storage_options",
]
