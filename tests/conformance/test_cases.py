"""The reference corpus (conformance/) against zarrext, and the corpus itself.

Every case runs through both routes zarrext users take: ``zarrext.open_array`` and
plain ``zarr.open_array`` (zarrext's codecs from its entry points, ``zarr+zarrext``).
A case zarrext does not pass today is listed in :data:`KNOWN_FAILURES` with the
reason, as a strict expected failure: fixing it makes the test fail until the entry
goes. A case where zarrext deviates from the spec on purpose must give exactly the
outcome the case records (``zarrext_deviation``), reported as a deviation.
The corpus can fail: flipping one bit of any write case's expected bytes must be
reported. And the committed corpus is what the generator builds now.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conformance.adapters import adapter, needs_runtime
from conformance.run import CASES, load_cases, run_case, shard_index

from conformance import generate

ALL = load_cases()
BY_ID = {case["id"]: (folder, case) for folder, case in ALL}
WRITES = [case["id"] for _, case in ALL if case["kind"] == "write"]

ZARR_CODECS = "zarr-python 3.4.2's own scale_offset/cast_value (cast-value-rs): "
BOTH = ("zarrext", "zarr+zarrext")
SHARDING = "zarr-python 3.4.2's ShardingCodec (zarrext reads shards through it): "

# case id -> (routes it fails on, why)
KNOWN_FAILURES: dict[str, tuple[tuple[str, ...], str]] = {
    "so-write-float32-overflow": (BOTH, ZARR_CODECS + "a float32 overflow is stored as inf"),
    "cv-write-clamp-to-float32": (BOTH, ZARR_CODECS + "clamp to float32 gives inf, not its "
                                  "largest finite value"),
    "cv-refuse-data-type-missing": (BOTH, ZARR_CODECS + "a cast_value without data_type "
                                    "raises TypeError, not a ValueError naming the codec"),
    "cv-fill-value-does-not-round-trip": (BOTH, ZARR_CODECS + "no check that the fill value "
                                          "survives the round trip (a SHOULD)"),
    "shard-codecs-missing": (BOTH, SHARDING + "a missing `codecs` defaults to [bytes]"),
    "shard-index-codecs-missing": (BOTH, SHARDING + "a missing `index_codecs` defaults to "
                                   "[bytes, crc32c]"),
    "shard-codecs-not-a-list": (BOTH, SHARDING + "`codecs` as one object raises TypeError"),
    "shard-name-not-sharding-indexed": (
        ("zarr+zarrext",), "zarr-python names a codec it has no implementation of "
        "(UnknownCodecError), which the runner scores as not supported: it cannot tell a "
        "name no spec defines from one zarr lacks"),
    "shard-index-codecs-without-array-to-bytes": (
        BOTH, "zarr-python checks index_codecs only when it decodes a shard's index: the "
              "refusal names a chunk (malformed_chunk), not the metadata"),
}


def _params(route: str) -> list[object]:
    out = []
    for _, case in ALL:
        routes, why = KNOWN_FAILURES.get(case["id"], ((), ""))
        marks = ([pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)]
                 if route in routes else [])
        out.append(pytest.param(case["id"], id=case["id"], marks=marks))
    return out


def _run(route: str, case_id: str, tmp_path: Path) -> None:
    folder, case = BY_ID[case_id]
    result = run_case(adapter(route), folder, case, tmp_path)
    if "zarrext_outcome" in case.get("zarrext_deviation", {}) and route == "zarrext":
        # zarrext's deliberate deviation: exactly the outcome recorded, never a pass
        assert result.outcome == "deviation", result
        assert not result.passed
        assert result.value_error or result.outcome != "refused", result
        return
    assert result.passed, f"{result.outcome}: {result.detail}"
    if result.outcome == "refused":  # bad input: a ValueError-family error (house rule)
        assert result.value_error, f"refused with {result.error_type}: {result.detail}"


@pytest.mark.parametrize("case_id", _params("zarrext"))
def test_zarrext_open_array(case_id: str, tmp_path: Path) -> None:
    _run("zarrext", case_id, tmp_path)


@pytest.mark.parametrize("case_id", _params("zarr+zarrext"))
def test_plain_zarr_open_array(case_id: str, tmp_path: Path) -> None:
    folder, case = BY_ID[case_id]
    if (case["kind"] == "write" or case["expected"].get("operation") == "write") \
            and needs_runtime(case):
        # Masks and decisions are runtime settings plain zarr-python has no way to take:
        # the runner must say so rather than write something else.
        result = run_case(adapter("zarr+zarrext"), folder, case, tmp_path)
        assert result.outcome == "not supported", result
        return
    _run("zarr+zarrext", case_id, tmp_path)


def _flip_one_bit(case_dir: Path, case: dict[str, object]) -> str:
    """Flip one bit of the first expected object, inside the part the runner compares."""
    expected = case["expected"]
    assert isinstance(expected, dict)
    key = sorted(expected["objects"])[0]
    path = case_dir / "expected" / key
    data = bytearray(path.read_bytes())
    compare = expected["compare"]
    if compare["mode"] == "shard":
        metadata = json.loads((case_dir / "store" / "zarr.json").read_text())
        config = metadata["codecs"][-1]["configuration"]
        index = shard_index(bytes(data), config,
                            metadata["chunk_grid"]["configuration"]["chunk_shape"])
        entries = [(int(o), int(n)) for o, n in index.reshape(-1, 2) if n != 2**64 - 1]
        position = sum(entries[0]) - 1  # the last byte of a stored inner chunk
    elif compare["mode"] == "prefix":
        position = compare["nbytes"] - 1
    else:
        position = len(data) // 2
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    return key


# A bit flipped in a case zarrext writes otherwise is reported by chance, or not at all.
@pytest.mark.parametrize("case_id", [c for c in WRITES
                                     if "zarrext" not in KNOWN_FAILURES.get(c, ((), ""))[0]])
def test_one_flipped_bit_is_reported(case_id: str, tmp_path: Path) -> None:
    folder, case = BY_ID[case_id]
    outcome = case.get("zarrext_deviation", {}).get("zarrext_outcome")
    if outcome == "bytes differ":
        pytest.skip("zarrext writes other bytes on purpose and plain zarr cannot be given "
                    "the decision: no route here writes this case's bytes")
    copy = tmp_path / "case"
    shutil.copytree(folder, copy)
    key = _flip_one_bit(copy, case)
    # a case whose write zarrext refuses on purpose is checked through plain zarr
    route = "zarr+zarrext" if outcome else "zarrext"
    result = run_case(adapter(route), copy, case, tmp_path / "scratch")
    assert result.outcome == "bytes differ", result
    assert result.detail.startswith(key), result.detail


def test_corpus_is_what_the_generator_builds(tmp_path: Path) -> None:
    generate.write_corpus(tmp_path / "cases")
    assert generate.differences(tmp_path / "cases", CASES) == []


def test_generator_does_not_import_zarrext() -> None:
    builders = Path(generate.__file__).parent
    for path in [builders / "generate.py", *sorted((builders / "builders").glob("*.py"))]:
        assert not re.search(r"^\s*(import|from)\s+zarrext", path.read_text(), re.M), path


def test_case_ids_are_unique_and_folders_named_by_them() -> None:
    ids = [case["id"] for _, case in ALL]
    assert len(ids) == len(set(ids)) >= 150
    assert all(folder.name == case["id"] for folder, case in ALL)


def test_every_spec_has_read_refuse_and_write_cases() -> None:
    kinds: dict[str, set[str]] = {}
    for _, case in ALL:
        kinds.setdefault(case["spec"], set()).add(case["kind"])
    assert kinds == {spec: {"read", "refuse", "write"} for spec in
                     ("000", "001", "002", "003", "004")}


def _specs_folder() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "seeds").is_dir():
            return parent / "shared" / "seeds"
    return None


def test_clauses_are_quoted_verbatim() -> None:
    specs = _specs_folder()
    if specs is None:
        pytest.skip("the spec texts (shared/seeds) are not beside this checkout")
    assert generate.unquoted_clauses(generate.all_cases(), specs) == []


def test_readme_counts_match_the_corpus() -> None:
    readme = (CASES.parent / "README.md").read_text()
    index = json.loads((CASES / "index.json").read_text())
    for spec, entry in index["specs"].items():
        row = re.search(rf"^\| {spec} [^|]*\|[^|]*\| (\d+) \|", readme, re.M)
        assert row is not None, spec
        assert int(row.group(1)) == entry["cases"], spec


def test_example_1_chunk_is_a_tiff() -> None:
    tifffile = pytest.importorskip("tifffile")
    folder, _ = BY_ID["pad-example-1-tiff-chunk"]
    image = tifffile.imread(folder / "store" / "c" / "0" / "0")
    np.testing.assert_array_equal(image, np.load(folder / "expected.npy"))


@pytest.mark.parametrize("case_id", ["cond-mask-1-applies", "opt-mask-too-short",
                                     "pad-write-literal-start", "cond-write-masks-per-chunk",
                                     # optional values cross as values + validity files
                                     "opt-nested", "opt-write-all-present"])
def test_command_protocol(case_id: str, tmp_path: Path) -> None:
    """An implementation behind ``cmd:`` (conformance/command_example.py) runs the cases."""
    folder, case = BY_ID[case_id]
    script = Path(generate.__file__).parent / "command_example.py"
    program = adapter(f"cmd:{sys.executable} {script}")
    result = run_case(program, folder, case, tmp_path)
    expected = "not supported" if needs_runtime(case) else {
        "read": "read", "refuse": "refused", "write": "bytes equal"}[case["kind"]]
    assert result.outcome == expected, result


def test_the_readme_summary_is_the_runners() -> None:
    """The documentation's interoperability table is RESULTS.md's summary, as the runner
    wrote it."""
    from conformance.run import with_readme_summary

    root = CASES.parent.parent
    readme = (root / "docs" / "interoperability.md").read_text()
    results = (root / "conformance" / "RESULTS.md").read_text()
    assert with_readme_summary(readme, results) == readme


@pytest.mark.parametrize("route", ["zarrext", "zarr+zarrext"])
def test_results_md_holds_what_zarrext_gives_today(route: str, tmp_path: Path) -> None:
    """RESULTS.md (and so the README's summary) is not stale for zarrext's two routes:
    every case's outcome in it is the one a run gives now."""
    from conformance.run import run

    results = (CASES.parent / "RESULTS.md").read_text()
    column = results.split("## Every case", 1)[1].splitlines()[2].split("|").index(f" {route} ")
    recorded = {}
    for line in results.split("## Every case", 1)[1].split("\n## ", 1)[0].splitlines()[4:]:
        cells = [c.strip() for c in line.split("|")]
        recorded[cells[1].strip("`")] = cells[column].replace(" **✗**", "")
    now = {r.id: r.outcome for r in run(adapter(route))}
    assert recorded == now


def test_every_refuse_case_names_a_cause_of_the_protocol() -> None:
    from conformance.adapters import CAUSES

    refuse = [case for _, case in ALL if case["kind"] == "refuse"]
    assert {case["expected"]["cause"] for case in refuse} == set(CAUSES)
    protocol = (CASES.parent / "PROTOCOL.md").read_text()
    assert all(f"`{cause}`" in protocol for cause in CAUSES)


def test_spec_000_cases_run_under_the_name_its_text_uses() -> None:
    """Each spec 000 case under ``conditional`` has a twin under ``optional``."""
    names = {case["id"]: case["codec_name"] for _, case in ALL if case["spec"] == "000"}
    conditional = {i for i, name in names.items() if name == "conditional"}
    assert conditional
    assert all(names.get(f"{i}-as-optional") == "optional" for i in conditional)
    for case_id in conditional:
        folder, _ = BY_ID[case_id]
        twin, _ = BY_ID[f"{case_id}-as-optional"]
        original = (folder / "store" / "zarr.json").read_text()
        assert (twin / "store" / "zarr.json").read_text() == original.replace(
            '"conditional"', '"optional"')


def test_compress_if_smaller_expects_the_texts_masks() -> None:
    """Trials on the original chunk, ``len(trial) < len(unencoded)``: zarrext's masks
    are its deviation, not the expected bytes."""
    for case_id, header in [("cond-write-compress-if-smaller-chain", 0b11),
                            ("cond-write-compress-if-smaller-shuffle", 0b10)]:
        folder, case = BY_ID[case_id]
        assert (folder / "expected" / "c" / "0").read_bytes()[0] == header
        assert case["zarrext_deviation"]["zarrext_outcome"] == "bytes differ"
        assert case["zarrext_deviation"]["zarrext_masks"][0] != header


def test_levels_say_what_the_quoted_clause_binds() -> None:
    levels = {case["id"]: case["level"] for _, case in ALL}
    assert set(levels.values()) == {"MUST", "SHOULD", "implied", "interop"}
    assert {i for i in levels if i.endswith("-zero-length") and levels[i] == "interop"} == {
        "opt-all-missing-gzip-zero-length", "opt-all-missing-crc32c-zero-length",
        "opt-all-missing-zstd-zero-length", "opt-all-missing-gzip-crc32c-zero-length",
        "opt-nested-outer-all-missing-zero-length"}
    assert levels["opt-all-missing-bytes-zero-length"] == "MUST"  # [bytes] of nothing: 0
    assert all(levels[i] == "implied" for i in levels if i.startswith("cond-reserved-bit"))
    assert levels["opt-trailing-bytes"] == levels["pad-padding-length-differs"] == "implied"
    for _, case in ALL:  # no motivation or example quoted under MUST
        if case["level"] == "MUST":
            assert not case["section"].startswith(("Motivation", "Abstract", "Usage")), case
            assert not case["clause"].startswith(("This allows", "This ensures")), case


@pytest.mark.parametrize(("impl", "case_id", "outcome", "said"), [
    ("zarr", "cond-mask-1-applies", "not supported", "UnknownCodecError"),
    ("zarr", "opt-nested", "not supported", "No Zarr data type found"),
    ("tensorstore", "pad-start-zeros", "not supported", "is not registered"),
    ("zarrs", "so-decode-int16", "not supported", "scale_offset is not supported"),
    ("zarrs", "shard-index-codecs-without-array-to-bytes", "refused", "missing array to bytes"),
])
def test_a_peer_column_reports_what_the_peer_says(impl: str, case_id: str, outcome: str,
                                                  said: str) -> None:
    """No name lists: "not supported" is the peer's own word, and zarr-python and zarrs
    run without zarrext's entry points (a process of their own)."""
    import subprocess

    from conformance.adapters import ADAPTERS

    if ADAPTERS[impl]().unavailable():
        pytest.skip(f"{impl} is not installed")
    done = subprocess.run([sys.executable, "-m", "conformance.run", "--impl", impl, "--only",
                           case_id, "--json"], capture_output=True, text=True, check=True,
                          cwd=CASES.parent.parent)
    result = next(r for r in json.loads(done.stdout)[impl]["results"] if r["id"] == case_id)
    assert result["outcome"] == outcome, result
    assert said in result["detail"], result
