"""A job's output inside groups holding consolidated metadata (issue 35, items 1 and 2).

Every step of the publication (``zarrext.jobs.outputs``) is stopped at, on either side:
there, what zarr-python reads through each group and what xarray reads (through the
consolidated metadata, its default) is the old output or the new one, exactly, with
the metadata stored beside the chunks. Locally a kill at that moment is the tree as
it is then (copied aside): a rerun over that copy removes what the killed run left,
consolidates the groups again and lists no temporary output.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.conftest import Where
from zarrext.jobs import outputs
from zarrext.jobs.outputs import STAGING_MARKER, UNFINISHED, find_leftovers
from zarrext.quantize import copy_group_quantized, copy_quantized

BOUNDS = {"old": 0.01, "new": 0.05}


def _source(location: str, which: str, options: dict[str, Any] | None = None) -> str:
    """A float array to quantize; ``old`` and ``new`` differ in dtype, range and
    chunks, so their quantized copies differ in stored dtype, scale and offset."""
    rng = np.random.default_rng(0 if which == "old" else 1)
    if which == "old":
        data = rng.uniform(0, 10, (24, 20)).astype("f4")
        chunks: tuple[int, ...] = (8, 10)
    else:
        data = rng.uniform(-3, 3, (24, 20)).astype("f8")
        chunks = (12, 5)
    data[0, :3] = np.nan
    zarr.create_array(location, shape=data.shape, chunks=chunks, dtype=data.dtype,
                      fill_value=np.nan, dimension_names=("y", "x"),
                      storage_options=options)[:] = data
    return location


def _source_group(location: str, which: str) -> str:
    group = zarr.open_group(location, mode="w")
    _source(f"{location}/t", which)
    group.create_array("n", shape=(24, 20), chunks=(24, 20), dtype="i2",
                       dimension_names=("y", "x"))[:] = 1 if which == "old" else 2
    return location


def _quantize(which: str, source: str, out: str, *, group: bool = False,
              options: dict[str, Any] | None = None) -> None:
    copy = copy_group_quantized if group else copy_quantized
    copy(source, out, max_abs_error=BOUNDS[which], overwrite=True, allow_larger=True,
         storage_options=options)


def _hierarchy(location: str, options: dict[str, Any] | None = None) -> None:
    """``g`` (consolidated) holding ``p`` (consolidated) holding an integer array."""
    root = zarr.open_group(location, mode="w", storage_options=options)
    parent = root.create_group("p")
    parent.create_array("other", shape=(24, 20), chunks=(24, 20), dtype="i4",
                        dimension_names=("y", "x"))[:] = 7


def _consolidate(location: str, options: dict[str, Any] | None = None) -> None:
    """zarr's own consolidation of the group at ``location``."""
    store = zarr.open_group(location, mode="r+", storage_options=options).store
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata is not in the v3 spec
        zarr.consolidate_metadata(store)


def _consolidate_both(location: str, options: dict[str, Any] | None = None) -> None:
    _consolidate(f"{location}/p", options)
    _consolidate(location, options)


def _reads(location: str, member: str, options: dict[str, Any] | None = None
           ) -> dict[str, tuple[np.ndarray, dict[str, Any]] | None]:
    """The member ``p/<member>`` as each reader sees it (values, metadata), None
    where the reader finds no such member: zarr through ``g`` and through ``p``,
    xarray through them (consolidated metadata by default)."""
    if member.endswith(".zip"):  # no member of a group: read at its path
        return {"path": _stored(location, member, options)}
    seen: dict[str, tuple[np.ndarray, dict[str, Any]] | None] = {}
    within, _, variable = f"p/{member}".rpartition("/")
    with warnings.catch_warnings():
        # xarray's "Failed to open Zarr store with consolidated metadata": a group
        # whose consolidated metadata is withdrawn is read member by member
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, group, path in (("zarr through g", location, f"p/{member}"),
                                  ("zarr through p", f"{location}/p", member)):
            try:
                array = zarr.open_group(group, mode="r", storage_options=options)[path]
            except KeyError:
                seen[name] = None
            else:
                assert isinstance(array, zarr.Array)
                seen[name] = (np.asarray(array[...]), array.metadata.to_dict())
        for name, store, inner in (("xarray through g", location, within),
                                   ("xarray through p", f"{location}/p",
                                    within.removeprefix("p").strip("/") or None)):
            ds = xr.open_zarr(store, group=inner, storage_options=options)
            seen[name] = (ds[variable].values, {}) if variable in ds else None
    return seen


