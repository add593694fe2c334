"""Picklable descriptions of stores and arrays, for jobs that run on a Dask cluster.

A live store holds clients, sockets and an event loop: pickled into a Dask graph it
would carry them (or fail to), and it would bake one process's credentials object
into every task. A job sends a :class:`StoreRef` instead: the store's location
(a local path or URL) and its ``storage_options`` as plain data. Each worker reopens
the store from it with :func:`zarrext.stores.open_store`, and reopens the array
once per job (:meth:`ArrayRef.open`), not once per task.

A store opened from a URL is described by that URL and options. A store object
built elsewhere is described from what it exposes (:func:`store_ref`): a
``LocalStore`` by its directory, an ``FsspecStore`` by its file system's protocol,
path and ``storage_options``, a zarr ``ObjectStore`` by its obstore store's class
and configuration. A store that lives only in this process (``MemoryStore``) has no
description: jobs on it run on local threads.

An icechunk session's store is described by the session itself, which icechunk
pickles for this: a read-only session as it is, a writable one as one fork per task
(:func:`forked`, ``session.fork()``), which the task writes through and hands back
for the job to merge before its one commit (:func:`zarrext.jobs.cluster.on_client`).

An array's description also carries the runtime settings it was opened with
(:func:`zarrext.open_array`'s decisions, padding function, shard layout): a worker
reopens it with zarrext's codec pipeline and those codecs, as the client had it.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.metadata import ArrayV3Metadata

from zarrext._exit import settle_at_exit
from zarrext._zarr_compat import async_array_of, set_codec_pipeline, with_codecs
from zarrext.jobs.transactions import is_session_store
from zarrext.stores import RemoteObjectStore, StoreOpenError, open_store, refuse_read_only

__all__ = [
    "ArrayRef", "StoreRef", "array_ref", "forked", "store_ref", "worker_ref", "writable_session_of",
]

# fsspec keeps these in ``storage_options``; they belong to the opening process.
_PROCESS_OPTIONS = ("asynchronous", "loop", "skip_instance_cache")


@dataclass(frozen=True)
class StoreRef:
    """Where a store is, as plain data a worker can reopen it from.

    Attributes
    ----------
    location : str
        A local path or URL (as :func:`zarrext.stores.open_store` takes it).
    storage_options : mapping, optional
        The URL's options (endpoint, credentials, region...).
    obstore : tuple, optional
        For a zarr ``ObjectStore``: the obstore store's class name, prefix, config,
        client options and retry config, and for zarrext's
        :class:`~zarrext.stores.RemoteObjectStore` the URL and timeout its errors
        name; ``location`` then only names it.
    session : icechunk.Session or icechunk.ForkSession, optional
        For an icechunk session's store: a read-only session or one task's fork of a
        writable one (both pickle), or a writable session itself (which does not:
        tasks get forks of it, :func:`forked`); ``location`` then only names it.
    """

    location: str
    storage_options: Mapping[str, Any] | None = field(default=None, compare=False)
    obstore: tuple[Any, ...] | None = field(default=None, compare=False)
    session: Any = field(default=None, compare=False)

    def open(self, mode: str = "r") -> Store:
        """A new store object for this location (in the calling process)."""
        if self.session is not None:
            return self.session.store
        if self.obstore is not None:
            return _open_obstore(self.obstore, read_only=mode == "r")
        return open_store(self.location, mode=mode, storage_options=self.storage_options)


def _open_obstore(
    described: tuple[Any, ...], read_only: bool
) -> Store:
    import obstore.store
    from zarr.storage import ObjectStore

    name, prefix, config, client_options, retry_config, *said = described
    kind = getattr(obstore.store, name)
    inner = kind(
        prefix=prefix, config=config, client_options=client_options, retry_config=retry_config
    )
    settle_at_exit()  # obstore's threads must not be in Python as the process exits
    if said:  # opened by zarrext from a URL: its errors name it, as on the client
        location, timeout = said
        return RemoteObjectStore(inner, read_only=read_only, location=location, timeout=timeout)
    return ObjectStore(inner, read_only=read_only)


def store_ref(store: Store | str, storage_options: Mapping[str, Any] | None = None) -> StoreRef:
    """The description of ``store`` (a store object, or a path or URL).

    Raises
    ------
    StoreOpenError
        For a store that exists only in this process (e.g. ``MemoryStore``) or of a
        kind zarrext cannot describe.
    """
    if isinstance(store, str):
        return StoreRef(store, dict(storage_options) if storage_options else None)
    if is_session_store(store):
        session = store.session  # type: ignore[attr-defined]
        if session.read_only:
            return StoreRef(f"icechunk:{session.snapshot_id}", session=session)
        # Not sent as it is (icechunk pickles no writable session): zarrext.jobs.cluster
        # sends each task a fork of it (forked) and merges the forks back.
        return StoreRef(f"icechunk-session:{session.branch}", session=session)
    from zarr.storage import FsspecStore, LocalStore, ObjectStore

    if isinstance(store, LocalStore):
        return StoreRef(str(store.root))
    if isinstance(store, FsspecStore):
        protocol = store.fs.protocol
        scheme = protocol if isinstance(protocol, str) else protocol[0]
        if scheme == "memory":
            raise StoreOpenError(
                "a memory:// store lives in one process; Dask workers cannot open it"
            )
        options = {
            k: v for k, v in store.fs.storage_options.items() if k not in _PROCESS_OPTIONS
        }
        return StoreRef(f"{scheme}://{store.path}", options or None)
    inner = getattr(store, "store", None)
    config = getattr(inner, "config", None)
    if type(store) in (ObjectStore, RemoteObjectStore) and isinstance(config, dict):
        described: tuple[Any, ...] = (
            type(inner).__name__,
            getattr(inner, "prefix", None),
            dict(config),
            dict(getattr(inner, "client_options", None) or {}),
            getattr(inner, "retry_config", None),
        )
        if isinstance(store, RemoteObjectStore):
            described += (store.location, store.timeout)
        return StoreRef(f"obstore:{inner!r}", obstore=described)
    raise StoreOpenError(
        f"a {type(store).__name__} cannot be described for Dask workers to reopen; "
        "give the array as a local path or URL (with storage_options)"
    )


@dataclass(frozen=True)
class ArrayRef:
    """An array as a worker reopens it: its store's description and path.

    Equal (and hashed) by ``token`` alone, one per job: each worker process opens
    the array once per job (:meth:`open`) and reuses it for every task of it (a
    fork's, :func:`forked`, is one task's and opened by it alone).

    Attributes
    ----------
    store : StoreRef
    path : str
    mode : str
    token : str
    codecs : tuple, optional
        The codecs of an array opened through zarrext (:func:`zarrext.open_array`),
        with their runtime settings (decisions, padding, shard layout; they pickle):
        :meth:`open` gives the array zarrext's codec pipeline and these codecs.
        None: the array as zarr-python opens it.
    """

    store: StoreRef = field(compare=False)
    path: str = field(compare=False)
    mode: str = field(default="r+", compare=False)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    codecs: tuple[Any, ...] | None = field(default=None, compare=False)

    def open(self) -> zarr.Array:
        """The array: with zarrext's codec pipeline and the runtime codecs it was
        described with, or as zarr-python opens it.

        Raises
        ------
        ValueError
            When the array's codecs in the store are not those it was described with
            (its ``zarr.json`` was replaced meanwhile).
        """
        if self.store.session is not None:  # a fork is one task's: open it there, once
            return _opened(self)
        with _OPEN_LOCK:  # threads of one worker: the first opens, the others wait for it
            return _open_once(self)


def array_ref(array: zarr.Array, mode: str = "r+") -> ArrayRef:
    """The description of ``array`` (see :func:`store_ref`), with its runtime codecs
    when its codec pipeline is zarrext's."""
    from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline

    if mode != "r":
        # the workers reopen the store from its path or URL, writable: ask here
        refuse_read_only(array, "a job writing on Dask workers")
    store_path = array.store_path
    runtime = isinstance(async_array_of(array).codec_pipeline, ZarrextCodecPipeline)
    codecs = tuple(array.metadata.codecs) if runtime else None  # type: ignore[union-attr]
    return ArrayRef(store_ref(store_path.store), store_path.path, mode, codecs=codecs)


