"""check: reports index checksum, bounds and overlap problems; repairs only with repair=True."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

import zarrext
from zarrext.cli import app
from zarrext.sharding.journal import TMP_MARK, journal_path, journal_pending, write_journal

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
    write_journal(shard, len(good), offset, good[offset : offset + ISZ])
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
    journal_path(shard).write_bytes(b"ZXJ1\x00\x01")
    (finding,) = zarrext.check(array)
    assert "torn journal" in finding.problems[0]
    zarrext.open_array(str(tmp_path / "a"))  # opening for writing repairs
    assert not journal_pending(shard)
    assert shard.read_bytes() == good


def test_stale_temp_file_removed_only_on_repair(tmp_path: Path) -> None:
    array = _array(tmp_path / "a")
    shard = tmp_path / "a" / "c" / "0" / "0"
    dead = shard.with_name("0" + TMP_MARK + "999999999-abcd")
    dead.write_bytes(b"x")
    alive = shard.with_name("0" + TMP_MARK + f"{os.getpid()}-abcd")
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
    journal_path(shard).write_bytes(b"torn")
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
    assert "1 shard rewritten" in result.output
    assert shard.stat().st_size < size
    result = runner.invoke(app, ["compact", "--expand", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert zarr.open_array(str(tmp_path / "a"))[0, 0] == 1


def _dense(path: Path, location: str = "end") -> zarr.Array:
    """Shards as zarr-python writes them: chunks packed in order, then (or after) the index."""
    array = zarr.create_array(
        str(path), shape=(8, 8), chunks=(8, 8), dtype="float32", compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(2, 2), codecs=[BytesCodec()], index_location=location
        ),
    )
    array[:] = np.linspace(0, 1, 64, dtype="float32").reshape(8, 8)
    return array


Make = Callable[[Path, str], zarr.Array]


def _kinds(array: zarr.Array) -> list[tuple[str, str, bool]]:
    return [(f.key, p.kind, p.repairable) for f in zarrext.check(array) for p in f.details]


@pytest.mark.parametrize("make", [_array, _dense], ids=["fixed-slot", "dense"])
def test_truncated_index_at_end_told_from_checksum_error(tmp_path: Path, make: Make) -> None:
    array = make(tmp_path / "a", "end")
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    isz = ISZ  # 16 inner chunks
    for cut in [k for k in range(1, isz - 15) if k % 16]:
        shard.write_bytes(good[:-cut])
        (finding,) = zarrext.check(array)
        assert finding.problems == [
            f"truncated: file is {len(good) - cut} bytes, its index needs {len(good)}"
        ], cut
    for at in range(len(good) - isz, len(good)):  # damage in place: never called a cut
        damaged = bytearray(good)
        damaged[at] ^= 0x5A
        shard.write_bytes(bytes(damaged))
        assert _kinds(array) == [("c/0/0", "index_checksum", False)], at
    left = len(good) - isz - 7
    shard.write_bytes(good[:left])  # the index is gone: only a file shorter than one tells
    kind = "index_checksum" if left >= isz else "truncated"
    assert _kinds(array) == [("c/0/0", kind, False)]
    shard.write_bytes(good[:10])
    (finding,) = zarrext.check(array)
    assert finding.problems == [f"truncated: file is 10 bytes, its index needs {isz}"]


@pytest.mark.parametrize("make", [_array, _dense], ids=["fixed-slot", "dense"])
def test_truncated_index_at_start(tmp_path: Path, make: Make) -> None:
    array = make(tmp_path / "a", "start")
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    shard.write_bytes(good[:-50])
    digest = _digest(tmp_path / "a")
    (finding,) = zarrext.check(array, repair=True)
    assert finding.problems == [
        f"truncated: file is {len(good) - 50} bytes, its index needs {len(good)}"
    ]
    assert finding.remaining == finding.problems  # repair cannot bring the bytes back
    assert _digest(tmp_path / "a") == digest
    data = bytearray(good)
    data[5] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert _kinds(array) == [("c/0/0", "index_checksum", False)]


def _damaged_group(path: Path) -> tuple[zarr.Group, int]:
    """a: c/0/0 cut by 5 bytes, c/1/1 index damaged in place, a dead writer's file
    beside c/0/0 and c/1/0; b: validates. Returns the group and a shard's size."""
    group = zarr.open_group(str(path), mode="w")
    for name in ("a", "b"):
        group.create_array(name, shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="float32",
                           compressors=None)[:] = 1.5
    shards = path / "a" / "c"
    size = (shards / "0" / "0").stat().st_size
    (shards / "0" / "0").write_bytes((shards / "0" / "0").read_bytes()[:-5])
    data = bytearray((shards / "1" / "1").read_bytes())
    data[-10] ^= 0xFF
    (shards / "1" / "1").write_bytes(bytes(data))
    for key in ("0/0", "1/0"):
        (shards / (key + TMP_MARK + "999999999-abcd")).write_bytes(b"x")
    return group, size


