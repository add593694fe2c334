"""compact / expand: dense and fixed-slot rewrites, atomic, same values for every reader."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import zarrext
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.jobs.shards.inspect import shard_report
from zarrext.sharding import ShardLayoutError


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
    assert all(s.chunk_bytes + s.index_bytes == s.file_size for s in infos)
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
    from zarr.codecs.numcodecs import BZ2

    array = zarr.create_array(
        str(tmp_path / "a"), shape=(16,), chunks=(16,), shards=(16,), dtype="i4",
        compressors=BZ2(level=1),  # a compressor zarrext knows no bound for
    )
    array[:] = 1
    with pytest.raises(ShardLayoutError, match="no bound"):
        zarrext.expand(array)
    assert zarrext.compact(array).shards == 1  # compaction needs none


def test_compact_rolls_back_pending_write_first(tmp_path: Path) -> None:
    from zarrext.sharding.journal import journal_pending, write_journal

    array = _array(tmp_path / "a", "end")
    array[:8, :8] = 3
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    # simulate a killed writer: journal written, then garbage appended and a torn index
    write_journal(shard, len(good), len(good) - (16 * 16 + 4), good[-(16 * 16 + 4):])
    with open(shard, "ab") as f:
        f.write(os.urandom(300))
    zarrext.compact(array)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:8, :8], 3)
    assert not journal_pending(shard)


SLOTTED = 4  # inner chunks per side of the one shard of _slotted()


def _slotted(path: Path, location: str = "end") -> tuple[zarr.Array, np.ndarray]:
    """A fixed-slot shard of uncompressed chunks (each fills its slot), all written,
    then chunks 5 and 10 updated: they move to their spare slots."""
    array = zarrext.create_array(
        str(path), shape=(8 * SLOTTED, 8 * SLOTTED), chunks=(8 * SLOTTED, 8 * SLOTTED),
        dtype="i4", fill_value=0, compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8), codecs=[BytesCodec()], index_location=location
        ),
        shard_layout="fixed-slot",
    )
    expected = np.arange(array.size, dtype="i4").reshape(array.shape)
    array[:] = expected
    for flat in (5, 10):
        i, j = divmod(flat, SLOTTED)
        expected[8 * i : 8 * i + 8, 8 * j : 8 * j + 8] *= -1
        array[8 * i : 8 * i + 8, 8 * j : 8 * j + 8] = expected[8 * i : 8 * i + 8, 8 * j : 8 * j + 8]
    return array, expected


def _shard_table(array: zarr.Array, shard: Path) -> np.ndarray:
    from zarrext.sharding.reader import index_format, open_shared

    handle = open_shared(shard, index_format(array.metadata.codecs[0], (SLOTTED, SLOTTED)))
    assert handle is not None
    try:
        return handle.index_table("")
    finally:
        handle.close()


def test_compact_in_place(tmp_path: Path) -> None:
    """Chunks in spare slots move home within the file; truncating it publishes."""
    array, expected = _slotted(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    before = _shard_table(array, shard)
    slot = 8 * 8 * 4
    assert before[5, 0] != 5 * slot  # in their spare slots
    assert before[10, 0] != 10 * slot
    inode, size = shard.stat().st_ino, shard.stat().st_size

    report = zarrext.compact(array)
    assert shard.stat().st_ino == inode  # the same file
    n = SLOTTED * SLOTTED
    assert report.bytes_before == size
    assert report.bytes_after == shard.stat().st_size == n * slot + n * 16 + 4
    np.testing.assert_array_equal(_shard_table(array, shard)[:, 0], np.arange(n) * slot)
    # dense (no byte unused), which for chunks that fill their slots is slot form
    assert [
        (s.layout, s.chunk_bytes + s.index_bytes == s.file_size) for s in shard_report(array)
    ] == [("fixed-slot", True)]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], expected)
    assert zarrext.check(array) == []
    assert not [p for p in (tmp_path / "a").rglob("*zarrext*")]


def _replaced_by_compact(array: zarr.Array, shard: Path, expected: np.ndarray) -> None:
    inode = shard.stat().st_ino
    zarrext.compact(array)
    assert shard.stat().st_ino != inode  # rewritten into a new file
    assert all(s.chunk_bytes + s.index_bytes == s.file_size for s in shard_report(array))
    np.testing.assert_array_equal(zarr.open_array(array.store_path.store.root, mode="r")[:],
                                  expected)
    assert zarrext.check(array) == []


def test_compact_in_place_needs_the_index_at_the_end(tmp_path: Path) -> None:
    array, expected = _slotted(tmp_path / "a", "start")
    _replaced_by_compact(array, tmp_path / "a" / "c" / "0" / "0", expected)


def test_compact_in_place_never_writes_over_a_live_chunk(tmp_path: Path) -> None:
    """Chunk 3 removed: packing the chunks after it would write each over the next
    one's live bytes, so the shard is rewritten into a new file instead."""
    array, expected = _slotted(tmp_path / "a")
    expected[:8, 24:32] = 0
    array[:8, 24:32] = 0  # all fill value: the chunk is removed
    shard = tmp_path / "a" / "c" / "0" / "0"
    assert _shard_table(array, shard)[3, 0] == 2**64 - 1  # absent
    _replaced_by_compact(array, shard, expected)


