"""Deliberately broken implementations: the corpus must catch each one.

Each mutant is a program under the ``cmd:`` protocol (PROTOCOL.md)::

    python -m conformance.run --impl "cmd:python -m conformance.mutants header-bit-order"

The planted mutants are zarrext (``zarrext.open_array``, as the ``zarrext`` adapter
drives it) with one defect; ``none`` is zarrext unchanged, the control. The others
refuse, crash or hang on every call. ``python -m conformance.mutants --table`` prints
the mutation table: each mutant against the cases it targets (which the control
passes) and against every refuse case.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from conformance.adapters import CommandAdapter
from conformance.run import CASES, Result, load_cases, run_case


@dataclass(frozen=True)
class Mutant:
    name: str
    defect: str
    targets: tuple[str, ...] = ()  # ids of cases the defect must fail
    spec: str = ""  # the spec whose cases the defect is about (--wide runs them all)


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("header-bit-order", "spec 000's header mask read and written most significant "
           "bit first within each byte",
           ("cond-mask-1-applies", "cond-mask-1-applies-as-optional", "cond-bit-7-is-codec-7",
            "cond-two-codecs-every-mask", "cond-write-codec-order",
            "cond-write-header-bits-16"), "000"),
    Mutant("shard-index-big-endian", "the shard index's offsets and lengths byte-swapped "
           "(read and written big-endian under a little-endian bytes codec)",
           ("shard-index-end", "shard-index-start", "shard-empty-inner-chunks",
            "shard-write-index-end", "shard-write-empty-inner-chunks"), "001"),
    Mutant("pad-off-by-one", "pad removes nbytes + 1 bytes and writes nbytes + 1 bytes",
           ("pad-start-zeros", "pad-end-zeros", "pad-start-literal", "pad-write-zeros-default",
            "pad-write-literal-end"), "004"),
    Mutant("optional-mask-inverted", "spec 003's mask read and written inverted (present "
           "as missing)",
           ("opt-mask-bytes-codec", "opt-inner-uint16", "opt-nested", "opt-write-mask-bytes",
            "opt-write-packbits-bytes"), "003"),
    Mutant("rounding-half-away", "cast_value's default rounding, nearest-even, done as "
           "nearest-away (ties away from zero)",
           ("cv-decode-rounding-nearest-even", "cv-write-rounding-nearest-even",
            "cv-write-float64-to-float32-nearest-even"), "002"),
    Mutant("refuse-everything", "every call refused outside the protocol's causes (exit 1, "
           "the old protocol's refusal)"),
    Mutant("refuse-everything-as-invalid_metadata", "every call refused for "
           "invalid_metadata (exit 10)"),
    Mutant("refuse-everything-as-malformed_chunk", "every call refused for malformed_chunk "
           "(exit 11)"),
    Mutant("refuse-everything-as-value_not_representable", "every call refused for "
           "value_not_representable (exit 12)"),
    Mutant("crash-everything", "every call dies with an uncaught exception (a traceback)"),
    Mutant("abort-everything", "every call killed by a signal (SIGABRT)"),
    Mutant("hang", "every call sleeps forever (run with a short timeout)"),
)}
#: Read and write cases every blanket mutant (no targets) runs besides the refuse cases.
SAMPLE = ("cond-mask-1-applies", "shard-index-end", "so-decode-int16", "opt-all-present",
          "pad-start-zeros", "cond-write-codec-order", "shard-write-index-end",
          "so-write-int16", "opt-write-all-present", "pad-write-zeros-default")


def program(name: str, timeout: float = 60.0) -> CommandAdapter:
    """Mutant ``name`` (or ``none``) as a ``cmd:`` implementation."""
    return CommandAdapter(f"{sys.executable} -m conformance.mutants {name}", timeout)


def cases_for(mutant: Mutant, root: Path = CASES) -> list[tuple[Path, dict[str, object]]]:
    """The cases a mutant runs: its targets, or every refuse case and :data:`SAMPLE`."""
    wanted = set(mutant.targets or SAMPLE)
    return [(folder, case) for folder, case in load_cases(root)
            if case["id"] in wanted or (not mutant.targets and case["kind"] == "refuse")]


def run_mutant(name: str, timeout: float = 60.0, root: Path = CASES,
               wide: bool = False) -> list[Result]:
    """Mutant ``name`` against its cases (:func:`cases_for`); ``wide``: a planted
    defect against every case of its spec instead."""
    impl = program(name, timeout)
    mutant = MUTANTS[name]
    cases = cases_for(mutant, root)
    if wide and mutant.spec:
        cases = [(f, c) for f, c in load_cases(root) if c["spec"] == mutant.spec]
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        return [run_case(impl, folder, case, Path(tmp)) for folder, case in cases]


def table(results: dict[str, list[Result]]) -> str:
    """The mutation table: per mutant, cases run and failed, refuse cases passed."""
    lines = ["| mutant | cases run | cases failed | refuse cases run | refuse cases passed |",
             "|---|---|---|---|---|"]
    for name, rs in results.items():
        refuse = [r for r in rs if r.kind == "refuse"]
        lines.append(f"| {name} | {len(rs)} | {sum(not r.passed for r in rs)} | "
                     f"{len(refuse)} | {sum(r.passed for r in refuse)} |")
    return "\n".join(lines)


def outcomes(results: list[Result]) -> str:
    return json.dumps({r.id: r.outcome for r in results})
