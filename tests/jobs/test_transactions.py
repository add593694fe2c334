"""icechunk repositories as transactional stores: jobs commit one snapshot or nothing."""

from __future__ import annotations

import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import StorePath

import zarrext
from tests.conftest import Run, conditional
from zarrext.jobs.transactions import (
    CommitConflictError,
    RepositoryError,
    commit,
    job_message,
    open_repository,
    read_session,
    repository_storage,
    run_forked,
    transaction,
)
from zarrext.sharding.geometry import ShardLayoutError

icechunk = pytest.importorskip("icechunk")
icechunk.set_logs_filter("off")  # its warnings about local repositories are not ours to test

DATA = (np.arange(64 * 64, dtype="f4").reshape(64, 64) % 7).astype("f4")


def fill(store: Any) -> None:
    """A plain array ``a`` (conditional zstd, stored raw) and a sharded ``sh`` in ``store``."""
    a = zarrext.create_array(
        store, name="a", shape=DATA.shape, chunks=(16, 16), dtype="f4", fill_value=0,
        compressors=[conditional(ZstdCodec(level=1))], decision="never_apply",
    )
    a[:] = DATA
    sh = zarrext.create_array(
        store, name="sh", shape=DATA.shape, chunks=(8, 8), shards=(32, 32), dtype="f4",
        fill_value=0, compressors=[conditional(ZstdCodec(level=1))], decision="never_apply",
    )
    sh[:] = DATA


def make_repository(storage: Any) -> tuple[Any, str]:
    """A repository holding :func:`fill`'s arrays in its first commit; (repo, snapshot)."""
    repo = icechunk.Repository.create(storage)
    session = repo.writable_session("main")
    fill(session.store)
    return repo, session.commit("arrays stored raw")


