"""Format 2 sources as they come: damaged chunks, unusual data types and fill values,
string members, zipped groups, corrupt metadata, object-store outputs (issue 42, item 7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

import zarrext
from tests.conftest import Run
from zarrext.errors import ChunkDecodeError

DATA = (np.arange(32 * 10, dtype="f4").reshape(32, 10) / 7).astype("f4")


def _format_2(path: Path, compressor: Any = "auto") -> zarr.Array:
    array = zarr.create_array(path, shape=DATA.shape, chunks=(16, 10), dtype="f4",
                              zarr_format=2, compressors=compressor)
    array[:] = DATA
    return array


def _damaged(path: Path, how: str) -> None:
    """Chunk ``0.0`` of a format 2 array, damaged as ``how`` says."""
    if how == "raw truncated":
        _format_2(path, compressor=None)
    elif how.startswith("blosc"):
        _format_2(path, compressor=numcodecs.Blosc(cname="lz4"))
    else:
        _format_2(path)
    chunk = path / "0.0"
    stored = chunk.read_bytes()
    damaged = {
        "corrupt": stored[:8] + bytes(b ^ 0xFF for b in stored[8:]),
        "truncated": stored[: len(stored) // 2],
        "empty": b"",
        "raw truncated": stored[:320],  # 80 of the chunk's 160 float32 values
        # c-blosc trusts the frame's header: numcodecs decodes these to other values
        "blosc cut by 5 bytes": stored[:-5],
        "blosc with bytes after": stored + bytes(7),
    }[how]
    chunk.write_bytes(damaged)


HOW = ["corrupt", "truncated", "empty", "raw truncated", "blosc cut by 5 bytes",
       "blosc with bytes after"]


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_format_2_chunk_is_a_chunk_decode_error_naming_it(
    tmp_path: Path, how: str
) -> None:
    _damaged(tmp_path / "src.zarr", how)
    with pytest.raises(ChunkDecodeError) as raised:
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr")
    assert raised.value.key == "0.0"
    assert raised.value.array in ("", "/")
    with pytest.raises(ChunkDecodeError) as raised:
        zarrext.quantize.copy_quantized(tmp_path / "src.zarr", tmp_path / "q.zarr",
                                        max_abs_error=0.01)
    assert raised.value.key == "0.0"
    assert not (tmp_path / "out.zarr").exists()
    assert not (tmp_path / "q.zarr").exists()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("command", ["convert", "quantize"])
def test_a_damaged_format_2_chunk_is_one_line_naming_it(
    run: Run, tmp_path: Path, how: str, command: str
) -> None:
    _damaged(tmp_path / "src.zarr", how)
    extra = ["--max-abs-error", "0.01"] if command == "quantize" else []
    code, _, err = run(command, tmp_path / "src.zarr", "--out", tmp_path / "out.zarr",
                       *extra, "-q")
    assert code == 1
    assert err.count("\n") == 1, err
    assert "chunk '0.0'" in err
    assert str(tmp_path / "src.zarr") in err
    assert "cannot reshape" not in err


def test_a_damaged_chunk_of_a_group_member_names_the_member(run: Run, tmp_path: Path) -> None:
    group = zarr.create_group(tmp_path / "g.zarr", zarr_format=2)
    group.create_array("t", shape=(20,), chunks=(10,), dtype="f8")[:] = np.arange(20.0)
    (tmp_path / "g.zarr" / "t" / "1").write_bytes(b"\x00" * 7)
    code, _, err = run("convert", tmp_path / "g.zarr", "--out", tmp_path / "o.zarr", "-q")
    assert code == 1
    assert err.count("\n") == 1, err
    assert f"{tmp_path / 'g.zarr'}/t" in err
    assert "chunk '1'" in err


# -- quantize and --max-abs-error on format 2 ---------------------------------------


def _big_endian(path: Path) -> np.ndarray:
    data = np.linspace(-3, 7, 40).astype(">f8")
    zarr.create_array(path, shape=(40,), chunks=(16,), dtype=">f8", zarr_format=2)[:] = data
    return data


def _null_fill(path: Path) -> np.ndarray:
    data = np.linspace(-3, 7, 40)
    array = zarr.create_array(path, shape=(48,), chunks=(16,), dtype="f8", zarr_format=2,
                              fill_value=None)
    array[:40] = data  # the last chunk is missing: read as the type's default
    assert json.loads((path / ".zarray").read_text())["fill_value"] is None
    return np.asarray(zarr.open_array(path)[:])


@pytest.mark.parametrize("make", [_big_endian, _null_fill])
@pytest.mark.parametrize("command", ["convert", "quantize"])
def test_big_endian_and_null_fill_format_2_floats_quantize(
    run: Run, tmp_path: Path, make: Any, command: str
) -> None:
    data = make(tmp_path / "src.zarr")
    code, _, err = run(command, tmp_path / "src.zarr", "--out", tmp_path / "q.zarr",
                       "--max-abs-error", "0.01", "-q")
    assert (code, err) == (0, "")
    copy = zarr.open_array(tmp_path / "q.zarr")
    assert copy.metadata.zarr_format == 3
    assert np.max(np.abs(copy[:] - data.astype("f8"))) <= 0.01


def _with_strings(path: Path) -> np.ndarray:
    group = zarr.create_group(path, zarr_format=2)
    x = np.linspace(0, 1, 20)
    group.create_array("x", shape=(20,), chunks=(10,), dtype="f8")[:] = x
    group.create_array("s", shape=(3,), chunks=(3,), dtype=str)[:] = np.array(["a", "bb", "ccc"])
    return x


@pytest.mark.parametrize(
    "args",
    [
        ("quantize", "--max-abs-error", "0.01", "--array", "x"),
        ("quantize", "--max-abs-error", "0.01"),
        ("convert", "--max-abs-error", "0.01", "--arrays", "x"),
        ("convert", "--arrays", "x"),
    ],
)
def test_a_format_2_group_with_a_string_array_is_copied(
    run: Run, tmp_path: Path, args: tuple[str, ...]
) -> None:
    x = _with_strings(tmp_path / "g.zarr")
    code, _, err = run(args[0], tmp_path / "g.zarr", "--out", tmp_path / "o.zarr", *args[1:],
                       "-q")
    assert (code, err) == (0, "")
    copy = zarr.open_group(tmp_path / "o.zarr")
    assert copy.metadata.zarr_format == 3
    assert list(copy["s"][:]) == ["a", "bb", "ccc"]
    assert np.max(np.abs(copy["x"][:] - x)) <= 0.01


def test_convert_group_max_abs_error_quantizes_the_floats_and_converts_the_rest(
    run: Run, tmp_path: Path
) -> None:
    group = zarr.create_group(tmp_path / "g.zarr", zarr_format=2)
    x = np.linspace(0, 1, 20)
    group.create_array("x", shape=(20,), chunks=(10,), dtype="f8")[:] = x
    group.create_array("i", shape=(20,), chunks=(10,), dtype="i4")[:] = np.arange(20)
    code, out, err = run("convert", tmp_path / "g.zarr", "--out", tmp_path / "o.zarr",
                         "--max-abs-error", "0.01", "--json")
    assert (code, err) == (0, "")
    reports = {r["path"]: r for r in json.loads(out)["arrays"]}
    assert "quantized" in reports["x"]["becomes"]
    assert "quantized" not in reports["i"]["becomes"]
    copy = zarr.open_group(tmp_path / "o.zarr")
    np.testing.assert_array_equal(copy["i"][:], np.arange(20))
    assert np.max(np.abs(copy["x"][:] - x)) <= 0.01
    # named, an integer array is still refused
    code, _, err = run("convert", tmp_path / "g.zarr", "--out", tmp_path / "p.zarr",
                       "--max-abs-error", "0.01", "--arrays", "i")
    assert code == 1
    assert "int32" in err


# -- a group zipped as the README says ------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("extra", [(), ("--arrays", "x"), ("--max-abs-error", "0.01")])
def test_a_group_zipped_by_make_archive_converts(
    run: Run, tmp_path: Path, zarr_format: int, extra: tuple[str, ...]
) -> None:
    group = zarr.create_group(tmp_path / "g.zarr", zarr_format=zarr_format)
    x = np.linspace(0, 1, 20)
    group.create_array("x", shape=(20,), chunks=(10,), dtype="f8")[:] = x
    group.create_group("sub").create_array("y", shape=(4,), chunks=(2,), dtype="f4")[:] = 2
    shutil.make_archive(str(tmp_path / "g"), "zip", root_dir=tmp_path / "g.zarr")
    import zipfile

    assert any(n.endswith("/") for n in zipfile.ZipFile(tmp_path / "g.zip").namelist())
    code, _, err = run("convert", tmp_path / "g.zip", "--out", tmp_path / "o.zarr", *extra,
                       "-q")
    assert (code, err) == (0, "")
    copy = zarr.open_group(tmp_path / "o.zarr")
    assert np.max(np.abs(copy["x"][:] - x)) <= 0.01
    assert np.max(np.abs(copy["sub/y"][:] - 2)) <= 0.01


# -- corrupt metadata ------------------------------------------------------------------


def _corrupt(tmp_path: Path, zarr_format: int, member: bool) -> tuple[Path, str]:
    """A store with one metadata document that is not JSON: (the store, the document's
    path in it)."""
    document = ".zarray" if zarr_format == 2 else "zarr.json"
    if member:
        group = zarr.create_group(tmp_path / "s.zarr", zarr_format=zarr_format)
        group.create_array("t", shape=(4,), chunks=(2,), dtype="f8")[:] = 1
        group.create_array("u", shape=(4,), chunks=(2,), dtype="f8")[:] = 1
        name = f"t/{document}"
    else:
        zarr.create_array(tmp_path / "s.zarr", shape=(4,), chunks=(2,), dtype="f8",
                          zarr_format=zarr_format)[:] = 1
        name = document
    (tmp_path / "s.zarr" / name).write_text('{"zarr_format": ')
    return tmp_path / "s.zarr", name


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("member", [False, True])
@pytest.mark.parametrize("command", ["convert", "quantize", "info", "check"])
def test_corrupt_metadata_is_one_line_naming_the_file_and_the_array(
    run: Run, tmp_path: Path, zarr_format: int, member: bool, command: str
) -> None:
    store, name = _corrupt(tmp_path, zarr_format, member)
    extra = {"convert": ["--out", tmp_path / "o.zarr"],
             "quantize": ["--out", tmp_path / "o.zarr", "--max-abs-error", "0.1"]}
    code, _, err = run(command, store, *extra.get(command, []))
    assert code == 1
    assert err.count("\n") == 1, err
    if command in ("info", "check") and zarr_format == 2 and member:
        # the group opens, and info and check read format 3: they say what to run
        assert "zarrext convert" in err
        return
    assert f"{store}/{name}" in err
    # a zarr.json cut short says neither node_type: "array or group"
    kind = "array" if name.endswith(".zarray") else "array or group"
    assert f"{kind} {store}/t:" in err if member else f"{kind} {store}:" in err
    assert "not valid JSON" in err


def test_the_api_names_a_corrupt_member_document(tmp_path: Path) -> None:
    store, _ = _corrupt(tmp_path, 2, member=True)
    with pytest.raises(ValueError, match=r"array 't'.*t/\.zarray"):
        zarrext.convert(store, tmp_path / "o.zarr")


# -- object stores ---------------------------------------------------------------------


def test_convert_local_to_s3_reaches_a_custom_endpoint(
    run: Run, tmp_path: Path, s3: dict[str, Any]
) -> None:
    _format_2(tmp_path / "src.zarr")
    options = json.dumps(s3["options"])
    out = f"{s3['url']}/a.zarr"
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", out, "--out-options",
                       options, "-q")
    assert (code, err) == (0, "")
    # as quantize: with a local PATH, --storage-options are --out's
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", f"{s3['url']}/b.zarr",
                       "--storage-options", options, "-q")
    assert (code, err) == (0, "")
    from zarrext.stores import open_store

    for name in ("a.zarr", "b.zarr"):
        copy = zarr.open_array(open_store(f"{s3['url']}/{name}", mode="r",
                                          storage_options=s3["options"]))
        np.testing.assert_array_equal(copy[:], DATA)
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "c.zarr",
                       "--out-options", options)
    assert code == 2
    assert "--out-options" in err


def test_a_failed_s3_run_that_leaves_objects_says_so_and_check_finds_them(
    run: Run, tmp_path: Path, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrext.jobs import outputs

    group = zarr.create_group(tmp_path / "g.zarr", zarr_format=2)
    group.create_array("a", shape=(40,), chunks=(10,), dtype="f8")[:] = np.arange(40.0)
    group.create_array("b", shape=(40,), chunks=(10,), dtype="f8")[:] = np.arange(40.0)
    (tmp_path / "g.zarr" / "b" / "3").write_bytes(b"\x00" * 5)  # fails after a's chunks
    from zarrext.stores import open_store

    options = json.dumps(s3["options"])
    parent = f"{s3['url']}/p.zarr"
    zarr.create_group(open_store(parent, mode="w", storage_options=s3["options"]))
    out = f"{parent}/o.zarr"

    async def cleanup_fails(store: Any, last: str | None = None) -> None:
        raise ConnectionError("the connection dropped")  # as a lost network would

    monkeypatch.setattr(outputs.remote, "_delete_all", cleanup_fails)
    code, _, err = run("convert", tmp_path / "g.zarr", "--out", out, "--out-options",
                       options, "-q")
    assert code == 1
    assert err.count("\n") == 1, err
    assert "nothing was written" not in err
    assert f"left at {out}" in err
    monkeypatch.undo()
    code, out_text, _ = run("check", parent, "--storage-options", options)
    assert code == 1
    assert f"{out}:" in out_text
    assert "interrupted" in out_text or "unfinished" in out_text
    code, out_text, _ = run("check", parent, "--storage-options", options, "--json")
    assert code == 1
    [left] = json.loads(out_text)["leftovers"]
    assert left["key"] == out
    code, _, err = run("check", out, "--storage-options", options)  # the leftover itself
    assert code == 1
    assert f"{out}: an unfinished output of a zarrext job" in err
    # a rerun replaces them
    (tmp_path / "g.zarr" / "b" / "3").unlink()
    code, _, err = run("convert", tmp_path / "g.zarr", "--out", out, "--out-options",
                       options, "-q")
    assert (code, err) == (0, "")
    code, out_text, _ = run("check", parent, "--storage-options", options, "--json")
    assert json.loads(out_text)["leftovers"] == []
