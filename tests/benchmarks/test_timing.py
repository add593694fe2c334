"""The timing helpers shared by the benchmark scripts (benchmarks/timing.py)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import weakref
from types import ModuleType

import pytest

from tests.paths import ROOT

TIMING_PATH = ROOT / "benchmarks" / "timing.py"


@pytest.fixture(scope="module")
def timing() -> ModuleType:
    """benchmarks/timing.py, loaded by path (benchmarks/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_timing", TIMING_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, timing: ModuleType) -> list[float]:
    """A fake ``time.perf_counter`` for the timing module: each call returns the
    running sum of the durations the test appends to the returned list, so a
    function "takes" whatever the test says."""
    now = itertools.count()
    durations: list[float] = []

    def perf_counter() -> float:
        # Two calls per timed call: the start (even) and the end (odd).
        i = next(now)
        return sum(durations[: (i + 1) // 2])

    monkeypatch.setattr(timing.time, "perf_counter", perf_counter)
    return durations


def test_interleave_runs_in_turn_and_keeps_every_time(timing: ModuleType, clock: list[float]):
    calls: list[str] = []

    def call(name: str) -> str:
        calls.append(name)
        return f"r{name}"

    clock.extend([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    runs = timing.interleave(
        {"a": lambda: call("a"), "b": lambda: call("b")}, 3, keep_results=True
    )
    assert calls == ["a", "b"] * 3
    assert runs.seconds == {"a": [1.0, 3.0, 5.0], "b": [2.0, 4.0, 6.0]}
    assert runs.results == {"a": "ra", "b": "rb"}
    assert runs.best("b") == 2.0
    assert runs.median("a") == 3.0
    assert runs.bests() == {"a": 1.0, "b": 2.0}


def test_results_are_dropped_before_the_next_call_unless_kept(timing: ModuleType):
    class Output:
        """A return value that can be watched for being freed."""

    alive: list[list[bool]] = []
    outputs: list[weakref.ref[Output]] = []

    def read() -> Output:
        alive.append([ref() is not None for ref in outputs])
        out = Output()
        outputs.append(weakref.ref(out))
        return out

    runs = timing.interleave({"a": read, "b": read}, 2)
    assert runs.results == {}
    assert alive == [[], [False], [False, False], [False, False, False]]

    alive.clear()
    outputs.clear()
    kept = timing.interleave({"a": read, "b": read}, 2, keep_results=True)
    assert alive[-1] == [False, True, True]  # a's second, b's first: the last ones kept
    assert set(kept.results) == {"a", "b"}


def test_alternate_order_reverses_every_other_round(timing: ModuleType, clock: list[float]):
    calls: list[str] = []
    clock.extend([1.0] * 8)
    timing.interleave(
        {name: (lambda n=name: calls.append(n)) for name in "abc"}, 3, alternate_order=True
    )
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]


def test_before_runs_untimed_ahead_of_each_call(timing: ModuleType):
    events: list[str] = []
    runs = timing.interleave(
        {"x": lambda: events.append("x"), "y": lambda: events.append("y")},
        2,
        before=lambda name: events.append(f"before {name}"),
    )
    assert events == ["before x", "x", "before y", "y"] * 2
    assert all(len(times) == 2 for times in runs.seconds.values())


def test_paired_ratio_is_the_median_of_per_round_ratios(timing: ModuleType):
    # A burst of load in round 2 slows both contenders; the ratio of each pair is
    # unaffected, the ratio of medians or bests would not be.
    runs = timing.Runs({"new": [1.1, 11.0, 1.2], "old": [1.0, 10.0, 1.0]})
    assert runs.paired_ratio("new", "old") == pytest.approx(1.1)
    assert runs.paired_ratio("old", "new") == pytest.approx(1 / 1.1)


def test_timed_is_the_median_and_best_of_the_minimum(timing: ModuleType, clock: list[float]):
    clock.extend([5.0, 1.0, 3.0])
    assert timing.timed(lambda: None, 3) == 3.0
    clock.extend([4.0, 2.0, 6.0])
    assert timing.best_of(lambda: None, 3) == 2.0


def test_timed_sync_flushes_once_before_timing(
    timing: ModuleType, monkeypatch: pytest.MonkeyPatch
):
    events: list[str] = []
    monkeypatch.setattr(timing.os, "sync", lambda: events.append("sync"))
    timing.timed(lambda: events.append("call"), 2, sync=True)
    timing.timed(lambda: events.append("unsynced"))
    assert events == ["sync", "call", "call", "unsynced"]


def test_interleave_refuses_no_rounds(timing: ModuleType):
    with pytest.raises(ValueError, match="at least one round"):
        timing.interleave({"a": lambda: None}, 0)


def test_interleave_keeps_each_calls_user_and_system_cpu(timing: ModuleType):
    def busy() -> int:
        return sum(range(2_000_000))

    runs = timing.interleave({"busy": busy, "idle": lambda: None}, 2)
    assert [len(runs.cpu[name]) for name in ("busy", "idle")] == [2, 2]
    assert all(user >= 0 and system >= 0 for user, system in runs.cpu["idle"])
    assert min(runs.cpu_seconds("busy")) > max(runs.cpu_seconds("idle"))
