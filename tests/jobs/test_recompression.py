"""``zarrext.recompress``: compress later, in place, without touching zarr.json."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import imagecodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype

import zarrext
from zarrext.jobs.recompression import recompress

SHUFFLE_ZSTD = [
    {"name": "shuffle", "configuration": {"element_size": 4}},
    {"name": "zstd", "configuration": {"level": 3}},
]


def mixed_data(shape: tuple[int, int] = (64, 64), noise_rows: int = 16) -> np.ndarray:
    """Smooth float32 rows, with ``noise_rows`` rows of random bits on top."""
    rng = np.random.default_rng(42)
    data = np.tile(np.linspace(0, 1, shape[1], dtype=np.float32), (shape[0], 1))
    data[:noise_rows] = rng.integers(0, 2**32, (noise_rows, shape[1]), dtype=np.uint32).view(
        np.float32
    )
    return data


def ingest(path: Path, data: np.ndarray, **kwargs: object) -> zarr.Array:
    z = zarrext.create_array(
        str(path), shape=data.shape, chunks=(16, 16), dtype="float32",
        serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec(SHUFFLE_ZSTD), Crc32cCodec()],
        decision="never_apply", **kwargs,
    )
    z[:] = data
    return z


def chunk_files(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*")) if p.is_file() and p.name != "zarr.json"
    }


def test_recompress_shrinks_store_and_keeps_metadata(tmp_path: Path) -> None:
    data = mixed_data()
    ingest(tmp_path / "a.zarr", data)
    meta = (tmp_path / "a.zarr" / "zarr.json").read_bytes()
    before = chunk_files(tmp_path / "a.zarr")
    assert all(b[0] == 0 for b in before.values())  # ingest stored every chunk raw

    calls: list[tuple[int, int]] = []
    report = recompress(str(tmp_path / "a.zarr"), "compress_if_smaller",
                        progress=lambda done, total: calls.append((done, total)))

    # from (0, 16) up to (16, 16), never backwards, in the calling thread
    assert calls[0] == (0, 16)
    assert calls[-1] == (16, 16)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert {t for _, t in calls} == {16}
    after = chunk_files(tmp_path / "a.zarr")
    assert (tmp_path / "a.zarr" / "zarr.json").read_bytes() == meta
    assert set(after) == set(before)
    assert report.chunks == report.objects == 16
    assert report.bytes_before == sum(map(len, before.values()))
    assert report.bytes_after == sum(map(len, after.values()))
    assert report.bytes_after < report.bytes_before
    # The noise row of chunks stays raw, the smooth chunks get shuffle+zstd.
    headers = Counter(b[0] for b in after.values())
    assert headers == Counter({0: 4, 0b11: 12})
    assert report.masks_before == Counter({0: 16})
    assert report.masks_after == Counter({0: 4, 0b11: 12})
    for key, blob in after.items():
        if blob[0] == 0b11:
            # payload = zstd frame of the shuffled chunk, then a 4-byte crc32c
            raw = imagecodecs.zstd_decode(blob[1:-4])
            assert len(raw) == 16 * 16 * 4, key
    back = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[:]
    assert np.array_equal(back.view(np.uint32), data.view(np.uint32))


def test_recompress_skips_chunks_that_are_not_stored(tmp_path: Path) -> None:
    data = mixed_data()
    z = zarrext.create_array(
        str(tmp_path / "a.zarr"), shape=data.shape, chunks=(16, 16), dtype="float32",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec(SHUFFLE_ZSTD)],
        decision="never_apply",
    )
    z[16:32, :] = data[16:32]  # one row of chunks only
    report = recompress(z, "always_apply")
    assert report.objects == 4
    files = chunk_files(tmp_path / "a.zarr")
    assert sorted(files) == [f"c/1/{j}" for j in range(4)]
    assert all(b[0] == 0b11 for b in files.values())


def test_recompress_keeps_stored_fill_value_chunks(tmp_path: Path) -> None:
    z = zarrext.create_array(
        str(tmp_path / "a.zarr"), shape=(32, 32), chunks=(16, 16), dtype="float32",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec(SHUFFLE_ZSTD)],
        decision="never_apply", config={"write_empty_chunks": True},
    )
    z[:] = 0.0
    assert len(chunk_files(tmp_path / "a.zarr")) == 4
    recompress(z, "compress_if_smaller")
    files = chunk_files(tmp_path / "a.zarr")
    assert len(files) == 4
    assert all(b[0] == 0b11 for b in files.values())


def test_recompress_sharded_inner_chunks(tmp_path: Path) -> None:
    data = mixed_data((64, 64))
    inner = [BytesCodec(), zarrext.ConditionalCodec([ZstdCodec(level=3)]), Crc32cCodec()]
    z = zarrext.create_array(
        str(tmp_path / "s.zarr"), shape=data.shape, chunks=(32, 64), dtype="float32",
        serializer=ShardingCodec(chunk_shape=(16, 16), codecs=inner), compressors=None,
        decision="never_apply",
    )
    z[:48] = data[:48]  # the last row of inner chunks stays absent
    meta = (tmp_path / "s.zarr" / "zarr.json").read_bytes()
    report = recompress(z, "compress_if_smaller")
    assert (tmp_path / "s.zarr" / "zarr.json").read_bytes() == meta
    assert report.objects == 2  # two shards
    assert report.chunks == 12  # 3 rows x 4 stored inner chunks
    assert report.masks_after == Counter({0: 4, 1: 8})
    assert report.bytes_after < report.bytes_before
    back = zarr.open_array(str(tmp_path / "s.zarr"), mode="r")[:]
    assert np.array_equal(back[:48].view(np.uint32), data[:48].view(np.uint32))
    assert np.all(back[48:] == 0)


def test_recompress_with_decision_function_gets_chunk_indices(tmp_path: Path) -> None:
    data = mixed_data()
    ingest(tmp_path / "a.zarr", data)
    seen: set[tuple[int, ...]] = set()

    def only_first_column(chunk_index, codec_index, codec, unencoded_chunk):  # type: ignore[no-untyped-def]
        seen.add(chunk_index)
        return chunk_index[1] == 0

    report = recompress(str(tmp_path / "a.zarr"), only_first_column, workers=3)
    assert seen == {(i, j) for i in range(4) for j in range(4)}
    assert report.masks_after == Counter({0b11: 4, 0: 12})


def test_recompress_refuses_array_without_conditional(tmp_path: Path) -> None:
    z = zarr.create_array(str(tmp_path / "p.zarr"), shape=(4,), chunks=(2,), dtype="i4")
    z[:] = 1
    with pytest.raises(ValueError, match="no conditional codec"):
        recompress(z, "compress_if_smaller")


@pytest.mark.slow
def test_recompress_on_dask_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    data = mixed_data()
    ingest(tmp_path / "a.zarr", data)
    meta = (tmp_path / "a.zarr" / "zarr.json").read_bytes()
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        calls: list[tuple[int, int]] = []
        report = recompress(str(tmp_path / "a.zarr"), "compress_if_smaller", client=client,
                            progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (16, 16)
    assert report.masks_after == Counter({0: 4, 0b11: 12})
    assert (tmp_path / "a.zarr" / "zarr.json").read_bytes() == meta
    back = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[:]
    assert np.array_equal(back.view(np.uint32), data.view(np.uint32))


# -- progress, damaged chunks, dry runs --------------------------------------------------


@pytest.mark.parametrize("progress", [None, False, True], ids=["none", "false", "true"])
def test_progress_takes_none_false_and_true(
    tmp_path: Path, progress: bool | None, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest(tmp_path / "a.zarr", mixed_data())
    report = recompress(str(tmp_path / "a.zarr"), progress=progress)
    assert report.chunks == 16
    err = capsys.readouterr().err
    if progress:
        assert err.endswith("recompress /: 16/16\n")
        assert "recompress /: 0/16" in err
    else:
        assert err == ""


@pytest.mark.parametrize("progress", [1, "yes", [print]], ids=["int", "str", "list"])
def test_progress_refuses_anything_else_before_writing(tmp_path: Path, progress: object) -> None:
    ingest(tmp_path / "a.zarr", mixed_data())
    before = chunk_files(tmp_path / "a.zarr")
    with pytest.raises(TypeError, match=r"progress must be a callable.*got"):
        recompress(str(tmp_path / "a.zarr"), progress=progress)  # type: ignore[arg-type]
    assert chunk_files(tmp_path / "a.zarr") == before


def _damage_chunk(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _damaged_store(store: Any, sharded: bool) -> np.ndarray:
    """``arr`` (4 x 4 chunks, or 2 x 4 shards of two inner chunks) with one byte
    flipped in chunk (1, 1): in ``c/1/1``, or inner chunk (1, 0) of shard ``c/0/1``."""
    data = mixed_data((64, 64))
    zarrext.create_array(
        store, name="arr", shape=(64, 64), chunks=(16, 16), dtype="float32",
        shards=(32, 16) if sharded else None, serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec(SHUFFLE_ZSTD), Crc32cCodec()],
        decision="never_apply",
    )[:] = data
    return data


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_recompress_goes_on_past_a_damaged_chunk_and_names_it(
    tmp_path: Path, sharded: bool
) -> None:
    from zarrext.errors import ChunkDecodeError, DamagedChunksError

    store = zarr.storage.LocalStore(tmp_path)
    data = _damaged_store(store, sharded)
    key = "c/0/1" if sharded else "c/1/1"
    if sharded:  # flip a byte in the middle of inner chunk (1, 0): chunk (1, 1)
        from zarrext.jobs.inspection import shard_entries, storage_block

        shard = tmp_path / "arr" / key
        raw = bytearray(shard.read_bytes())
        sharding = storage_block(zarr.open_array(store, path="arr").metadata)[1]
        assert sharding is not None
        entries = dict(shard_entries(sharding, default_buffer_prototype().buffer.from_bytes(
            bytes(raw)), (2, 1), key))
        start, stop = entries[(1, 0)]
        raw[(start + stop) // 2] ^= 0xFF
        shard.write_bytes(bytes(raw))
        damaged_bytes = bytes(raw[start:stop])
    else:
        _damage_chunk(tmp_path / "arr" / key)
        damaged_bytes = (tmp_path / "arr" / key).read_bytes()
    before = chunk_files(tmp_path / "arr")
    errors = []
    for dry_run in (True, False):
        with pytest.raises(DamagedChunksError) as raised:
            recompress(zarr.open_array(store, path="arr", mode="r+"), dry_run=dry_run)
        errors.append(raised.value)
        if dry_run:
            assert chunk_files(tmp_path / "arr") == before  # a dry run writes nothing
    dry, real = errors
    for error in (dry, real):
        assert isinstance(error, ChunkDecodeError)  # what callers caught before
        (only,) = error.damaged
        assert (only.array, only.key, only.codec, only.inner) == (
            "arr", f"arr/{key}", "crc32c", (1, 0) if sharded else None)
        assert "checksum" in str(only.__cause__)
        assert f"chunk 'arr/{key}'" in str(error)
        # every other chunk was (or would be) re-encoded: 15 of 16
        assert error.report.chunks == 15
        assert error.report.masks_after == Counter({0b11: 11, 0: 4})  # noise stays raw
    after = chunk_files(tmp_path / "arr")
    # byte-identical: a chunk file as it was; an inner chunk's bytes in its shard
    # (whose other chunk, a noise chunk, stays raw: the shard comes out the same)
    assert damaged_bytes in after[key] if sharded else after[key] == damaged_bytes
    # rewritten: every object holding a smooth chunk that was not damaged (the noise
    # chunks of row 0 stay raw, rewritten to the same bytes)
    smooth = ({f"c/0/{j}" for j in (0, 2, 3)} | {f"c/1/{j}" for j in range(4)} if sharded
              else {f"c/{i}/{j}" for i in (1, 2, 3) for j in range(4)} - {key})
    assert {k for k in after if after[k] != before[k]} == smooth
    back = zarr.open_array(store, path="arr", mode="r")
    expected = data.view(np.uint32)
    for i in range(4):
        for j in range(4):
            block = (slice(16 * i, 16 * i + 16), slice(16 * j, 16 * j + 16))
            if (i, j) != (1, 1):
                assert np.array_equal(back[block].view(np.uint32), expected[block]), (i, j)
    # a second run finds the same damaged chunk, still damaged the same way
    report = recompress(zarr.open_array(store, path="arr", mode="r+"), on_damage="report")
    assert [(e.key, e.inner) for e in report.damaged] == [
        (f"arr/{key}", (1, 0) if sharded else None)]


def test_recompress_on_damage_report_returns_the_report(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(tmp_path)
    _damaged_store(store, False)
    _damage_chunk(tmp_path / "arr" / "c" / "1" / "1")
    _damage_chunk(tmp_path / "arr" / "c" / "3" / "0")
    report = recompress(zarr.open_array(store, path="arr", mode="r+"), on_damage="report")
    assert [e.key for e in report.damaged] == ["arr/c/1/1", "arr/c/3/0"]
    assert report.chunks == 14
    with pytest.raises(ValueError, match="on_damage must be"):
        recompress(zarr.open_array(store, path="arr", mode="r+"), on_damage="skip")  # type: ignore[arg-type]


def test_recompress_on_s3_goes_on_past_a_damaged_chunk(run, s3: dict[str, Any]) -> None:
    import json

    import s3fs

    from zarrext.errors import DamagedChunksError

    url = f"{s3['url']}/a.zarr"
    fs = s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)
    data = _damaged_store(zarr.storage.FsspecStore.from_url(
        s3["url"], storage_options=s3["options"]), sharded=False)
    url = f"{s3['url']}/arr"
    raw = bytearray(fs.cat(f"{url}/c/1/1"))
    raw[len(raw) // 2] ^= 0xFF
    fs.pipe(f"{url}/c/1/1", bytes(raw))
    so = ("--storage-options", json.dumps(s3["options"]))
    code, out, err = run("recompress", url, "--dry-run", *so)
    assert code == 1
    assert "would recompress /: 15 chunks in 16 objects" in out
    assert "1 damaged chunk would be left as stored" in out
    assert fs.cat(f"{url}/c/2/0")[0] == 0  # still raw: nothing written
    code, out, err = run("recompress", url, *so)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("zarrext: damaged: ")
    assert "chunk 'c/1/1'" in lines[0]
    assert "crc32c" in lines[0]
    assert "Stored: 0x" in lines[0]  # hex, not Python bytes
    assert "left 1 damaged chunk " in lines[1]
    assert fs.cat(f"{url}/c/1/1") == bytes(raw)  # byte-identical
    assert {fs.cat(f"{url}/c/{i}/{j}")[0] for i in (1, 2, 3) for j in range(4)
            if (i, j) != (1, 1)} == {0b11}  # the smooth chunks (row 0 is noise)
    with pytest.raises(DamagedChunksError):
        zarrext.recompress(url, storage_options=s3["options"])
    back = zarr.open_array(url, mode="r", storage_options=s3["options"])
    assert np.array_equal(back[:16].view(np.uint32), data[:16].view(np.uint32))


def test_dry_run_reports_what_the_run_does_and_writes_nothing(tmp_path: Path) -> None:
    ingest(tmp_path / "a.zarr", mixed_data())
    before = chunk_files(tmp_path / "a.zarr")
    plan = recompress(str(tmp_path / "a.zarr"), dry_run=True)
    assert chunk_files(tmp_path / "a.zarr") == before
    done = recompress(str(tmp_path / "a.zarr"))
    assert (plan.chunks, plan.objects, plan.bytes_before, plan.bytes_after) == (
        done.chunks, done.objects, done.bytes_before, done.bytes_after)
    assert plan.masks_after == done.masks_after
    assert plan.bytes_after < plan.bytes_before


def test_cli_names_damaged_chunks_in_dry_run_and_run_alike(run, tmp_path: Path) -> None:
    ingest(tmp_path / "a.zarr", mixed_data())
    _damage_chunk(tmp_path / "a.zarr" / "c" / "1" / "2")
    _damage_chunk(tmp_path / "a.zarr" / "c" / "3" / "0")
    damaged = {k: v for k, v in chunk_files(tmp_path / "a.zarr").items()
               if k in ("c/1/2", "c/3/0")}
    outcomes = [run("recompress", tmp_path / "a.zarr", *extra) for extra in (["--dry-run"], [])]
    for code, _out, err in outcomes:
        assert code == 1
        lines = err.strip().splitlines()
        assert len(lines) == 3, err  # each damaged chunk, then the summary
        assert "chunk 'c/1/2'" in lines[0]
        assert "chunk 'c/3/0'" in lines[1]
        assert all("crc32c" in line and "b'" not in line for line in lines[:2])
        assert "2 damaged chunks" in lines[2]
    assert outcomes[0][2].splitlines()[:2] == outcomes[1][2].splitlines()[:2]
    assert "would recompress /: 14 chunks in 16 objects" in outcomes[0][1]
    assert "damaged, left as stored" in outcomes[1][1]
    after = chunk_files(tmp_path / "a.zarr")
    assert {k: after[k] for k in damaged} == damaged
    assert sum(b[0] == 0b11 for b in after.values()) == 10  # 12 smooth chunks, 2 damaged
