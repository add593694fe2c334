"""What every command shares: opening the store a user named, and failing in one line.

An expected failure (a path that is not a Zarr store, a Zarr format 2 array, bad
metadata, a read-only store, a bad option) ends the command with one line on
stderr saying what went wrong, where, and what to do, and a non-zero exit code;
``zarrext.cli.main`` turns :class:`CliError` and the library's ``ValueError``
and ``OSError`` families into that line. Set ``ZARREXT_TRACEBACK=1`` to see the
traceback instead.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import json
import os
import socket
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import urlsplit

import typer
import zarr
from zarr.errors import NodeNotFoundError

from zarrext._text import counted
from zarrext.codecs.decisions import BUILTIN_DECISIONS
from zarrext.errors import MalformedMetadataError, naming_codec_holder, naming_malformed_metadata
from zarrext.jobs.group_metadata import is_staging
from zarrext.jobs.outputs import UNFINISHED as _UNFINISHED
from zarrext.stores import (
    StoreOpenError,
    is_obstore_error,
    local_path,
    open_store,
    parse_storage_options,
    store_error,
)

__all__ = [
    "DECISION",
    "ICECHUNK_BRANCH",
    "ICECHUNK_SNAPSHOT",
    "ICECHUNK_SNAPSHOT_HELP",
    "SNAPSHOT_WITH_DRY_RUN",
    "OUT_OPTIONS",
    "STORAGE_OPTIONS",
    "CliError",
    "EXIT_CODES_HELP",
    "ExitCode",
    "SCHEDULER",
    "SessionPath",
    "check_scheduler",
    "dask_client",
    "fail",
    "failure",
    "in_icechunk",
    "iter_arrays",
    "one_line",
    "open_node",
    "refuse_non_zarr_file",
    "require_writable",
    "valid_storage_options",
    "run_each",
    "storage_options_of",
]


class ExitCode(enum.IntEnum):
    """The exit codes of every command: one per kind of failure."""

    OK = 0
    FAILED = 1
    """The job cannot be done with what it found: not a Zarr store, a damaged chunk,
    an output that exists, a read-only store, nothing to do; the job refused."""
    USAGE = 2
    """The command line is wrong: an unknown option, a bad value, options that do
    not go together, a URL or --storage-options that make no store."""
    UNREACHABLE = 3
    """A store or service cannot be reached or refuses access: the network, the
    credentials, a missing bucket, an object store that does not answer within
    ``ZARREXT_STORE_TIMEOUT``, a Dask scheduler that does not answer."""
    INTERRUPTED = 130
    """Ctrl-C."""


EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 the job failed or refused (not a Zarr store, damaged data, "
    "an existing output, a read-only store); 2 usage (a bad option or value, options "
    "that conflict, a URL or --storage-options that make no store); 3 a store or "
    "service cannot be reached or refuses access (network, credentials, missing bucket, "
    "no answer within ZARREXT_STORE_TIMEOUT, Dask scheduler); 130 interrupted."
)
"""The epilog of ``zarrext --help``."""


class CliError(Exception):
    """An expected failure of a command: its message is the one line the user sees."""

    def __init__(self, message: str, code: int = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.code = int(code)


def fail(message: str, code: int = ExitCode.FAILED) -> NoReturn:
    """End the command with ``message`` on stderr and exit ``code`` (an :class:`ExitCode`)."""
    raise CliError(message, code)


def failure(error: BaseException, locations: Sequence[Any] = ()) -> tuple[str, int]:
    """The one line and the :class:`ExitCode` for an expected error of a command.

    ``locations`` are the stores the command names (PATH, --out): a remote store's
    error (obstore's, a remote file system's ``OSError``) is said naming the one it
    concerns, with what to do, and exits :attr:`ExitCode.UNREACHABLE`.
    """
    if isinstance(error, CliError):
        return str(error), error.code
    if isinstance(error, StoreOpenError):
        return one_line(error), ExitCode.USAGE
    remote = store_error(error, [str(x) for x in locations if x is not None])
    if remote is not None:
        return one_line(remote), ExitCode.UNREACHABLE
    if is_obstore_error(error):
        return _unreachable("the store", error), ExitCode.UNREACHABLE
    return one_line(error) or type(error).__name__, ExitCode.FAILED


def one_line(error: BaseException) -> str:
    """The error and its notes (how far a job got) on one line."""
    parts = (str(error), *getattr(error, "__notes__", ()))
    return "; ".join(" ".join(p.split()) for p in parts if p)


PATH_HELP = "A Zarr array or group: a directory, a .zip archive, or a URL (s3://, gs://, ...)."

def valid_storage_options(text: str | None) -> str | None:
    # Checked while the command line is parsed: bad JSON is a usage error (exit 2),
    # reported before any store is opened.
    try:
        parse_storage_options(text)
    except StoreOpenError as e:
        raise typer.BadParameter(str(e).removeprefix("--storage-options ")) from None
    return text


STORAGE_OPTIONS = typer.Option(
    "--storage-options",
    help="JSON object of options for a URL's store (fsspec's names or obstore's), e.g. "
    '\'{"endpoint_url": "http://host:9000"}\' or \'{"anon": true}\'.',
    callback=valid_storage_options,
)
"""The ``--storage-options`` option every command taking a PATH has."""


OUT_OPTIONS = typer.Option(
    "--out-options", callback=valid_storage_options,
    help="JSON object of options for an --out URL's store (as --storage-options). "
    "Default: --storage-options when --out is a URL; with a local PATH, "
    "--storage-options are --out's alone.",
)
"""The ``--out-options`` option of the commands writing a copy (see :func:`storage_options_of`)."""


def storage_options_of(
    path: str, out: str | None, storage_options: str | None, out_storage_options: str | None
) -> tuple[str | None, str | None]:
    """The storage options of PATH and of --out: ``--storage-options`` are for the
    command's URLs (PATH's; --out's too, unless ``--out-options`` are given)."""
    in_repository = isinstance(path, SessionPath)  # --out is a path inside it
    path_is_url = not in_repository and local_path(path) is None
    out_is_url = not in_repository and out is not None and local_path(out) is None
    if out_storage_options is not None and not out_is_url:
        fail(f"--out-options are for an --out URL, and {out} is not one",
             ExitCode.USAGE)
    if not out_is_url:
        return storage_options, None  # PATH's (refused for a local PATH when it is opened)
    if out_storage_options is not None:
        return storage_options, out_storage_options
    return (storage_options if path_is_url else None), storage_options


