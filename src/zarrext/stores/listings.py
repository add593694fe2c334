"""The keys of a store, and the sizes of its objects from one listing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import LocalStore, ObjectStore

from zarrext.stores.remote import RemoteObjectStore

__all__ = [
    "list_keys",
    "object_sizes",
]


async def _collect(store: Store, prefix: str) -> list[str]:
    return [key async for key in store.list_prefix(prefix)]


def list_keys(store: Store, prefix: str = "") -> list[str]:
    """Every key of ``store`` under ``prefix``, sorted (on zarr's event loop)."""
    from zarr.core.sync import sync

    return sorted(sync(_collect(store, prefix)))


def object_sizes(store: Store, prefix: str = "") -> dict[str, int] | None:
    """The size of every object of ``store`` under ``prefix``, by key, from one listing;
    None where the store cannot list sizes (ask :meth:`~zarr.abc.store.Store.getsize`
    per key there).

    The keys are exactly those of :func:`list_keys` (``store.list_prefix(prefix)``),
    each with the size ``store.getsize(key)`` gives, asked of the store at once:

    - an object store (zarr's :class:`~zarr.storage.ObjectStore`, obstore): its
      listing (S3's ``ListObjectsV2``, a request per 1,000 objects) holds the sizes,
      where ``getsize`` sends one ``HEAD`` per object (1.8 ms of the loopback S3
      server's CPU each);
    - an fsspec store (:class:`~zarr.storage.FsspecStore`): ``find`` with details;
      None if the file system lists any object without its size;
    - a local directory (:class:`~zarr.storage.LocalStore`): one walk, each file's
      ``stat`` in the same thread (``getsize`` hops to a thread per key);
    - any other store (a zip archive, memory, an icechunk session, a store wrapping
      another): None.
    """
    from zarr.core.sync import sync
    from zarr.storage import FsspecStore

    if isinstance(store, ObjectStore):
        return sync(_obstore_sizes(store, prefix))
    if isinstance(store, FsspecStore) and type(store).list_prefix is FsspecStore.list_prefix:
        return sync(_fsspec_sizes(store, prefix))
    if type(store) is LocalStore:
        return _local_sizes(Path(store.root), prefix.rstrip("/"))
    return None


async def _obstore_sizes(store: ObjectStore, prefix: str) -> dict[str, int]:
    """The listing ``ObjectStore.list_prefix`` makes (``obstore.list``), with sizes."""
    import obstore as obs

    naming: contextlib.AbstractContextManager[Any] = (
        store._naming() if isinstance(store, RemoteObjectStore) else contextlib.nullcontext()
    )
    sizes: dict[str, int] = {}
    with naming:
        async for batch in obs.list(store.store, prefix=prefix, chunk_size=1000):
            for meta in batch:
                sizes[meta["path"]] = int(meta["size"])
    return sizes


async def _fsspec_sizes(store: Any, prefix: str) -> dict[str, int] | None:
    """The listing ``FsspecStore.list_prefix`` makes (``fs._find``), with details."""
    root = store.path.rstrip("/")
    found = await store.fs._find(
        f"{root}/{prefix}" if root else prefix, detail=True, maxdepth=None, withdirs=False
    )
    sizes: dict[str, int] = {}
    for path, info in found.items():
        size = info.get("size")
        if size is None:  # the file system does not list it: getsize reads it
            return None
        sizes[path.removeprefix(f"{root}/") if root else path.removeprefix("/")] = int(size)
    return sizes


def _local_sizes(root: Path, prefix: str) -> dict[str, int]:
    """The files ``LocalStore.list_prefix`` lists (``rglob``: every file under
    ``root / prefix``, links to files followed, links to directories not entered),
    with their sizes, in one walk."""
    sizes: dict[str, int] = {}
    pending = [os.path.join(root, prefix) if prefix else os.fspath(root)]
    strip = len(root.as_posix()) + 1
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        # A file's key is its directory's key and its name: the directory's path is
        # made a key once (as pathlib writes it: "/" between parts, none doubled),
        # not each file's: a Path per file cost more than the walk and the stats.
        relative = Path(directory).as_posix()[strip:]
        within = f"{relative}/" if relative else ""
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
                continue
            try:
                if entry.is_file():
                    sizes[within + entry.name] = entry.stat().st_size
            except FileNotFoundError:  # deleted while listed, or a broken link
                continue
    return sizes
