"""shard_report / render_shard_table: layout guess, bytes stored, file size, empty chunks."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from zarr.codecs import BytesCodec, ShardingCodec

import zarrext
from zarrext.cli.render import render_shard_table
from zarrext.jobs.shards.inspect import shard_report, writes_text
from zarrext.sharding import ShardLayoutError

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
    assert info.stored_bytes == info.chunk_bytes == RAW  # the index is not counted
    assert info.index_bytes == ISZ
    assert info.file_size == 16 * RAW + ISZ
    assert info.in_place
    assert not info.pending

    append = _create(tmp_path / "a", "append")
    append[:8, :8] = 1
    append[:8, :8] = 2  # the old copy and the old index become dead bytes
    (info,) = shard_report(append)
    assert info.layout == "append"
    assert info.file_size == 2 * RAW + 2 * ISZ  # chunk + index, twice
    assert info.stored_bytes == RAW

    zarrext.compact(append)
    (info,) = shard_report(append)
    assert info.layout == "dense"
    assert info.file_size == info.stored_bytes + ISZ


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
    from zarrext.jobs.shards.inspect import MAX_SHARD_ROWS

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
    assert "1/10 chunks empty" in text  # the rest: 5 shards of 2 chunks, one chunk empty
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
    from zarrext.jobs.shards.inspect import shard_json

    array = _create(tmp_path / "a", "fixed-slot")
    array[:8, :8] = 1
    (info,) = shard_report(array)
    document = shard_json(info)
    assert document["key"] == "c/0/0"
    assert (document["empty_chunks"], document["n_chunks"]) == (15, 16)
    shard = tmp_path / "a" / "c" / "0" / "0"
    assert document["file_size"] == info.file_size == shard.stat().st_size
    assert document["writes"] == "in place (each chunk in its slot)"


# -- issue 34.6: inner chunks beyond the array's edge; counts and their nouns --


def _inside_and_written(
    shape: tuple[int, int], shard: tuple[int, int], inner: tuple[int, int],
    written: tuple[slice, slice],
) -> dict[str, tuple[int, int]]:
    """Per shard key: (inner chunks inside the array, those of them no write touched),
    counted chunk by chunk from the geometry alone."""
    out = {}
    for si in range(-(-shape[0] // shard[0])):
        for sj in range(-(-shape[1] // shard[1])):
            inside = empty = 0
            for ci in range(shard[0] // inner[0]):
                for cj in range(shard[1] // inner[1]):
                    y0, x0 = si * shard[0] + ci * inner[0], sj * shard[1] + cj * inner[1]
                    if y0 >= shape[0] or x0 >= shape[1]:
                        continue  # beyond the edge: no chunk of the array
                    inside += 1
                    touched = (y0 < written[0].stop and written[0].start < y0 + inner[0]
                               and x0 < written[1].stop and written[1].start < x0 + inner[1])
                    empty += not touched
            out[f"c/{si}/{sj}"] = (inside, empty)
    return out


@settings(max_examples=15)
@given(
    inner=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    per_shard=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    shards=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    cut=st.tuples(st.integers(0, 15), st.integers(0, 15)),
    corner=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    layout=st.sampled_from([None, "fixed-slot", "append"]),
)
def test_inner_chunks_beyond_the_edge_are_neither_empty_nor_counted(
    tmp_path_factory: pytest.TempPathFactory, inner: tuple[int, int],
    per_shard: tuple[int, int], shards: tuple[int, int], cut: tuple[int, int],
    corner: tuple[float, float], layout: str | None,
) -> None:
    """An edge shard's inner chunks past the array's shape hold no data: the report
    counts neither them nor their bytes ("48/64 empty" for a full array was wrong)."""
    shard = (inner[0] * per_shard[0], inner[1] * per_shard[1])
    # the array ends anywhere in its last shard
    shape = tuple(max(1, n * s - c % s) for n, s, c in zip(shards, shard, cut, strict=True))
    start = tuple(int(f * (s - 1)) for f, s in zip(corner, shape, strict=True))
    written = (slice(start[0], shape[0]), slice(start[1], shape[1]))
    path = tmp_path_factory.mktemp("edge") / "a.zarr"
    array = zarrext.create_array(
        str(path), shape=shape, chunks=shard, dtype="i4", fill_value=0, compressors=None,
        serializer=ShardingCodec(chunk_shape=inner, codecs=[BytesCodec()]),
        shard_layout=layout,
    )
    array[written] = 1
    expected = _inside_and_written(shape, shard, inner, written)
    report = shard_report(array)
    assert {i.key: (i.n_chunks, i.empty_chunks) for i in report} == {
        k: v for k, v in expected.items() if v[1] < v[0]  # a shard with no chunk is no file
    }
    for info in report:  # the chunks' bytes are the values they hold, 4 bytes each
        assert info.stored_bytes == 4 * inner[0] * inner[1] * (info.n_chunks - info.empty_chunks)


def _messages(run, *commands: tuple[str, ...]) -> str:
    out = []
    for args in commands:
        code, text, err = run(*args)
        assert code == 0, err
        out.append(text + err)
    return "\n".join(out)


@pytest.mark.parametrize("n_shards", [1, 2])
def test_counts_in_messages_agree_with_their_nouns(run, tmp_path: Path, n_shards: int) -> None:
    """"1 shard", "2 shards": never "1 shards", never "shard(s)" (issue 34.6)."""
    import re

    path = tmp_path / "a.zarr"
    array = zarr.create_array(str(path), shape=(4, 4 * n_shards), chunks=(2, 2),
                              shards=(4, 4), dtype="float32", compressors=None)
    array[:] = 1.5
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    for i in range(n_shards):
        group.create_array(f"v{i}", shape=(4,), chunks=(4,), dtype="i4")[:] = 1
    text = _messages(
        run, ("compact", path, "--dry-run"), ("expand", path), ("compact", path),
        ("compact", path), ("check", path), ("check", path, "--deep"), ("info", path),
        ("info", tmp_path / "g.zarr"), ("inspect", path),
    )
    assert not re.search(r"\b1 (shards|chunks|arrays|indexes|objects|files)\b", text), text
    assert "(s)" not in text
    noun = "shard" if n_shards == 1 else "shards"
    assert f"{n_shards} {noun} rewritten" in text
    assert (f"{n_shards} {noun}, already dense: left as it is" if n_shards == 1
            else f"{n_shards} {noun}, all already dense: left as they are") in text
    assert f"group: {n_shards} {'array' if n_shards == 1 else 'arrays'}," in text


def test_summary_line_says_one_shard(tmp_path: Path) -> None:
    from zarrext.jobs.shards.inspect import summary_line

    array = _create(tmp_path / "a", None)
    array[:8, :8] = 1
    (info,) = shard_report(array)
    line = summary_line([info])
    assert line.startswith("... and 1 more shard (1 dense): ")
    assert "15/16 chunks empty" in line