def _known_decision(name: str) -> str:
    if name not in BUILTIN_DECISIONS:
        known = ", ".join(BUILTIN_DECISIONS)
        raise typer.BadParameter(f"{name!r} is unknown; choose one of {known}")
    return name


DECISION = typer.Option(
    "--decision",
    help="Built-in decision for the conditional codec(s): "
    + ", ".join(BUILTIN_DECISIONS) + ".",
    callback=_known_decision,
)
"""The ``--decision`` option: one of ``BUILTIN_DECISIONS`` (else exit 2)."""


def _named(value: str | None) -> str | None:
    # An empty name is no branch or snapshot (icechunk would read `main`): usage, exit 2.
    if value is not None and not value.strip():
        raise typer.BadParameter("an empty name; give a branch (e.g. main) or snapshot id")
    return value


ICECHUNK_BRANCH = typer.Option(
    "--icechunk-branch",
    metavar="BRANCH",
    callback=_named,
    help="PATH is an icechunk repository (a directory, s3:// or gs:// URL): read the tip of "
    "BRANCH; a job that writes runs in one session and commits one snapshot to BRANCH. "
    "A repository in a local directory is not safe for concurrent commits (icechunk's "
    "warning): a commit another writer makes meanwhile can be lost; keep the repository "
    "in s3:// or gs:// when anything else commits to BRANCH.",
)
"""``--icechunk-branch``: the commands taking it are decorated with :func:`in_icechunk`."""

