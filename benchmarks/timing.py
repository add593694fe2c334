"""Timing helpers shared by every ``benchmarks/bench_*.py`` script.

The machine these run on is shared and small (2 cores), so single timings swing by
10-40 % with the load of the moment. The helpers here are the three ways the scripts
deal with that:

* :func:`interleave` runs several contenders in turn, round after round, so that a
  burst of load hits them all alike, and keeps every time (:class:`Runs`): the best,
  the median, or the median of the paired ratios of two contenders (each pair run
  back to back shares the load of its moment; the median ignores pairs hit by a
  burst). ``alternate_order`` reverses the order every other round: the first run of
  a round measures a little slower here. Each call also has its process CPU time,
  user and system apart (``resource.getrusage``): less swayed by load than the wall
  time, and a call slowed by the kernel (zeroing fresh pages for a new output, say)
  shows as system time. A garbage collection runs untimed before each call, so
  that none lands in one contender's time for garbage another made.
* :func:`timed` times one call (or the median of several), optionally after
  ``os.sync()`` so that earlier writes' writeback does not throttle it.
* :func:`best_of` is the best of ``repeat`` calls of one function.

:func:`save_results` keeps a run's times, with the machine's load, as JSON in the
folder ``ZARREXT_BENCH_RESULTS`` names (``make bench`` sets it): ``plots.py`` makes the
documentation's performance tables and plots from them.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Runs:
    """Every timing :func:`interleave` took, by contender, in the order taken.

    Attributes
    ----------
    seconds : dict of str to list of float
        Each contender's times, one per round.
    results : dict of str to object
        Each contender's return value in the last round, when :func:`interleave`
        was asked to keep them (else empty).
    cpu : dict of str to list of (float, float)
        Each contender's process CPU seconds, (user, system), one per round.
    """

    seconds: dict[str, list[float]] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def best(self, name: str) -> float:
        """Fastest time of ``name``."""
        return min(self.seconds[name])

    def bests(self) -> dict[str, float]:
        """Fastest time of every contender."""
        return {name: min(times) for name, times in self.seconds.items()}

    def median(self, name: str) -> float:
        """Median time of ``name``."""
        return statistics.median(self.seconds[name])

    def paired_ratio(self, numerator: str, denominator: str) -> float:
        """Median over rounds of ``numerator``'s time / ``denominator``'s time."""
        pairs = zip(self.seconds[numerator], self.seconds[denominator], strict=True)
        return statistics.median(a / b for a, b in pairs)

    def cpu_seconds(self, name: str) -> list[float]:
        """``name``'s process CPU seconds (user + system), one per round."""
        return [user + system for user, system in self.cpu[name]]


def process_tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every process it started that is
    alive now (the moto server, a cluster's workers)."""
    import psutil

    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


class ProcessTreeCpu:
    """Each call's CPU seconds in this process and the processes it started
    (:func:`process_tree_cpu_seconds`), by name: with the wall time it says how busy
    the machine was. Where this process and a server it started together keep every
    core busy, the row is bound by the machine's CPU."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    def wrap(self, name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn``, its CPU seconds added to ``name``'s at each call."""
        def run() -> Any:
            start = process_tree_cpu_seconds()
            try:
                return fn()
            finally:
                self.seconds.setdefault(name, []).append(process_tree_cpu_seconds() - start)

        return run

    def of_best(self, name: str, times: list[float]) -> float:
        """CPU seconds of the round with the best wall time."""
        return self.seconds[name][times.index(min(times))]


def interleave(
    fns: Mapping[str, Callable[[], Any]],
    repeat: int,
    *,
    before: Callable[[str], None] | None = None,
    alternate_order: bool = False,
    keep_results: bool = False,
) -> Runs:
    """Run each function once per round, ``repeat`` rounds, and time every call.

    Parameters
    ----------
    fns : mapping of str to callable
        The contenders, run in this order within a round.
    repeat : int
        Rounds (at least 1).
    before : callable, optional
        ``before(name)`` runs untimed ahead of each call (delete the last run's
        output, ``os.sync()``, open a fresh array, ...).
    alternate_order : bool
        Run the contenders in reverse order every other round.
    keep_results : bool
        Keep each contender's last return value in ``Runs.results``. Off by default:
        every return value is dropped before the next call, so that each call
        starts with the process's memory as the last one left it. Kept, the
        process grows by one return value per contender in the first round alone
        (ten reads of 128 MiB: 1.3 GiB the kernel must find, reclaim and compact
        for), which is then that round's cost and not the contender's.

    Returns
    -------
    Runs
    """
    if repeat < 1:
        raise ValueError(f"interleave needs at least one round, got repeat={repeat}")
    runs = Runs({name: [] for name in fns}, cpu={name: [] for name in fns})
    names = list(fns)
    for round_ in range(repeat):
        order = names[::-1] if alternate_order and round_ % 2 else names
        for name in order:
            if before is not None:
                before(name)
            gc.collect()
            start = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            result = fns[name]()
            runs.seconds[name].append(time.perf_counter() - t0)
            if keep_results:
                runs.results[name] = result
            del result
            end = resource.getrusage(resource.RUSAGE_SELF)
            runs.cpu[name].append(
                (end.ru_utime - start.ru_utime, end.ru_stime - start.ru_stime)
            )
    return runs


def timed(fn: Callable[[], Any], repeat: int = 1, *, sync: bool = False) -> float:
    """Seconds of ``fn()``: the median of ``repeat`` calls.

    ``sync`` flushes dirty pages first (``os.sync()``, once), so that the writeback
    of earlier phases does not throttle this one.
    """
    if sync:
        os.sync()
    return interleave({"fn": fn}, repeat).median("fn")


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """Fastest of ``repeat`` calls of ``fn``, in seconds."""
    return interleave({"fn": fn}, repeat).best("fn")


RESULTS_FOLDER = "ZARREXT_BENCH_RESULTS"


def save_results(runs: Runs, name: str, title: str, reference: str, **meta: Any) -> Path | None:
    """Write ``runs``' times as ``<name>.json`` in the folder ``$ZARREXT_BENCH_RESULTS``
    (nothing when it is not set): ``title`` says what was measured, ``reference`` is the
    row the others are compared with, ``meta`` anything else worth printing beside them;
    the load average is added."""
    folder = os.environ.get(RESULTS_FOLDER)
    if not folder:
        return None
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "title": title, "reference": reference, "seconds": runs.seconds,
        "load": [round(x, 2) for x in os.getloadavg()], **meta,
    }, indent=1))
    return path
