"""What the CLI prints for people (info, --version) and for scripts (--json)."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from tests.conftest import Run, tree_digest


def make_store(path: Path) -> None:
    group = zarr.open_group(str(path), mode="w", attributes={"title": "demo"})
    cond = group.create_array(
        "cond", shape=(8, 8), chunks=(4, 4), dtype="uint16", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec()])], dimension_names=["y", "x"],
        fill_value=7,
    )
    zarrext.with_runtime(cond)[:] = np.arange(64, dtype=np.uint16).reshape(8, 8) // 8
    group.create_array("sub/sharded", shape=(8, 8), chunks=(2, 2), shards=(4, 4),
                       dtype="float32", compressors=None)[:] = 1.5


def test_version(run: Run) -> None:
    code, out, _ = run("--version")
    assert code == 0
    assert out.strip() == f"zarrext {zarrext.__version__}"
    # one version source: the installed distribution's (pyproject's, dynamic) is it too
    assert version("zarrext") == zarrext.__version__


def test_info_tree_and_json(run: Run, tmp_path: Path) -> None:
    make_store(tmp_path / "s.zarr")
    code, out, err = run("info", tmp_path / "s.zarr", "--json")
    assert code == 0, err
    tree = json.loads(out)
    files = [p for p in (tmp_path / "s.zarr").rglob("*") if p.is_file()]
    assert tree["type"] == "group"
    assert tree["attributes"] == {"title": "demo"}
    assert tree["arrays"] == 2
    # the objects: every chunk and shard file whole (shard indexes too), no zarr.json;
    # stored: the chunks without the shards' indexes
    chunk_files = [p for p in files if p.name != "zarr.json"]
    assert tree["object_bytes"] == sum(p.stat().st_size for p in chunk_files)
    assert tree["stored_bytes"] < tree["object_bytes"]
    cond, sub = tree["members"]
    assert cond["path"] == "cond"
    assert cond["shape"] == [8, 8]
    assert cond["dtype"] == "uint16"
    assert cond["chunks"] == [4, 4]
    assert cond["shards"] is None
    assert cond["codecs"] == ["bytes", "conditional"]
    assert cond["fill_value"] == 7
    assert cond["dimension_names"] == ["y", "x"]
    assert cond["stored_bytes"] == sum(
        p.stat().st_size for p in chunk_files if "cond" in p.relative_to(tmp_path).parts
    )
    sharded = sub["members"][0]
    assert sharded["path"] == "sub/sharded"
    assert sharded["chunks"] == [2, 2]
    assert sharded["shards"] == [4, 4]
    assert sharded["codecs"] == ["sharding_indexed[bytes]"]

    code, out, _ = run("info", tmp_path / "s.zarr")
    assert code == 0
    assert "cond  array 8x8 uint16  chunks 4x4  shards none" in out
    assert "sharded  array 8x8 float32  chunks 2x2  shards 4x4" in out
    assert "dimensions: y, x" in out
    assert "codecs: bytes -> conditional" in out



def test_info_says_each_arrays_chunk_grid(run: Run, tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("edge", shape=(10, 7), chunks=(4, 4), dtype="uint8")
    group.create_array("sharded", shape=(10,), chunks=(2,), shards=(8,), dtype="uint8")
    group.create_array("scalar", shape=(), dtype="uint8")
    group["edge"][:4, :] = 1  # two of the six chunks stored
    group["sharded"][8:] = 1  # the second shard
    code, out, err = run("info", tmp_path / "g.zarr")
    assert code == 0, err
    lines = out.splitlines()

    def grid_of(name: str) -> str:
        at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"{name}  array"))
        return next(line.strip() for line in lines[at + 1:] if "grid:" in line)

    assert grid_of("edge") == "grid: 6 chunks, 2 stored"  # 3 x 2, the edge chunks counted
    assert grid_of("sharded") == "grid: 2 shards of 4 chunks, 1 stored"
    assert grid_of("scalar") == "grid: 1 chunk, 0 stored"
    code, out, err = run("info", tmp_path / "g.zarr", "--json")
    assert [m["stored_objects"] for m in json.loads(out)["members"]] == [2, 0, 1]

def test_info_and_inspect_count_the_same_bytes(run: Run, tmp_path: Path) -> None:
    make_store(tmp_path / "s.zarr")
    _, info_out, _ = run("info", tmp_path / "s.zarr", "--json")
    _, inspect_out, _ = run("inspect", tmp_path / "s.zarr", "--json")
    tree = json.loads(info_out)
    inspected = {a["path"]: a["stored_bytes"] for a in json.loads(inspect_out)["arrays"]}
    listed = {a["path"]: a["stored_bytes"] for a in (tree["members"][0],
                                                      tree["members"][1]["members"][0])}
    assert listed == inspected
    assert all(n > 0 for n in inspected.values())
    assert tree["stored_bytes"] == sum(inspected.values())
    code, text, _ = run("info", tmp_path / "s.zarr")
    assert code == 0
    assert f"{sum(inspected.values()):,} bytes stored" in text


def test_inspect_json(run: Run, tmp_path: Path) -> None:
    make_store(tmp_path / "s.zarr")
    code, out, _ = run("inspect", tmp_path / "s.zarr", "--json")
    assert code == 0
    report = json.loads(out)
    by_path = {a["path"]: a for a in report["arrays"]}
    cond = by_path["cond"]
    expected = zarrext.jobs.inspection.inventory(zarr.open_array(str(tmp_path / "s.zarr" / "cond")))
    assert cond["stored_chunks"] == len(expected.chunks) == 4
    assert cond["stored_bytes"] == expected.stored_bytes
    masks = expected.mask_counts.items()
    assert cond["mask_counts"] == {expected.mask_text(m): n for m, n in masks}
    assert cond["mask_names"] == {m: {"0b0": "raw", "0b1": "zstd"}[m] for m in cond["mask_counts"]}
    assert cond["shards"] is None  # not sharded
    sharded = by_path["sub/sharded"]
    assert sharded["conditional"] is False
    root = tmp_path / "s.zarr" / "sub" / "sharded"
    files = sorted(p for p in (root / "c").rglob("*") if p.is_file())
    assert [s["key"] for s in sharded["shards"]] == [str(p.relative_to(root)) for p in files]
    assert [s["file_size"] for s in sharded["shards"]] == [p.stat().st_size for p in files]
    assert all(s["empty_chunks"] == 0 and s["n_chunks"] == 4 for s in sharded["shards"])
    assert all(s["mask_counts"] == {} for s in sharded["shards"])


@pytest.mark.parametrize("damage", [False, True])
def test_check_json(run: Run, tmp_path: Path, damage: bool) -> None:
    make_store(tmp_path / "s.zarr")
    shard = tmp_path / "s.zarr" / "sub" / "sharded" / "c" / "0" / "0"
    if damage:
        shard.write_bytes(shard.read_bytes()[:-5])  # truncated index
    code, out, _ = run("check", tmp_path / "s.zarr", "--json")
    report = json.loads(out)
    findings = {a["array"]: a["findings"] for a in report["arrays"]}
    assert set(findings) == {"cond", "sub/sharded"}
    assert report["ok"] is (not damage)
    assert code == (1 if damage else 0)
    if damage:
        assert [f["key"] for f in findings["sub/sharded"]] == ["c/0/0"]


def test_expand_command(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    array = zarr.create_array(str(path), shape=(8, 8), chunks=(2, 2), shards=(4, 4),
                              dtype="float32", compressors=None)
    array[:2, :2] = 1.5  # one inner chunk of one shard: dense, that shard holds one chunk
    shard = path / "c" / "0" / "0"
    dense = shard.stat().st_size
    code, out, err = run("expand", path)
    assert code == 0, err
    assert "1 shard rewritten" in out
    assert shard.stat().st_size > dense  # fixed slots: room for all four inner chunks
    expected = np.zeros((8, 8), dtype="float32")
    expected[:2, :2] = 1.5
    np.testing.assert_array_equal(zarr.open_array(str(path))[:], expected)


def test_recompress_json_quiet_and_dry_run(run: Run, tmp_path: Path) -> None:
    make_store(tmp_path / "s.zarr")
    before = tree_digest(tmp_path / "s.zarr")
    code, out, err = run("recompress", tmp_path / "s.zarr", "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["dry_run"] is True
    assert [a["path"] for a in plan["arrays"]] == ["cond"]
    assert plan["arrays"][0]["chunks"] == 4
    code, _, _ = run("compact", tmp_path / "s.zarr", "--dry-run")
    assert code == 0
    assert tree_digest(tmp_path / "s.zarr") == before  # dry runs write nothing

    code, out, err = run("recompress", tmp_path / "s.zarr", "--json")
    assert code == 0, err
    (report,) = json.loads(out)["arrays"]
    after = zarrext.jobs.inspection.inventory(zarr.open_array(str(tmp_path / "s.zarr" / "cond")))
    assert report["path"] == "cond"
    assert report["bytes_after"] == after.stored_bytes
    assert report["masks_after"] == {after.mask_text(m): n for m, n in after.mask_counts.items()}

    code, out, err = run("recompress", tmp_path / "s.zarr", "--quiet")
    assert code == 0, err
    assert out.strip() == ""


def test_size_change_words() -> None:
    from zarrext.jobs.inspection import size_change

    assert size_change(200, 100) == "2.00x smaller"
    assert size_change(100, 128) == "1.28x larger"
    assert size_change(0, 0) == "-"


def test_inspect_labels_and_plot_cap(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.image

    from zarrext.cli import plot

    make_store(tmp_path / "s.zarr")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = run("inspect", "s.zarr")
    assert code == 0
    assert "array s.zarr/cond " in out
    assert "array s.zarr/sub/sharded " in out
    monkeypatch.setattr(plot, "MAX_PLOTTED_ARRAYS", 1)
    code, out, _ = run("inspect", tmp_path / "s.zarr", "--plot", tmp_path / "one.png")
    assert code == 0
    assert "(first 1 of 2 arrays)" in out
    one = matplotlib.image.imread(tmp_path / "one.png")
    monkeypatch.setattr(plot, "MAX_PLOTTED_ARRAYS", 2)
    run("inspect", tmp_path / "s.zarr", "--plot", tmp_path / "two.png")
    two = matplotlib.image.imread(tmp_path / "two.png")
    assert two.shape[0] > one.shape[0]  # one row of panels per plotted array


def test_interrupted_recompress_says_how_far_it_got(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrext.jobs import recompression

    make_store(tmp_path / "s.zarr")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(recompression, "recompress", interrupted)
    code, _, err = run("recompress", tmp_path / "s.zarr")
    assert code == 130
    assert err.count("\n") == 1
    assert "recompress stopped in cond after 0 finished arrays" in err
    assert "rerun the same command to finish" in err


def test_compact_says_what_plain_readers_may_see(run: Run, tmp_path: Path) -> None:
    from zarrext.jobs.shards.compact import READER_NOTE

    arr = zarrext.create_array(
        str(tmp_path / "a.zarr"), shape=(16,), chunks=(8,), shards=(16,), dtype="i4",
        compressors=None, shard_layout="fixed-slot",
    )
    arr[:4] = 3
    code, out, err = run("compact", tmp_path / "a.zarr")
    assert code == 0, err
    assert READER_NOTE in out
    assert not err
    assert (zarr.open_array(str(tmp_path / "a.zarr"))[:4] == 3).all()


@pytest.mark.parametrize("args", [("recompress", "--json"), ("inspect", "--json"),
                                  ("check", "--json"), ("info", "--json"),
                                  ("recompress", "--json", "--dry-run")])
def test_json_stdout_is_exactly_one_document(
    run: Run, tmp_path: Path, args: tuple[str, ...]
) -> None:
    make_store(tmp_path / "s.zarr")
    code, out, err = run(args[0], tmp_path / "s.zarr", *args[1:])
    assert code == 0, err
    document = json.loads(out)
    assert isinstance(document, dict)
    # nothing before or after it: no progress bar, no blank line (json.loads skips those)
    assert out.startswith("{"), repr(out[:40])
    assert out.endswith("}\n"), repr(out[-40:])


def test_a_store_that_grew_says_larger(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from io import StringIO

    from rich.console import Console
    from zarr.codecs import Crc32cCodec

    from zarrext.cli.render import recompress_table
    from zarrext.jobs.recompression import RecompressReport

    # 4-byte chunks stored raw behind a 1-byte header and a 4-byte crc32c: 9 bytes each
    z = zarrext.create_array(
        str(tmp_path / "g.zarr"), shape=(16,), chunks=(4,), dtype="uint8",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()]),
                                              Crc32cCodec()],
        decision="never_apply",
    )
    z[:] = np.arange(16, dtype="uint8")
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run("inspect", tmp_path / "g.zarr")
    assert code == 0, err
    assert "2.25x larger" in out
    assert "smaller" not in out

    out_file = StringIO()
    table = recompress_table(
        RecompressReport("a", 4, 4, bytes_before=100, bytes_after=128, n_codecs=1)
    )
    Console(file=out_file, width=120).print(table)
    assert "1.28x larger" in out_file.getvalue()


@pytest.mark.parametrize("job", ["compact", "expand"])
def test_quiet_shard_jobs_print_nothing(run: Run, tmp_path: Path, job: str) -> None:
    make_store(tmp_path / "s.zarr")
    code, out, err = run(job, tmp_path / "s.zarr", "--quiet")
    assert code == 0, err
    assert (out, err) == ("", "")
    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path / "s.zarr" / "sub" / "sharded"))[:], np.full((8, 8), 1.5)
    )
    code, out, _ = run(job, tmp_path / "s.zarr")
    assert code == 0
    assert "sub/sharded: 4 shards" in out


def test_quiet_quantize_prints_nothing(run: Run, tmp_path: Path) -> None:
    values = np.linspace(0, 1, 64, dtype="f4").reshape(8, 8)
    zarr.create_array(str(tmp_path / "f.zarr"), shape=(8, 8), chunks=(4, 4), dtype="f4")[:] = (
        values
    )
    code, out, err = run(
        "quantize", tmp_path / "f.zarr", "--max-abs-error", "0.01", "--out", tmp_path / "q.zarr",
        "--quiet",
    )
    assert code == 0, err
    assert (out, err) == ("", "")
    back = zarr.open_array(str(tmp_path / "q.zarr"))[:]
    assert float(np.abs(back - values).max()) <= 0.01
