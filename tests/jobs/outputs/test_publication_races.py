"""A job publishes its output only over what it saw at its start (issue 42, item 5).

Whatever appears at ``--out`` during a run (another tool's array, a directory holding
a user's file, an empty directory, a second job's output) is never replaced: the
publication refuses, atomically (a no-replace rename locally, a conditional create on
an object store), in one line; the intruder stays as it is and this run's staged
output is discarded. With ``overwrite``, only the output the run saw at its start is
replaced: one put there meanwhile is refused the same way.

The races are made deterministic here: the intruder is created from the job's own
progress callback, after its last write unit and before its publication.
``tests/jobs/outputs/test_publication_processes.py`` races real processes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import zarrext
from tests.conftest import Where, tree_digest
from zarrext.jobs import outputs
from zarrext.jobs.outputs import STAGING_MARKER, UNFINISHED, OutputConflictError
from zarrext.quantize import copy_quantized


def _source(location: str, seed: int, options: dict[str, Any] | None = None) -> np.ndarray:
    data = np.random.default_rng(seed).uniform(0, 10, (32, 24)).astype("f4")
    zarr.create_array(location, shape=data.shape, chunks=(8, 8), dtype="f4",
                      fill_value=np.nan, storage_options=options)[:] = data
    return data


def _another_tools_array(location: str, options: dict[str, Any] | None = None) -> None:
    zarr.create_array(location, shape=(3,), chunks=(3,), dtype="i2", fill_value=0,
                      storage_options=options)[:] = [7, 8, 9]


def _at_last_unit(action: Callable[[], None]) -> Callable[..., None]:
    """A progress callback running ``action`` once, as the last write unit is done."""
    done_once: list[bool] = []

    def progress(*args: Any) -> None:
        done, total = args[-2], args[-1]
        if done == total and not done_once and (len(args) < 4 or args[1] == "copy"):
            done_once.append(True)
            action()

    return progress


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if STAGING_MARKER in p.name)


def _thesis(path: Path) -> None:
    path.mkdir()
    (path / "thesis.txt").write_text("four years of work")


def _empty_directory(path: Path) -> None:
    path.mkdir()


def _array(path: Path) -> None:
    _another_tools_array(str(path))


def _zip_file(path: Path) -> None:
    path.write_bytes(b"someone else's archive")


INTRUDERS = {"thesis": _thesis, "empty-directory": _empty_directory, "array": _array}


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("intruder", sorted(INTRUDERS))
def test_what_appears_at_a_new_local_output_during_the_run_is_never_replaced(
    tmp_path: Path, intruder: str, overwrite: bool
) -> None:
    _source(str(tmp_path / "src.zarr"), 0)
    out = tmp_path / "out.zarr"
    make = INTRUDERS[intruder]
    seen: dict[str, bytes] = {}

    def intrude() -> None:
        make(out)
        seen.update(tree_digest(out))

    with pytest.raises(OutputConflictError, match="during this run") as refused:
        zarrext.convert(str(tmp_path / "src.zarr"), str(out), overwrite=overwrite,
                        progress=_at_last_unit(intrude))
    assert "\n" not in str(refused.value)
    assert out.is_dir()
    assert tree_digest(out) == seen
    assert _leftovers(out) == []  # this run's staged output discarded


def test_a_file_appearing_at_a_new_zip_output_is_never_replaced(tmp_path: Path) -> None:
    _source(str(tmp_path / "src.zarr"), 0)
    out = tmp_path / "out.zip"
    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(str(tmp_path / "src.zarr"), str(out),
                        progress=_at_last_unit(lambda: _zip_file(out)))
    assert out.read_bytes() == b"someone else's archive"
    assert _leftovers(out) == []


def test_quantize_never_replaces_what_appears_at_its_output(tmp_path: Path) -> None:
    _source(str(tmp_path / "src.zarr"), 0)
    out = tmp_path / "q.zarr"
    with pytest.raises(OutputConflictError, match="during this run"):
        copy_quantized(str(tmp_path / "src.zarr"), str(out), max_abs_error=0.01,
                       allow_larger=True, progress=_at_last_unit(lambda: _thesis(out)))
    assert (out / "thesis.txt").read_text() == "four years of work"
    assert _leftovers(out) == []


@pytest.mark.parametrize("how", ["replaced-by-another-array", "replaced-by-a-thesis"])
def test_overwrite_replaces_only_the_output_seen_at_the_start(
    tmp_path: Path, how: str
) -> None:
    """The output seen at the start was removed during the run, and something else
    put at its path: that is not what the caller asked to replace."""
    _source(str(tmp_path / "src.zarr"), 0)
    out = tmp_path / "out.zarr"
    _source(str(out), 1)

    def swap_in_another() -> None:
        shutil.rmtree(out)
        (_array if how == "replaced-by-another-array" else _thesis)(out)

    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(str(tmp_path / "src.zarr"), str(out), overwrite=True,
                        progress=_at_last_unit(swap_in_another))
    if how == "replaced-by-another-array":
        np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], [7, 8, 9])
    else:
        assert (out / "thesis.txt").read_text() == "four years of work"
    assert _leftovers(out) == []


def test_overwrite_still_replaces_the_output_seen_at_the_start(tmp_path: Path) -> None:
    data = _source(str(tmp_path / "src.zarr"), 0)
    out = tmp_path / "out.zarr"
    _source(str(out), 1)
    zarrext.convert(str(tmp_path / "src.zarr"), str(out), overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], data)
    assert _leftovers(out) == []


def test_without_a_no_replace_rename_a_new_output_is_still_never_put_over_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the C library or file system has no ``RENAME_NOREPLACE``, the path is
    claimed by ``mkdir`` (which fails on anything there) before the rename."""
    monkeypatch.setattr(outputs.local, "_rename_no_replace", lambda a, b: False)
    _source(str(tmp_path / "src.zarr"), 0)
    for make in (_thesis, _empty_directory):
        out = tmp_path / f"out-{make.__name__}.zarr"
        with pytest.raises(OutputConflictError, match="during this run"):
            zarrext.convert(str(tmp_path / "src.zarr"), str(out),
                            progress=_at_last_unit(lambda: make(out)))  # noqa: B023
        assert out.is_dir()
        assert [p.name for p in out.iterdir()] == (["thesis.txt"] if make is _thesis else [])
    out = tmp_path / "out.zip"
    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(str(tmp_path / "src.zarr"), str(out),
                        progress=_at_last_unit(lambda: _zip_file(out)))
    assert out.read_bytes() == b"someone else's archive"
    for name in ("fresh.zarr", "fresh.zip"):
        zarrext.convert(str(tmp_path / "src.zarr"), str(tmp_path / name))
        assert _leftovers(tmp_path / name) == []
    assert zarr.open_array(str(tmp_path / "fresh.zarr"), mode="r").shape == (32, 24)