def _stored(location: str, member: str, options: dict[str, Any] | None = None
            ) -> tuple[np.ndarray, dict[str, Any]] | None:
    """The member as its own zarr.json and chunks say (no group involved)."""
    where: Any = f"{location}/p/{member}"
    try:
        if member.endswith(".zip"):
            if not Path(where).is_file():
                return None
            where = zarr.storage.ZipStore(where, mode="r")
        array = zarr.open_array(where, mode="r", storage_options=options)
    except FileNotFoundError:
        return None
    return np.asarray(array[...]), array.metadata.to_dict()


def _version(seen: tuple[np.ndarray, dict[str, Any]] | None,
             versions: dict[str, tuple[np.ndarray, dict[str, Any]] | None]) -> str:
    """Which of ``versions`` a reader saw: values equal exactly, metadata too."""
    for name, version in versions.items():
        if version is None or seen is None:
            if version is seen:
                return name
            continue
        values, metadata = seen
        if values.shape == version[0].shape and np.array_equal(
            values, version[0], equal_nan=True
        ) and (not metadata or metadata == version[1]):
            return name
    raise AssertionError("a reader saw neither the old output nor the new one")


# The publication's own renames (the output built, an old output put aside, the
# record) and removal (the staging directory), not zarr's writes inside the output.
_PUBLISHED_NAMES = ("output", "output.zip", "replaced", "consolidate.json")


def _renamed(*args: Any, **kwargs: Any) -> bool:
    return any(Path(str(a)).name in _PUBLISHED_NAMES for a in args[:2])


def _removed(*args: Any, **kwargs: Any) -> bool:
    return STAGING_MARKER in Path(str(args[0])).name


class _Steps:
    """Wraps the publication's steps: ``seen(label)`` runs before the first and
    after each (nothing happens between one step's end and the next one's start)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seen: Callable[[str], None]) -> None:
        self.seen = seen
        self.labels: list[str] = []
        for name in ("_record", "withdraw", "_exchange", "consolidate", "consolidate_again"):
            for module in (outputs.local, outputs.remote, outputs.destinations):
                if hasattr(module, name):
                    monkeypatch.setattr(module, name, self._around(name, getattr(module, name)))
        for module, name, only in ((os, "replace", _renamed), (shutil, "rmtree", _removed)):
            monkeypatch.setattr(module, name, self._around(name, getattr(module, name), only))
        real_publish = outputs.MetadataLastStore.publish
        steps = self

        async def publish(store: Any) -> None:  # the zarr.json documents on an object store
            import asyncio

            if not steps.labels:
                await asyncio.to_thread(steps._seen, "before publish")
            await real_publish(store)
            await asyncio.to_thread(steps._seen, "after publish")

        monkeypatch.setattr(outputs.MetadataLastStore, "publish", publish)

    def _seen(self, label: str) -> None:
        self.labels.append(label)
        self.seen(label)

    def _around(self, name: str, real: Callable[..., Any],
                only: Callable[..., bool] = lambda *a, **k: True) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            if not only(*args, **kwargs):
                return real(*args, **kwargs)
            if not self.labels:
                self._seen(f"before {name}")
            result = real(*args, **kwargs)
            self._seen(f"after {name}")
            return result
        return step


@contextlib.contextmanager
def _owner_gone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process counts as gone for the temporary outputs it left (a killed run's)."""
    from zarrext.sharding import journal

    real = journal.process_alive
    with monkeypatch.context() as m:
        m.setattr(journal, "process_alive", lambda pid: pid != os.getpid() and real(pid))
        yield


