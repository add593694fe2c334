"""The corpus's value files are plain arrays a reader in any language takes as
conformance/FORMAT.md says: raw little-endian elements at a described offset, and an
optional data type's validity beside its values."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from conformance.run import CASES, load_cases

from conformance import generate, values

ALL = load_cases(CASES)
STRUCT = {"bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B",
          "uint16": "H", "uint32": "I", "uint64": "Q", "float32": "f", "float64": "d"}


def _raw(path: Path, descriptor: dict) -> list:
    """The elements of a value file from its descriptor alone (no .npy parser)."""
    data = path.read_bytes()[descriptor["data_offset"]:]
    n = math.prod(descriptor["shape"])
    code = STRUCT[descriptor["data_type"]]
    assert len(data) == n * struct.calcsize("<" + code), path
    return list(struct.unpack(f"<{n}{code}", data))


@pytest.mark.parametrize("case_id", [c["id"] for _, c in ALL])
def test_every_value_file_is_plain_and_described(case_id: str) -> None:
    folder, case = next((f, c) for f, c in ALL if c["id"] == case_id)
    files = sorted(p.name for p in folder.glob("*.npy"))
    assert files == sorted(case.get("arrays", {})), files
    for name, descriptor in case.get("arrays", {}).items():
        array = np.load(folder / name, allow_pickle=False)
        assert array.dtype.names is None, name
        assert (descriptor["data_type"], descriptor["shape"]) == (array.dtype.name,
                                                                list(array.shape))
        raw = np.array(_raw(folder / name, descriptor), array.dtype).reshape(array.shape)
        assert raw.tobytes() == array.astype(array.dtype.newbyteorder("<")).tobytes()


def test_optional_cases_name_their_validity() -> None:
    optional = [(f, c) for f, c in ALL if isinstance(
        json.loads((f / "store" / "zarr.json").read_text())["data_type"], dict)]
    assert len(optional) >= 40
    for _, case in optional:
        expected = case["expected"]
        if case["kind"] == "read":
            assert expected["valid"] == "expected.valid.npy", case["id"]
        if "input" in expected:
            assert expected["input_valid"] == "input.valid.npy", case["id"]


def test_a_nested_optional_read_without_numpy() -> None:
    """opt-nested's values, from the two files by FORMAT.md's rules alone."""
    folder, case = next((f, c) for f, c in ALL if c["id"] == "opt-nested")
    shape = case["arrays"]["expected.npy"]["shape"]
    inner = _raw(folder / "expected.npy", case["arrays"]["expected.npy"])
    valid = _raw(folder / "expected.valid.npy", case["arrays"]["expected.valid.npy"])
    n = math.prod(shape)
    records = values.load(folder, "expected").reshape(-1)
    assert {(valid[i], valid[n + i]) for i in range(n)} == {(0, 0), (1, 0), (1, 1)}
    for i in range(n):
        outer, middle = bool(valid[i]), bool(valid[n + i])
        assert records[i]["valid"] == outer
        if outer:
            assert records[i]["value"]["valid"] == middle
        if outer and middle:
            assert records[i]["value"]["value"] == inner[i]
        else:
            assert (inner[i], middle and not outer) == (0, False)


def test_split_and_join_are_inverse_where_values_mean_something() -> None:
    dtype = np.dtype([("value", np.dtype([("value", "<u2"), ("valid", "?")])),
                      ("valid", "?")])
    records = np.zeros(4, dtype)
    records["valid"] = [False, True, True, False]
    records["value"]["valid"] = [True, False, True, True]  # element 0, 3: meaningless
    records["value"]["value"] = [9, 8, 7, 6]
    inner, valid = values.split(records)
    assert valid is not None
    assert valid.tolist() == [[False, True, True, False], [False, False, True, False]]
    assert inner.tolist() == [0, 0, 7, 0]
    back = values.join(inner, valid)
    assert back["valid"].tolist() == records["valid"].tolist()
    assert back["value"]["value"][2] == 7
    plain = np.arange(3, dtype="<f8")
    assert values.split(plain)[1] is None
    assert values.join(plain, None) is plain


def test_refusals_on_write_carry_their_writer_settings() -> None:
    on_write = [c for _, c in ALL if c["expected"].get("operation") == "write"]
    assert on_write
    assert all(c["writer"]["write_empty_chunks"] is False for c in on_write)
    reserved = next(c for c in on_write if c["id"] == "cond-write-mask-sets-reserved-bit")
    assert reserved["writer"]["conditional_masks"]["masks"] == [2, 2]


def test_writes_through_a_conditional_codec_name_their_masks_source() -> None:
    """The runtime setting spec 000's writer needs is in each case: masks, a decision,
    or ``decision: null`` (the spec's default mask)."""
    conditional = [c for f, c in ALL if "writer" in c and generate.has_conditional(
        json.loads((f / "store" / "zarr.json").read_text())["codecs"])]
    assert len(conditional) >= 15
    for case in conditional:
        assert {"conditional_masks", "decision"} & case["writer"].keys(), case["id"]
    default = next(c for c in conditional if c["id"] == "cond-write-no-mask-defaults-to-zero")
    assert default["writer"]["decision"] is None