def test_without_the_exchange_overwrite_still_replaces_only_what_it_saw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outputs.local, "_exchange", lambda a, b: False)
    data = _source(str(tmp_path / "src.zarr"), 0)
    out = tmp_path / "out.zarr"
    _source(str(out), 1)

    def swap_in_another() -> None:
        shutil.rmtree(out)
        _thesis(out)

    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(str(tmp_path / "src.zarr"), str(out), overwrite=True,
                        progress=_at_last_unit(swap_in_another))
    assert (out / "thesis.txt").read_text() == "four years of work"
    shutil.rmtree(out)
    _source(str(out), 1)
    zarrext.convert(str(tmp_path / "src.zarr"), str(out), overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], data)
    assert _leftovers(out) == []


def test_a_zarr_json_put_at_an_s3_output_during_the_run_is_never_overwritten(
    s3: dict[str, Any],
) -> None:
    where = Where("s3", s3["url"], s3["options"])
    _source(where.location("src.zarr"), 0, s3["options"])
    theirs = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {
        "written_by": "another tool"}}).encode()
    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(
            where.location("src.zarr"), where.location("out.zarr"),
            storage_options=s3["options"],
            progress=_at_last_unit(lambda: where.put("out.zarr", "zarr.json", theirs)),
        )
    stored = where.stored("out.zarr")
    assert stored["zarr.json"] == theirs
    assert UNFINISHED not in stored