def _temporary_names(location: Path) -> list[str]:
    """Temporary outputs anywhere under ``location``, and in any consolidated metadata."""
    found = [str(p) for p in location.rglob(f"*{STAGING_MARKER}*")]
    for document in location.rglob("zarr.json"):
        text = document.read_text()
        if STAGING_MARKER in text:
            found.append(f"listed in {document}")
    return found


def _fresh(location: Path, member: str) -> None:
    """Both groups hold consolidated metadata, describing the member as stored."""
    for group, path in ((location, f"p/{member}"), (location / "p", member)):
        document = json.loads((group / "zarr.json").read_text())
        assert document.get("consolidated_metadata") is not None, group
        listed = document["consolidated_metadata"]["metadata"][path]
        stored = json.loads((group / path / "zarr.json").read_text())
        stored.pop("consolidated_metadata", None)
        listed.pop("consolidated_metadata", None)
        assert listed == stored


@pytest.mark.parametrize(
    "case", ["replace-array", "replace-array-no-exchange", "replace-group", "add-array",
             "add-zip"]
)
def test_every_step_of_a_local_publication_reads_old_or_new_and_a_rerun_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    group_job = case == "replace-group"
    member = {"replace-group": "q/t", "add-zip": "q.zip"}.get(case, "q")
    out_name = member.split("/")[0]
    make = _source_group if group_job else _source
    sources = {w: make(str(tmp_path / f"src-{w}.zarr"), w) for w in ("old", "new")}
    # the new output as a complete run writes it (quantizing is deterministic)
    reference = tmp_path / "reference"
    _hierarchy(str(reference))
    _quantize("new", sources["new"], str(reference / "p" / out_name), group=group_job)
    location = tmp_path / "g"
    _hierarchy(str(location))
    if case.startswith("replace"):
        _quantize("old", sources["old"], str(location / "p" / out_name), group=group_job)
    _consolidate_both(str(location))
    versions = {"old": _stored(str(location), member), "new": _stored(str(reference), member)}
    assert versions["new"] is not None
    assert (versions["old"] is None) == (not case.startswith("replace"))
    order = ["old", "new"]
    if case == "replace-array-no-exchange":
        # Two renames where no exchange exists: between them the path holds nothing
        # (the only such moment), and a rerun after a kill there puts the old one back.
        monkeypatch.setattr(outputs.local, "_exchange", lambda a, b: False)
        versions = {"old": versions["old"], "nothing": None, "new": versions["new"]}
        order = ["old", "nothing", "new"]

    kills = tmp_path / "kills"
    by_reader: dict[str, list[str]] = {}

    def seen(label: str) -> None:
        reads = {name: _version(r, versions) for name, r in _reads(str(location), member).items()}
        for name, version in reads.items():
            by_reader.setdefault(name, []).append(version)
        if case.startswith("replace"):  # withdrawn everywhere before the swap:
            assert len(set(reads.values())) == 1, (label, reads)  # the readers agree
        shutil.copytree(location.parent, kills / f"{len(steps.labels):02d}",
                        ignore=shutil.ignore_patterns("kills"), symlinks=True)

    steps = _Steps(monkeypatch, seen)
    _quantize("new", sources["new"], str(location / "p" / out_name), group=group_job)
    monkeypatch.undo()
    assert "after _exchange" in steps.labels or case != "replace-array"
    assert "after withdraw" in steps.labels or not case.startswith("replace")
    # each reader saw the old output until some step, the new one from then on
    for seen_versions in by_reader.values():
        assert seen_versions == sorted(seen_versions, key=order.index)
        assert seen_versions[-1] == "new"
        nothing = [label for label, v in zip(steps.labels, seen_versions, strict=True)
                   if v == "nothing"]
        assert nothing == (["after replace"] if "nothing" in order else [])
    assert _temporary_names(location) == []
    if case != "add-zip":  # a zip archive is no member of a group
        _fresh(location, member)

    # Killed at each of those moments, then run again: the group reads old or new
    # as above, the rerun leaves no temporary output, the groups list the new output.
    for killed in sorted(kills.iterdir()):
        at = killed / "g"
        left = find_leftovers(at)
        assert all(f.kept is not None for f in left)  # this process still runs
        with _owner_gone(monkeypatch):
            assert [f.kept for f in find_leftovers(at)] == [None] * len(left)
            assert {f.path.name for f in left} == {
                p.name for p in (at / "p").iterdir() if STAGING_MARKER in p.name
            }
            for f in left:
                assert f.size == sum(p.lstat().st_size for p in f.path.rglob("*") if p.is_file())
            copied = {w: str(killed / Path(s).name) for w, s in sources.items()}
            _quantize("new", copied["new"], str(at / "p" / out_name), group=group_job)
        assert _temporary_names(at) == []
        assert find_leftovers(at) == []
        reads = _reads(str(at), member)
        assert {_version(r, versions) for r in reads.values()} == {"new"}
        if case != "add-zip":
            _fresh(at, member)


