"""``zarrext.api``: runtime settings attached to arrays without touching zarr.json."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
import zarr
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from tests.conftest import Run
from zarrext.codecs.decisions import DecisionError, NoDecisionWarning, Plan, resolve_decision
from zarrext.formats import tiff


def chunk_file(root: Path, i: int, j: int) -> Path:
    return root / "c" / str(i) / str(j)


def test_reopened_tiff_array_writes_its_header_literally_until_given_the_function(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tiff.zarr"
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    z = zarrext.create_array(
        str(path), shape=data.shape, **tiff.create_kwargs((32, 32), "uint16", compression="zstd")
    )
    z[:32] = data[:32]  # create_kwargs' pad codec carries the header function
    meta = (path / "zarr.json").read_bytes()
    literal = tiff.header((32, 32), "uint16", compression="zstd", strip_byte_count=0)

    # Reopened without a function, pad writes the header zarr.json holds, byte for
    # byte (its StripByteCounts is 0), and says once that it does not fit.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = zarrext.open_array(str(path))
        plain[32:, :32] = data[32:, :32]
    [said] = [str(w.message) for w in caught if issubclass(w.category, tiff.TiffHeaderWarning)]
    assert "StripByteCounts 0" in said
    assert "dynamic_header('uint16', compression='zstd')" in said
    assert chunk_file(path, 1, 0).read_bytes()[:110] == literal

    again = zarrext.open_array(
        str(path), padding=tiff.dynamic_header("uint16", compression="zstd")
    )
    again[32:] = data[32:]
    assert (path / "zarr.json").read_bytes() == meta
    for i in range(2):
        for j in range(2):
            image = tifffile.imread(chunk_file(path, i, j))
            assert np.array_equal(image, data[32 * i : 32 * (i + 1), 32 * j : 32 * (j + 1)])
    assert np.array_equal(zarr.open_array(str(path))[:], data)


def test_padding_needs_a_pad_codec(tmp_path: Path) -> None:
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), chunks=(2,), dtype="u1")
    with pytest.raises(ValueError, match="no pad codec"):
        zarrext.with_runtime(z, padding=lambda data, index, shape: b"")


def test_decision_reaches_conditional_codec_nested_in_shard_and_pad_stays(tmp_path: Path) -> None:
    inner = [BytesCodec(), zarrext.ConditionalCodec([ZstdCodec()])]
    z = zarrext.create_array(
        str(tmp_path / "s.zarr"), shape=(8, 8), chunks=(8, 8), dtype="u1",
        serializer=zarr.codecs.ShardingCodec(chunk_shape=(4, 4), codecs=inner),
        compressors=[zarrext.PadCodec(location="start", nbytes=3, padding=b"abc")],
        decision="always_apply",
    )
    z[:] = 5
    shard = (tmp_path / "s.zarr" / "c" / "0" / "0").read_bytes()
    assert shard[:3] == b"abc"
    inventory = zarrext.inventory(z)
    assert inventory.mask_counts == {1: 4}
    assert z.metadata.to_dict() == zarr.open_array(str(tmp_path / "s.zarr")).metadata.to_dict()


# --- the array's decision, recorded by create_array and used again by open_array ---

SHARDED = {"shards": (16, 16)}
# Compressible values, none of them the fill value: every chunk is stored.
RAMP = (np.arange(32 * 32, dtype=np.int32).reshape(32, 32) // 64) + 1


def conditional_array(path: Path, **kwargs: Any) -> zarr.Array:
    return zarrext.create_array(
        str(path), shape=(32, 32), chunks=(8, 8), dtype="i4", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec()])], **kwargs,
    )


def no_decision_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, NoDecisionWarning)]


@pytest.mark.parametrize("layout", [{}, SHARDED], ids=["chunks", "shards"])
def test_reopened_array_writes_with_the_decision_create_array_recorded(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    conditional_array(tmp_path / "a.zarr", decision="compress_if_smaller", **layout)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        reopened = zarrext.open_array(str(tmp_path / "a.zarr"))
        reopened[:] = RAMP
    assert no_decision_warnings(record) == []
    inventory = zarrext.inventory(reopened)
    assert inventory.mask_counts == {1: 16}  # zstd applied to every chunk
    assert inventory.stored_bytes < RAMP.nbytes
    assert np.array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[:], RAMP)


def test_create_array_records_a_builtin_decision_beside_the_users_attributes(
    tmp_path: Path,
) -> None:
    smallest = resolve_decision("smallest")  # a built-in's object records its name too
    conditional_array(tmp_path / "a.zarr", decision=smallest, attributes={"title": "t"})
    written = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())
    # a JSON object in a string: netCDF takes it (tests/jobs/convert/test_netcdf.py)
    assert written["attributes"] == {"title": "t", "zarrext": '{"decision": "smallest"}'}


@pytest.mark.parametrize(
    "decision",
    [lambda chunk_index, codec, unencoded_chunk: True, 1, Plan(np.ones((4, 4), np.uint8))],
    ids=["function", "mask", "plan"],
)
def test_a_decision_that_is_no_builtin_is_not_recorded(tmp_path: Path, decision: Any) -> None:
    z = conditional_array(tmp_path / "a.zarr", decision=decision)
    z[:] = RAMP
    assert zarrext.inventory(z).mask_counts == {1: 16}  # the decision itself was used
    assert "zarrext" not in json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())[
        "attributes"
    ]
    with pytest.warns(NoDecisionWarning):
        zarrext.open_array(str(tmp_path / "a.zarr"))[:] = RAMP


def test_an_explicit_decision_wins_over_the_recorded_one(tmp_path: Path) -> None:
    conditional_array(tmp_path / "a.zarr", decision="compress_if_smaller")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        z = zarrext.open_array(str(tmp_path / "a.zarr"), decision="never_apply")
        z[:] = RAMP
    assert no_decision_warnings(record) == []
    assert zarrext.inventory(z).mask_counts == {0: 16}


def test_a_plain_zarr_writer_is_unaffected_by_the_record(tmp_path: Path) -> None:
    conditional_array(tmp_path / "a.zarr", decision="compress_if_smaller")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        plain = zarr.open_array(str(tmp_path / "a.zarr"))
        plain[:] = RAMP
    assert no_decision_warnings(record) == []
    assert zarrext.inventory(plain).mask_counts == {0: 16}  # the spec's default: stored raw


@pytest.mark.parametrize("layout", [{}, SHARDED], ids=["chunks", "shards"])
def test_a_writer_with_no_decision_warns_once_per_array(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    z = conditional_array(tmp_path / "a.zarr", **layout)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        z[:] = RAMP  # 16 chunks, encoded by several threads
        z[:8] = RAMP[:8] + 1
        messages = no_decision_warnings(record)
        assert len(messages) == 1
        assert str(z.store_path) in messages[0]
        assert "decision=" in messages[0]
        zarrext.open_array(str(tmp_path / "a.zarr"))[:] = RAMP  # another opened array
        assert len(no_decision_warnings(record)) == 2
        zarrext.open_array(str(tmp_path / "a.zarr"), mode="r")[:]  # reads never warn
        assert len(no_decision_warnings(record)) == 2
    assert zarrext.inventory(z).mask_counts == {0: 16}


def test_a_recorded_decision_that_is_no_builtin_is_refused_for_writing(tmp_path: Path) -> None:
    z = conditional_array(tmp_path / "a.zarr")
    z.attrs.update({"zarrext": {"decision": "my_function"}})
    with pytest.raises(DecisionError, match=r"a\.zarr.*'my_function'.*decision="):
        zarrext.open_array(str(tmp_path / "a.zarr"))
    assert zarrext.open_array(str(tmp_path / "a.zarr"), mode="r").shape == (32, 32)
    z = zarrext.open_array(str(tmp_path / "a.zarr"), decision="always_apply")
    z[:] = RAMP
    assert zarrext.inventory(z).mask_counts == {1: 16}


def test_create_array_refuses_a_zarrext_attribute_it_cannot_record_in(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"attributes\['zarrext'\] is 3"):
        conditional_array(
            tmp_path / "a.zarr", decision="compress_if_smaller", attributes={"zarrext": 3}
        )
    assert not (tmp_path / "a.zarr" / "zarr.json").exists()


def test_info_json_shows_the_recorded_decision(run: Run, tmp_path: Path) -> None:
    conditional_array(tmp_path / "s.zarr" / "kept", decision="compress_if_smaller")
    conditional_array(tmp_path / "s.zarr" / "none")
    zarr.open_group(str(tmp_path / "s.zarr"))  # the two arrays' parent, as a group
    code, out, err = run("info", tmp_path / "s.zarr", "--json")
    assert code == 0, err
    decisions = {m["path"]: m["decision"] for m in json.loads(out)["members"]}
    assert decisions == {"kept": "compress_if_smaller", "none": None}


def test_inspect_shows_the_recorded_decision(run: Run, tmp_path: Path) -> None:
    conditional_array(tmp_path / "s.zarr" / "kept", decision="compress_if_smaller")
    conditional_array(tmp_path / "s.zarr" / "none")
    zarr.open_group(str(tmp_path / "s.zarr"))
    code, out, err = run("inspect", tmp_path / "s.zarr", "--json")
    assert code == 0, err
    decisions = {a["path"]: a["decision"] for a in json.loads(out)["arrays"]}
    assert decisions == {"kept": "compress_if_smaller", "none": None}
    code, out, err = run("inspect", tmp_path / "s.zarr" / "kept")
    assert code == 0, err
    assert "decision for zarrext's writers: compress_if_smaller" in out
    code, out, err = run("inspect", tmp_path / "s.zarr" / "none")
    assert "no decision recorded" in out


def test_every_job_takes_a_path_as_an_array(tmp_path: Path) -> None:
    # issue 27 item 10: compact and expand took only arrays ('str' object has no
    # attribute 'metadata'), recompress a path too; issue 26 item 7: write_dask of a
    # NumPy array ('numpy.ndarray' object has no attribute 'chunks')
    pytest.importorskip("dask")
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

    path = str(tmp_path / "s.zarr")
    zarrext.create_array(
        path, shape=(16, 16), chunks=(8, 8), dtype="uint16",
        serializer=ShardingCodec(chunk_shape=(4, 4), codecs=[
            BytesCodec(), zarrext.ConditionalCodec([ZstdCodec()]), Crc32cCodec()]),
        compressors=None,
    )
    data = np.arange(256, dtype="uint16").reshape(16, 16)
    assert zarrext.write_dask(data, path) == data.nbytes
    assert zarrext.compact(path).shards == 4
    assert zarrext.expand(path).shards == 4
    assert zarrext.check(path, deep=True) == []
    assert zarrext.inventory(path).store_keys == 4
    assert zarrext.recompress(path).chunks == 16
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[:], data)
