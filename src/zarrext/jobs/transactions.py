"""Jobs as transactions: icechunk repositories, their sessions, one commit per job.

An `icechunk <https://icechunk.io>`_ repository keeps a Zarr store as a history
of snapshots. Readers open a snapshot (a branch's tip, or an older one) and see
it unchanged whatever writers do meanwhile; a writer works in a *session* and
publishes everything it wrote at once with a commit, or nothing. zarrext's jobs
run on a session's store as on any other (``zarrext.open_array(session.store,
path=...)``); this module adds what a job needs around that:

- :func:`open_repository` opens a repository in a local directory or an object
  store (``s3://``, ``gs://``) from the same ``storage_options`` as a URL;
- :func:`read_session` opens a branch or a snapshot for reading,
  :func:`transaction` a branch for one job that commits one snapshot (or, on any
  failure, nothing) and turns a conflicting commit into
  :class:`CommitConflictError`;
- :func:`run_forked` runs one task per fork of a writable session (threads or a
  Dask cluster: forks pickle) and merges the forks back before one commit.

Writes in place are not possible in a repository (each write adds a new chunk to
the next snapshot): the shard layouts ``fixed-slot`` and ``append`` and
``expand`` are refused there, as on every object store.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zarrext._extras import needs
from zarrext.stores import (
    StoreAccessError,
    StoreOpenError,
    classify,
    local_path,
    open_store,
    store_timeout,
)

if TYPE_CHECKING:
    from icechunk import ForkSession, Repository, Session, Storage

__all__ = [
    "CommitConflictError",
    "RepositoryError",
    "Transaction",
    "commit",
    "is_session_store",
    "job_message",
    "open_repository",
    "read_session",
    "repository_storage",
    "run_forked",
    "transaction",
    "writable_session",
]


class RepositoryError(ValueError):
    """A repository, branch or snapshot that does not exist or cannot be opened."""


class CommitConflictError(RepositoryError):
    """Another session committed changes to the same chunks first: nothing was committed."""


def _icechunk(what: str) -> Any:
    with needs("icechunk", what):
        import icechunk
    return icechunk


def _first_line(error: BaseException) -> str:
    # icechunk's messages go on with a Rust span trace ("context: ..."): keep the sentence.
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def is_session_store(store: Any) -> bool:
    """Whether ``store`` is an icechunk session's store (without importing icechunk)."""
    return any(cls.__module__.startswith("icechunk") for cls in type(store).__mro__)


# fsspec's s3fs option names -> icechunk.s3_storage's, so one --storage-options serves both.
_S3_OPTIONS = {
    "endpoint_url": "endpoint_url",
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "region": "region",
    "anon": "anonymous",
}


def _s3_storage(bucket: str, prefix: str, options: Mapping[str, Any]) -> Storage:
    icechunk = _icechunk("an icechunk repository in S3")
    options = dict(options)
    client_kwargs = options.pop("client_kwargs", None) or {}
    options.setdefault("endpoint_url", client_kwargs.get("endpoint_url"))
    options.setdefault("region", client_kwargs.get("region_name"))
    unknown = sorted(set(options) - set(_S3_OPTIONS))
    if unknown:
        raise StoreOpenError(
            f"s3://{bucket}/{prefix}: --storage-options {', '.join(unknown)} cannot be passed "
            f"to an icechunk repository; it takes {', '.join(_S3_OPTIONS)} and client_kwargs "
            "(endpoint_url, region_name)"
        )
    kwargs = {_S3_OPTIONS[k]: v for k, v in options.items() if v is not None}
    endpoint = kwargs.get("endpoint_url")
    if endpoint is not None:
        # S3-compatible servers (MinIO, moto, Ceph) are addressed by path, often over http.
        kwargs.update(allow_http=endpoint.startswith("http://"), force_path_style=True)
    if "access_key_id" not in kwargs and not kwargs.get("anonymous"):
        kwargs["from_env"] = True
    return icechunk.s3_storage(bucket=bucket, prefix=prefix or None, **kwargs)


