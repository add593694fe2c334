"""Run zarr-python's own test suite without and with zarrext, and compare.

Installing a plugin must not change zarr for arrays that do not use it. This
script downloads the sdist of the zarr version installed in the project's venv,
builds a scratch venv holding that zarr and its test dependencies, runs the
chosen test files there once without zarrext, then installs zarrext into the
same venv (so its entry points exist) and runs them again with ``import
zarrext`` done first. It prints passed/failed/skipped/errors for both runs and
every test whose outcome differs.

Usage (``make zarr-suite`` runs it with the defaults)::

    python scripts/zarr_suite.py [--workdir .zarr-suite] [--workers 2] [TEST ...]

zarrext's own dependencies are installed in both runs, so the two differ only in
zarrext. It needs network access to PyPI and takes 10-20 minutes on two cores; it
is not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tomllib
import venv
from collections import Counter
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The test modules named by issue 9, relative to the sdist's tests/ directory.
DEFAULT_TESTS = (
    "test_array.py",
    "test_api.py",
    "test_api",
    "test_codecs",
    "test_dtype",
    "test_dtype_registry.py",
    "test_metadata",
    "test_indexing.py",
    "test_registry.py",
    "test_codec_entrypoints.py",
    "test_group.py",
    "test_codec_pipeline.py",
)

# Besides the sdist's own "test" dependency group (pinned by zarr), the optional
# store libraries some tests import; the same set in both runs, so skips match.
EXTRA_TEST_DEPENDENCIES = ("fsspec>=2023.10.0", "obstore>=0.5.1")

# A ``sitecustomize`` module on PYTHONPATH: every Python process of the run (pytest,
# its xdist workers, and the processes zarr's multiprocessing tests spawn) imports
# zarrext before anything else, as a user's program that uses zarrext does. With
# ``-p plugin`` alone, spawned children do not import zarrext; zarr's test conftest
# then iterates ``data_type_registry.contents`` while a Struct lookup lazily loads
# the entry points, and the dict grows under it (RuntimeError in the child, and
# ``test_multiprocessing[spawn/forkserver]`` waits forever on the lost task).
PLUGIN = "import zarrext  # noqa: F401\n"

# Outcomes that may differ because a test names a zarrext codec as its example of a
# codec zarr does not know: with zarrext installed, the codec exists.
EXPECTED_DIFFERENCES = {
    "n5_default": "uses 'n5_default' as its example of a codec that is not registered",
    "test_resolve_codec_reports_missing_codec": (
        "uses 'n5_default' as its example of a codec that is not registered"
    ),
}

# zarr parametrizes some tests over every registered data type. With zarrext they
# also run on its optional type, whose contract differs on purpose; each such test
# that fails is explained by one of these (substring of the test ID -> why).
EXPECTED_ADDED_FAILURES = {
    "zarr2": "the optional type is Zarr format 3 only (the spec defines no format 2 form)",
    "(2, ": "the optional type is Zarr format 3 only (the spec defines no format 2 form)",
    "[2-": "the optional type is Zarr format 3 only (the spec defines no format 2 form)",
    "test_registered_dtypes_match_dtype": (
        "its in-memory form is a NumPy structured (value, valid) dtype, which stays zarr's "
        "struct: optional is chosen only explicitly (issue 11, item 4)"
    ),
    "test_match_dtype_unique[zarr3": (
        "its in-memory form is a NumPy structured (value, valid) dtype, which zarr's struct "
        "matches: optional is chosen only explicitly (issue 11, item 4)"
    ),
    "test_dtype_forms[zarr3": (
        "the test passes the native form as dtype.str, which for a structured dtype is "
        "'|V9' (raw bytes), not the (value, valid) fields"
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=REPO / ".zarr-suite")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("tests", nargs="*", default=list(DEFAULT_TESTS))
    args = parser.parse_args()

    zarr_version = version("zarr")
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    source = _unpack_sdist(zarr_version, workdir)
    python = _scratch_venv(workdir / "venv", zarr_version, _test_group(source))

    runs = {}
    # zarrext's own dependencies stay installed in both runs (cast-value-rs, for
    # one, un-skips zarr tests): the runs differ only in zarrext itself.
    _pip(python, "install", str(REPO))
    _pip(python, "uninstall", "-y", "zarrext")
    runs["without"] = _run(python, source, args.tests, args.workers, workdir / "without.jsonl")
    _pip(python, "install", "--no-deps", "-e", str(REPO))
    plugin_dir = workdir / "with-zarrext"
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / "sitecustomize.py").write_text(PLUGIN)
    runs["with"] = _run(
        python, source, args.tests, args.workers, workdir / "with.jsonl",
        plugin_dir=plugin_dir,
    )
    _pip(python, "uninstall", "-y", "zarrext")

    print(f"zarr {zarr_version}, zarrext at {REPO.name}: {', '.join(args.tests)}")
    for name, outcomes in runs.items():
        counts = Counter(outcomes.values())
        print(f"  {name:8} zarrext: " + ", ".join(
            f"{counts[k]} {k}" for k in ("passed", "failed", "skipped", "xfailed", "error")
        ))
    without, with_ = runs["without"], runs["with"]
    differences = sorted(t for t in without.keys() & with_.keys() if without[t] != with_[t])
    print(f"{len(differences)} tests differ")
    for test in differences:
        why = next((w for key, w in EXPECTED_DIFFERENCES.items() if key in test), "")
        note = f" (expected: {why})" if why else ""
        print(f"  {test}: {without[test]} -> {with_[test]}{note}")
    # zarr parametrizes some tests over every registered data type: with zarrext
    # installed they also run on its optional type, whose contract differs on
    # purpose (Zarr format 3 only; never inferred from a NumPy structured dtype).
    added = sorted(with_.keys() - without.keys())
    added_counts = Counter(with_[t] for t in added)
    print(f"{len(added)} tests only with zarrext (zarr's tests parametrized over its data "
          "type): " + ", ".join(f"{n} {k}" for k, n in sorted(added_counts.items())))
    unexplained_added = []
    for test in added:
        if with_[test] not in ("passed", "skipped", "xfailed"):
            why = next((w for key, w in EXPECTED_ADDED_FAILURES.items() if key in test), "")
            print(f"  {test}: {with_[test]}" + (f" (expected: {why})" if why else ""))
            if not why:
                unexplained_added.append(test)
    removed = sorted(without.keys() - with_.keys())
    print(f"{len(removed)} tests only without zarrext")
    for test in removed:
        print(f"  {test}: {without[test]}")
    unexpected = [t for t in differences if not any(k in t for k in EXPECTED_DIFFERENCES)]
    unexpected += removed + unexplained_added
    return 1 if unexpected else 0


def _unpack_sdist(zarr_version: str, workdir: Path) -> Path:
    source = workdir / f"zarr-{zarr_version}"
    if not source.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
             "--no-deps", f"zarr=={zarr_version}", "-d", str(workdir)],
            check=True,
        )
        with tarfile.open(workdir / f"zarr-{zarr_version}.tar.gz") as sdist:
            sdist.extractall(workdir, filter="data")
    return source


def _test_group(source: Path) -> list[str]:
    """The requirements of the sdist's ``[dependency-groups] test``."""
    groups = tomllib.loads((source / "pyproject.toml").read_text())["dependency-groups"]
    return [r for r in groups["test"] if isinstance(r, str)]


