"""Read-only means read-only: every job given an array or store opened read-only
refuses before it writes (``zarrext.stores.ReadOnlyError``, a ``ValueError`` as
zarr-python's refusal of ``ro[...] = x``), and the store is byte-identical after.

Each job on a local directory and on the loopback S3 server; ``write_dask`` on a
Dask cluster is in ``tests/jobs/test_cluster.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

import zarrext
from tests.conftest import tree_digest
from zarrext.stores import ReadOnlyError, open_store

DATA = np.tile(np.linspace(0, 1, 32, dtype=np.float32), (32, 1))


def s3_digest(url: str, options: dict[str, Any]) -> dict[str, bytes]:
    """Every object under ``url`` with its bytes."""
    import s3fs

    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    return {key: fs.cat_file(key) for key in sorted(fs.find(url))}


@pytest.fixture(params=["local", "s3"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A sharded conditional(zstd) array written raw (so every job has work to do):
    its location, storage options, and a function giving the store's bytes."""
    if request.param == "local":
        url, options = str(tmp_path / "a.zarr"), None
        digest: Callable[[], dict[str, bytes]] = lambda: tree_digest(tmp_path / "a.zarr")  # noqa: E731
    else:
        s3 = request.getfixturevalue("s3")
        url, options = f"{s3['url']}/a.zarr", s3["options"]
        digest = lambda: s3_digest(url, options)  # noqa: E731
    array = zarrext.create_array(
        url, storage_options=options, shape=DATA.shape, dtype=DATA.dtype, chunks=(16, 16),
        compressors=None, decision="never_apply",
        serializer=ShardingCodec(
            chunk_shape=(8, 8), codecs=[BytesCodec(), zarrext.ConditionalCodec([ZstdCodec()])]
        ),
    )
    array[:] = DATA
    return {"url": url, "options": options, "digest": digest, "kind": request.param}


def read_only_array(stored: dict[str, Any]) -> zarr.Array:
    return zarrext.open_array(stored["url"], mode="r", storage_options=stored["options"])


def read_only_store(stored: dict[str, Any]) -> Any:
    return open_store(stored["url"], mode="r", storage_options=stored["options"])


JOBS: dict[str, Callable[[zarr.Array], Any]] = {
    "write_dask": lambda a: zarrext.write_dask(da.from_array(DATA[::-1].copy(), chunks=16), a),
    "recompress": lambda a: zarrext.recompress(a, "compress_if_smaller"),
    "compact": zarrext.compact,
    "expand": zarrext.expand,
    "check --repair": lambda a: zarrext.check(a, repair=True),
}


@pytest.mark.parametrize("job", JOBS)
def test_a_job_given_a_read_only_array_refuses_and_writes_nothing(
    stored: dict[str, Any], job: str
) -> None:
    before = stored["digest"]()
    with pytest.raises(ReadOnlyError, match=f"read-only mode: {job} writes into it"):
        JOBS[job](read_only_array(stored))
    assert stored["digest"]() == before
    # the family of zarr's own refusal of a write into a read-only array
    with pytest.raises(ValueError, match="read-only"):
        read_only_array(stored)[:] = 0


@pytest.mark.parametrize("job", ["recompress", "compact"])
def test_a_job_given_an_array_over_a_read_only_store_refuses(
    stored: dict[str, Any], job: str
) -> None:
    # zarr.open_array in mode "r+" over a store opened read-only: the array is read-only
    before = stored["digest"]()
    with pytest.raises(ReadOnlyError):
        JOBS[job](zarr.open_array(read_only_store(stored), mode="r"))
    assert stored["digest"]() == before


def test_recompress_given_a_read_only_store_refuses(stored: dict[str, Any]) -> None:
    before = stored["digest"]()
    with pytest.raises(ReadOnlyError, match="recompress"):
        zarrext.recompress(read_only_store(stored))
    assert stored["digest"]() == before
    # a dry run only reads: a read-only store is fine for it
    report = zarrext.recompress(read_only_store(stored), dry_run=True)
    assert report.chunks == 16
    assert stored["digest"]() == before


def test_jobs_run_on_the_same_array_opened_for_writing(stored: dict[str, Any]) -> None:
    # the refusal is about the mode, not the store: opened "r+", the job writes
    before = stored["digest"]()
    writable = zarrext.open_array(stored["url"], storage_options=stored["options"])
    zarrext.recompress(writable, "compress_if_smaller")
    assert stored["digest"]() != before
    np.testing.assert_array_equal(read_only_array(stored)[:], DATA)


def test_quantize_into_a_read_only_store_refuses(
    stored: dict[str, Any], tmp_path: Path
) -> None:
    if stored["kind"] == "local":
        out = tmp_path / "q.zarr"
        out.mkdir()
        output: Any = open_store(str(out), mode="r")
        listing: Callable[[], Any] = lambda: tree_digest(out)  # noqa: E731
    else:
        url = stored["url"].replace("a.zarr", "q.zarr")
        output = open_store(url, mode="r", storage_options=stored["options"])
        listing = lambda: s3_digest(url, stored["options"])  # noqa: E731
    before = stored["digest"]()
    for quantize in (zarrext.quantize.copy_quantized, zarrext.quantize.copy_group_quantized):
        with pytest.raises(ReadOnlyError, match="quantize"):
            quantize(
                read_only_store(stored), output, max_abs_error=0.01,
                storage_options=stored["options"],
            )
        assert listing() == {}
    assert stored["digest"]() == before


def test_a_worker_description_of_a_read_only_array_is_not_writable(
    stored: dict[str, Any]
) -> None:
    from zarrext.jobs.store_refs import array_ref

    array = read_only_array(stored)
    with pytest.raises(ReadOnlyError):
        array_ref(array)  # jobs that write describe arrays "r+"
    assert array_ref(array, "r").open().read_only
