"""Conditional writes of single objects on an object store: create only where none is,
replace only what is unchanged.
"""

from __future__ import annotations

import contextlib

from zarr.abc.store import Store
from zarr.storage import ObjectStore

from zarrext.stores.classification import not_found_errors
from zarrext.stores.errors import StoreOpenError
from zarrext.stores.remote import RemoteObjectStore

__all__ = [
    "create_object",
    "create_object_async",
    "read_object",
    "replace_object",
]


async def _create(store: ObjectStore, key: str, value: bytes) -> bool:
    import obstore as obs
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    naming = store._naming() if isinstance(store, RemoteObjectStore) else contextlib.nullcontext()
    with naming:
        try:
            await obs.put_async(store.store, key, value, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
    return True


def create_object(store: Store, key: str, value: bytes) -> bool | None:
    """Write ``key`` only where no object is: one conditional request (S3's
    ``If-None-Match: *``, GCS's generation 0, Azure's ``If-None-Match``).

    Returns True when written, False when an object was there (nothing written),
    None for a store that has no conditional write (an fsspec store; nothing
    written). A server that ignores the condition writes over what is there: see
    :meth:`zarrext.jobs.outputs.Destination.staged` for how a job finds out.
    """
    from zarr.core.sync import sync

    return sync(create_object_async(store, key, value))


async def create_object_async(store: Store, key: str, value: bytes) -> bool | None:
    """:func:`create_object`, awaited."""
    if not isinstance(store, ObjectStore):
        return None
    try:
        return await _create(store, key, value)
    except NotImplementedError:  # an obstore store without conditional writes
        return None


async def _read(store: ObjectStore, key: str) -> tuple[bytes, str | None] | None:
    import obstore as obs

    missing: tuple[type[Exception], ...] = (FileNotFoundError, *not_found_errors())
    naming = store._naming() if isinstance(store, RemoteObjectStore) else contextlib.nullcontext()
    with naming:
        try:
            result = await obs.get_async(store.store, key)
        except missing:
            return None
        return bytes(await result.bytes_async()), result.meta.get("e_tag")


def read_object(store: Store, key: str) -> tuple[bytes, str | None] | None:
    """``(bytes, ETag)`` of the object ``key`` of an object store (the ETag to
    :func:`replace_object` it only if unchanged), None when there is none."""
    from zarr.core.sync import sync

    if not isinstance(store, ObjectStore):
        raise StoreOpenError(f"{store} is not an object store")
    return sync(_read(store, key))


async def _replace(store: ObjectStore, key: str, value: bytes, e_tag: str) -> bool:
    import obstore as obs
    from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

    naming = store._naming() if isinstance(store, RemoteObjectStore) else contextlib.nullcontext()
    with naming:
        try:
            await obs.put_async(store.store, key, value, mode={"e_tag": e_tag})
        except (PreconditionError, AlreadyExistsError, NotFoundError, FileNotFoundError):
            return False
    return True


def replace_object(store: Store, key: str, value: bytes, e_tag: str | None) -> bool | None:
    """Write ``key`` only if its object is still the one whose ETag is ``e_tag``
    (S3's ``If-Match``): True when written, False when it changed or went (nothing
    written), None where the store has no conditional write (nothing written)."""
    from zarr.core.sync import sync

    if not isinstance(store, ObjectStore) or e_tag is None:
        return None
    try:
        return sync(_replace(store, key, value, e_tag))
    except NotImplementedError:
        return None