def _scratch_venv(path: Path, zarr_version: str, requirements: list[str]) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        venv.create(path, with_pip=True)
        _pip(python, "install", f"zarr=={zarr_version}", *requirements, *EXTRA_TEST_DEPENDENCIES)
    return python


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", *args, "--quiet"], check=True)


def _run(
    python: Path,
    source: Path,
    tests: list[str],
    workers: int,
    report: Path,
    plugin_dir: Path | None = None,
) -> dict[str, str]:
    """Outcome per test ID, read from pytest-reportlog's JSON lines."""
    report.unlink(missing_ok=True)
    command = [
        str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
        # zarr is imported before pytest starts in the run with zarrext (sitecustomize),
        # so pytest cannot rewrite the asserts of zarr's own pytest plugin and warns;
        # zarr's configuration makes warnings errors. Both runs ignore that warning.
        "-W", "ignore::pytest.PytestAssertRewriteWarning",
        f"--report-log={report}", *[f"tests/{t}" for t in tests],
    ]
    env = None
    if plugin_dir is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(plugin_dir)}
    subprocess.run(command, cwd=source, env=env, check=False)
    outcomes: dict[str, str] = {}
    if not report.exists():  # pytest stopped before collecting (e.g. a conftest error)
        return {"<collection>": "error"}
    for line in report.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("$report_type") == "CollectReport" and entry["outcome"] == "failed":
            outcomes[entry["nodeid"]] = "error"
        if entry.get("$report_type") != "TestReport":
            continue
        test, when, outcome = entry["nodeid"], entry["when"], entry["outcome"]
        if outcome == "failed" and when != "call":
            outcomes[test] = "error"
        elif "wasxfail" in entry and outcome == "skipped":
            outcomes[test] = "xfailed"
        elif when == "call" or (when == "setup" and outcome == "skipped"):
            outcomes.setdefault(test, outcome)
            if outcome == "failed":
                outcomes[test] = "failed"
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