def writable_session_of(ref: Any) -> Any:
    """The writable icechunk session (not a fork) an :class:`ArrayRef` or
    :class:`StoreRef` describes, else None."""
    store = getattr(ref, "store", ref)
    session = getattr(store, "session", None)
    if session is None or session.read_only or type(session).__name__ == "ForkSession":
        return None
    return session


def forked(ref: ArrayRef) -> ArrayRef:
    """``ref``, over a writable icechunk session, on a new fork of it: one task's.

    The task writes through the fork and returns it (``ref.store.session``) for the
    job to merge into the session (:func:`zarrext.jobs.cluster.on_client`). A task rerun
    after its worker died starts again from the fork as it was sent: what the dead
    worker wrote is not in it.

    Raises
    ------
    ValueError
        When ``ref`` describes no writable icechunk session.
    """
    session = writable_session_of(ref)
    if session is None:
        raise ValueError(f"{ref.store.location}: not a writable icechunk session to fork")
    fork = StoreRef(f"icechunk-fork:{session.branch}", session=session.fork())
    return ArrayRef(fork, ref.path, ref.mode, codecs=ref.codecs)


_OPEN_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _open_once(ref: ArrayRef) -> zarr.Array:
    return _opened(ref)


def _opened(ref: ArrayRef) -> zarr.Array:
    array = zarr.open_array(ref.store.open(ref.mode), path=ref.path, mode=ref.mode)
    if ref.codecs is None:
        return array
    metadata = array.metadata
    # runtime settings are no metadata: the codecs as zarr.json spells them must match
    if not isinstance(metadata, ArrayV3Metadata) or [c.to_dict() for c in metadata.codecs] != [
        c.to_dict() for c in ref.codecs
    ]:
        raise ValueError(
            f"array {ref.path or '/'!r} in {ref.store.location}: its codecs changed since the "
            "job described it (zarr.json replaced meanwhile); run the job again"
        )
    from zarrext.pipeline.codec_pipeline import build_pipeline

    bound = with_codecs(metadata, ref.codecs)
    runtime = AsyncArray(metadata=bound, store_path=array.store_path, config=array.config)
    set_codec_pipeline(runtime, build_pipeline(bound, array.store_path.path))
    return zarr.Array(runtime)


def worker_ref(store: Any, job: str, what: str) -> StoreRef:
    """``store`` described for ``job``'s Dask workers (``what``: the source or the
    output, as messages name it). A zip archive, which only this process can read
    and write, and a store with no description are refused in one line.

    A :class:`~zarrext.jobs.outputs.MetadataLastStore` is described by the store it
    wraps: workers write chunks only; this process publishes the metadata.
    """
    from zarr.storage import ZipStore

    from zarrext.jobs.outputs import MetadataLastStore

    if isinstance(store, MetadataLastStore):
        store = store.wrapped
    if isinstance(store, ZipStore):
        raise StoreOpenError(
            f"{job} on a Dask cluster: the {what} is a zip archive, which only this "
            "process can read and write; give a directory or URL, or leave out the client"
        )
    try:
        return store_ref(store)
    except StoreOpenError as e:
        raise StoreOpenError(f"{job} on a Dask cluster: the {what}: {e}") from None