def test_cli_check_wording_keys_once_and_exit_codes(tmp_path: Path) -> None:
    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args))
        assert result.exception is None or isinstance(result.exception, SystemExit)
        return result.exit_code, result.output

    path = tmp_path / "g.zarr"
    _, size = _damaged_group(path)
    b_files = sum(p.stat().st_size for p in (path / "b" / "c").rglob("*") if p.is_file())
    tmp = "0" + TMP_MARK + "999999999-abcd"
    problems = [
        "a c/0/0:",
        "  problem: stale temporary file " + tmp + " (its process is gone)",
        "    {0}",
        f"  problem: truncated: file is {size - 5} bytes, its index needs {size}",
        "    --repair cannot fix this: restore the shard from a copy",
        "a c/1/0:",
        "  problem: stale temporary file " + tmp + " (its process is gone)",
        "    {0}",
        "a c/1/1:",
        f"  problem: index checksum error: the 68-byte index at byte {size - 68} "
        "does not match its checksum",
        "    --repair cannot fix this: restore the shard from a copy",
        "b: every shard validates: 4 shard indexes read, chunks' byte ranges checked, no "
        "interrupted writes left behind; chunk contents not decoded (--deep decodes them); "
        # the bytes as info and inspect count them: the values (no compression), and
        # the shard files whole
        f"{8 * 8 * 4} bytes stored ({b_files:,} in objects)",
    ]
    code, out = run("check", str(path))
    assert code == 1
    assert out.splitlines() == [line.format("--repair fixes this") for line in problems]
    for key in ("c/0/0", "c/1/0", "c/1/1"):
        assert out.count(key) == 1

    code, out = run("check", str(path), "--repair")
    assert code == 1  # the cut and the checksum error remain
    assert out.splitlines() == [line.format(f"repaired: deleted {tmp}") for line in problems]
    assert not list(path.rglob(f"*{TMP_MARK}*"))

    code, out = run("check", str(path), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False
    findings = {a["array"]: a["findings"] for a in report["arrays"]}
    assert findings["b"] == []
    assert [(f["key"], f["ok"], [(p["kind"], p["repairable"], p["repaired"], p["advice"])
                                 for p in f["problems"]]) for f in findings["a"]] == [
        ("c/0/0", False, [("truncated", False, False, "restore the shard from a copy")]),
        ("c/1/1", False, [("index_checksum", False, False, "restore the shard from a copy")]),
    ]

    for key in ("0/0", "1/1"):  # restored from a copy: only repairable problems left
        (path / "a" / "c" / key).write_bytes((path / "b" / "c" / key).read_bytes())
    (path / "a" / "c" / "1" / ("1" + TMP_MARK + "999999999-ef")).write_bytes(b"x")
    code, out = run("check", str(path), "--json")
    assert code == 1  # found, not yet repaired
    (finding,) = json.loads(out)["arrays"][0]["findings"]
    assert [(p["kind"], p["repairable"], p["repaired"]) for p in finding["problems"]] == [
        ("stale_temporary_file", True, False)
    ]
    code, out = run("check", str(path), "--repair", "--json")
    assert code == 0
    (finding,) = json.loads(out)["arrays"][0]["findings"]
    assert finding["ok"] is True
    assert finding["problems"][0]["repaired"] is True
    code, out = run("check", str(path))
    assert code == 0
    assert out.splitlines() == [f"{name}{problems[-1][1:]}" for name in "ab"]


def test_findings_sorted_by_key_numbers_as_numbers(tmp_path: Path) -> None:
    array = zarr.create_array(str(tmp_path / "a"), shape=(24,), chunks=(2,), dtype="i4",
                              compressors=None)
    array[:] = np.arange(24, dtype="i4")
    for i in (11, 2, 10, 0):
        (tmp_path / "a" / "c" / (f"{i}" + TMP_MARK + "999999999-ab")).write_bytes(b"x")
    assert [f.key for f in zarrext.check(array)] == ["c/0", "c/2", "c/10", "c/11"]


# -- --deep: what it cannot verify ------------------------------------------------------


@pytest.mark.parametrize(
    ("compressors", "shards", "verifiable", "damage"),
    [
        (None, None, False, (9, 0x01)),
        ([zarrext.ShuffleCodec(element_size=4)], (8, 8), False, (9, 0x01)),
        ([Crc32cCodec()], None, True, (9, 0x01)),
        # A conditional header checks itself only (its reserved bits), not the payload.
        ([zarrext.ConditionalCodec([{"name": "zstd", "configuration": {"level": 1}}])],
         (8, 8), True, (0, 0x80)),
    ],
    ids=["plain", "sharded-shuffle", "crc32c", "conditional"],
)
def test_deep_says_which_chunks_it_cannot_verify(
    tmp_path: Path, compressors: list | None, shards: tuple | None, verifiable: bool,
    damage: tuple[int, int],
) -> None:
    from zarrext.jobs.shards.check import check, unverifiable

    array = zarrext.create_array(
        str(tmp_path / "a"), shape=(8, 8), chunks=(4, 4), shards=shards, dtype="float32",
        serializer=BytesCodec(), compressors=compressors,
    )
    array[:] = np.arange(64, dtype="float32").reshape(8, 8)
    chunk = tmp_path / "a" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    at, bits = damage  # a value's low bit decodes, unless a checksum catches it
    data[at] ^= bits
    chunk.write_bytes(bytes(data))
    findings = check(array, deep=True)
    reason = unverifiable(array)
    result = CliRunner().invoke(app, ["check", str(tmp_path / "a"), "--deep"])
    if verifiable:
        assert reason is None
        assert [f.key for f in findings] == ["c/0/0"]
        assert result.exit_code == 1
    else:
        assert findings == []  # the damage decodes: it cannot be seen...
        assert reason is not None  # ...and the check says so
        assert "crc32c" in reason
        assert ("inner chunks" in reason) is (shards is not None)
        assert result.exit_code == 0
        assert "cannot verify" in result.output
        assert "crc32c" in result.output
        assert "validates" not in result.output
    as_json = CliRunner().invoke(app, ["check", str(tmp_path / "a"), "--deep", "--json"])
    assert json.loads(as_json.output)["arrays"][0]["unverified"] == reason


def test_cli_check_says_what_it_checked_and_that_deep_decodes(run, tmp_path: Path) -> None:
    from zarr.codecs import Crc32cCodec

    array = zarr.create_array(str(tmp_path / "a"), shape=(8,), chunks=(4,), dtype="i4",
                              compressors=[Crc32cCodec()])
    array[:] = 1
    chunk = tmp_path / "a" / "c" / "1"
    raw = bytearray(chunk.read_bytes())
    raw[0] ^= 0xFF  # a damaged value: only decoding finds it
    chunk.write_bytes(bytes(raw))
    code, out, _ = run("check", tmp_path / "a")
    assert code == 0
    assert out.splitlines() == [
        "/: 2 chunks listed, no interrupted writes left behind; chunk contents not "
        f"decoded (--deep decodes them); {2 * (4 * 4 + 4)} bytes stored"  # values + crc32c
    ]
    code, out, _ = run("check", tmp_path / "a", "--deep")
    assert code == 1
    assert "c/1" in out
    assert "Stored: 0x" in out  # the checksums in hex
    chunk.write_bytes(bytes(raw[:0]) + bytes([raw[0] ^ 0xFF]) + bytes(raw[1:]))
    code, out, _ = run("check", tmp_path / "a", "--deep")
    assert code == 0
    assert out.splitlines() == ["/: every chunk validates: 2 chunks read, every chunk in them "
                                f"decoded; {2 * (4 * 4 + 4)} bytes stored"]


def test_deep_check_of_nested_shards_opened_by_zarrext(tmp_path: Path) -> None:
    # issue 26 item 6: zarrext.open_array's runtime sharding codec kept nested shards
    # off the synchronous inner-chunk decoder (TypeError: SupportsSyncCodec)
    import warnings

    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

    path = str(tmp_path / "nested.zarr")
    inner = ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), Crc32cCodec()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: nested sharding disables partial reads
        array = zarr.create_array(path, shape=(16, 16), chunks=(8, 8), dtype="uint16",
                                  serializer=ShardingCodec(chunk_shape=(4, 4), codecs=[inner]))
        array[:] = np.arange(256, dtype="uint16").reshape(16, 16)
        assert zarrext.check(zarrext.open_array(path, mode="r"), deep=True) == []
        shard = tmp_path / "nested.zarr" / "c" / "0" / "0"
        damaged = bytearray(shard.read_bytes())
        damaged[5] ^= 0xFF  # a byte of the first inner shard's first chunk
        shard.write_bytes(bytes(damaged))
        problems = zarrext.check(zarrext.open_array(path, mode="r"), deep=True)
    assert [p.key for p in problems] == ["c/0/0"]


