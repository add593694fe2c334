"""The store a user named, opened: its arrays, refused in one line when it is no Zarr
store, read-only or unfinished.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zarr
from zarr.errors import NodeNotFoundError

from zarrext.cli.failures import ExitCode, fail, unreachable_text
from zarrext.cli.icechunk import is_icechunk_repository, open_in_session
from zarrext.cli.options import SessionPath
from zarrext.errors import MalformedMetadataError, naming_codec_holder, naming_malformed_metadata
from zarrext.jobs.group_metadata import is_staging
from zarrext.jobs.outputs import UNFINISHED as _UNFINISHED
from zarrext.stores import StoreOpenError, local_path, open_store, parse_storage_options

__all__ = [
    "is_sharded",
    "iter_arrays",
    "open_node",
    "refuse_non_zarr_file",
    "require_writable",
    "require_writable_file",
]


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
        return open_in_session(path, mode)
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
            fail(unreachable_text(text, e), ExitCode.UNREACHABLE)
    try:
        with naming_codec_holder(store=text), naming_malformed_metadata(store):
            node = zarr.open(store, mode=mode)  # type: ignore[arg-type]
    except MalformedMetadataError as e:
        fail(str(e.named_in(text)))
    except json.JSONDecodeError as e:
        fail(f"{text}: malformed Zarr metadata ({e}); fix or restore its zarr.json")
    except (NodeNotFoundError, FileNotFoundError, NotADirectoryError):
        if local is not None and is_icechunk_repository(local):
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
        fail(unreachable_text(text, e), ExitCode.UNREACHABLE)
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


def is_sharded(array: Any) -> bool:
    """Whether ``array`` is a Zarr format 3 array whose stored objects are shards."""
    from zarr.core.metadata import ArrayV3Metadata

    from zarrext.codecs.chain import CodecChain

    metadata = array.metadata
    return (
        isinstance(metadata, ArrayV3Metadata)
        and CodecChain.from_metadata(metadata).sharding is not None
    )
