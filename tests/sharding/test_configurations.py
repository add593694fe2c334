"""Every runtime feature over the arrays users create (``tests/configurations.py``).

Each example either reads back exactly what plain zarr-python stores for the same
values, or is refused at open with one line, leaving the array's files unchanged;
refusals happen only where the codec chain predicts them. A fast profile runs in
``make test``, a long one (and writer processes) in ``make test-slow``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import event, example, given, reject, settings
from hypothesis import strategies as st
from zarr.storage import MemoryStore

import zarrext
from tests.configurations import (
    Configuration,
    bands,
    configuration,
    configurations,
    write_unit,
)
from tests.conftest import tree_digest
from zarrext.sharding.geometry import ShardLayoutError

FAST = 40
SLOW = 300
SLOW_PROCESSES = 25


@contextlib.contextmanager
def _panics_fail() -> Iterator[None]:
    """A Rust panic in a codec (a ``BaseException``, which hypothesis neither shrinks
    nor shows) fails the example like any other error."""
    try:
        yield
    except Exception:
        raise
    except BaseException as e:
        if type(e).__name__ == "PanicException":
            raise AssertionError(f"a codec panicked: {e}") from e
        raise


def _fresh(tmp_path: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path)) / "a.zarr"


def _create(tmp_path: Path, config: Configuration) -> Path:
    """A new array of ``config``, created by plain zarr-python (a configuration zarr
    refuses is not one users can reach)."""
    path = _fresh(tmp_path)
    try:
        zarr.create_array(path, **config.kwargs)
    except ValueError:
        reject()
    return path


def _expected(config: Configuration, values: np.ndarray) -> np.ndarray:
    """What plain zarr-python stores for ``values`` in this array (quantized arrays
    round them)."""
    reference = zarr.create_array(MemoryStore(), **config.kwargs)
    reference[...] = values
    return reference[...]


def _holds_a_value(config: Configuration, expected: np.ndarray) -> bool:
    """Whether some element of ``expected`` differs from the array's fill value."""
    if expected.dtype.names:  # optional: the fill value is "missing"
        return bool(expected["valid"].any())
    return bool((expected != config.kwargs["fill_value"]).any())


def _assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype
    if expected.dtype.names:  # optional: compare validity, then values where valid
        np.testing.assert_array_equal(got["valid"], expected["valid"])
        valid = expected["valid"]
        np.testing.assert_array_equal(got["value"][valid], expected["value"][valid])
    else:
        np.testing.assert_array_equal(got, expected)


def _layout_refusal_predicted(config: Configuration) -> bool:
    """Layouts refuse arrays that are not sharded and codecs after the sharding codec."""
    return not config.sharded or config.outer


def _slot_may_be_unbounded(config: Configuration) -> bool:
    """fixed-slot also refuses inner codecs whose encoded size it cannot bound: the
    optional codec and inner shards (compressors inside the shard have bounds)."""
    return config.dtype == "optional-int16" or config.route == "nested"


def _open_layout(config: Configuration, path: Path, layout: str) -> zarr.Array | None:
    """The array opened with ``layout``, or None after checking the refusal."""
    before = tree_digest(path)
    decision = "compress_if_smaller" if config.conditional else None
    try:
        return zarrext.open_array(path, mode="r+", shard_layout=layout, decision=decision)
    except ShardLayoutError as e:
        refusal = str(e)
    assert "\n" not in refusal
    assert tree_digest(path) == before  # a refusal changes nothing
    event(f"{layout}: refused at open")
    if not _layout_refusal_predicted(config):
        assert layout == "fixed-slot", refusal
        assert _slot_may_be_unbounded(config), refusal
        assert "size" in refusal  # the inner chunks have no bounded encoded size
    return None


def _write_bands_threads(array: zarr.Array, values: np.ndarray, regions: list[Any]) -> None:
    errors: list[BaseException] = []

    def write(region: Any) -> None:
        try:
            array[region] = values[region]
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(r,)) for r in regions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _layout_threads(tmp_path: Path, config: Configuration, layout: str, cuts: list[int]) -> None:
    path = _create(tmp_path, config)
    array = _open_layout(config, path, layout)
    if array is None:
        return
    assert not _layout_refusal_predicted(config)
    event(f"{layout}: written by threads ({config.route}, filters {config.filters})")
    values = config.values()
    # writers take row bands that cut through inner chunks: several writers merge
    # into one inner chunk
    _write_bands_threads(array, values, bands(config.shape, cuts))
    _assert_same(zarr.open_array(path)[...], _expected(config, values))
    # whole inner chunks (inner shards when shards nest), four writers at a time
    unit = write_unit(config)
    blocks = [
        (slice(i, i + unit[0]), slice(j, j + unit[1]))
        for i in range(0, config.shape[0], unit[0])
        for j in range(0, config.shape[1], unit[1])
    ]
    again = config.values(salt=1)
    for start in range(0, len(blocks), 4):
        _write_bands_threads(array, again, blocks[start : start + 4])
    _assert_same(zarr.open_array(path)[...], _expected(config, again))
    assert zarrext.check(zarr.open_array(path), deep=True) == []


