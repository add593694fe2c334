"""Commands on an icechunk repository: PATH read at a branch or snapshot, a job that
writes run in one session and committed as one snapshot.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
import zarr
from zarr.errors import NodeNotFoundError

from zarrext.cli.failures import ExitCode, fail
from zarrext.cli.options import (
    ICECHUNK_BRANCH,
    ICECHUNK_SNAPSHOT_HELP,
    SessionPath,
    icechunk_snapshot_option,
)
from zarrext.errors import naming_codec_holder
from zarrext.stores import local_path, parse_storage_options

__all__ = [
    "in_icechunk",
    "is_icechunk_repository",
    "LOCAL_REPOSITORY_NOTE",
    "open_in_session",
]


LOCAL_REPOSITORY_NOTE = (
    "{path} is an icechunk repository in a local directory, which icechunk says is not "
    "safe for concurrent commits: a commit another writer makes to branch {branch} at the "
    "same time as this job's can be lost; let one writer commit at a time, or keep the "
    "repository in object storage (s3://, gs://)"
)
"""The line a job committing to a local repository says (icechunk's own warning, in the
CLI's words, once, where the user acts)."""


# The two warnings icechunk's Rust logger prints (several lines each, straight to
# stderr, not through Python's warnings) when it opens a repository in a local
# directory: that such storage is not safe for concurrent commits, which the CLI says
# itself (LOCAL_REPOSITORY_NOTE) to a job that commits; and that lost-response recovery
# of conditional writes is off, about network failures a local disk does not have.
# Only these two sources are lowered to errors, and only while a command on a local
# repository runs; ICECHUNK_LOG, icechunk's own setting, wins over this.
_LOCAL_REPOSITORY_LOGS = "warn,icechunk_arrow_object_store=error,icechunk_storage::readback=error"


# On a repository in object storage, the AWS SDK's configuration loader (aws_config)
# warns at each step of its search for a region and credentials that finds nothing
# ("failed to load region from IMDS", "provider failed to provide credentials", 3-7
# lines before the command's own error, which says what is missing). Only that search
# is lowered to errors: icechunk's own warnings, about the data's safety among them,
# are kept.
_REMOTE_REPOSITORY_LOGS = "warn,aws_config=error"


@contextlib.contextmanager
def _repository_logs(local: bool) -> Iterator[None]:
    import icechunk

    if "ICECHUNK_LOG" in os.environ:
        yield
        return
    icechunk.set_logs_filter(_LOCAL_REPOSITORY_LOGS if local else _REMOTE_REPOSITORY_LOGS)
    try:
        yield
    finally:
        icechunk.set_logs_filter(None)  # icechunk's default (or ICECHUNK_LOG) again


def in_icechunk(
    job: str,
    *,
    settings: Sequence[str] = (),
    writes: Callable[[Mapping[str, Any]], bool] = lambda arguments: False,
    snapshot_help: str | None = ICECHUNK_SNAPSHOT_HELP,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command ``--icechunk-branch`` and ``--icechunk-snapshot``.

    ``snapshot_help`` is ``--icechunk-snapshot``'s help on this command (saying
    when a command that can write takes it); None for a command that always
    writes, which has no ``--icechunk-snapshot``.

    With either option, the command's PATH is an icechunk repository: the command
    runs on a session's store (a :class:`SessionPath` in place of PATH, which
    :func:`open_node` opens). A command that ``writes`` (given its arguments) runs
    in one writable session of the branch and commits one snapshot when it
    succeeds, with a message naming the job and its ``settings`` (argument names);
    when it fails, nothing is committed. A conflicting commit is one line.
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        options = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=None,
                annotation=Annotated[str | None, option],
            )
            for name, option in (
                ("icechunk_branch", ICECHUNK_BRANCH),
                ("icechunk_snapshot",
                 None if snapshot_help is None else icechunk_snapshot_option(snapshot_help)),
            )
            if option is not None
        ]

        @functools.wraps(command)
        def run(
            *args: Any,
            icechunk_branch: str | None = None,
            icechunk_snapshot: str | None = None,
            **kwargs: Any,
        ) -> Any:
            if icechunk_branch is None and icechunk_snapshot is None:
                return command(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
            if icechunk_branch is not None and icechunk_snapshot is not None:
                fail("give --icechunk-branch or --icechunk-snapshot, not both", ExitCode.USAGE)
            writing = writes(arguments)
            if writing and icechunk_snapshot is not None:
                fail(
                    f"{job} writes, and snapshots are never changed: give --icechunk-branch "
                    "to commit a new snapshot to a branch",
                    2,
                )
            from zarrext._extras import needs

            with needs("icechunk", f"zarrext {job} --icechunk-branch"):
                import icechunk  # noqa: F401
            path = str(arguments["path"])
            local = local_path(path) is not None
            with _repository_logs(local):
                return _in_repository(
                    command, bound, job, settings, path, writing, local,
                    icechunk_branch, icechunk_snapshot,
                )

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(), *options]
        )
        return run

    return decorate


def _in_repository(
    command: Callable[..., Any],
    bound: inspect.BoundArguments,
    job: str,
    settings: Sequence[str],
    path: str,
    writing: bool,
    local: bool,
    icechunk_branch: str | None,
    icechunk_snapshot: str | None,
) -> Any:
    """Run ``command`` on the repository at ``path`` (see :func:`in_icechunk`)."""
    from zarrext.cli._warnings import note
    from zarrext.jobs.transactions import job_message, open_repository, read_session, transaction

    arguments = bound.arguments
    repo = open_repository(
        path, storage_options=parse_storage_options(arguments.get("storage_options"))
    )
    if not writing:
        session = read_session(
            repo, branch=icechunk_branch, snapshot=icechunk_snapshot, where=path
        )
        arguments["path"] = SessionPath(path, session.store)
        return command(*bound.args, **bound.kwargs)
    assert icechunk_branch is not None
    chosen = {name: arguments[name] for name in settings}
    message = job_message(job, chosen)
    with transaction(
        repo, icechunk_branch, message, where=path,
        metadata={"job": job, "settings": chosen},
    ) as done:
        arguments["path"] = SessionPath(path, done.store)
        result = command(*bound.args, **bound.kwargs)
        if local and done.session.has_uncommitted_changes:  # said when it is about to commit
            # said even with -q: icechunk's warning about the data's safety is never
            # silenced, only put in the CLI's words (errors and this note with -q)
            note(LOCAL_REPOSITORY_NOTE.format(path=path, branch=icechunk_branch), quiet=False)
    if not arguments.get("quiet"):
        said = (
            f"committed snapshot {done.snapshot_id} to branch {icechunk_branch}"
            if done.snapshot_id is not None
            else f"nothing changed: no snapshot committed to branch {icechunk_branch}"
        )
        typer.echo(f"zarrext: {said} ({message})", err=True)
    return result


def is_icechunk_repository(path: Path) -> bool:
    # An icechunk repository's root holds a `repo` object and `snapshots/`.
    return (path / "repo").is_file() and (path / "snapshots").is_dir()


def open_in_session(path: SessionPath, mode: str) -> zarr.Array | zarr.Group:
    try:
        with naming_codec_holder(store=str(path)):
            node = zarr.open(path.store, mode=mode)  # type: ignore[arg-type]
    except (NodeNotFoundError, FileNotFoundError):
        fail(f"{path}: the icechunk snapshot holds no Zarr array or group at its root")
    if node.metadata.zarr_format != 3:
        fail(f"{path}: Zarr format 2 nodes are not supported by zarrext")
    return node
