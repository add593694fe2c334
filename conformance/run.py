"""Run the corpus against implementations: ``python -m conformance.run --impl NAME``.

Per case, one outcome:

- read cases and refuse cases: ``read`` (values equal), ``wrong value``, ``refused``,
  ``wrong cause``, ``not supported``, ``error``; a read case passes when ``read``, a
  refuse case when ``refused`` for the case's ``cause`` (``wrong cause``: refused for
  another one);
- write cases: ``bytes equal``, ``bytes differ``, ``refused``, ``not supported``,
  ``error``; passes when ``bytes equal``.

``error`` is a failure that is no refusal: a crash (a Rust panic, a signal), a
timeout, a program's exit status outside the protocol, or a Python error that
means a bug rather than a judgement (TypeError, AttributeError, ...).

``deviation`` (zarrext only): the outcome a case records as zarrext's deliberate
deviation from the spec (``zarrext_deviation.zarrext_outcome``, with its reason);
never a pass, counted apart from the spec's score.

Scores are kept per level (``MUST`` apart from ``SHOULD``, ``implied`` and ``interop``).

``--impl all`` runs every installed implementation, each in a process of its own.
``--json`` prints the results as JSON, ``--markdown`` as the tables of RESULTS.md.
The table (the default output) exits with status 1 when a case failed, unless
``--report-only``; ``--json`` and ``--markdown`` are reports and exit 0.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from conformance import values as value_files
from conformance.adapters import ADAPTERS, Adapter, Crashed, Refused, Unsupported, adapter, is_bug

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
PASSING = {"read": "read", "refuse": "refused", "write": "bytes equal"}


@dataclass
class Result:
    id: str
    spec: str
    kind: str
    outcome: str
    passed: bool
    detail: str = ""
    error_type: str = ""
    value_error: bool = False  # the error is a ValueError (zarrext's refusals must be)
    seconds: float = 0.0
    level: str = "MUST"
    cause: str = ""  # the cause a refusal gave


def load_cases(root: Path = CASES, only: str | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every case folder under ``root`` with its ``case.json``, in id order."""
    out = []
    for path in sorted(root.glob("*/*/case.json")):
        case = json.loads(path.read_text())
        if only is None or only in case["id"]:
            out.append((path.parent, case))
    return sorted(out, key=lambda item: item[1]["id"])


# -- comparing values ------------------------------------------------------------------


def value_difference(got: np.ndarray, expected: np.ndarray) -> str | None:
    """Why ``got`` is not ``expected`` (None when equal).

    Floats compare bit-pattern-free but exactly: equal values with equal signs, NaN
    where NaN. Optional records compare ``valid``, and ``value`` where valid.
    """
    got = np.asarray(got)
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if expected.dtype.names:
        if not got.dtype.names or set(got.dtype.names) != set(expected.dtype.names):
            return f"dtype {got.dtype}, expected records {expected.dtype}"
        if not np.array_equal(got["valid"], expected["valid"]):
            n = int((got["valid"] != expected["valid"]).sum())
            return f"{n} elements present/missing wrongly"
        valid = expected["valid"]
        return value_difference(got["value"][valid], expected["value"][valid])
    if got.dtype.kind != expected.dtype.kind or got.dtype.itemsize != expected.dtype.itemsize:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if expected.dtype.kind in "fc":
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
        if expected.dtype.kind == "f":
            same &= np.signbit(got) == np.signbit(expected)
    else:
        same = got == expected
    if bool(np.all(same)):
        return None
    where = tuple(int(i) for i in np.argwhere(~same)[0])
    return (f"{int((~same).sum())} of {same.size} differ; first at {where}: "
            f"{got[where]!r}, expected {expected[where]!r}")


# -- running one case --------------------------------------------------------------------