def repository_storage(
    location: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> Storage:
    """Where the repository at ``location`` lives, as icechunk's ``Storage``.

    Parameters
    ----------
    location : str or PathLike
        A local directory (or ``file://`` URL), ``s3://bucket/prefix`` or
        ``gs://bucket/prefix``.
    storage_options : mapping, optional
        For URLs, the options one gives fsspec for the same place: ``endpoint_url``,
        ``key``, ``secret``, ``token``, ``anon``, ``client_kwargs`` (``region_name``)
        for S3; ``token`` (a service account file) or ``anon`` for Google Cloud
        Storage. Without credentials they come from the environment.

    Raises
    ------
    StoreOpenError
        For storage options with a local path, options icechunk does not take, or a
        URL scheme icechunk has no storage for.
    """
    text = os.fspath(location)
    local = local_path(text)
    if local is not None:
        if storage_options:
            raise StoreOpenError(
                f"{text}: --storage-options are for URLs (s3://, gs://), not local paths"
            )
        return _icechunk("an icechunk repository").local_filesystem_storage(
            str(Path(local).absolute())
        )
    scheme, _, rest = text.partition("://")
    bucket, _, prefix = rest.partition("/")
    options = dict(storage_options or {})
    if scheme in ("s3", "s3a"):
        return _s3_storage(bucket, prefix.strip("/"), options)
    if scheme in ("gs", "gcs"):
        icechunk = _icechunk("an icechunk repository in Google Cloud Storage")
        token = options.pop("token", None)
        anonymous = bool(options.pop("anon", False))
        if options:
            raise StoreOpenError(
                f"{text}: --storage-options {', '.join(sorted(options))} cannot be passed to "
                "an icechunk repository in Google Cloud Storage; it takes token and anon"
            )
        return icechunk.gcs_storage(
            bucket=bucket, prefix=prefix.strip("/") or None, service_account_file=token,
            anonymous=anonymous or None, from_env=None if token or anonymous else True,
        )
    raise StoreOpenError(
        f"{text}: zarrext opens icechunk repositories in local directories, s3:// and "
        f"gs://, not {scheme}://"
    )


def open_repository(
    location: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> Repository:
    """The icechunk repository at ``location`` (see :func:`repository_storage`).

    A repository in object storage gets the bound on a request that every object
    store gets (:data:`zarrext.stores.STORE_TIMEOUT_ENV`, icechunk's
    ``StorageTimeoutSettings.operation_timeout_ms``).

    Raises
    ------
    RepositoryError
        When there is no repository at ``location``.
    StoreAccessError
        When the repository's object store cannot be reached or refuses access
        (no credentials, a missing bucket, no answer within the bound).
    StoreOpenError
        For a bad ``ZARREXT_STORE_TIMEOUT``.
    MissingExtraError
        When icechunk is not installed.
    """
    icechunk = _icechunk("an icechunk repository")
    storage = repository_storage(location, storage_options)
    where = os.fspath(location)
    remote = local_path(where) is None
    # a remote repository's requests get the bound object stores get (icechunk's own
    # default is the AWS SDK's: none, a frozen server is waited for without end)
    timeout = store_timeout() if remote else None
    settings = None if timeout is None else icechunk.StorageSettings(
        timeouts=icechunk.StorageTimeoutSettings(operation_timeout_ms=round(timeout * 1000))
    )
    try:
        found = icechunk.Repository.exists(storage, settings)
    except icechunk.IcechunkError as e:
        if not remote:
            raise RepositoryError(
                f"{where}: cannot reach the icechunk repository ({_first_line(e)})"
            ) from e
        cause, what, todo = classify(e, where, timeout)
        raise StoreAccessError(
            f"{where}: cannot reach the icechunk repository: "
            f"{_first_line(e) if cause == 'other' else what}; {todo}", where, cause,
        ) from e
    if not found:
        missing = _missing_bucket(where, storage_options) if remote else None
        if missing is not None:
            raise missing
        inside = _repository_above(location)
        raise RepositoryError(
            f"{os.fspath(location)}: no icechunk repository here; "
            + (
                f"it is the path {inside[1]} inside the repository {inside[0]}: give that "
                f"as PATH (quantize takes --icechunk-path {inside[1]})"
                if inside else "give the directory or URL the repository was created at "
                "(icechunk.Repository.create)"
            )
        )
    if settings is None:
        return icechunk.Repository.open(storage)
    # merged with the repository's own configuration: only the timeouts change
    return icechunk.Repository.open(storage, config=icechunk.RepositoryConfig(storage=settings))


def _missing_bucket(
    location: str, storage_options: Mapping[str, Any] | None
) -> StoreAccessError | None:
    """The error naming the missing bucket of ``location``, if it is missing (icechunk
    answers that no repository is there)."""
    from zarr.core.sync import sync

    try:
        store = open_store(location, storage_options=storage_options)
        sync(store.exists("zarr.json"))  # zarrext's object store asks for the bucket
    except StoreAccessError as e:
        return e if e.cause == "missing bucket" else None
    except Exception:  # the repository's question was answered: no better one here
        return None
    return None


def _repository_above(location: str | os.PathLike[str]) -> tuple[str, str] | None:
    """(repository, path inside it) when a local ``location`` lies inside a repository."""
    local = local_path(os.fspath(location))
    if local is None:
        return None
    path = Path(local).absolute()
    for parent in path.parents:
        # An icechunk repository's root holds a `repo` object and `snapshots/`.
        if (parent / "repo").is_file() and (parent / "snapshots").is_dir():
            return str(parent), path.relative_to(parent).as_posix()
    return None


def _unknown_ref(repo: Repository, error: Exception, what: str, where: str) -> RepositoryError:
    branches = ", ".join(sorted(repo.list_branches()))
    return RepositoryError(
        f"{where}: the icechunk repository has no {what} ({_first_line(error)}); "
        f"its branches: {branches}"
    )


def read_session(
    repo: Repository,
    *,
    branch: str | None = None,
    snapshot: str | None = None,
    where: str = "repository",
) -> Session:
    """A read-only session on the tip of ``branch`` or on ``snapshot`` (default: ``main``).

    Raises
    ------
    RepositoryError
        When the branch or snapshot does not exist; ``where`` names the repository.
    """
    icechunk = _icechunk("an icechunk repository")
    if branch is not None and snapshot is not None:
        raise ValueError(f"{where}: give a branch or a snapshot, not both")
    try:
        if snapshot is not None:
            return repo.readonly_session(snapshot_id=snapshot)
        return repo.readonly_session(branch=branch or "main")
    except (icechunk.NotFoundError, icechunk.InvalidInputError) as e:
        what = f"snapshot {snapshot!r}" if snapshot is not None else f"branch {branch or 'main'!r}"
        raise _unknown_ref(repo, e, what, where) from e


def writable_session(repo: Repository, branch: str, *, where: str = "repository") -> Session:
    """A writable session on ``branch`` (a :class:`RepositoryError` if there is none)."""
    icechunk = _icechunk("an icechunk repository")
    try:
        return repo.writable_session(branch)
    except icechunk.NotFoundError as e:
        raise _unknown_ref(repo, e, f"branch {branch!r}", where) from e


def job_message(job: str, settings: Mapping[str, Any]) -> str:
    """A commit message naming the job and its settings, as on the command line.

    >>> job_message("recompress", {"decision": "compress_if_smaller", "dry_run": False})
    'zarrext recompress --decision compress_if_smaller'
    >>> job_message("quantize", {"out": "my q", "array": ["clim/temp", "clim/pr"]})
    "zarrext quantize --out 'my q' --array clim/temp --array clim/pr"
    """
    words = ["zarrext", job]
    for name, value in settings.items():
        option = "--" + name.replace("_", "-")
        if value is True:
            words.append(option)
        elif isinstance(value, list | tuple):  # a repeated option, once per value
            for each in value:
                words += [option, str(each)]
        elif value is not None and value is not False:
            words += [option, str(value)]
    return shlex.join(words)


def commit(session: Session, message: str, *, where: str = "repository", **metadata: Any) -> str:
    """Commit ``session`` as one snapshot; its id.

    Another session may have committed to the branch since this one began: its
    changes are kept under ours when they touch other chunks (icechunk's
    ``ConflictDetector`` rebase); when both changed the same chunk or array,
    nothing is committed.

    Raises
    ------
    CommitConflictError
        When another session changed the same chunks or arrays first; the branch
        is left as that session made it.
    """
    icechunk = _icechunk("an icechunk commit")
    try:
        return str(
            session.commit(
                message, metadata=metadata or None, rebase_with=icechunk.ConflictDetector()
            )
        )
    except icechunk.ConflictError as e:
        conflicts = "; ".join(
            f"{c.path}: {c.conflict_type}".replace("ConflictType.", "")
            for c in getattr(e, "conflicts", ()) or ()
        )
        raise CommitConflictError(
            f"{where}: another session committed to branch {session.branch} first and changed "
            f"what this job changed ({conflicts or _first_line(e)}); nothing was committed, "
            "the branch is as that session left it: run the job again"
        ) from e


@dataclass
class Transaction:
    """A job's writable session: its store, and after the commit, the snapshot.

    Attributes
    ----------
    session : icechunk.Session
    message : str
        The commit message.
    snapshot_id : str or None
        The snapshot committed; None until then, and when the job changed nothing
        (no empty snapshot is committed).
    metadata : dict
        Stored with the commit (icechunk's commit metadata).
    """

    session: Session
    message: str
    snapshot_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def store(self) -> Any:
        """The session's zarr store: open arrays on it as on any store."""
        return self.session.store


@contextmanager
def transaction(
    repo: Repository,
    branch: str,
    message: str,
    *,
    where: str = "repository",
    metadata: Mapping[str, Any] | None = None,
) -> Iterator[Transaction]:
    """Run the ``with`` block in one writable session of ``branch``; commit it at the end.

    The block writes through ``transaction.store``. When it returns, everything
    it wrote is committed as one snapshot (``transaction.snapshot_id``); when it
    raises (Ctrl-C included), nothing is: the branch and every snapshot stay as
    they were and the session's changes are dropped.

    Raises
    ------
    RepositoryError
        When ``branch`` does not exist.
    CommitConflictError
        See :func:`commit`.
    """
    session = writable_session(repo, branch, where=where)
    done = Transaction(session, message, metadata=dict(metadata or {}))
    try:
        yield done
    except BaseException:
        session.discard_changes()
        raise
    if session.has_uncommitted_changes:
        done.snapshot_id = commit(session, message, where=where, **done.metadata)


def run_forked[T](
    session: Session,
    function: Callable[[ForkSession, T], ForkSession],
    tasks: Iterable[T],
    *,
    executor: Any = None,
) -> None:
    """Run ``function(fork, task)`` for each task on a fork of ``session``, then merge.

    Each task gets its own fork of the writable ``session`` (``session.fork()``),
    writes through ``fork.store`` and returns the fork; the forks' changes are
    merged into ``session``, which the caller commits once (:func:`commit`, or
    the end of a :func:`transaction`). Tasks must write disjoint chunks.

    Parameters
    ----------
    session : icechunk.Session
        A writable session; it must have no uncommitted changes (icechunk forks
        only a clean session).
    function : callable
        ``function(fork, task) -> fork``. On a cluster it runs on the workers: a
        function importable there, and picklable tasks.
    tasks : iterable
    executor : optional
        Anything with ``submit(function, *args)`` returning futures with
        ``result()``: a ``concurrent.futures`` executor, or a
        ``dask.distributed.Client`` (forks pickle to its workers and back).
        None runs the tasks one by one here.

    Raises
    ------
    Exception
        The first task's error; then nothing is merged (the other tasks' writes
        are dropped with their forks) and ``session`` is as it was.
    """
    items = list(tasks)
    if executor is None:
        forks = [function(session.fork(), task) for task in items]
    else:
        futures = [_submit(executor, function, session.fork(), task) for task in items]
        forks = [future.result() for future in futures]
    for fork in forks:
        if not is_session_store(getattr(fork, "store", None)):
            raise TypeError(
                f"run_forked: {getattr(function, '__name__', function)!r} returned "
                f"{type(fork).__name__}; it must return the fork it was given"
            )
    if forks:
        session.merge(*forks)


def _submit(executor: Any, function: Callable[..., Any], *args: Any) -> Any:
    if type(executor).__module__.startswith("distributed"):
        # pure=False: two tasks with equal arguments are still two tasks
        return executor.submit(function, *args, pure=False)
    return executor.submit(function, *args)