def test_compact_in_place_never_writes_over_quarantined_bytes(tmp_path: Path) -> None:
    """A lock-free reader may still read a quarantined range: not a target either."""
    import time

    from zarrext.sharding.journal import write_quarantine

    array, expected = _slotted(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    slot = 8 * 8 * 4
    write_quarantine(shard, [(10 * slot + 8, 10 * slot + 16, time.time() + 60)])
    _replaced_by_compact(array, shard, expected)


def _compact_killed_at(path: Path, point: str) -> int:
    """Run compaction of the array at ``path`` in a process SIGKILLed if it reaches
    ``point``; its exit status."""
    import subprocess
    import sys

    script = f"import zarr, zarrext; zarrext.compact(zarr.open_array({str(path)!r}))"
    env = {**os.environ, "ZARREXT_SHARDING_FAULT": f"{point}=1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False, timeout=120)
    return done.returncode


def _as_before(array: zarr.Array, shard: Path, old: bytes, table: np.ndarray) -> bytes:
    """The shard's bytes, checked to hold its old size, index and referenced bytes."""
    after = shard.read_bytes()
    index_size = SLOTTED * SLOTTED * 16 + 4
    assert len(after) == len(old)
    assert after[-index_size:] == old[-index_size:]
    for offset, length in table.tolist():  # every referenced byte as it was
        assert after[offset : offset + length] == old[offset : offset + length]
    return after


@pytest.mark.parametrize("point", ["compact-data", "compact-index"])
def test_compact_in_place_killed(tmp_path: Path, point: str) -> None:
    """SIGKILLed while moving chunks home or after writing the new index: the old
    shard, whole (the same values, nothing for check to find), and a later
    compaction finishes the job in place."""
    array, expected = _slotted(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    old = shard.read_bytes()
    table = _shard_table(array, shard)
    assert _compact_killed_at(tmp_path / "a", point) == -signal.SIGKILL
    assert _as_before(array, shard, old, table) != old  # the chunks moved home first
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], expected)
    assert zarrext.check(array) == []
    inode = shard.stat().st_ino
    zarrext.compact(array)
    assert shard.stat().st_ino == inode
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], expected)


def test_compact_in_place_never_writes_over_the_old_index(tmp_path: Path) -> None:
    """A dense shard with fewer unused bytes than its index: the new index would
    lie over the old one, which a crash before the truncation would leave torn.
    The shard is rewritten into a new file instead (never reaching the point
    after the new index is written in place)."""
    array, expected = _slotted(tmp_path / "a")
    zarrext.compact(array)
    shard = tmp_path / "a" / "c" / "0" / "0"
    data = shard.read_bytes()
    chunks_end = SLOTTED * SLOTTED * 8 * 8 * 4
    shard.write_bytes(data[:chunks_end] + b"\xab" * 100 + data[chunks_end:])
    inode = shard.stat().st_ino
    assert _compact_killed_at(tmp_path / "a", "compact-index") == 0
    assert shard.stat().st_ino != inode
    assert shard.stat().st_size == len(data)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], expected)


def test_compacting_a_compact_shard_writes_nothing(tmp_path: Path) -> None:
    array, expected = _slotted(tmp_path / "a")
    zarrext.compact(array)
    shard = tmp_path / "a" / "c" / "0" / "0"
    data, stat = shard.read_bytes(), shard.stat()
    report = zarrext.compact(array)
    assert report.bytes_before == report.bytes_after == len(data)
    assert shard.stat().st_ino == stat.st_ino
    assert shard.stat().st_mtime_ns == stat.st_mtime_ns  # not even rewritten in place
    assert shard.read_bytes() == data
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], expected)


def _stamps(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every shard file's bytes, inode and mtime: equal means not even rewritten."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted((root / "c").rglob("*")) if p.is_file()
    }


def _zarr_python_shards(
    location: Any, compressors: Any = "zstd", **kwargs: Any
) -> tuple[zarr.Array, np.ndarray]:
    """Shards fresh from zarr-python: dense, inner chunks in Morton order."""
    array = zarr.create_array(
        location, shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="f4",
        compressors=[ZstdCodec(level=1)] if compressors == "zstd" else compressors, **kwargs,
    )
    data = np.random.default_rng(5).normal(size=(64, 64)).astype("f4")
    data[40:] = 0  # inner chunks holding the fill value: absent, not empty entries
    array[:] = data
    return array, data


def test_compact_leaves_dense_shards_from_zarr_python_untouched(tmp_path: Path) -> None:
    array, data = _zarr_python_shards(str(tmp_path / "a"))
    before = _stamps(tmp_path / "a")
    report = zarrext.compact(array)
    assert (report.shards, report.unchanged, report.rewritten) == (4, 4, 0)
    assert report.bytes_before == report.bytes_after == sum(len(b) for b, _, _ in
                                                            before.values())
    assert _stamps(tmp_path / "a") == before
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], data)