def _short(error: BaseException, scratch: Path) -> str:
    """One line: the error's type and message, scratch paths and tensorstore's spec dump
    left out (a message must read the same on every run)."""
    text = f"{type(error).__name__}: {error}"
    text = re.sub(r"\s*\[tensorstore_spec=.*\]\s*$", "", text, flags=re.S)
    text = re.sub(re.escape(str(scratch)) + r"/[^/]+/store/?", "<store>/", text)
    text = " ".join(text.split())
    return text if len(text) <= 240 else f"{text[:90]} ... {text[-145:]}"


def _failure(case: dict[str, Any], error: BaseException, scratch: Path,
             started: float) -> Result:
    """The outcome of a case the implementation raised on: a refusal only when the
    adapter says so with a cause (:class:`Refused`)."""
    cause = ""
    wrapped = isinstance(error, Refused | Unsupported | Crashed)
    original = error.__cause__ if wrapped and error.__cause__ else error
    while not str(original) and (original.__cause__ or original.__context__):
        original = original.__cause__ or original.__context__  # type: ignore[assignment]
    detail = _short(original, scratch)
    if original is error and wrapped:  # a program's message, without a Python type
        detail = detail.split(": ", 1)[1] if ": " in detail else detail
    if isinstance(error, Unsupported):
        outcome = "not supported"
    elif isinstance(error, Refused):
        cause = error.cause
        expected = case["expected"].get("cause")
        outcome = "refused" if case["kind"] != "refuse" or cause == expected else "wrong cause"
        detail = f"[{cause}] {detail}"
        if outcome == "wrong cause":
            detail += f" (expected cause: {expected})"
    elif isinstance(error, Crashed) or is_bug(error):
        outcome = "error"
    else:  # an adapter that let an error through unjudged
        outcome = "error"
        detail = f"not judged by the adapter: {detail}"
    return Result(case["id"], case["spec"], case["kind"], outcome,
                  outcome == PASSING[case["kind"]], detail,
                  type(original).__name__, isinstance(original, ValueError),
                  time.perf_counter() - started, case.get("level", "MUST"), cause)


def _deviation(impl: Adapter, case: dict[str, Any], result: Result) -> Result:
    """A documented deviation of zarrext's (``zarrext_deviation.zarrext_outcome``) is
    reported as such for zarrext's route, with its reason: never a pass."""
    deviation = case.get("zarrext_deviation") or {}
    if impl.name == "zarrext" and result.outcome == deviation.get("zarrext_outcome"):
        return Result(result.id, result.spec, result.kind, "deviation", False,
                      f"{result.detail} (deliberate: {deviation['reason']})",
                      result.error_type, result.value_error, result.seconds,
                      result.level, result.cause)
    return result


def stored_objects(store: Path) -> dict[str, bytes]:
    """Every object under ``store`` but the metadata, by key."""
    return {p.relative_to(store).as_posix(): p.read_bytes()
            for p in sorted(store.rglob("*")) if p.is_file() and p.name != "zarr.json"}


def _byte_difference(key: str, a: bytes, b: bytes) -> str | None:
    if a == b:
        return None
    if len(a) != len(b):
        return f"{key}: {len(a)} bytes, expected {len(b)}"
    first = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    return f"{key}: byte {first} is {a[first]:#04x}, expected {b[first]:#04x}"


class ShardFormatError(ValueError):
    """A stored shard whose index does not decode with its index codecs."""


def _crc32c(data: bytes) -> int:
    import google_crc32c

    return int(google_crc32c.value(data))