def test_a_second_job_never_takes_over_a_running_jobs_s3_output(
    s3: dict[str, Any],
) -> None:
    """A job finding another's marker at its output, that job's process alive, is
    refused at its start: it deletes nothing of the running job's."""
    where = Where("s3", s3["url"], s3["options"])
    data = _source(where.location("src.zarr"), 0, s3["options"])
    _source(where.location("other-src.zarr"), 1, s3["options"])
    out = where.location("out.zarr")
    refused: list[BaseException] = []

    def second_job() -> None:
        try:
            zarrext.convert(where.location("other-src.zarr"), out,
                            storage_options=s3["options"])
        except OutputConflictError as e:
            refused.append(e)

    zarrext.convert(where.location("src.zarr"), out, storage_options=s3["options"],
                    progress=_at_last_unit(second_job))
    assert len(refused) == 1
    assert "\n" not in str(refused[0])
    assert "writing" in str(refused[0])
    np.testing.assert_array_equal(
        zarr.open_array(out, mode="r", storage_options=s3["options"])[:], data)
    assert UNFINISHED not in where.stored("out.zarr")


def test_a_server_ignoring_conditional_writes_is_named_and_read_before_writing(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that ignores ``If-None-Match`` (its conditional create always writes)
    is found by the marker written twice: a warning names it, and the root
    ``zarr.json`` is read just before it is written."""
    from zarrext.stores import objects

    real = objects._create

    async def ignoring(store: Any, key: str, value: bytes) -> bool:
        await real(store, key, value)  # a first create: written
        await store.set(key, zarr.core.buffer.default_buffer_prototype().buffer.from_bytes(
            value))  # as such a server would: written again, and said so
        return True

    monkeypatch.setattr(objects, "_create", ignoring)
    where = Where("s3", s3["url"], s3["options"])
    data = _source(where.location("src.zarr"), 0, s3["options"])
    with pytest.warns(outputs.UnconditionalStoreWarning, match="ignores conditional"):
        zarrext.convert(where.location("src.zarr"), where.location("ok.zarr"),
                        storage_options=s3["options"])
    np.testing.assert_array_equal(
        zarr.open_array(where.location("ok.zarr"), storage_options=s3["options"])[:], data)
    theirs = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    with pytest.warns(outputs.UnconditionalStoreWarning), \
            pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(
            where.location("src.zarr"), where.location("out.zarr"),
            storage_options=s3["options"],
            progress=_at_last_unit(lambda: where.put("out.zarr", "zarr.json", theirs)),
        )
    assert where.stored("out.zarr")["zarr.json"] == theirs


def test_an_fsspec_output_is_read_before_its_root_is_written(s3: dict[str, Any]) -> None:
    """An fsspec store has no conditional write: the root ``zarr.json`` another writer
    put there is found by a read just before the write, and left as it is."""
    from zarr.storage import FsspecStore

    where = Where("s3", s3["url"], s3["options"])
    _source(where.location("src.zarr"), 0, s3["options"])
    output = FsspecStore.from_url(where.location("out.zarr"), storage_options=s3["options"])
    theirs = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(
            where.location("src.zarr"), output, storage_options=s3["options"],
            progress=_at_last_unit(lambda: where.put("out.zarr", "zarr.json", theirs)),
        )
    assert where.stored("out.zarr")["zarr.json"] == theirs


def test_a_refused_publication_leaves_the_groups_consolidated_metadata_as_it_was(
    tmp_path: Path,
) -> None:
    """Refused before anything was withdrawn or swapped: the consolidated metadata of
    the group above is not written again (it would list the intruder)."""
    _source(str(tmp_path / "src.zarr"), 0)
    group = tmp_path / "g.zarr"
    zarr.open_group(str(group), mode="w").create_array("a", shape=(2,), dtype="i1")
    zarr.consolidate_metadata(str(group))
    document = (group / "zarr.json").read_bytes()
    with pytest.raises(OutputConflictError, match="during this run"):
        zarrext.convert(str(tmp_path / "src.zarr"), str(group / "q"),
                        progress=_at_last_unit(lambda: _array(group / "q")))
    assert (group / "zarr.json").read_bytes() == document
    np.testing.assert_array_equal(zarr.open_array(str(group / "q"), mode="r")[:], [7, 8, 9])


# The marker of a job that started together with the one under test.
_THEIR_MARKER = json.dumps({"zarrext": "a job is writing here", "pid": 1, "host": "x",
                            "id": "theirs"}).encode()


async def _their_marker_lands(store: Any, key: str) -> None:
    """The other job's conditional write, told it may write as this one was, lands."""
    await store.set(key, zarr.core.buffer.default_buffer_prototype().buffer.from_bytes(
        _THEIR_MARKER))


def _refused_at_start(where: Where, s3: dict[str, Any]) -> None:
    """``convert`` into ``out.zarr`` is refused in one line: another job is writing."""
    with pytest.raises(OutputConflictError, match="is writing") as refused:
        zarrext.convert(where.location("src.zarr"), where.location("out.zarr"),
                        storage_options=s3["options"])
    assert "\n" not in str(refused.value)


def test_two_claims_that_both_succeed_leave_one_job_writing(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server whose conditional create checks, then writes (the loopback S3 server
    does: two creates at once can both succeed) tells two jobs starting together
    that each made the output's marker. The job that reads back another's marker
    is refused at its start, in one line, writing nothing; the other's marker stays."""
    from zarrext.stores import objects

    real = objects._create
    raced: list[str] = []

    async def racing(store: Any, key: str, value: bytes) -> bool:
        written = await real(store, key, value)
        if key == UNFINISHED and written and not raced:
            raced.append(key)
            await _their_marker_lands(store, key)
        return written

    monkeypatch.setattr(objects, "_create", racing)
    where = Where("s3", s3["url"], s3["options"])
    _source(where.location("src.zarr"), 0, s3["options"])
    _refused_at_start(where, s3)
    assert raced == [UNFINISHED]
    assert where.stored("out.zarr") == {UNFINISHED: _THEIR_MARKER}


def test_two_take_overs_that_both_succeed_leave_one_job_writing(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two jobs finding a killed run's marker both replace it, conditional on its
    ETag, and both are told it worked (a server that checks, then writes): the job
    that reads back another's marker is refused, deleting none of the killed run's
    objects (they are the other job's to clear now)."""
    from zarrext.stores import objects

    real = objects._replace

    async def racing(store: Any, key: str, value: bytes, e_tag: str) -> bool:
        replaced = await real(store, key, value, e_tag)
        await _their_marker_lands(store, key)  # checked against the same ETag
        return replaced

    monkeypatch.setattr(objects, "_replace", racing)
    where = Where("s3", s3["url"], s3["options"])
    _source(where.location("src.zarr"), 0, s3["options"])
    where.put("out.zarr", UNFINISHED, b"a killed run's marker")
    where.put("out.zarr", "c/0/0", b"a killed run's chunk")
    _refused_at_start(where, s3)
    assert where.stored("out.zarr") == {UNFINISHED: _THEIR_MARKER,
                                        "c/0/0": b"a killed run's chunk"}
