"""check: reports index checksum, bounds and overlap problems; repairs only with repair=True."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

import zarrext
from zarrext.cli import app
from zarrext.sharding import writer

ISZ = 16 * 16 + 4


def _array(path: Path, location: str = "start") -> zarr.Array:
    array = zarrext.create_array(
        str(path), shape=(32, 32), chunks=(32, 32), dtype="i4", fill_value=0, compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8), codecs=[BytesCodec(), Crc32cCodec()], index_location=location
        ),
        shard_layout="fixed-slot",
    )
    array[:] = np.arange(32 * 32, dtype="i4").reshape(32, 32)
    return array


def _digest(path: Path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()


def _table(shard: Path) -> np.ndarray:
    return np.frombuffer(shard.read_bytes()[: ISZ - 4], dtype="<u8").reshape(-1, 2).copy()


def _put_table(shard: Path, table: np.ndarray) -> None:
    import google_crc32c

    raw = table.astype("<u8").tobytes()
    with open(shard, "r+b") as f:
        f.write(raw + google_crc32c.value(raw).to_bytes(4, "little"))


def test_clean_array_validates(tmp_path: Path) -> None:
    assert zarrext.check(_array(tmp_path / "a")) == []


def test_checksum_mismatch_reported_not_changed(tmp_path: Path) -> None:
    array = _array(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    data[20] ^= 0xFF
    shard.write_bytes(bytes(data))
    digest = _digest(tmp_path / "a")
    (finding,) = zarrext.check(array)
    assert "checksum" in finding.problems[0].lower() or "decode" in finding.problems[0]
    assert _digest(tmp_path / "a") == digest
    (finding,) = zarrext.check(array, repair=True)  # cannot be rebuilt without a journal
    assert not finding.ok
    assert _digest(tmp_path / "a") == digest


def test_out_of_bounds_and_overlap_reported_then_repaired(tmp_path: Path) -> None:
    array = _array(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    table = _table(shard)
    table[3] = (shard.stat().st_size - 10, 260)  # past the end
    table[7] = (table[6, 0] + 4, table[6, 1])  # overlaps chunk 6
    _put_table(shard, table)
    digest = _digest(tmp_path / "a")
    (finding,) = zarrext.check(array)
    text = " ".join(finding.problems)
    assert "inner chunk 3" in text
    assert "past end" in text
    assert "6 and 7 overlap" in text
    assert _digest(tmp_path / "a") == digest
    (finding,) = zarrext.check(array, repair=True)
    assert finding.ok
    assert len(finding.repaired) == 2
    assert zarrext.check(array) == []
    values = zarr.open_array(str(tmp_path / "a"))[:]
    expected = np.arange(32 * 32, dtype="i4").reshape(32, 32)
    for flat in range(16):
        i, j = divmod(flat, 4)
        want = 0 if flat in (3, 7) else expected[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8]
        np.testing.assert_array_equal(values[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8], want)


@pytest.mark.parametrize("location", ["start", "end"])
def test_torn_index_rolled_back_from_journal(tmp_path: Path, location: str) -> None:
    array = _array(tmp_path / "a", location)
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    offset = 0 if location == "start" else len(good) - ISZ
    writer.write_journal(shard, len(good), offset, good[offset : offset + ISZ])
    with open(shard, "r+b") as f:  # half a new index, then the writer died
        f.seek(offset)
        f.write(os.urandom(ISZ // 2))
        f.seek(0, 2)
        f.write(os.urandom(100))
    assert zarrext.check(array)  # reported
    (finding,) = zarrext.check(array, repair=True)
    assert finding.ok
    assert shard.read_bytes() == good
    assert zarrext.check(array) == []


def test_torn_journal_is_discarded(tmp_path: Path) -> None:
    array = _array(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    writer.journal_path(shard).write_bytes(b"ZXJ1\x00\x01")
    (finding,) = zarrext.check(array)
    assert "torn journal" in finding.problems[0]
    zarrext.open_array(str(tmp_path / "a"))  # opening for writing repairs
    assert not writer.journal_pending(shard)
    assert shard.read_bytes() == good


def test_stale_temp_file_removed_only_on_repair(tmp_path: Path) -> None:
    array = _array(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    dead = shard.with_name("0" + writer.TMP_MARK + "999999999-abcd")
    dead.write_bytes(b"x")
    alive = shard.with_name("0" + writer.TMP_MARK + f"{os.getpid()}-abcd")
    alive.write_bytes(b"x")
    (finding,) = zarrext.check(array)
    assert dead.exists()
    assert any(dead.name in p for p in finding.problems)
    zarrext.check(array, repair=True)
    assert not dead.exists()
    assert alive.exists()


def test_cli_check_and_compact(tmp_path: Path) -> None:
    array = _array(tmp_path / "a")
    runner = CliRunner()
    result = runner.invoke(app, ["check", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "every shard validates" in result.output
    shard = tmp_path / "a" / "c" / "0" / "0"
    writer.journal_path(shard).write_bytes(b"torn")
    result = runner.invoke(app, ["check", str(tmp_path / "a")])
    assert result.exit_code == 1
    assert "torn journal" in result.output
    result = runner.invoke(app, ["check", str(tmp_path / "a"), "--repair"])
    assert result.exit_code == 0
    assert "repaired" in result.output
    array[:8, :8] = 1  # moves a chunk out of its slot
    size = shard.stat().st_size
    result = runner.invoke(app, ["compact", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "1 shards" in result.output
    assert shard.stat().st_size < size
    result = runner.invoke(app, ["compact", "--expand", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert zarr.open_array(str(tmp_path / "a"))[0, 0] == 1