def test_a_rerun_consolidates_what_a_killed_run_withdrew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed with the consolidated metadata withdrawn, before the swap: the group is
    read member by member (the old output); the next run, refused or not, writes
    the consolidated metadata again, then removes the temporary output."""
    source = _source(str(tmp_path / "src.zarr"), "old")
    location = tmp_path / "g"
    _hierarchy(str(location))
    _quantize("old", source, str(location / "p" / "q"))
    _consolidate_both(str(location))
    old = _stored(str(location), "q")
    kill = tmp_path / "kill"

    def freeze(a: Path, b: Path) -> bool:
        shutil.copytree(location, kill, symlinks=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.local, "_exchange", freeze)
    with pytest.raises(KeyboardInterrupt):
        _quantize("new", source, str(location / "p" / "q"))
    monkeypatch.undo()
    for group in (kill, kill / "p"):
        assert "consolidated_metadata" not in json.loads((group / "zarr.json").read_text())
    assert {_version(r, {"old": old}) for r in _reads(str(kill), "q").values()} == {"old"}
    with _owner_gone(monkeypatch), pytest.raises(outputs.OutputConflictError,
                                                  match="already exists"):
        copy_quantized(source, str(kill / "p" / "q"), max_abs_error=0.01)
    _fresh(kill, "q")
    assert _temporary_names(kill) == []


def test_a_temporary_output_is_no_member_and_never_consolidated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a job builds its output, and after a kill, the group's members and the
    consolidated metadata written meanwhile list no temporary output; nor do they
    list an earlier zarrext's temporary copy (a whole array under a hidden name)."""
    source = _source(str(tmp_path / "src.zarr"), "old")
    location = tmp_path / "g"
    _hierarchy(str(location))
    earlier = location / "p" / f".old{STAGING_MARKER}0123456789ab"
    _quantize("old", source, str(tmp_path / "earlier.zarr"))
    shutil.copytree(tmp_path / "earlier.zarr", earlier)
    _consolidate(str(location / "p"))  # zarr's own lists it
    assert earlier.name in json.loads((location / "p" / "zarr.json").read_text())[
        "consolidated_metadata"]["metadata"]
    members: list[list[str]] = []
    staging: list[str] = []

    def during(phase: str, done: int, total: int) -> None:
        if phase == "copy" and done == 1:
            staging.extend(p.name for p in (location / "p").iterdir()
                           if p.name.startswith(f".old{STAGING_MARKER}{os.getpid()}-"))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zarr: "not recognized as a component"
                members.append(sorted(zarr.open_group(str(location / "p"), mode="r",
                                                      use_consolidated=False).keys()))

    with pytest.warns(outputs.OutputLeftoverWarning, match=r"\.old\.zarrext-tmp-.*bytes"):
        copy_quantized(source, str(location / "p" / "old"), max_abs_error=0.01,
                       progress=during)
    # this job's temporary output (being written) is no member; the earlier
    # zarrext's whole array under a hidden name is one to zarr, not to zarrext
    assert len(staging) == 1
    assert members == [sorted([earlier.name, "other"])]
    listed = json.loads((location / "p" / "zarr.json").read_text())["consolidated_metadata"]
    assert sorted(listed["metadata"]) == ["old", "other"]
    assert earlier.exists()  # not provably a killed run's: named, left in place