ICECHUNK_SNAPSHOT_HELP = "PATH is an icechunk repository: read the snapshot ID."
SNAPSHOT_WITH_DRY_RUN = f"{ICECHUNK_SNAPSHOT_HELP} Only with --dry-run: snapshots never change."


def icechunk_snapshot_option(help: str = ICECHUNK_SNAPSHOT_HELP) -> Any:
    """``--icechunk-snapshot``: read an earlier snapshot of a repository; ``help``
    says when a command that can write takes it."""
    return typer.Option("--icechunk-snapshot", metavar="ID", callback=_named, help=help)


ICECHUNK_SNAPSHOT = icechunk_snapshot_option()
"""``--icechunk-snapshot`` on a command that only reads."""


class SessionPath(str):
    """PATH as the user gave it (for messages) and the icechunk session's store to open."""

    store: Any

    def __new__(cls, text: str, store: Any) -> SessionPath:
        made = super().__new__(cls, text)
        made.store = store
        return made


QUIET_HELP = (
    "Print nothing but errors (and the one warning about data safety: a job committing "
    "to an icechunk repository in a local directory)."
)
"""The help of every command's --quiet/-q."""

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


def open_node(
    path: Path | str, mode: str = "r", storage_options: str | None = None,
    *, format_2: bool = False,
) -> zarr.Array | zarr.Group:
    """Open the Zarr format 3 array or group at ``path``, or fail with one line
    (``format_2``: a format 2 one too, for the jobs that copy it into format 3).

    ``path`` is a local path, a zip archive or a URL; ``storage_options`` is the
    ``--storage-options`` JSON text. A :class:`SessionPath` opens its icechunk
    session's store.
    """
    text = str(path)
    if isinstance(path, SessionPath):
        return _open_in_session(path, mode)
    local = local_path(text)
    if local is not None and not local.exists():
        fail(f"{text}: no such file or directory")
    if local is not None:
        refuse_non_zarr_file(text, local)
    try:
        store = open_store(
            text, mode="r" if mode == "r" else "r+",
            storage_options=parse_storage_options(storage_options),
        )
    except StoreOpenError as e:
        fail(str(e), ExitCode.USAGE)
    if local is None:
        # One request first: a store that cannot be reached fails here, alone (zarr's
        # open asks for three keys at once, and the two left waiting print noise).
        from zarr.core.sync import sync

        try:
            sync(store.exists("zarr.json"))
        except Exception as e:
            fail(_unreachable(text, e), ExitCode.UNREACHABLE)
    try:
        with naming_codec_holder(store=text), naming_malformed_metadata(store):
            node = zarr.open(store, mode=mode)  # type: ignore[arg-type]
    except MalformedMetadataError as e:
        fail(str(e.named_in(text)))
    except json.JSONDecodeError as e:
        fail(f"{text}: malformed Zarr metadata ({e}); fix or restore its zarr.json")
    except (NodeNotFoundError, FileNotFoundError, NotADirectoryError):
        if local is not None and _is_icechunk_repository(local):
            fail(
                f"{text}: an icechunk repository, not a Zarr store; add --icechunk-branch "
                "main (or the branch to use)", 2,
            )
        if local is None and _unfinished(store):
            fail(
                f"{text}: an unfinished output of a zarrext job (it holds "
                f"{_UNFINISHED}), not a Zarr array or group: rerun the job that writes it "
                "(it replaces what is there), or delete it once no zarrext job is writing it"
            )
        fail(
            f"{text}: not a Zarr array or group (no zarr.json); "
            "give the directory holding zarr.json"
        )
    except ValueError:
        raise  # the metadata's (an unknown codec, a bad value), not the store's
    except Exception as e:
        if local is not None:
            raise
        fail(_unreachable(text, e), ExitCode.UNREACHABLE)
    if node.metadata.zarr_format != 3 and not format_2:
        kind = "array" if isinstance(node, zarr.Array) else "group"
        fail(
            f"{text}: a Zarr format 2 {kind}; this command reads Zarr format 3: make a "
            f"format 3 copy with `zarrext convert {text} --out COPY.zarr` (consolidated "
            "stores too; the source stays as it is) and run it on the copy"
        )
    return node