# -- a killed writer's temporary file goes with the journal on the next open (27.13) --

_PAUSED_WRITER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[2])
import numpy as np
import zarrext
array = zarrext.open_array(sys.argv[1], shard_layout="append")


def publish_never(source, target):
    # the new shard is built under its temporary name: stop here until killed
    print("built", flush=True)
    time.sleep(600)


os.link = publish_never
array[32:, :] = np.ones((32, 32), dtype="i4")  # shard c/1/0 is new: built, then linked
"""


def _paused_writer(path: Path) -> Any:
    """A writer process stopped with a new shard's temporary file written, unpublished."""
    import subprocess
    import sys

    src = Path(zarrext.__file__).parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_WRITER, str(path), str(src)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "built"
    return proc


def _append_array(path: Path) -> None:
    array = zarrext.create_array(
        str(path), shape=(64, 32), chunks=(32, 32), dtype="i4", fill_value=0, compressors=None,
        serializer=ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), Crc32cCodec()]),
        shard_layout="append",
    )
    array[:32] = np.arange(32 * 32, dtype="i4").reshape(32, 32)


def test_opening_for_writing_removes_a_killed_writers_temporary_file(tmp_path: Path) -> None:
    import signal

    path = tmp_path / "a"
    _append_array(path)
    proc = _paused_writer(path)
    (tmp,) = (path / "c" / "1").glob(f"0{TMP_MARK}*")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    (finding,) = zarrext.check(zarr.open_array(str(path), mode="r"))
    assert finding.problems == [f"stale temporary file {tmp.name} (its process is gone)"]
    zarrext.open_array(str(path), mode="r+")  # rolls the dead writer's file away
    assert not tmp.exists()
    assert zarrext.check(zarr.open_array(str(path), mode="r")) == []
    np.testing.assert_array_equal(
        zarr.open_array(str(path), mode="r")[:32],
        np.arange(32 * 32, dtype="i4").reshape(32, 32))


def test_opening_for_writing_keeps_a_live_writers_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "a"
    _append_array(path)
    proc = _paused_writer(path)
    try:
        (tmp,) = (path / "c" / "1").glob(f"0{TMP_MARK}*")
        # another host's writer: its process cannot be seen from here, so never judged
        foreign = tmp.with_name(f"0{TMP_MARK}999999999-0badc0de-abcdef01")
        foreign.write_bytes(b"x")
        zarrext.open_array(str(path), mode="r+")
        zarrext.check(zarr.open_array(str(path), mode="r+"), repair=True)
        assert tmp.exists()
        assert foreign.exists()
    finally:
        proc.kill()
        proc.wait(timeout=30)