def shard_index(shard: bytes, config: dict[str, Any], shard_shape: list[int]) -> np.ndarray:
    """The ``(offset, nbytes)`` index of ``shard``, decoded by its index codecs.

    Index codecs the corpus uses: ``transpose``, ``bytes`` (either endianness),
    ``crc32c`` (checked).
    """
    cps = [s // c for s, c in zip(shard_shape, config["chunk_shape"], strict=True)]
    codecs = config["index_codecs"]
    n_crc = sum(c["name"] == "crc32c" for c in codecs)
    size = 16 * int(np.prod(cps)) + 4 * n_crc
    if len(shard) < size:
        raise ShardFormatError(f"{len(shard)} bytes cannot hold a {size}-byte index")
    raw = shard[-size:] if config.get("index_location", "end") == "end" else shard[:size]
    for codec in reversed(codecs):
        if codec["name"] == "crc32c":
            raw, checksum = raw[:-4], int.from_bytes(raw[-4:], "little")
            if _crc32c(raw) != checksum:
                raise ShardFormatError("the index's crc32c does not match")
    shape = [*cps, 2]
    order = next((c["configuration"]["order"] for c in codecs if c["name"] == "transpose"),
                 list(range(len(shape))))
    endian = next(((c.get("configuration") or {}).get("endian", "little") for c in codecs
                   if c["name"] == "bytes"), "little")
    dtype = "<u8" if endian == "little" else ">u8"
    stored = np.frombuffer(raw, dtype).reshape([shape[i] for i in order])
    return np.transpose(stored, np.argsort(order)).astype(np.uint64)


EMPTY = (2**64 - 1, 2**64 - 1)


def shard_difference(key: str, got: bytes, expected: bytes, config: dict[str, Any],
                     shard_shape: list[int]) -> str | None:
    """Why shard ``got`` does not hold ``expected``'s inner chunks (None when it does).

    Order and placement are free (spec 001); the index must decode at its location
    with its codecs, and each inner chunk's bytes must be equal (nested shards:
    compared the same way), an empty entry where ``expected`` has one.
    """
    try:
        got_index = shard_index(got, config, shard_shape)
    except ShardFormatError as e:
        return f"{key}: {e}"
    try:
        want_index = shard_index(expected, config, shard_shape)
    except ShardFormatError:  # a damaged expected/ (the corpus's own test does that)
        return _byte_difference(key, got, expected)
    inner = config["codecs"]
    nested = inner[-1]["configuration"] if [c["name"] for c in inner] == [
        "sharding_indexed"] else None
    for coords in np.ndindex(*want_index.shape[:-1]):
        where = f"{key} inner chunk {coords}"
        g, w = tuple(map(int, got_index[coords])), tuple(map(int, want_index[coords]))
        if (g == EMPTY) != (w == EMPTY):
            return f"{where}: {'empty' if g == EMPTY else 'stored'}, expected " + (
                "empty" if w == EMPTY else "stored")
        if w == EMPTY:
            continue
        if g[0] + g[1] > len(got):
            return f"{where}: its entry runs past the end of the shard"
        a, b = got[g[0]:g[0] + g[1]], expected[w[0]:w[0] + w[1]]
        difference = (shard_difference(where, a, b, nested, config["chunk_shape"])
                      if nested else _byte_difference(where, a, b))
        if difference:
            return difference
    return None


def _shard_shape(metadata: dict[str, Any]) -> list[int]:
    """The shape the sharding codec sees: the chunk shape, through any transpose."""
    shape = list(metadata["chunk_grid"]["configuration"]["chunk_shape"])
    for codec in metadata["codecs"]:
        if codec["name"] == "transpose":
            shape = [shape[i] for i in codec["configuration"]["order"]]
    return shape


def bytes_difference(got: dict[str, bytes], folder: Path, compare: dict[str, Any]) -> str | None:
    """Why the stored objects are not ``folder/expected/`` (None when they are).

    ``compare["mode"]``: ``exact`` (every object byte for byte), ``prefix`` (the
    first ``nbytes`` of each object), ``shard`` (:func:`shard_difference`).
    """
    expected = stored_objects(folder / "expected")
    if set(got) != set(expected):
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        return f"keys missing {missing}, unexpected {extra}"
    mode = compare.get("mode", "exact")
    metadata = json.loads((folder / "store" / "zarr.json").read_text())
    for key in sorted(expected):
        a, b = got[key], expected[key]
        if mode == "shard":
            difference = shard_difference(key, a, b, metadata["codecs"][-1]["configuration"],
                                          _shard_shape(metadata))
        elif mode == "prefix":
            difference = _byte_difference(key, a[:compare["nbytes"]], b[:compare["nbytes"]])
        else:
            difference = _byte_difference(key, a, b)
        if difference:
            return difference
    return None


def metadata_difference(store: Path, folder: Path) -> str | None:
    """Why ``zarr.json`` after a write is not the case's (None when it is, as JSON): a
    write stores chunks and never puts its settings in the metadata (spec 001)."""
    try:
        after = json.loads((store / "zarr.json").read_text())
    except (OSError, ValueError) as error:
        return f"zarr.json: unreadable after the write ({type(error).__name__})"
    before = json.loads((folder / "store" / "zarr.json").read_text())
    if after == before:
        return None
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return f"zarr.json: the write changed {', '.join(changed)}"


def run_case(impl: Adapter, folder: Path, case: dict[str, Any], scratch: Path) -> Result:
    """One case against one implementation, in a scratch copy of its store."""
    started = time.perf_counter()
    work = scratch / case["id"]
    if work.exists():
        shutil.rmtree(work)
    store = work / "store"
    shutil.copytree(folder / "store", store)
    expected = case["expected"]
    try:
        with warnings.catch_warnings():  # an implementation's warnings are not outcomes
            warnings.simplefilter("ignore")
            if case["kind"] == "write" or expected.get("operation") == "write":
                values = value_files.load(folder, "input")
                impl.write(store, case, values, expected.get("selection"))
                got_bytes = stored_objects(store)
            else:
                got = impl.read(store, case)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        return _deviation(impl, case, _failure(case, error, scratch, started))

    def done(outcome: str, detail: str = "") -> Result:
        return _deviation(impl, case, Result(
            case["id"], case["spec"], case["kind"], outcome, outcome == PASSING[case["kind"]],
            detail, seconds=time.perf_counter() - started, level=case.get("level", "MUST")))

    if case["kind"] == "refuse":
        what = "wrote" if expected["operation"] == "write" else "read"
        return done("read", f"{what} without refusing; expected refusal: {expected['because']}")
    if case["kind"] == "read":
        difference = value_difference(got, value_files.load(folder, "expected"))
        return done("wrong value", difference) if difference else done("read")
    difference = (metadata_difference(store, folder)
                  or bytes_difference(got_bytes, folder, expected.get("compare", {})))
    if difference is None and expected.get("compare", {}).get("roundtrip"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                back = impl.read(store, case)
        except Exception as error:
            return done("bytes differ", f"reading back failed: {_short(error, scratch)}")
        difference = value_difference(back, values)
        if difference:
            difference = f"read back: {difference}"
    return done("bytes differ", difference) if difference else done("bytes equal")


def run(impl: Adapter, root: Path = CASES, only: str | None = None) -> list[Result]:
    """Every case under ``root`` against ``impl``."""
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        return [run_case(impl, folder, case, Path(tmp)) for folder, case in
                load_cases(root, only)]


# -- output ---------------------------------------------------------------------------------


def level_group(level: str) -> str:
    """``MUST`` or ``other`` (``SHOULD``, ``implied``, ``interop``): scored apart."""
    return "MUST" if level == "MUST" else "other"


def summary(results: list[Result]) -> dict[str, dict[str, int]]:
    """Per spec: cases and passes per level group (``MUST``, ``other``), and how many of
    each outcome. A deviation is neither passed nor failed: it is counted apart."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        row = out.setdefault(r.spec, Counter())
        group = level_group(r.level)
        row["cases"] += 1
        row["passed"] += r.passed
        row[f"{group} cases"] += 1
        row[f"{group} passed"] += r.passed
        row[r.outcome] += 1
    return {k: dict(v) for k, v in sorted(out.items())}


SCORE_KEYS = ("cases", "passed", "MUST cases", "MUST passed", "other cases", "other passed")


def text_table(name: str, results: list[Result]) -> str:
    width = max((len(r.id) for r in results), default=10)
    lines = [f"# {name}",
             f"{'case':<{width}}  {'kind':<6}  {'level':<7}  {'outcome':<13}  ok    detail"]
    for r in results:
        lines.append(f"{r.id:<{width}}  {r.kind:<6}  {r.level:<7}  {r.outcome:<13}  "
                     f"{'pass' if r.passed else 'FAIL'}  {r.detail}".rstrip())
    lines.append("")
    for spec, row in summary(results).items():
        parts = ", ".join(f"{row[k]} {k}" for k in sorted(row) if k not in SCORE_KEYS)
        lines.append(f"spec {spec}: MUST {row.get('MUST passed', 0)}/{row.get('MUST cases', 0)}"
                     f", other {row.get('other passed', 0)}/{row.get('other cases', 0)} "
                     f"({parts})")
    must = [r for r in results if r.level == "MUST"]
    other = [r for r in results if r.level != "MUST"]
    deviations = sum(r.outcome == "deviation" for r in results)
    lines.append(f"{name}: MUST {sum(r.passed for r in must)}/{len(must)}, other levels "
                 f"{sum(r.passed for r in other)}/{len(other)}"
                 + (f"; {deviations} deliberate deviations" if deviations else ""))
    return "\n".join(lines)


SPEC_FOLDERS = {"000": "000 conditional", "001": "001 sharding_indexed",
                "002": "002 scale_offset, cast_value", "003": "003 optional", "004": "004 pad"}


def _cell(row: dict[str, int]) -> str:
    extra = ", ".join(f"{row[k]} {k}" + ("s" if k != "not supported" and row[k] > 1 else "")
                      for k in ("not supported", "error", "deviation") if row.get(k))
    cell = f"{row.get('MUST passed', 0)} · {row.get('other passed', 0)}"
    return cell + (f" ({extra})" if extra else "")


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    """RESULTS.md: versions, a summary per spec, level and implementation, zarrext's
    deviations, every case, failures."""
    names = list(runs)
    results = {n: [Result(**r) for r in runs[n]["results"]] for n in names}
    lines = ["# Conformance results", "",
             "Generated by `python -m conformance.run --impl all --markdown > "
             "conformance/RESULTS.md` (`make conformance-results`); do not edit by hand.",
             "A cell is the outcome: `read`, `refused`, `wrong cause`, `wrong value`, "
             "`not supported`, `error`, or for write cases `bytes equal` / `bytes differ`. "
             "A read case passes when `read`, a refuse case when `refused` for the case's "
             "cause (PROTOCOL.md), a write case when `bytes equal`; a case failed otherwise "
             "than `not supported` is marked **✗**. `deviation` is zarrext's documented "
             "deliberate deviation from the spec (the case's `zarrext_deviation`): not a "
             "pass, listed apart. See README.md for what each case is.", "",
             "## Implementations", ""]
    for name in names:
        lines.append(f"- **{name}**: {runs[name]['description']} ({runs[name]['version']})")
    lines += ["", "## Summary: cases passed", "",
              "Each cell: MUST cases passed · other cases passed (SHOULD, implied, interop), "
              "then what was not supported, errors and zarrext's deliberate deviations.", "",
              "| spec | MUST · other cases | " + " | ".join(names) + " |",
              "|---|---|" + "---|" * len(names)]
    per_impl = {n: summary(results[n]) for n in names}
    specs = sorted({s for n in names for s in per_impl[n]})
    first = per_impl[names[0]]
    for spec in specs:
        row = first.get(spec, {})
        total = f"{row.get('MUST cases', 0)} · {row.get('other cases', 0)}"
        lines.append(f"| {SPEC_FOLDERS.get(spec, spec)} | {total} | "
                     + " | ".join(_cell(per_impl[n].get(spec, {})) for n in names) + " |")
    whole = {n: summary([Result(**{**asdict(r), "spec": "all"}) for r in results[n]])["all"]
             for n in names}
    lines.append(f"| all | {whole[names[0]]['MUST cases']} · "
                 f"{whole[names[0]].get('other cases', 0)} | "
                 + " | ".join(_cell(whole[n]) for n in names) + " |")
    deviations = [(n, r) for n in names for r in results[n] if r.outcome == "deviation"]
    lines += ["", "## zarrext's deviations (not counted as passes)", ""]
    lines += [f"- `{r.id}` ({r.level}, {n}): {r.detail}" for n, r in deviations] or ["None."]
    lines += ["", "## Every case", "",
              "| case | kind | level | " + " | ".join(names) + " |",
              "|---|---|---|" + "---|" * len(names)]
    by_id = {n: {r.id: r for r in results[n]} for n in names}
    for r in results[names[0]]:
        cells = []
        for n in names:
            other = by_id[n][r.id]
            marked = not other.passed and other.outcome not in ("not supported", "deviation")
            cells.append(other.outcome + (" **✗**" if marked else ""))
        lines.append(f"| `{r.id}` | {r.kind} | {r.level} | " + " | ".join(cells) + " |")
    lines += ["", "## Failures other than \"not supported\"", ""]
    for n in names:
        failed = [r for r in results[n]
                  if not r.passed and r.outcome not in ("not supported", "deviation")]
        lines += [f"### {n}: {len(failed)}", ""]
        lines += [f"- `{r.id}` ({r.level}, {r.outcome}): {r.detail}" for r in failed]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


README_BEGIN = "<!-- conformance summary: generated by `make conformance-results` -->"
README_END = "<!-- end of conformance summary -->"


def summary_table(results_md: str) -> str:
    """The "Summary: cases passed" section of a RESULTS.md: its legend and table."""
    section = results_md.split("## Summary: cases passed\n", 1)[1]
    return section.split("\n## ", 1)[0].strip()


def with_readme_summary(readme: str, results_md: str) -> str:
    """``readme`` with the table between its conformance markers replaced by
    ``results_md``'s summary (the README's table is the runner's, never hand-written)."""
    head, rest = readme.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_BEGIN}\n{summary_table(results_md)}\n{README_END}{tail}"


def _in_subprocess(name: str, root: Path, only: str | None, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "conformance.run", "--impl", name, "--json",
            "--report-only", "--cases", str(root), "--timeout", str(timeout)]
    if only:
        argv += ["--only", only]
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          cwd=HERE.parent)
    if done.returncode:
        raise SystemExit(f"conformance run of {name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)[name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.run",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", action="append", required=True,
                        help=f"one of {sorted(ADAPTERS)}, cmd:PROGRAM, or all (repeatable)")
    parser.add_argument("--cases", type=Path, default=CASES, help="corpus folder")
    parser.add_argument("--only", help="run only cases whose id contains this")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds a cmd: program may take per call (then: error)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument("--markdown", action="store_true", help="print RESULTS.md's tables")
    parser.add_argument("--report-only", action="store_true",
                        help="exit 0 even when cases fail")
    args = parser.parse_args(argv)

    names: list[str] = []
    for name in args.impl:
        names += [n for n in ADAPTERS if ADAPTERS[n]().unavailable() is None] \
            if name == "all" else [name]
    runs: dict[str, dict[str, Any]] = {}
    for name in names:
        if len(names) > 1:
            runs[name] = _in_subprocess(name, args.cases, args.only, args.timeout)
            continue
        impl = adapter(name, args.timeout)
        why = impl.unavailable()
        if why:
            raise SystemExit(f"{name} is not installed: {why}")
        impl.prepare()
        results = run(impl, args.cases, args.only)
        runs[name] = {"description": impl.description, "version": impl.version(),
                      "results": [asdict(r) for r in results]}
    if args.json:
        print(json.dumps(runs, indent=1))
    elif args.markdown:
        print(markdown(runs), end="")
    else:
        print("\n\n".join(text_table(n, [Result(**r) for r in runs[n]["results"]])
                          for n in names))
    failed = any(not r["passed"] for n in names for r in runs[n]["results"])
    report = args.report_only or args.json or args.markdown
    return 1 if failed and not report else 0


if __name__ == "__main__":
    sys.exit(main())