def _jobs(tmp_path: Path, config: Configuration) -> None:
    """check --deep, inspect, info, recompress, compact, expand, read_masked."""
    from zarrext.jobs.inspection import inventory
    from zarrext.jobs.node_info import node_info

    path = _create(tmp_path, config)
    values = config.values()
    zarr.open_array(path)[...] = values
    expected = _expected(config, values)
    assert zarrext.check(zarr.open_array(path), deep=True) == []  # healthy: never corrupt
    stored = inventory(zarr.open_array(path))
    # zarr stores no chunk whose values all equal the fill value (write_empty_chunks
    # is off), e.g. an optional array whose every element is missing
    assert bool(stored.chunks) == _holds_a_value(config, expected)
    assert node_info(zarr.open_array(path))["type"] == "array"
    if config.dtype == "optional-int16":
        masked = zarrext.read_masked(zarr.open_array(path))
        np.testing.assert_array_equal(~masked.mask, expected["valid"])
    if config.conditional:
        report = zarrext.recompress(str(path), "compress_if_smaller", progress=None)
        assert report.chunks == len(stored.chunks)
        _assert_same(zarr.open_array(path)[...], expected)
    if not config.sharded:
        return
    for job in (zarrext.compact, zarrext.expand):
        before = tree_digest(path)
        refusal = None
        try:
            job(zarrext.open_array(path, mode="r+"))
        except ShardLayoutError as e:
            refusal = str(e)
        if refusal is not None:
            assert "\n" not in refusal
            assert tree_digest(path) == before
            assert config.outer or (job is zarrext.expand and _slot_may_be_unbounded(config))
            event(f"{job.__name__}: refused")
            continue
        event(f"{job.__name__}: values kept")
        assert not config.outer
        _assert_same(zarr.open_array(path)[...], expected)
        assert zarrext.check(zarr.open_array(path), deep=True) == []


def _write_dask(tmp_path: Path, config: Configuration, layout: str | None) -> None:
    import dask.array as da

    path = _create(tmp_path, config)
    if layout is None:
        decision = "compress_if_smaller" if config.conditional else None
        array = zarrext.open_array(path, mode="r+", decision=decision)
        unit = config.shard
    else:
        opened = _open_layout(config, path, layout)
        if opened is None:
            return
        array, unit = opened, write_unit(config)
    values = config.values()
    event(f"write_dask: written ({layout or 'no layout'})")
    zarrext.write_dask(da.from_array(values, chunks=unit), array)
    _assert_same(zarr.open_array(path)[...], _expected(config, values))
    # blocks that split what a task may write alone are refused before any write
    if any(u > 1 and s > 1 for u, s in zip(unit, config.shape, strict=True)):
        half = tuple(max(1, u // 2) for u in unit)
        if any(u % h or h == u for u, h in zip(unit, half, strict=True)):
            before = tree_digest(path)
            with pytest.raises(ShardLayoutError, match="boundaries"):
                zarrext.write_dask(da.from_array(values, chunks=half), array)
            assert tree_digest(path) == before


LAYOUT = st.sampled_from(["fixed-slot", "append"])
CUTS = st.lists(st.integers(1, 100), max_size=3)


@settings(max_examples=FAST)
@given(config=configurations(sharded_only=True), layout=LAYOUT, cuts=CUTS)
def test_layouts_with_threads_write_exactly_or_refuse(tmp_path, config, layout, cuts) -> None:
    with _panics_fail():
        _layout_threads(tmp_path, config, layout, cuts)


@pytest.mark.slow
@settings(max_examples=SLOW)
@given(config=configurations(), layout=LAYOUT, cuts=CUTS)
def test_layouts_with_threads_write_exactly_or_refuse_long(tmp_path, config, layout, cuts) -> None:
    with _panics_fail():
        _layout_threads(tmp_path, config, layout, cuts)


@settings(max_examples=FAST)
@given(config=configurations())
# every element missing: zarr stores no chunk (found by CI's long profile)
@example(config=configuration("shards", (2, 2), (4, 4), (4, 4), "optional-int16", "none",
                              "none", "none", 10710))
def test_jobs_keep_values_and_check_finds_nothing(tmp_path, config) -> None:
    with _panics_fail():
        _jobs(tmp_path, config)


@pytest.mark.slow
@settings(max_examples=SLOW)
@given(config=configurations())
def test_jobs_keep_values_and_check_finds_nothing_long(tmp_path, config) -> None:
    with _panics_fail():
        _jobs(tmp_path, config)


@settings(max_examples=FAST // 2)
@given(config=configurations(sharded_only=True), layout=st.sampled_from([None, "append"]))
def test_write_dask_writes_exactly_or_refuses(tmp_path, config, layout) -> None:
    with _panics_fail():
        _write_dask(tmp_path, config, layout)


@pytest.mark.slow
@settings(max_examples=SLOW // 2)
@given(config=configurations(sharded_only=True),
       layout=st.sampled_from([None, "append", "fixed-slot"]))
def test_write_dask_writes_exactly_or_refuses_long(tmp_path, config, layout) -> None:
    with _panics_fail():
        _write_dask(tmp_path, config, layout)


def _write_band_in_process(path: str, layout: str, decision: str | None, region: Any,
                           values: np.ndarray) -> None:
    zarrext.open_array(path, mode="r+", shard_layout=layout, decision=decision)[region] = values


@pytest.mark.slow
@settings(max_examples=SLOW_PROCESSES)
@given(config=configurations(sharded_only=True), layout=LAYOUT, cuts=CUTS)
def test_layouts_with_processes_write_exactly_or_refuse(tmp_path, config, layout, cuts) -> None:
    path = _create(tmp_path, config)
    if _open_layout(config, path, layout) is None:
        return
    event(f"{layout}: written by processes ({config.route}, filters {config.filters})")
    values = config.values()
    regions = bands(config.shape, [*cuts, config.shape[0] // 2])
    decision = "compress_if_smaller" if config.conditional else None
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.starmap(_write_band_in_process,
                     [(str(path), layout, decision, r, values[r]) for r in regions])
    _assert_same(zarr.open_array(path)[...], _expected(config, values))