_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # TIFF and BigTIFF


def refuse_non_zarr_file(text: str, local: Path) -> None:
    """Fail in one line on a local file that is no store (a zip archive is one),
    saying what to do with it: a TIFF image is read with tifffile, not opened as Zarr."""
    if not local.is_file() or local.suffix == ".zip":
        return
    try:
        with local.open("rb") as f:
            head = f.read(4)
    except OSError:
        return
    if head in _TIFF_MAGIC or local.suffix.lower() in (".tif", ".tiff"):
        fail(
            f"{text}: a TIFF file, not a Zarr store; zarrext jobs read Zarr: read the image "
            "with tifffile (tifffile.imread, or tifffile.imread(path, aszarr=True) as a "
            "store) and write it with zarrext.create_array (zarrext.formats.tiff.create_kwargs "
            "makes each chunk a TIFF itself)"
        )
    fail(f"{text}: a file, not a Zarr store; give a directory holding zarr.json (or "
         ".zarray, .zgroup), a .zip archive of one, or a URL")


def _unfinished(store: Any) -> bool:
    """Whether an object store's location is an output a zarrext job did not finish."""
    from zarr.core.sync import sync

    try:
        return bool(sync(store.exists(_UNFINISHED)))
    except Exception:  # unreadable now: said as not a Zarr store
        return False


def _is_icechunk_repository(path: Path) -> bool:
    # An icechunk repository's root holds a `repo` object and `snapshots/`.
    return (path / "repo").is_file() and (path / "snapshots").is_dir()


def _open_in_session(path: SessionPath, mode: str) -> zarr.Array | zarr.Group:
    try:
        with naming_codec_holder(store=str(path)):
            node = zarr.open(path.store, mode=mode)  # type: ignore[arg-type]
    except (NodeNotFoundError, FileNotFoundError):
        fail(f"{path}: the icechunk snapshot holds no Zarr array or group at its root")
    if node.metadata.zarr_format != 3:
        fail(f"{path}: Zarr format 2 nodes are not supported by zarrext")
    return node


def _unreachable(location: str, error: BaseException) -> str:
    # obstore's errors and a remote file system's OSError are said by type
    # (zarrext.stores.store_error); other clients have their own (botocore's
    # NoCredentialsError, aiohttp's...): their message, without obstore's dump.
    known = store_error(error, [location]) if location != "the store" else None
    if known is not None:
        return one_line(known)
    said = one_line(error).split(" Debug source:")[0]
    return (
        f"{location}: cannot read the store ({type(error).__name__}: {said}); "
        "check the URL, --storage-options and credentials"
    )


def iter_arrays(
    path: Path | str, mode: str = "r", storage_options: str | None = None
) -> Iterator[zarr.Array]:
    """Every array at ``path``: the array itself, or all arrays of a group, recursively."""
    node = open_node(path, mode, storage_options)
    if isinstance(node, zarr.Array):
        yield node
        return
    try:
        with naming_codec_holder(store=str(path), group=node), \
                naming_malformed_metadata(node.store, node.store_path.path):
            members = sorted(node.members(max_depth=None), key=lambda m: m[0])
    except MalformedMetadataError as e:
        fail(str(e.named_in(str(path))))
    except json.JSONDecodeError as e:
        fail(f"{path}: a member's zarr.json is malformed ({e}); fix or restore it")
    for name, member in members:
        # an earlier zarrext's temporary copy (a whole array under a hidden name) is
        # no array of the group: check reports it as what a killed job left
        if isinstance(member, zarr.Array) and not is_staging(name):
            yield member


