"""shard_report / render_shard_table: layout guess, bytes used, file size, empty chunks."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import zarr
from rich.console import Console
from zarr.codecs import BytesCodec, ShardingCodec

import zarrext
from zarrext.cli.render import render_shard_table
from zarrext.sharding import ShardLayoutError, shard_report
from zarrext.sharding.inspect import writes_text

RAW = 8 * 8 * 4
ISZ = 16 * 16 + 4


def _create(path: Path, layout: str | None, location: str = "end") -> zarr.Array:
    return zarrext.create_array(
        str(path), shape=(32, 64), chunks=(32, 32), dtype="i4", fill_value=0, compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(8, 8), codecs=[BytesCodec()], index_location=location
        ),
        shard_layout=layout,
    )


def test_report_fixed_slot_append_dense(tmp_path: Path) -> None:
    fixed = _create(tmp_path / "f", "fixed-slot")
    fixed[:8, :8] = 1  # one of 16 chunks in shard c/0/0; shard c/0/1 not stored
    (info,) = shard_report(fixed)
    assert info.key == "c/0/0"
    assert (info.layout, info.empty_chunks, info.n_chunks) == ("fixed-slot", 15, 16)
    assert info.bytes_used == RAW + ISZ
    assert info.file_size == 16 * RAW + ISZ
    assert info.in_place
    assert not info.pending

    append = _create(tmp_path / "a", "append")
    append[:8, :8] = 1
    append[:8, :8] = 2  # the old copy and the old index become dead bytes
    (info,) = shard_report(append)
    assert info.layout == "append"
    assert info.file_size == 2 * RAW + 2 * ISZ  # chunk + index, twice
    assert info.bytes_used == RAW + ISZ

    zarrext.compact(append)
    (info,) = shard_report(append)
    assert info.layout == "dense"
    assert info.file_size == info.bytes_used


def test_read_only_and_corrupt(tmp_path: Path) -> None:
    array = _create(tmp_path / "a", "fixed-slot", "start")
    array[:, :] = 3
    shard = tmp_path / "a" / "c" / "0" / "1"
    shard.write_bytes(b"\x00" * shard.stat().st_size)  # index checksum now fails
    report = shard_report(zarr.open_array(str(tmp_path / "a"), mode="r"))
    assert [i.layout for i in report] == ["fixed-slot", "unknown"]
    # opened read-only, still a local fixed-slot shard: writers opened with a
    # layout could write it in place; this handle has none, so its writes would not
    assert report[0].in_place
    assert not report[1].in_place
    out = StringIO()
    render_shard_table(report, Console(file=out, width=250))
    text = out.getvalue()
    assert "in place (each chunk in its slot)" not in text
    assert "whole-shard rewrite (zarr-python, zarrext.open_array without shard_layout); " \
        "in place when opened with shard_layout='fixed-slot'" in text
    assert "index unreadable" in text


def test_render_table(tmp_path: Path) -> None:
    array = _create(tmp_path / "a", "fixed-slot")
    array[:8, :8] = 1
    out = StringIO()
    render_shard_table(shard_report(array), Console(file=out, width=200))
    text = out.getvalue()
    assert "c/0/0" in text
    assert "fixed-slot" in text
    assert "15/16" in text
    assert "in place" in text


def test_not_sharded(tmp_path: Path) -> None:
    array = zarr.create_array(str(tmp_path / "p"), shape=(4,), chunks=(2,), dtype="i4")
    with pytest.raises(ShardLayoutError, match="not sharded"):
        shard_report(array)
    assert np.all(array[:] == 0)


def test_zarrext_inspect_shows_shards(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from zarrext.cli import app

    array = _create(tmp_path / "a", "fixed-slot")
    array[:8, :8] = 1
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "a")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "shards of" in result.output
    assert "fixed-slot" in result.output
    assert "15/16" in result.output


def test_inspect_read_only_local_fixed_slot_is_in_place(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from zarrext.cli import app

    array = _create(tmp_path / "a", "fixed-slot")
    array[:8, :8] = 1
    array = _create(tmp_path / "d", None)  # zarr-python's dense shards
    array[:8, :8] = 1
    env = {"COLUMNS": "250"}
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "a")], env=env)
    assert result.exit_code == 0, result.output
    # inspect opens without a layout: it says what plain writes do, and the option
    assert "whole-shard rewrite" in result.output
    assert "in place when opened with shard_layout='fixed-slot'" in result.output
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "d")], env=env)
    assert "in place when opened with shard_layout='append'" in result.output


def test_inspect_says_a_write_without_a_layout_rewrites_the_shard(run, tmp_path: Path) -> None:
    """zarrext.open_array without shard_layout replaces the whole shard file on a
    write (a new inode, a new size); inspect must not call that 'in place'."""
    _create(tmp_path / "d", None)[:, :] = 1  # zarr-python's dense shards
    shard = tmp_path / "d" / "c" / "0" / "0"
    inode = shard.stat().st_ino
    zarrext.open_array(str(tmp_path / "d"))[:8, :8] = 2
    assert shard.stat().st_ino != inode  # replaced, not written in place
    code, out, err = run("inspect", tmp_path / "d", "--json")
    assert code == 0, err
    writes = {s["writes"] for s in json.loads(out)["arrays"][0]["shards"]}
    assert writes == {"whole-shard rewrite (zarr-python, zarrext.open_array without "
                      "shard_layout); in place when opened with shard_layout='append'"}
    # through an array opened with a layout, the report says what its writes do
    appender = zarrext.open_array(str(tmp_path / "d"), shard_layout="append")
    assert {writes_text(i) for i in shard_report(appender)} == {
        "in place (appended; zarrext expand puts chunks in slots)"}


def test_shard_rows_capped_with_a_summary(tmp_path: Path) -> None:
    from zarrext.sharding.inspect import MAX_SHARD_ROWS

    array = zarrext.create_array(
        str(tmp_path / "a"), shape=(8, 8 * 25), chunks=(8, 8), dtype="i4", fill_value=0,
        compressors=None, serializer=ShardingCodec(chunk_shape=(8, 4), codecs=[BytesCodec()]),
        shard_layout="fixed-slot",
    )
    array[:, : 8 * 24 + 4] = 1  # 25 shards, the last one half empty
    report = shard_report(array)
    assert len(report) == 25 > MAX_SHARD_ROWS == 20
    out = StringIO()
    table = render_shard_table(report, Console(file=out, width=200))
    assert table.row_count == 20
    text = out.getvalue()
    assert "c/0/19" in text
    assert "c/0/20" not in text
    assert "... and 5 more shards (5 fixed-slot)" in text
    assert "1/10 empty chunks" in text  # the rest: 5 shards of 2 chunks, one chunk empty
    full_text = StringIO()
    full = render_shard_table(report, Console(file=full_text, width=200), max_rows=None)
    assert full.row_count == 25
    assert "more shards" not in full_text.getvalue()


def test_one_line_per_shard_and_the_writes_said_once(tmp_path: Path) -> None:
    array = _create(tmp_path / "a", "fixed-slot")
    array[:, :] = 1  # two shards, c/0/0 and c/0/1
    out = StringIO()
    render_shard_table(shard_report(array), Console(file=out, width=60), title="shards of a")
    lines = out.getvalue().splitlines()
    assert lines[0] == "shards of a; writes: in place (each chunk in its slot)"
    assert sum("in place" in line for line in lines) == 1
    rows = [line for line in lines if line.lstrip().startswith("c/")]
    assert [row.split()[:2] for row in rows] == [["c/0/0", "fixed-slot"], ["c/0/1", "fixed-slot"]]
    assert all(row.rstrip().endswith("0/16") for row in rows)  # no chunk empty, on that line


def test_a_shard_that_differs_says_so_in_a_note(tmp_path: Path) -> None:
    array = _create(tmp_path / "a", "fixed-slot")
    array[:, :] = 1
    shard = tmp_path / "a" / "c" / "0" / "1"
    shard.write_bytes(b"\x00" * shard.stat().st_size)  # index unreadable
    out = StringIO()
    table = render_shard_table(shard_report(array), Console(file=out, width=200))
    assert [c.header for c in table.columns][-1] == "note"
    (bad,) = [line for line in out.getvalue().splitlines() if "c/0/1" in line]
    assert "index unreadable" in bad
    (good,) = [line for line in out.getvalue().splitlines() if "c/0/0" in line]
    assert "index unreadable" not in good


def test_shard_json(tmp_path: Path) -> None:
    from zarrext.sharding.inspect import shard_json

    array = _create(tmp_path / "a", "fixed-slot")
    array[:8, :8] = 1
    (info,) = shard_report(array)
    document = shard_json(info)
    assert document["key"] == "c/0/0"
    assert (document["empty_chunks"], document["n_chunks"]) == (15, 16)
    shard = tmp_path / "a" / "c" / "0" / "0"
    assert document["file_size"] == info.file_size == shard.stat().st_size
    assert document["writes"] == "in place (each chunk in its slot)"