def test_compact_and_expand_rewrite_only_what_needs_it(tmp_path: Path) -> None:
    array, expected = _zarr_python_shards(str(tmp_path / "a"), compressors=None)
    zarrext.expand(array)
    slotted = _stamps(tmp_path / "a")
    again = zarrext.expand(array)  # every chunk already in its slot
    assert (again.shards, again.unchanged) == (4, 4)
    assert _stamps(tmp_path / "a") == slotted
    # back to dense; then one shard updated by appending: only that one needs compacting
    first = zarrext.compact(array)
    # the top shards hold every chunk: their slots (no compressor) are back to back
    # already; the bottom ones have empty slots
    assert (first.shards, first.rewritten, first.unchanged) == (4, 2, 2)
    writer = zarrext.open_array(str(tmp_path / "a"), shard_layout="append")
    writer[:8, :8] = 7  # appended to shard c/0/0: the old copy stays as a hole
    expected[:8, :8] = 7
    dense = _stamps(tmp_path / "a")
    second = zarrext.compact(array)
    assert (second.shards, second.rewritten, second.unchanged) == (4, 1, 3)
    after = _stamps(tmp_path / "a")
    assert {k for k in after if after[k] != dense[k]} == {"c/0/0"}
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], expected)


def test_cli_compact_with_nothing_to_do_changes_nothing(run, tmp_path: Path) -> None:
    from zarrext.jobs.shards.compact import READER_NOTE

    _zarr_python_shards(str(tmp_path / "a"))
    before = _stamps(tmp_path / "a")
    code, out, err = run("compact", tmp_path / "a")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["/: 4 shards, all already dense: left as they are"]
    assert READER_NOTE not in out  # nothing was rewritten: no readers to warn
    assert _stamps(tmp_path / "a") == before


def test_cli_compact_of_whole_encoded_shards_says_one_thing(run, tmp_path: Path) -> None:
    array = zarr.create_array(
        str(tmp_path / "a"), shape=(64, 64), chunks=(32, 32), dtype="f4",
        serializer=ShardingCodec(chunk_shape=(8, 8)), compressors=[ZstdCodec()],
    )
    array[:] = 1.5
    before = _stamps(tmp_path / "a")
    code, out, err = run("compact", tmp_path / "a")
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("/: left as it is: 'zstd' after sharding_indexed")
    assert "no sharded arrays" not in out
    code, out, err = run("expand", tmp_path / "a")
    assert code == 1
    assert out == ""  # neither "left as it is" nor the readers' note: one error line
    (line,) = [x for x in err.splitlines() if x.startswith("zarrext")]
    assert "no in-place layout can write such shards" in line
    assert _stamps(tmp_path / "a") == before


def test_cli_expand_prints_the_readers_note_only_when_it_succeeds(run, tmp_path: Path) -> None:
    from zarr.codecs.numcodecs import BZ2

    from zarrext.jobs.shards.compact import READER_NOTE

    # bz2: a compressor zarrext knows no slot bound for, so expand must fail
    _zarr_python_shards(str(tmp_path / "a"), compressors=BZ2(level=1))
    code, out, err = run("expand", tmp_path / "a")
    assert code == 1
    assert READER_NOTE not in out + err
    assert "no bound" in err
    zarr.create_array(str(tmp_path / "b"), shape=(8, 8), chunks=(2, 2), shards=(4, 4),
                      dtype="f4", compressors=None)[:2, :2] = 1.5
    code, out, err = run("expand", tmp_path / "b")
    assert code == 0, err
    assert out.splitlines()[-1] == f"note: {READER_NOTE}"


def test_compact_on_s3_leaves_dense_objects_unwritten(run, s3: dict[str, Any]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    bucket = s3["url"].removeprefix("s3://")
    # every PUT makes a version: a count that would show a rewrite to the same bytes
    fs.call_s3("put_bucket_versioning", Bucket=bucket,
               VersioningConfiguration={"Status": "Enabled"})
    url = f"{s3['url']}/a.zarr"
    array, data = _zarr_python_shards(url, storage_options=s3["options"])

    def versions() -> dict[str, int]:
        listed = fs.call_s3("list_object_versions", Bucket=bucket, Prefix="a.zarr/c/")
        return dict(Counter(v["Key"] for v in listed["Versions"]))

    before = versions()
    assert len(before) == 4
    assert set(before.values()) == {1}
    report = zarrext.compact(array)
    assert (report.shards, report.unchanged) == (4, 4)
    code, out, err = run("compact", url, "--storage-options", json.dumps(s3["options"]))
    assert code == 0, err
    assert "all already dense: left as they are" in out
    assert versions() == before
    np.testing.assert_array_equal(
        zarr.open_array(url, mode="r", storage_options=s3["options"])[:], data
    )
