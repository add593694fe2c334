"""An output resolved once (``zarrext.jobs.outputs.resolve_destination``): its kind
decides how it is staged, refused and published, and what a job may do there."""

from __future__ import annotations

from pathlib import Path

import pytest
import zarr
from zarr.storage import LocalStore, MemoryStore, StorePath, ZipStore

from zarrext.jobs.outputs import (
    Destination,
    InPlace,
    LocalDirectory,
    LocalZip,
    OutputConflictError,
    RemoteStore,
    resolve_destination,
)


def test_each_kind_of_output_resolves_to_its_destination(tmp_path: Path) -> None:
    zipped = ZipStore(tmp_path / "a.zip", mode="w")
    cases: list[tuple[object, type[Destination], bool, bool]] = [
        # output, kind, shard layouts write in place, only this process writes it
        (str(tmp_path / "out.zarr"), LocalDirectory, True, False),
        (LocalStore(tmp_path / "out.zarr"), LocalDirectory, True, False),
        (f"file://{tmp_path}/out.zarr", LocalDirectory, True, False),
        (str(tmp_path / "out.zip"), LocalZip, False, True),
        (zipped, LocalZip, False, True),
        ("s3://bucket/out.zarr", RemoteStore, False, False),
        ("memory://out.zarr", RemoteStore, False, False),
        (MemoryStore(), InPlace, False, False),
        (StorePath(LocalStore(tmp_path / "g.zarr"), "a"), InPlace, True, False),
        (StorePath(zipped, "a"), InPlace, False, True),
    ]
    for output, kind, in_place, only_here in cases:
        destination = resolve_destination(output, overwrite=False)
        assert type(destination) is kind, output
        assert destination.shard_layouts_in_place is in_place, output
        assert destination.only_this_process is only_here, output
        assert destination.output is output
        assert resolve_destination(destination, overwrite=True) is destination
    zipped.close()


def test_resolving_reads_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "out.zarr"
    resolve_destination(str(out), overwrite=False)
    assert not (tmp_path / "deep").exists()
    # a URL is opened by each step that uses it: a bucket nobody can reach is not asked
    resolve_destination("s3://no-such-bucket-zarrext/out.zarr", overwrite=False,
                        storage_options={"endpoint_url": "http://127.0.0.1:9"})


@pytest.mark.parametrize(
    ("source", "output", "said"),
    [
        ("a.zarr", "a.zarr", "is the input"),
        ("a.zarr", "a.zarr/inner", "is inside the input"),
        ("a.zarr/inner", "a.zarr", "contains the input"),
    ],
)
def test_an_output_overlapping_its_source_is_refused(
    tmp_path: Path, source: str, output: str, said: str
) -> None:
    destination = resolve_destination(str(tmp_path / output), overwrite=True)
    with pytest.raises(OutputConflictError, match=said):
        destination.refuse_overlap(str(tmp_path / source))
    # the same path in another place (an object store) is no overlap
    resolve_destination(f"s3://b/{output}", overwrite=True).refuse_overlap(
        str(tmp_path / source))
    resolve_destination(f"s3://b/{output}", overwrite=True).refuse_overlap(f"gs://b/{source}")
    with pytest.raises(OutputConflictError, match=said):
        resolve_destination(f"s3://b/{output}", overwrite=True).refuse_overlap(
            f"s3://b/{source}")


def test_a_failed_local_job_leaves_nothing_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    destination = resolve_destination(str(out), overwrite=False)

    def job(target: object) -> None:
        zarr.create_array(target, shape=(4,), dtype="i4")
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError) as raised:
        destination.run_staged(job)
    assert raised.value.__notes__ == [f"nothing was written at {out}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