def _read_only(path: Path) -> bool:
    # Root ignores permission bits, so a store whose write bits are all clear is read-only too.
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not os.access(path, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def require_writable(path: Path | str, job: str) -> None:
    """Refuse a job that writes when ``path`` (a local store) is read-only.

    A zip archive is read-only for zarrext's jobs; an object store says itself
    whether a write is allowed, when the job writes.
    """
    text = str(path)
    local = local_path(text)
    if local is None:
        return
    if local.suffix == ".zip" and local.is_file():
        fail(
            f"{text}: {job} rewrites the store, and zip archives are read-only for zarrext; "
            "unzip it, run the job on the directory, zip it again"
        )
    if _read_only(local) or (
        local.is_dir() and (local / "zarr.json").exists() and _read_only(local / "zarr.json")
    ):
        fail(f"{text} is read-only: {job} writes into it; make it writable or work on a copy")


def require_writable_file(path: Path) -> None:
    """Refuse an output file whose directory is read-only, before any work is done."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        fail(f"{path}: directory {parent} does not exist")
    if _read_only(parent) or (path.exists() and _read_only(path)):
        fail(f"cannot write {path}: {parent} is read-only; choose another place")


def check_scheduler(address: str, timeout: float = 3.0) -> None:
    """Fail at once when nothing answers at a dask scheduler's ``address``."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls") or parts.hostname is None or parts.port is None:
        fail(f"--scheduler {address}: expected tcp://HOST:PORT", ExitCode.USAGE)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        fail(
            f"cannot reach the dask scheduler at {address}: {reason}; "
            "start it or leave out --scheduler",
            ExitCode.UNREACHABLE,
        )


def _handshake(address: str, timeout: float) -> None:
    """Open and close one Dask connection to ``address``, or raise ``TimeoutError``
    after ``timeout`` seconds: distributed's own ``connect(timeout=...)`` (and so its
    ``Client``) waits forever for a handshake that a listener that is no Dask
    scheduler never sends."""
    import asyncio

    from distributed.comm import connect

    async def once() -> None:
        comm = await connect(address, timeout=timeout)
        await comm.close()

    asyncio.run(asyncio.wait_for(once(), timeout))


SCHEDULER_TIMEOUT_ENV = "ZARREXT_SCHEDULER_TIMEOUT"
"""Seconds to wait for a Dask scheduler's answer (default 30)."""


def scheduler_timeout() -> float:
    """Seconds a command waits for the Dask scheduler to answer: ``$ZARREXT_SCHEDULER_TIMEOUT``
    or 30."""
    text = os.environ.get(SCHEDULER_TIMEOUT_ENV, "")
    try:
        seconds = float(text) if text else 30.0
    except ValueError:
        fail(f"{SCHEDULER_TIMEOUT_ENV}={text!r}: expected a number of seconds", ExitCode.USAGE)
    if not seconds > 0:
        fail(f"{SCHEDULER_TIMEOUT_ENV}={text!r}: expected a number of seconds > 0",
             ExitCode.USAGE)
    return seconds


SCHEDULER = typer.Option(
    help="Address of a dask.distributed scheduler (tcp://HOST:PORT) to run the job on; "
    "its workers reopen the store from the path or URL and --storage-options."
)


@contextlib.contextmanager
def dask_client(scheduler: str | None, command: str) -> Iterator[Any]:
    """A ``dask.distributed`` client of the scheduler at ``scheduler`` (None: no client),
    closed at the end; one line on stderr when dask is missing or nothing answers."""
    if scheduler is None:
        yield None
        return
    from zarrext._extras import needs

    with needs("dask", f"zarrext {command} --scheduler"):
        from dask.distributed import Client

    check_scheduler(scheduler)
    timeout = scheduler_timeout()
    try:
        _handshake(scheduler, timeout)
        client = Client(scheduler, timeout=f"{timeout}s")
    except (OSError, TimeoutError) as e:
        # the port is open, but what listens there is no Dask scheduler (or a busy one)
        fail(
            f"no dask scheduler answered at {scheduler} within {timeout:g} s "
            f"({type(e).__name__}); check the address, or leave out --scheduler "
            f"(set {SCHEDULER_TIMEOUT_ENV} to wait longer)",
            ExitCode.UNREACHABLE,
        )
    try:
        yield client
    finally:
        client.close()


def describe(array: Any) -> str:
    """How an array is named in messages: its path in the store, or the store."""
    return str(array.path or "/")


def is_sharded(array: Any) -> bool:
    """Whether ``array`` is a Zarr format 3 array whose stored objects are shards."""
    from zarr.core.metadata import ArrayV3Metadata

    from zarrext.codecs.chain import CodecChain

    metadata = array.metadata
    return (
        isinstance(metadata, ArrayV3Metadata)
        and CodecChain.from_metadata(metadata).sharding is not None
    )


def run_each[R](
    arrays: Sequence[Any],
    job: Callable[[Any], R],
    *,
    path: Path | str,
    verb: str,
    on_interrupt: str = "",
) -> Iterator[tuple[Any, R]]:
    """Run ``job`` on each array of a group job, yielding ``(array, result)``.

    An array the job must skip (a ``ValueError`` or ``OSError``) is named in one
    line on stderr and the job goes on with the next; once every array was tried,
    the command fails if any was skipped. A single array's error ends the command
    at once, as its own. Ctrl-C notes where the job stopped and how far it got.

    Parameters
    ----------
    arrays : sequence of zarr.Array
    job : callable
        The work on one array; its result is yielded.
    path : Path or str
        The store as the user named it, for messages.
    verb : str
        What the job does, for messages ("compact", "recompress").
    on_interrupt : str
        Said after where Ctrl-C stopped the job (what the store looks like, how to finish).
    """
    skipped = done = 0
    for array in arrays:
        try:
            result = job(array)
        except KeyboardInterrupt as e:
            e.add_note(
                f"{verb} stopped in {describe(array)} after {counted(done, 'finished array')}"
                + (f"; {on_interrupt}" if on_interrupt else "")
            )
            raise
        except (ValueError, OSError) as e:
            if len(arrays) == 1:
                raise
            print(f"zarrext: skipped {describe(array)}: {one_line(e)}", file=sys.stderr)
            skipped += 1
            continue
        done += 1
        yield array, result
    if skipped:
        fail(f"{skipped} of {counted(len(arrays), 'array')} under {path} "
             f"{'was' if skipped == 1 else 'were'} skipped by {verb} (see above)")


def named_by_path(error: BaseException, path: Any) -> BaseException:
    """A chunk's decode error, or an unknown codec's, with its array named from the
    PATH the user gave (the library names it by its path in the store, ``'/'`` for
    the store's root)."""
    from zarrext.errors import ChunkDecodeError, CodecUnavailableError

    named: BaseException
    if isinstance(error, MalformedMetadataError) and error.store is None and isinstance(
        path, str
    ):
        named = error.named_in(path)
    elif isinstance(error, CodecUnavailableError) and error.store is None and isinstance(
        path, str
    ):
        named = CodecUnavailableError(error.reason, array=error.array, store=path,
                                      codec=error.codec)
    elif not isinstance(error, ChunkDecodeError) or not isinstance(path, str):
        return error
    else:
        inside = (error.array or "").strip("/")
        array = f"{path.rstrip('/')}/{inside}" if inside else path
        key = error.key
        if key is not None and inside and key.startswith(f"{inside}/"):
            key = key[len(inside) + 1 :]  # the key within the array just named
        named = ChunkDecodeError(error.reason, array=array, key=key, codec=error.codec,
                                 inner=error.inner)
    for note in getattr(error, "__notes__", ()):  # how far the job got, what it left
        named.add_note(note)
    return named
