"""The corpus judges itself: deliberately broken implementations must fail it.

Each mutant (conformance/mutants/) runs through the ``cmd:`` protocol, as a program
in another language would. A planted defect (header bit order, shard index
endianness, pad off by one, inverted optional mask, a rounding mode) fails every
case it targets, cases zarrext unchanged passes through the same route; a program
that refuses outside the protocol's causes, crashes, is killed or hangs passes no
refuse case; one that refuses everything for one cause passes exactly that cause's
refuse cases and no read or write case. Run with ``-s`` to see the mutation table.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from conformance.adapters import CommandAdapter, Refused, ZarrextAdapter, refusals
from conformance.mutants import MUTANTS, SAMPLE, program, run_mutant, table
from conformance.run import Result, load_cases, run_case

ALL = load_cases()
BY_ID = {case["id"]: (folder, case) for folder, case in ALL}
PLANTED = [name for name, m in MUTANTS.items() if m.targets]
BLANKET = ["refuse-everything", "crash-everything", "abort-everything", "hang"]
CONSTANT = [name for name in MUTANTS if name.startswith("refuse-everything-as-")]
RESULTS: dict[str, list[Result]] = {}


def _results(name: str) -> list[Result]:
    if name not in RESULTS:
        RESULTS[name] = run_mutant(name, timeout=1.0 if name == "hang" else 60.0)
    return RESULTS[name]


@pytest.mark.slow
def test_the_control_passes_every_targeted_case(tmp_path: Path) -> None:
    control = program("none")
    targets = sorted({i for name in PLANTED for i in MUTANTS[name].targets})
    failed = {}
    for case_id in targets:
        folder, case = BY_ID[case_id]
        result = run_case(control, folder, case, tmp_path)
        if not result.passed:
            failed[case_id] = f"{result.outcome}: {result.detail}"
    assert failed == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_defect_fails_every_case_it_targets(name: str) -> None:
    results = _results(name)
    assert sorted(r.id for r in results) == sorted(MUTANTS[name].targets)
    assert [r.id for r in results if r.passed] == []
    assert not any(r.outcome == "not supported" for r in results), results


@pytest.mark.slow
@pytest.mark.parametrize("name", BLANKET)
def test_refusing_crashing_or_hanging_passes_no_case(name: str) -> None:
    results = _results(name)
    refuse = [r for r in results if r.kind == "refuse"]
    assert len(refuse) == sum(case["kind"] == "refuse" for _, case in ALL)
    assert [r.id for r in results if r.passed] == []
    assert {r.outcome for r in results} == {"error"}, Counter(r.outcome for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("name", CONSTANT)
def test_one_cause_for_everything_passes_only_that_causes_refuse_cases(name: str) -> None:
    cause = name.removeprefix("refuse-everything-as-")
    results = _results(name)
    passed = sorted(r.id for r in results if r.passed)
    assert passed == sorted(case["id"] for _, case in ALL if case["kind"] == "refuse"
                            and case["expected"]["cause"] == cause)
    assert all(r.outcome == "refused" for r in results if r.id in SAMPLE)


@pytest.mark.slow
def test_print_the_mutation_table() -> None:
    """The table for the report (``pytest -s``): every mutant's row."""
    text = table({name: _results(name) for name in MUTANTS})
    print("\n" + text)
    assert text.count("\n") == len(MUTANTS) + 1


# -- the protocol's scoring, one exit status at a time (fast) ----------------------------


def _program(code: str, timeout: float = 60.0) -> CommandAdapter:
    return CommandAdapter(f"{sys.executable} -c {code!r}", timeout)


@pytest.mark.parametrize(("code", "outcome", "passed"), [
    ("import sys; sys.exit(11)", "refused", True),  # the case's cause
    ("import sys; sys.exit(10)", "wrong cause", False),
    ("import sys; sys.exit(12)", "wrong cause", False),
    ("import sys; sys.exit(3)", "not supported", False),
    ("import sys; sys.exit(1)", "error", False),  # outside the protocol
    ("import sys; sys.exit(2)", "error", False),
    ("raise TypeError('a bug')", "error", False),  # a traceback
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "error", False),
    ("pass", "error", False),  # exit 0 without OUT.npy
    ("import time; time.sleep(30)", "error", False),  # past the timeout
])
def test_a_refuse_case_passes_only_a_refusal_for_its_cause(
        code: str, outcome: str, passed: bool, tmp_path: Path) -> None:
    folder, case = BY_ID["pad-chunk-one-byte-short"]
    assert case["expected"]["cause"] == "malformed_chunk"
    result = run_case(_program(code, timeout=2.0), folder, case, tmp_path)
    assert (result.outcome, result.passed) == (outcome, passed), result


def test_a_refusal_fails_a_read_case(tmp_path: Path) -> None:
    folder, case = BY_ID["pad-start-zeros"]
    result = run_case(_program("import sys; sys.exit(11)"), folder, case, tmp_path)
    assert (result.outcome, result.passed) == ("refused", False)


def test_python_adapters_judge_the_same_way(tmp_path: Path) -> None:
    """A TypeError is an error, a ValueError on opening invalid_metadata, a ValueError
    on reading malformed_chunk, whatever the adapter."""

    class Raising(ZarrextAdapter):
        def __init__(self, phase: str, error: Exception) -> None:
            self.phase, self.error = phase, error

        def read(self, store: Path, case: dict[str, object]) -> object:
            with refusals(self.phase):
                raise self.error

    folder, case = BY_ID["pad-chunk-one-byte-short"]
    got = {(phase, type(error).__name__): run_case(Raising(phase, error), folder, case,
                                                   tmp_path).outcome
           for phase in ("open", "read")
           for error in (TypeError("x"), ValueError("x"))}
    assert got == {("open", "TypeError"): "error", ("open", "ValueError"): "wrong cause",
                   ("read", "TypeError"): "error", ("read", "ValueError"): "refused"}
    with pytest.raises(Refused) as info, refusals("write"):
        raise ValueError("Value 300 out of range [0, 255]")
    assert info.value.cause == "value_not_representable"