def test_a_rerun_names_what_it_cannot_prove_is_a_killed_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _source(str(tmp_path / "src.zarr"), "old")
    out = tmp_path / "q.zarr"
    running = tmp_path / f".q.zarr{STAGING_MARKER}{os.getpid()}-00000000-0a1b2c3d"
    elsewhere_host = tmp_path / f".q.zarr{STAGING_MARKER}1-0123abcd-0a1b2c3d"
    earlier = tmp_path / f".q.zarr{STAGING_MARKER}old-0123456789ab"
    for path in (running, elsewhere_host, earlier):
        (path / "c").mkdir(parents=True)
        (path / "c" / "0").write_bytes(b"x" * 1000)
    from zarrext.sharding import journal

    # ``running``: this process on this host; the others: another host's, an earlier zarrext's
    running = running.rename(running.with_name(running.name.replace("00000000", journal.HOST)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copy_quantized(source, str(out), max_abs_error=0.01)
    said = sorted(str(w.message) for w in caught
                  if issubclass(w.category, outputs.OutputLeftoverWarning))
    assert len(said) == 3
    for path, why in ((running, "still runs"), (elsewhere_host, "another host"),
                      (earlier, "earlier zarrext")):
        assert path.exists()
        (line,) = [s for s in said if path.name in s]
        assert why in line
        assert "1,000 bytes" in line


def test_find_leftovers_reports_beside_and_inside_groups_and_removes_a_killed_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _source(str(tmp_path / "src.zarr"), "old")
    location = tmp_path / "g"
    _hierarchy(str(location))
    _quantize("old", source, str(location / "p" / "q"))
    _consolidate_both(str(location))
    kill = tmp_path / "kill"

    def freeze(*args: Any) -> None:
        shutil.copytree(location, kill, symlinks=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.local, "_swap", freeze)
    with pytest.raises(KeyboardInterrupt):
        _quantize("new", _source(str(tmp_path / "new.zarr"), "new"), str(location / "p" / "q"))
    monkeypatch.undo()
    (left,) = find_leftovers(kill)
    assert left.output == (kill / "p" / "q").resolve()
    assert left.size == sum(p.stat().st_size for p in left.path.rglob("*") if p.is_file())
    assert left.size > 0
    assert find_leftovers(kill / "p" / "q") == [left]  # beside the output too
    with pytest.raises(ValueError, match="left in place"):
        outputs.remove_leftover(left)  # this process still runs
    with _owner_gone(monkeypatch):
        (left,) = find_leftovers(kill)
        assert "killed job" in left.describe()
        assert f"{left.size:,} bytes" in left.describe()
        outputs.remove_leftover(left)
    assert find_leftovers(kill) == []
    _fresh(kill, "q")


class _Killed(Exception):
    pass


def test_adding_an_array_on_an_object_store_reads_absent_or_new_at_every_step(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an object store nothing is renamed and nothing replaced: until the groups
    are consolidated again, their consolidated metadata reads as before (no ``q``);
    a run killed after the output's zarr.json landed is finished by the rerun."""
    where = Where("s3", s3["url"], s3["options"])
    options = where.options
    location = where.location("g")
    source = _source(where.location("src.zarr"), "new", options)
    reference = where.location("reference")
    _hierarchy(reference, options)
    _quantize("new", source, f"{reference}/p/q", options=options)
    versions = {"old": None, "new": _stored(reference, "q", options)}
    _hierarchy(location, options)
    _consolidate_both(location, options)
    seen_versions: list[str] = []

    def seen(label: str) -> None:
        which = {_version(r, versions) for r in _reads(location, "q", options).values()}
        assert len(which) == 1, label
        seen_versions.append(which.pop())
        if label == "after publish":
            # as a kill: after the zarr.json documents, nothing of the job runs (an
            # Exception: it is raised in zarr's event loop, which a KeyboardInterrupt stops)
            raise _Killed

    steps = _Steps(monkeypatch, seen)
    with pytest.raises(_Killed):
        _quantize("new", source, f"{location}/p/q", options=options)
    monkeypatch.undo()
    assert steps.labels == ["before publish", "after publish"]
    assert seen_versions == ["old"] * 2
    assert _stored(location, "q", options) is not None  # complete, not yet listed
    assert UNFINISHED in where.stored("g/p/q")
    # as if its job still ran (in this process, a job that raised has ended)
    marker = json.loads(where.stored("g/p/q")[UNFINISHED])
    with monkeypatch.context() as running:
        running.setattr(outputs.remote, "_RUNNING_HERE", {marker["id"]})
        with pytest.raises(outputs.OutputConflictError, match="is writing"):
            copy_quantized(source, f"{location}/p/q", max_abs_error=0.05,
                           storage_options=options)
    with _owner_gone(monkeypatch), \
            pytest.raises(outputs.OutputConflictError, match="already exists"):
        copy_quantized(source, f"{location}/p/q", max_abs_error=0.05, storage_options=options)
    assert {_version(r, versions) for r in _reads(location, "q", options).values()} == {"new"}
    assert not [k for k in where.stored("g") if STAGING_MARKER in k]
    for group in ("g", "g/p"):
        listed = json.loads(where.stored(group)["zarr.json"])["consolidated_metadata"]
        assert sorted(listed["metadata"]) == (["p", "p/other", "p/q"] if group == "g"
                                              else ["other", "q"])


def test_cli_check_reports_leftovers_with_their_size_and_repair_removes_a_killed_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Any
) -> None:
    source = _source(str(tmp_path / "src.zarr"), "old")
    location = tmp_path / "g"
    _hierarchy(str(location))
    _quantize("old", source, str(location / "p" / "q"))
    _consolidate_both(str(location))
    kill = tmp_path / "kill"

    def freeze(*args: Any) -> None:  # a kill with the consolidated metadata withdrawn
        shutil.copytree(location, kill, symlinks=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.local, "_swap", freeze)
    with pytest.raises(KeyboardInterrupt):
        _quantize("new", source, str(location / "p" / "q"))
    monkeypatch.undo()
    earlier = kill / "p" / f".q{STAGING_MARKER}0123456789ab"  # an earlier zarrext's
    shutil.copytree(kill / "p" / "q", earlier)
    (killed,) = [p for p in (kill / "p").iterdir()
                 if p.name.startswith(f".q{STAGING_MARKER}{os.getpid()}-")]
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
             for p in (killed, earlier)}
    monkeypatch.chdir(tmp_path)

    code, out, err = run("check", "kill")
    assert code == 1
    assert err == ""  # zarr's "not recognized as a component" about them is not shown
    assert f"kill/p/{killed.name}:" not in out  # its process (this one) still runs
    assert f"kill/p/{earlier.name}:" in out
    assert f"{sizes[earlier.name]:,} bytes" in out
    assert "--repair cannot fix this: delete it once no zarrext job is writing q" in out
    # the arrays were checked, not the temporary copy as an array
    arrays = sorted(line.split(":")[0] for line in out.splitlines() if line.startswith("p/"))
    assert arrays == ["p/other", "p/q"], out

    with _owner_gone(monkeypatch):
        code, out, _ = run("check", "kill", "--json")
        assert code == 1
        report = json.loads(out)
        assert [f["key"] for f in report["leftovers"]] == sorted(
            f"kill/p/{p.name}" for p in (killed, earlier))
        assert [p["repairable"] for f in report["leftovers"] for p in f["problems"]] == [
            f["key"].endswith(killed.name) for f in report["leftovers"]]
        for finding in report["leftovers"]:
            (problem,) = finding["problems"]
            assert problem["kind"] == "interrupted_output"
            assert f"{sizes[finding['key'].rsplit('/', 1)[1]]:,} bytes" in problem["text"]
        assert not report["ok"]
        code, out, _ = run("check", "kill", "--repair")
    assert code == 1  # the earlier zarrext's is left
    assert f"kill/p/{killed.name}:" in out
    assert "repaired: deleted it" in out
    assert not killed.exists()
    assert earlier.exists()
    _fresh(kill, "q")  # consolidated again, as the killed run would have
    listed = json.loads((kill / "p" / "zarr.json").read_text())["consolidated_metadata"]
    assert sorted(listed["metadata"]) == ["other", "q"]
