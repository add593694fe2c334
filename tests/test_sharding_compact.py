"""compact / expand: dense and fixed-slot rewrites, atomic, same values for every reader."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import zarrext
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.sharding import ShardLayoutError, shard_report


def _array(path: Path, location: str, codecs: list | None = None) -> zarr.Array:
    return zarrext.create_array(
        str(path),
        shape=(64, 96),
        chunks=(32, 32),
        dtype="i4",
        fill_value=0,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8),
            codecs=codecs
            or [BytesCodec(), ConditionalCodec(codecs=[ZstdCodec(level=1)]), Crc32cCodec()],
            index_location=location,
        ),
        shard_layout="fixed-slot",
        decision="compress_if_smaller",
    )


def _fill(array: zarr.Array) -> np.ndarray:
    rng = np.random.default_rng(0)
    expected = np.zeros(array.shape, dtype="i4")
    for i in range(0, 64, 8):
        for j in range(0, 96, 8):
            kind = (i + j) // 8 % 3
            if kind == 0:
                continue  # stays empty
            value = (
                rng.integers(0, 1 << 30, (8, 8)).astype("i4")
                if kind == 1
                else np.full((8, 8), i + j)
            )
            array[i : i + 8, j : j + 8] = value
            expected[i : i + 8, j : j + 8] = value
    array[0:8, 8:16] = 5  # an update: the chunk moves to the spare area
    expected[0:8, 8:16] = 5
    return expected


def _sizes(path: Path) -> int:
    return sum(
        p.stat().st_size for p in (path / "c").rglob("*") if p.is_file() and "zarrext" not in p.name
    )


@pytest.mark.parametrize("location", ["start", "end"])
def test_compact_then_expand_round_trip(tmp_path: Path, location: str) -> None:
    path = tmp_path / "a"
    array = _array(path, location)
    expected = _fill(array)
    assert {s.layout for s in shard_report(array)} == {"fixed-slot"}
    before = _sizes(path)
    shards = [p for p in (path / "c").rglob("*") if p.is_file() and "zarrext" not in p.name]
    inodes = {p: p.stat().st_ino for p in shards}

    report = zarrext.compact(array, workers=3)
    assert report.shards == 6
    assert report.bytes_before == before
    assert report.bytes_after == _sizes(path) < before
    infos = shard_report(array)
    assert {s.layout for s in infos} == {"dense"}
    assert all(s.bytes_used == s.file_size for s in infos)
    # replaced, not rewritten in place: readers never saw a half-written file
    assert all(p.stat().st_ino != ino for p, ino in inodes.items())
    assert not [p for p in path.rglob("*zarrext*")]
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], expected)

    zarrext.expand(array)
    assert {s.layout for s in shard_report(array)} == {"fixed-slot"}
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], expected)
    # a fast ingest again: this write lands in its slot
    array[8:16, 8:16] = 77
    expected[8:16, 8:16] = 77
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], expected)
    assert zarrext.check(array) == []


def test_compact_with_progress_and_no_shards(tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from zarrext.cli.render import progress_bar

    array = _array(tmp_path / "a", "end")
    calls: list[tuple[int, int]] = []
    assert zarrext.compact(array, progress=lambda *a: calls.append(a)).shards == 0
    assert calls == [(0, 0)]
    array[:8, :8] = 1
    array[40:48, 40:48] = 2
    calls.clear()
    assert zarrext.compact(array, progress=lambda *a: calls.append(a)).shards == 2
    assert calls == [(0, 2), (1, 2), (2, 2)]
    # the CLI's bar draws in a terminal only (rich ends a bar on a pipe with a blank line)
    for terminal, drawn in ((True, True), (False, False)):
        out = StringIO()
        console = Console(file=out, force_terminal=terminal, force_interactive=terminal)
        with progress_bar("compacting a", console=console) as progress:
            assert zarrext.compact(array, progress=progress).shards == 2
        assert ("compacting a" in out.getvalue()) is drawn
        assert out.getvalue() == "" or drawn


def test_expand_needs_a_bound(tmp_path: Path) -> None:
    array = zarr.create_array(
        str(tmp_path / "a"), shape=(16,), chunks=(16,), shards=(16,), dtype="i4",
        compressors=ZstdCodec(),
    )
    array[:] = 1
    with pytest.raises(ShardLayoutError, match="no bound"):
        zarrext.expand(array)
    assert zarrext.compact(array).shards == 1  # compaction needs none


def test_compact_rolls_back_pending_write_first(tmp_path: Path) -> None:
    from zarrext.sharding import writer

    array = _array(tmp_path / "a", "end")
    array[:8, :8] = 3
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    # simulate a killed writer: journal written, then garbage appended and a torn index
    writer.write_journal(shard, len(good), len(good) - (16 * 16 + 4), good[-(16 * 16 + 4):])
    with open(shard, "ab") as f:
        f.write(os.urandom(300))
    zarrext.compact(array)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:8, :8], 3)
    assert not writer.journal_pending(shard)
