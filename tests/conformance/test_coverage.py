"""The corpus's map of the specs' normative statements (conformance/COVERAGE.md), and
what the runner checks after a write beyond the stored objects."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance.adapters import Adapter, adapter
from conformance.run import CASES, load_cases, run_case

from conformance import coverage

STATEMENTS = coverage.load_statements()
CASE_RECORDS = coverage.load_cases()


def _specs_folder() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "seeds").is_dir():
            return parent / "shared" / "seeds"
    return None


def test_coverage_md_is_what_the_generator_writes() -> None:
    committed = coverage.COVERAGE.read_text(encoding="utf-8")
    assert committed == coverage.markdown(STATEMENTS, CASE_RECORDS)


def test_every_statement_a_stored_case_can_test_has_a_case() -> None:
    rows = coverage.coverage(STATEMENTS, CASE_RECORDS)
    assert [r.statement["id"] for r in rows if r.status == "uncovered"] == []


def test_statements_are_quoted_verbatim() -> None:
    specs = _specs_folder()
    if specs is None:
        pytest.skip("the spec texts (shared/seeds) are not beside this checkout")
    assert coverage.unquoted_statements(STATEMENTS, specs) == []


def test_statement_ids_are_stable_and_spec_prefixed() -> None:
    for statement in STATEMENTS:
        assert statement["id"].startswith(statement["spec"] + "-"), statement


def _case(clause: str, level: str = "MUST") -> dict[str, Any]:
    return {"id": "x", "spec": "000", "clause": clause, "level": level}


def test_a_case_covers_what_its_clause_quotes() -> None:
    by_id = {s["id"]: s for s in STATEMENTS}
    statement = by_id["000-header-bits-multiple-of-8"]
    assert coverage.cites(_case("This value **must** be a multiple of 8."), statement)
    assert coverage.cites(_case("* This value **must**  be a multiple of 8. More."), statement)
    assert not coverage.cites(_case("The on-disk size of the header is always "
                                    "`header_bits / 8` bytes."), statement)
    assert not coverage.cites({**_case(statement["text"]), "spec": "004"}, statement)


def test_a_zarrext_deviation_case_covers_nothing() -> None:
    statement = next(s for s in STATEMENTS if s["id"] == "000-header-bits-multiple-of-8")
    rows = coverage.coverage([statement], [_case(statement["text"], "zarrext-deviation")])
    assert rows[0].status == "uncovered"
    rows = coverage.coverage([statement], [_case(statement["text"])])
    assert (rows[0].status, rows[0].cases) == ("case", ["x"])


def test_a_restating_statement_is_covered_by_the_cases_of_the_one_it_restates() -> None:
    by_id = {s["id"]: s for s in STATEMENTS}
    restating = by_id["000-p1-decode-reverse"]
    original = by_id[restating["restates"]]
    rows = coverage.coverage([original, restating], [_case(original["text"])])
    assert [(r.status, r.via) for r in rows] == [("case", ""), ("restated", original["id"])]


class _MetadataWriter(Adapter):
    """zarrext, then a write-strategy setting put into zarr.json (what spec 001 forbids)."""

    name = "metadata-writer"

    def read(self, store: Path, case: dict[str, Any]) -> np.ndarray:
        return adapter("zarrext").read(store, case)

    def write(self, store: Path, case: dict[str, Any], values: np.ndarray,
              selection: list[list[int]] | None) -> None:
        adapter("zarrext").write(store, case, values, selection)
        metadata = json.loads((store / "zarr.json").read_text())
        metadata["codecs"][0]["configuration"]["write_order"] = "morton"
        (store / "zarr.json").write_text(json.dumps(metadata))


def test_a_write_that_changes_zarr_json_fails(tmp_path: Path) -> None:
    folder, case = next((f, c) for f, c in load_cases(CASES)
                        if c["id"] == "shard-write-metadata-unchanged")
    assert run_case(adapter("zarrext"), folder, case, tmp_path).outcome == "bytes equal"
    result = run_case(_MetadataWriter(), folder, case, tmp_path / "second")
    assert (result.outcome, result.detail) == ("bytes differ",
                                               "zarr.json: the write changed codecs")


def test_a_write_case_over_an_existing_shard_starts_from_its_bytes(tmp_path: Path) -> None:
    """shard-write-into-reversed-shard's store holds shards a writer must update, not
    replace: a writer ignoring them stores the fill value in the other inner chunks."""
    folder, case = next((f, c) for f, c in load_cases(CASES)
                        if c["id"] == "shard-write-into-reversed-shard")
    copy = tmp_path / "case"
    shutil.copytree(folder, copy)
    for path in (copy / "store" / "c").rglob("*"):
        if path.is_file():
            path.unlink()
    result = run_case(adapter("zarrext"), copy, case, tmp_path / "scratch")
    assert result.outcome == "bytes differ", result
