"""Re-encode every stored inner chunk of a shard, under the writers' lock.

Whole-store jobs such as :func:`zarrext.recompress` change the bytes of every
chunk, not their values. Done through zarr-python's whole-shard rewrite they race
in-place writers (a write that lands between the job's read and its rewrite is
lost) and skip the rollback of a killed writer. :func:`transcode_shard` instead:

1. takes the same exclusive lock as writers (:func:`locked_shard`), which
   rolls back an interrupted transaction first;
2. reads the index and the chunk bytes from the locked file, so nothing a writer
   committed before is missed and nothing can commit meanwhile;
3. builds the new shard in a temporary file in the layout the shard had
   (chunks stay in their fixed slots, of the shard's own slot size when an
   earlier version of zarrext wrote it; a dense or append shard comes back dense)
   and swaps it in with ``os.replace``, still under the lock.

A crash leaves the old shard and a temporary file that ``zarrext check --repair``
deletes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from zarr.core.buffer import default_buffer_prototype

from zarrext.sharding import writer
from zarrext.sharding.geometry import ShardGeometry, guess_layout
from zarrext.sharding.journal import discard_sidecars, locked_shard, temp_path
from zarrext.sharding.state import ShardCorruptError, load_state

if TYPE_CHECKING:
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.buffer import Buffer

__all__ = ["TranscodeResult", "transcode_shard"]

# (inner chunk's flat index in the shard, its encoded bytes) -> new encoded bytes
Reencode = Callable[[int, "Buffer"], "Buffer"]


class TranscodeResult(NamedTuple):
    """``(bytes before, bytes after, inner chunks, layout kept)`` of one shard."""

    bytes_before: int
    bytes_after: int
    chunks: int
    layout: str


def transcode_shard(
    path: Path, codec: ShardingCodec, geometry: ShardGeometry, reencode: Reencode
) -> TranscodeResult | None:
    """Re-encode every stored inner chunk of the shard at ``path`` in one atomic swap.

    Parameters
    ----------
    path : Path
        The shard file.
    codec : ShardingCodec
        The array's sharding codec (its index codecs encode the new index).
    geometry : ShardGeometry
        The shard geometry writers use (its slot size places the chunks).
    reencode : callable
        ``reencode(flat, encoded) -> encoded``: the new bytes of one inner chunk.

    Returns
    -------
    TranscodeResult or None
        None when the shard does not exist (nothing to do).

    Raises
    ------
    ShardCorruptError
        When the shard's index cannot be used; the shard is left unchanged.
    """
    with locked_shard(path) as fd:
        if fd is None:
            return None
        state = load_state(fd, codec, geometry, path)
        geometry = geometry.for_shard(state.table, state.size)  # an earlier version's slots
        layout = guess_layout(state.table, state.size, geometry)
        datas: dict[int, bytes | Buffer | None] = {}
        prototype = default_buffer_prototype()
        for flat in np.flatnonzero(state.present()).tolist():
            offset, length = (int(v) for v in state.table[flat])
            raw = os.pread(fd, length, offset)
            if len(raw) != length:
                raise ShardCorruptError(
                    f"shard {path.name}: inner chunk {flat} is cut short ({len(raw)} of "
                    f"{length} bytes)"
                )
            datas[flat] = reencode(flat, prototype.buffer.from_bytes(raw))
        tmp = temp_path(path)
        writer.build_file(
            tmp, codec, geometry, "fixed-slot" if layout == "fixed-slot" else "append", datas
        )
        size_after = os.stat(tmp).st_size
        # Before the swap: once the new file is in place a writer may lock it and
        # start a journal of its own under the same name.
        discard_sidecars(path)
        # Still holding the old file's lock: writers waiting on it see a new inode
        # after the replace and reopen.
        os.replace(tmp, path)
        return TranscodeResult(state.size, size_after, len(datas), layout)