@pytest.fixture
def local_repo(tmp_path: Path) -> tuple[Any, str, Path]:
    repo, first = make_repository(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    return repo, first, tmp_path / "repo"


def loosen_shard(repo: Any) -> None:
    """Commit ``sh/c/0/0`` with spare bytes between its chunks and its index (at the
    end): still valid, no longer dense, so ``compact`` has that shard to rewrite."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    session = repo.writable_session("main")
    prototype = default_buffer_prototype()
    data = sync(session.store.get("sh/c/0/0", prototype)).to_bytes()
    index = 4 * 4 * 16 + 4  # 4x4 inner chunks, 16 bytes each, and the crc32c
    loose = data[:-index] + b"\xab" * 64 + data[-index:]
    sync(session.store.set("sh/c/0/0", prototype.buffer.from_bytes(loose)))
    session.commit("spare bytes in a shard")


def masks(store: Any, path: str = "a") -> Counter[int]:
    return zarrext.inventory(zarrext.open_array(store, path=path, mode="r")).mask_counts


def tip(repo: Any) -> str:
    return str(repo.lookup_branch("main"))


# -- the library: sessions, transactions, conflicts ---------------------------------------


def test_recompress_commits_one_snapshot_and_the_earlier_one_is_unchanged(
    local_repo: tuple[Any, str, Path],
) -> None:
    repo, first, _ = local_repo
    message = job_message("recompress", {"decision": "compress_if_smaller"})
    with transaction(repo, "main", message) as done:
        report = zarrext.recompress(zarrext.open_array(done.store, path="a", mode="r+"))
    assert report.masks_after == Counter({1: 16})
    assert done.snapshot_id == tip(repo) != first
    assert next(s.message for s in repo.ancestry(branch="main")) == message
    old, new = read_session(repo, snapshot=first), read_session(repo, branch="main")
    assert masks(old.store) == Counter({0: 16})
    assert masks(new.store) == Counter({1: 16})
    for session in (old, new):
        np.testing.assert_array_equal(zarr.open_array(session.store, path="a")[:], DATA)


def test_a_conflicting_commit_is_refused_and_the_branch_keeps_the_first(
    local_repo: tuple[Any, str, Path],
) -> None:
    repo, _, _ = local_repo
    ours = repo.writable_session("main")
    theirs = repo.writable_session("main")
    zarrext.recompress(zarrext.open_array(ours.store, path="a", mode="r+"))
    zarr.open_array(theirs.store, path="a")[:16, :16] = -1
    landed = commit(theirs, "theirs")
    conflict = r"\(/a: Chunk double update\); nothing was committed"
    with pytest.raises(CommitConflictError, match=conflict):
        commit(ours, "ours")
    assert tip(repo) == landed
    now = read_session(repo, branch="main").store
    assert masks(now) == Counter({0: 16})  # theirs alone: never_apply, no recompress
    assert (zarr.open_array(now, path="a")[:16, :16] == -1).all()


def test_commits_to_different_arrays_both_land(local_repo: tuple[Any, str, Path]) -> None:
    repo, first, _ = local_repo
    ours = repo.writable_session("main")
    theirs = repo.writable_session("main")
    zarrext.recompress(zarrext.open_array(ours.store, path="a", mode="r+"))
    zarr.open_array(theirs.store, path="sh")[:8, :8] = -1
    commit(theirs, "theirs")
    commit(ours, "ours")  # rebased onto theirs: no chunk in common
    now = read_session(repo, branch="main").store
    assert masks(now) == Counter({1: 16})
    assert (zarr.open_array(now, path="sh")[:8, :8] == -1).all()
    assert len(list(repo.ancestry(branch="main"))) == len(
        list(repo.ancestry(snapshot_id=first))
    ) + 2


def test_a_failing_job_commits_nothing(local_repo: tuple[Any, str, Path]) -> None:
    repo, first, _ = local_repo

    def job_that_fails() -> None:
        with transaction(repo, "main", "x") as done:
            zarr.open_array(done.store, path="a")[:] = -5
            raise RuntimeError("midway")

    with pytest.raises(RuntimeError, match="midway"):
        job_that_fails()
    assert tip(repo) == first
    np.testing.assert_array_equal(
        zarr.open_array(read_session(repo).store, path="a")[:], DATA
    )


def test_a_job_that_changes_nothing_commits_nothing(local_repo: tuple[Any, str, Path]) -> None:
    repo, first, _ = local_repo
    with transaction(repo, "main", "nothing") as done:
        assert zarrext.check(zarrext.open_array(done.store, path="sh", mode="r")) == []
    assert done.snapshot_id is None
    assert tip(repo) == first


def test_unknown_branch_snapshot_and_repository_are_one_clear_error(
    local_repo: tuple[Any, str, Path], tmp_path: Path
) -> None:
    repo, _, _ = local_repo
    with pytest.raises(RepositoryError, match=r"no branch 'nope'.*branches: main"):
        read_session(repo, branch="nope")
    with pytest.raises(RepositoryError, match="no branch 'nope'"), transaction(repo, "nope", "x"):
        pass
    with pytest.raises(RepositoryError, match="no snapshot"):
        read_session(repo, snapshot="AAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(RepositoryError, match="no icechunk repository here"):
        open_repository(tmp_path / "missing")


def test_storage_options_map_to_s3_and_bad_ones_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not local paths"):
        repository_storage(tmp_path, {"anon": True})
    with pytest.raises(ValueError, match="use_ssl cannot be passed"):
        repository_storage("s3://b/r", {"use_ssl": False})
    with pytest.raises(ValueError, match="not ftp://"):
        repository_storage("ftp://b/r")


# -- every job on a session's store --------------------------------------------------------


def test_read_jobs_on_a_readonly_session(local_repo: tuple[Any, str, Path]) -> None:
    from zarrext.jobs.node_info import node_info

    repo, _, _ = local_repo
    store = read_session(repo).store
    sh = zarrext.open_array(store, path="sh", mode="r")
    assert zarrext.check(sh) == []
    assert zarrext.check(sh, deep=True) == []
    inv = zarrext.inventory(sh)
    assert len(inv.chunks) == 64
    assert inv.mask_counts == Counter({0: 64})
    info = node_info(zarr.open_group(store, mode="r"))
    assert [m["path"] for m in info["members"]] == ["a", "sh"]
    assert info["stored_bytes"] == inv.stored_bytes + zarrext.inventory(
        zarrext.open_array(store, path="a", mode="r")
    ).stored_bytes


def test_compact_commits_whole_shards_and_in_place_layouts_are_refused(
    local_repo: tuple[Any, str, Path],
) -> None:
    repo, _first, _ = local_repo
    loosen_shard(repo)
    with transaction(repo, "main", "compact") as done:
        sh = zarrext.open_array(done.store, path="sh", mode="r+")
        report = zarrext.compact(sh)
        assert (report.shards, report.rewritten) == (4, 1)
        with pytest.raises(ShardLayoutError, match="IcechunkStore cannot"):
            zarrext.expand(sh)
        with pytest.raises(ShardLayoutError, match=r"fixed-slot.*IcechunkStore"):
            zarrext.open_array(done.store, path="sh", mode="r+", shard_layout="fixed-slot")
    assert done.snapshot_id == tip(repo)
    np.testing.assert_array_equal(
        zarr.open_array(read_session(repo).store, path="sh")[:], DATA
    )
    with transaction(repo, "main", "compact") as again:  # nothing left to do
        assert zarrext.compact(zarrext.open_array(again.store, path="sh")).rewritten == 0
    assert again.snapshot_id is None
    assert tip(repo) == done.snapshot_id


def test_quantize_into_the_session_refuses_existing_outputs(
    local_repo: tuple[Any, str, Path],
) -> None:
    from zarrext.jobs.outputs import OutputConflictError
    from zarrext.quantize import copy_quantized

    repo, first, _ = local_repo
    with transaction(repo, "main", "quantize") as done:
        source = StorePath(done.store, "a")
        with pytest.raises(OutputConflictError, match="is the input"):
            copy_quantized(source, StorePath(done.store, "a"), max_abs_error=0.01)
        with pytest.raises(OutputConflictError, match="sh already exists"):
            copy_quantized(source, StorePath(done.store, "sh"), max_abs_error=0.01)
        report = copy_quantized(source, StorePath(done.store, "q"), max_abs_error=0.01)
    assert report.worst_error <= 0.01
    now = read_session(repo).store
    np.testing.assert_allclose(zarr.open_array(now, path="q")[:], DATA, atol=0.01)
    with pytest.raises(FileNotFoundError):  # the earlier snapshot has no q
        zarr.open_array(read_session(repo, snapshot=first).store, path="q", mode="r")


# -- forks: one task per fork, merged before one commit ------------------------------------


def write_rows(fork: Any, rows: tuple[int, int]) -> Any:
    """A task: write rows ``rows`` of ``a`` (whole chunks) through the fork, return the fork."""
    array = zarr.open_array(fork.store, path="a")
    array[rows[0] : rows[1]] = np.full((rows[1] - rows[0], 64), rows[0], dtype="f4")
    return fork


def expected_rows() -> np.ndarray:
    return np.repeat(np.arange(0, 64, 16, dtype="f4"), 16)[:, None] * np.ones(64, "f4")


ROWS = [(r, r + 16) for r in range(0, 64, 16)]


@pytest.mark.parametrize("executor", ["none", "threads"])
def test_run_forked_merges_every_task_into_one_commit(
    local_repo: tuple[Any, str, Path], executor: str
) -> None:
    repo, first, _ = local_repo
    with transaction(repo, "main", "rows") as done:
        if executor == "threads":
            with ThreadPoolExecutor(4) as pool:
                run_forked(done.session, write_rows, ROWS, executor=pool)
        else:
            run_forked(done.session, write_rows, ROWS)
    assert [s.id for s in repo.ancestry(branch="main")][:2] == [done.snapshot_id, first]
    np.testing.assert_array_equal(
        zarr.open_array(read_session(repo).store, path="a")[:], expected_rows()
    )


def test_run_forked_on_a_two_process_cluster(local_repo: tuple[Any, str, Path]) -> None:
    distributed = pytest.importorskip("distributed")
    repo, _, _ = local_repo
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
        transaction(repo, "main", "rows on a cluster") as done,
    ):
        run_forked(done.session, write_rows, ROWS, executor=client)
    assert done.snapshot_id == tip(repo)
    np.testing.assert_array_equal(
        zarr.open_array(read_session(repo).store, path="a")[:], expected_rows()
    )


def failing_task(fork: Any, rows: tuple[int, int]) -> Any:
    write_rows(fork, rows)
    if rows[0] == 32:
        raise ValueError("task 32 failed")
    return fork


def test_run_forked_merges_nothing_when_a_task_fails(local_repo: tuple[Any, str, Path]) -> None:
    repo, first, _ = local_repo
    session = repo.writable_session("main")
    with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="task 32"):
        run_forked(session, failing_task, ROWS, executor=pool)
    assert not session.has_uncommitted_changes
    with pytest.raises(TypeError, match="must return the fork"):
        run_forked(session, lambda fork, task: None, [1])
    assert tip(repo) == first


# -- the command line -----------------------------------------------------------------------


def test_cli_recompress_commits_one_snapshot_naming_the_job(
    run: Run, local_repo: tuple[Any, str, Path]
) -> None:
    repo, first, path = local_repo
    code, out, err = run(
        "recompress", path, "--icechunk-branch", "main", "--decision", "compress_if_smaller",
        "--json",
    )
    assert code == 0, err
    assert {a["path"] for a in json.loads(out)["arrays"]} == {"a", "sh"}
    snapshots = list(repo.ancestry(branch="main"))
    assert snapshots[1].id == first  # exactly one new snapshot
    assert snapshots[0].message == "zarrext recompress --decision compress_if_smaller"
    assert {k: snapshots[0].metadata[k] for k in ("job", "settings")} == {
        "job": "recompress", "settings": {"decision": "compress_if_smaller"}
    }
    assert err.strip().splitlines()[-1] == (
        f"zarrext: committed snapshot {snapshots[0].id} to branch main "
        "(zarrext recompress --decision compress_if_smaller)"
    )
    code, out, err = run("inspect", path, "--icechunk-snapshot", first, "--json")
    assert code == 0, err
    assert {a["path"]: a["mask_counts"] for a in json.loads(out)["arrays"]} == {
        "a": {"0b0": 16}, "sh": {"0b0": 64}
    }
    code, out, _ = run("inspect", path, "--icechunk-branch", "main", "--json")
    assert {a["path"]: a["mask_counts"] for a in json.loads(out)["arrays"]} == {
        "a": {"0b1": 16}, "sh": {"0b1": 64}
    }


def test_cli_compact_commits_without_the_plain_readers_warning(
    run: Run, local_repo: tuple[Any, str, Path]
) -> None:
    repo, first, path = local_repo
    loosen_shard(repo)
    code, out, err = run("compact", path, "--icechunk-branch", "main")
    assert code == 0, err
    assert "sh: 4 shards, 1 rewritten" in out
    assert "note:" not in out  # readers of a repository see snapshots, never a race
    assert next(iter(repo.ancestry(branch="main"))).message == "zarrext compact"
    np.testing.assert_array_equal(zarr.open_array(read_session(repo).store, path="sh")[:], DATA)
    code, _, err = run("expand", path, "--icechunk-branch", "main")
    assert code == 1
    assert "IcechunkStore cannot do" in err
    assert len(list(repo.ancestry(branch="main"))) == len(
        list(repo.ancestry(snapshot_id=first))
    ) + 2  # the loosened shard's and compact's snapshots; expand committed nothing
    code, out, err = run("compact", path, "--icechunk-branch", "main")
    assert code == 0, err
    assert "sh: 4 shards, all already dense: left as they are" in out
    assert len(list(repo.ancestry(branch="main"))) == len(
        list(repo.ancestry(snapshot_id=first))
    ) + 2  # nothing to do: nothing committed


def test_cli_read_commands_on_a_branch(run: Run, local_repo: tuple[Any, str, Path]) -> None:
    repo, _, path = local_repo
    code, out, err = run("info", path, "--icechunk-branch", "main", "--json")
    assert code == 0, err
    assert [m["path"] for m in json.loads(out)["members"]] == ["a", "sh"]
    code, out, err = run("check", path, "--icechunk-branch", "main", "--deep", "--json")
    assert code == 0, err
    assert json.loads(out)["ok"] is True
    code, out, err = run("recompress", path, "--icechunk-branch", "main", "--dry-run")
    assert code == 0
    assert "would recompress a" in out
    assert err == ""
    assert len(list(repo.ancestry(branch="main"))) == 2  # a dry run commits nothing


def test_cli_conflicting_commit_is_one_line_and_the_branch_keeps_the_other(
    run: Run, local_repo: tuple[Any, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import zarrext.jobs.recompression

    repo, _, path = local_repo
    real = zarrext.jobs.recompression.recompress
    landed = []

    def racing(array: Any, *args: Any, **kwargs: Any) -> Any:
        report = real(array, *args, **kwargs)
        if not landed:  # another writer commits to the same array meanwhile
            other = repo.writable_session("main")
            zarr.open_array(other.store, path=array.path)[:] = 1
            landed.append(other.commit("another writer"))
        return report

    monkeypatch.setattr(zarrext.jobs.recompression, "recompress", racing)
    code, _out, err = run("recompress", path, "--icechunk-branch", "main", "-q")
    assert code == 1
    # -q: the local repository's safety note (kept even then), and the error in one line
    note, error = err.strip().splitlines()
    assert note.startswith(f"zarrext: warning: {path} is an icechunk repository in a local")
    assert error.startswith(f"zarrext: error: {path}: another session committed to branch main")
    assert "nothing was committed" in error
    assert tip(repo) == landed[0]
    now = read_session(repo).store
    assert masks(now) == Counter({0: 16})
    assert masks(now, "sh") == Counter({0: 64})


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["info", "{missing}", "--icechunk-branch", "main"], 1, "no icechunk repository here"),
        (["inspect", "{repo}", "--icechunk-branch", "nope"], 1, "no branch 'nope'"),
        (["check", "{repo}", "--icechunk-snapshot", "AAAAAAAAAAAAAAAAAAAA"], 1, "no snapshot"),
        (["recompress", "{repo}", "--icechunk-branch", "nope"], 1, "no branch 'nope'"),
        (["recompress", "{repo}", "--icechunk-snapshot", "X"], 2, "snapshots are never changed"),
        (["info", "{repo}", "--icechunk-branch", "main", "--icechunk-snapshot", "X"], 2,
         "not both"),
        (["info", "{repo}"], 2, "an icechunk repository, not a Zarr store"),
    ],
    ids=["no-repository", "unknown-branch", "unknown-snapshot", "write-unknown-branch",
         "write-to-snapshot", "both", "repository-without-branch"],
)
def test_cli_errors_are_one_line(
    run: Run, local_repo: tuple[Any, str, Path], tmp_path: Path, args: list[str], code: int,
    message: str,
) -> None:
    repo, first, path = local_repo
    args = [a.format(repo=path, missing=tmp_path / "missing") for a in args]
    got, _out, err = run(*args)
    assert got == code, err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("zarrext: error: ")
    assert message in err
    assert tip(repo) == first


def test_cli_without_icechunk_installed_says_which_extra(
    run: Run, local_repo: tuple[Any, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, path = local_repo
    monkeypatch.setitem(sys.modules, "icechunk", None)
    code, _, err = run("info", path, "--icechunk-branch", "main")
    assert code == 1
    assert err.strip() == (
        "zarrext: error: zarrext info --icechunk-branch needs icechunk, which is not "
        "installed: pip install 'zarrext[icechunk]'"
    )


def test_cli_recompress_in_a_repository_in_s3(run: Run, s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/repo"
    _repo, first = make_repository(repository_storage(url, s3["options"]))
    options = json.dumps(s3["options"])
    code, _, err = run(
        "recompress", url, "--icechunk-branch", "main", "--storage-options", options, "-q"
    )
    assert code == 0, err
    reopened = open_repository(url, storage_options=s3["options"])
    assert masks(read_session(reopened).store) == Counter({1: 16})
    assert masks(read_session(reopened, snapshot=first).store) == Counter({0: 16})
    code, out, err = run(
        "info", url, "--icechunk-snapshot", first, "--storage-options", options, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["stored_bytes"] > json.loads(
        run("info", url, "--icechunk-branch", "main", "--storage-options", options, "--json")[1]
    )["stored_bytes"]


# -- quantize into the repository -------------------------------------------------------------


def test_cli_quantize_commits_one_snapshot_naming_the_job_and_its_bound(
    run: Run, local_repo: tuple[Any, str, Path]
) -> None:
    repo, first, path = local_repo
    code, out, err = run(
        "quantize", path, "--icechunk-branch", "main", "--max-abs-error", "0.01",
        "--out", "q", "--json",
    )
    assert code == 0, err
    assert [a["path"] for a in json.loads(out)["arrays"]] == ["a", "sh"]
    snapshots = list(repo.ancestry(branch="main"))
    assert snapshots[1].id == first  # exactly one new snapshot
    assert snapshots[0].message == "zarrext quantize --max-abs-error 0.01 --out q"
    assert snapshots[0].metadata["settings"]["max_abs_error"] == 0.01
    assert err.strip().splitlines()[-1].startswith(
        f"zarrext: committed snapshot {snapshots[0].id} to branch main"
    )
    now = read_session(repo).store
    for name in ("a", "sh"):  # the copy holds the group's members, not itself
        copied = zarr.open_array(now, path=f"q/{name}", mode="r")
        assert [f.to_dict()["name"] for f in copied.filters] == ["scale_offset", "cast_value"]
        assert float(np.abs(copied[:] - DATA).max()) <= 0.01
    assert sorted(zarr.open_group(now, path="q", mode="r").array_keys()) == ["a", "sh"]
    with pytest.raises(FileNotFoundError):  # the earlier snapshot has no q
        zarr.open_group(read_session(repo, snapshot=first).store, path="q", mode="r")

    # q exists now: refused without --overwrite, in one line, and nothing committed
    code, _, err = run(
        "quantize", path, "--icechunk-branch", "main", "--max-abs-error", "0.01", "--out", "q",
    )
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "already exists" in err
    assert tip(repo) == snapshots[0].id


# -- jobs on a Dask cluster: one fork per task, merged before one commit ---------------


@pytest.fixture(scope="module")
def client() -> Any:
    """A Dask client of 2 worker processes, 1 thread each (the machine has 2 cores)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_recompress_and_compact_on_a_cluster_commit_once(
    local_repo: tuple[Any, str, Path], client: Any
) -> None:
    repo, first, _ = local_repo
    progress: list[tuple[int, int]] = []
    with transaction(repo, "main", "recompress and compact on a cluster") as done:
        report = zarrext.recompress(
            zarrext.open_array(done.store, path="a"), client=client,
            progress=lambda d, t: progress.append((d, t)),
        )
        sharded = zarrext.recompress(zarrext.open_array(done.store, path="sh"), client=client)
        compacted = zarrext.compact(zarrext.open_array(done.store, path="sh"), client=client)
    assert progress[0] == (0, 16)
    assert progress[-1] == (16, 16)
    assert report.masks_after == Counter({1: 16})
    assert sharded.masks_after == Counter({1: 64})
    assert compacted.shards == 4
    snapshots = list(repo.ancestry(branch="main"))
    assert [s.id for s in snapshots[:2]] == [done.snapshot_id, first]  # one commit
    now = read_session(repo).store
    assert masks(now) == Counter({1: 16})
    assert masks(now, "sh") == Counter({1: 64})
    for path in ("a", "sh"):
        np.testing.assert_array_equal(zarr.open_array(now, path=path)[:], DATA)
    old = read_session(repo, snapshot=first).store
    assert masks(old) == Counter({0: 16})
    assert masks(old, "sh") == Counter({0: 64})


def test_a_failing_task_on_a_cluster_merges_nothing(
    local_repo: tuple[Any, str, Path], client: Any
) -> None:
    from zarrext.jobs.cluster import on_client
    from zarrext.jobs.store_refs import array_ref

    repo, first, _ = local_repo
    session = repo.writable_session("main")
    ref = array_ref(zarrext.open_array(session.store, path="a"))
    results = on_client(client, failing_on_worker, [[0], [32]], ref, what="test")
    with pytest.raises(ValueError, match="task 32 failed"):
        list(results)
    assert not session.has_uncommitted_changes  # the finished task's fork was not merged
    assert tip(repo) == first


def failing_on_worker(ref: Any, rows: list[int]) -> int:
    """A task writing rows through its fork; the one given row 32 fails."""
    ref.open()[rows[0] : rows[0] + 16] = rows[0]
    if rows[0] == 32:
        raise ValueError("task 32 failed")
    return rows[0]


def test_a_conflicting_commit_after_a_cluster_job_leaves_the_branch_unchanged(
    local_repo: tuple[Any, str, Path], client: Any
) -> None:
    repo, _, _ = local_repo
    other = repo.writable_session("main")  # another writer, same array, commits first
    with (  # noqa: PT012
        pytest.raises(CommitConflictError, match="nothing was committed"),
        transaction(repo, "main", "recompress") as done,
    ):
        zarrext.recompress(zarrext.open_array(done.store, path="a"), client=client)
        zarr.open_array(other.store, path="a")[:] = 1
        theirs = other.commit("another writer")
    assert tip(repo) == theirs
    now = read_session(repo).store
    assert masks(now) == Counter({0: 16})
    np.testing.assert_array_equal(zarr.open_array(now, path="a")[:], np.ones_like(DATA))


def test_cli_recompress_on_a_scheduler_commits_one_snapshot(
    run: Run, local_repo: tuple[Any, str, Path], client: Any
) -> None:
    repo, first, path = local_repo
    code, out, err = run(
        "recompress", path, "--icechunk-branch", "main", "--scheduler",
        client.scheduler.address, "--json",
    )
    assert code == 0, err
    assert {a["path"] for a in json.loads(out)["arrays"]} == {"a", "sh"}
    snapshots = list(repo.ancestry(branch="main"))
    assert snapshots[1].id == first
    assert snapshots[0].message == "zarrext recompress --decision compress_if_smaller"
    now = read_session(repo).store
    assert masks(now) == Counter({1: 16})
    assert masks(now, "sh") == Counter({1: 64})
    np.testing.assert_array_equal(zarr.open_array(now, path="sh")[:], DATA)


def test_check_deep_on_a_cluster_reads_a_snapshot(
    local_repo: tuple[Any, str, Path], client: Any
) -> None:
    repo, first, _ = local_repo
    array = zarrext.open_array(read_session(repo, snapshot=first).store, path="sh", mode="r")
    assert zarrext.check(array, deep=True, client=client) == []


def test_recompress_on_a_cluster_in_a_repository_in_s3(
    s3: dict[str, Any], client: Any
) -> None:
    repo, first = make_repository(repository_storage(f"{s3['url']}/repo", s3["options"]))
    with transaction(repo, "main", "recompress") as done:
        zarrext.recompress(zarrext.open_array(done.store, path="sh"), client=client)
    now = read_session(repo).store
    assert masks(now, "sh") == Counter({1: 64})
    np.testing.assert_array_equal(zarr.open_array(now, path="sh")[:], DATA)
    assert masks(read_session(repo, snapshot=first).store, "sh") == Counter({0: 64})
