"""Outputs of whole-store jobs: never over their input, never seen half-built.

A job that writes a new array (``zarrext quantize --out``) must never leave
something that opens as a finished array when it is interrupted (Ctrl-C, an
error, kill -9), and a job replacing an output must leave the old one readable
until the new one is complete, through its path and through the consolidated
metadata of the groups holding it. How depends on what the store can do:

- a local directory or zip archive is built in a staging directory beside it
  (``.NAME.zarrext-tmp-<pid>-<host>-<id>``, no member of any group: no
  ``zarr.json`` at its root) and renamed into place when complete, over nothing
  but what the job saw at its start. A new output is renamed where nothing is, in
  one step that fails if anything is there (Linux's
  ``renameat2(RENAME_NOREPLACE)``; elsewhere ``mkdir`` claims the path, or a hard
  link puts a zip archive there): whatever appeared at the path during the run
  (another tool's array, a user's directory, a second job's output) stays, and
  the job fails with :class:`OutputConflictError`, its own output discarded. An
  old output the caller asked to replace is swapped with the new one in one step
  (Linux's ``renameat2(RENAME_EXCHANGE)``) and then removed, so its path holds
  the old output or the new one at every moment, a kill included; what the swap
  took out must be the output seen at the start (same inode; its ctime is checked
  just before), else the swap is undone and the job fails the same way. Where the
  exchange is not available (another OS, a file system without it) the old
  output is renamed into the staging directory just before: a kill between the
  two renames leaves it there, and the next run puts it back. The groups above holding
  consolidated metadata have it withdrawn before the swap and written again after
  (:func:`~zarrext.jobs.outputs.local.publish` says why in that order). A rerun
  removes what a killed run writing the same output left, once its process is gone (the staging
  directory's name says which), and names in a warning the temporary outputs
  beside it that it cannot prove are a killed run's (:func:`find_leftovers`);
- on an object store (no rename) a new output is written where it will stay,
  each chunk once, through a :class:`MetadataLastStore`: its ``zarr.json``
  documents are held in memory and written only when the job succeeds, the
  arrays' first and the root's last, the root's only where none is (a
  conditional create: one another writer put there during the run is never
  overwritten). Until the root's ``zarr.json`` lands, nothing opens at the
  output. The groups above holding consolidated metadata are then consolidated
  again. An object :data:`UNFINISHED`, naming the job's process and host, is
  written first (where none is, by a conditional create) and deleted last: it
  says the objects there are the job's own. A second job finding it refuses
  while that process runs (or runs on another host); once it is gone, a rerun
  takes the marker over (a write conditional on its ETag: one rerun does) and
  replaces the killed job's leftovers without ``overwrite`` (or, when the root's
  ``zarr.json`` had landed, consolidates the groups above again and deletes the
  marker), and never touches anything else. A store without conditional writes
  (an fsspec store, or a server ignoring ``If-None-Match``: the marker is
  written twice to find out, and a warning says so) is read just before each of
  those writes instead: a writer in that moment is not detected;
- an existing output on an object store is never replaced, ``overwrite`` or not
  (:class:`OutputConflictError`, naming what to do instead). Without a rename,
  a replacement has to put the new objects at the old ones' keys one by one: a
  chunk key of the new output is the same key as the old output's, so between
  the first such write and the last the prefix holds a mix that is neither
  output (and deleting the old output first leaves nothing that opens), and a
  kill there loses both. Write to a new prefix and point readers to it, or
  delete the old output first;
- in an icechunk session the job writes in place: readers see nothing of it
  until the caller commits, and a failed job's changes are never committed;
- an output inside a Zarr format 2 group is refused before anything is read: it
  would be a format 3 node that the group's readers do not see as a member.

The package's modules: :mod:`~zarrext.jobs.outputs.destinations` (an output resolved
by its kind, staged, refused, published), :mod:`~zarrext.jobs.outputs.local` (a local
output's publication), :mod:`~zarrext.jobs.outputs.remote` (an object-store output's
claim and marker), :mod:`~zarrext.jobs.outputs.metadata_last` (the store holding
``zarr.json`` back), :mod:`~zarrext.jobs.outputs.leftovers` (what killed jobs left) and
:mod:`~zarrext.jobs.outputs.conflicts` (the refusals). Every public name is importable
from ``zarrext.jobs.outputs``.
"""

from __future__ import annotations

from zarrext.jobs.group_metadata import STAGING_MARKER
from zarrext.jobs.outputs.conflicts import (
    OutputConflictError,
    OutputLeftoverWarning,
    UnconditionalStoreWarning,
)
from zarrext.jobs.outputs.destinations import (
    Destination,
    IcechunkSession,
    InPlace,
    LocalDirectory,
    LocalZip,
    RemoteStore,
    resolve_destination,
    staged_output,
)
from zarrext.jobs.outputs.leftovers import (
    Leftover,
    RemoteLeftover,
    find_leftovers,
    find_remote_leftovers,
    remove_leftover,
)
from zarrext.jobs.outputs.metadata_last import MetadataLastStore
from zarrext.jobs.outputs.remote import UNFINISHED

__all__ = [
    "STAGING_MARKER",
    "UNFINISHED",
    "Leftover",
    "RemoteLeftover",
    "MetadataLastStore",
    "OutputConflictError",
    "OutputLeftoverWarning",
    "UnconditionalStoreWarning",
    "Destination",
    "IcechunkSession",
    "InPlace",
    "LocalDirectory",
    "LocalZip",
    "RemoteStore",
    "find_leftovers",
    "find_remote_leftovers",
    "remove_leftover",
    "resolve_destination",
    "staged_output",
]
