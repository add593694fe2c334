"""Built-in decisions by their spelling: the CLI's ``--decision``, ``decision=``, the
record in an array's attributes and the decision a reopened array writes with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ZstdCodec

import zarrext
from tests.conftest import Run
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.decisions import BUILTIN_DECISIONS, resolve_decision

DATA = np.arange(256, dtype="i4").reshape(16, 16) // 7


def conditional_array(path: Path, **kwargs: Any) -> zarr.Array:
    return zarrext.create_array(
        str(path), shape=(16, 16), chunks=(8, 8), dtype="i4", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec()])], **kwargs,
    )


def decision_of(array: zarr.Array) -> Any:
    (codec,) = [c for c in array.metadata.codecs if isinstance(c, ConditionalCodec)]
    return codec.decision


def recorded(path: Path) -> Any:
    attributes = json.loads((path / "zarr.json").read_text())["attributes"]
    return json.loads(attributes["zarrext"])["decision"]


@pytest.mark.parametrize("name", list(BUILTIN_DECISIONS))
@pytest.mark.parametrize("given", ["spelling", "object"])
def test_every_builtin_round_trips_through_the_record(
    tmp_path: Path, name: str, given: str
) -> None:
    decision = name if given == "spelling" else resolve_decision(name)
    created = conditional_array(tmp_path / "a.zarr", decision=decision)
    assert recorded(tmp_path / "a.zarr") == name  # the record's format: the name alone
    reopened = zarrext.open_array(str(tmp_path / "a.zarr"))
    again = decision_of(reopened)
    assert type(again) is type(resolve_decision(name))
    assert repr(again) == repr(decision_of(created)) == f"<decision {name}>"
    reopened[:] = DATA
    expected = zarrext.create_array(
        str(tmp_path / "b.zarr"), shape=(16, 16), chunks=(8, 8), dtype="i4",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        decision=name,
    )
    expected[:] = DATA
    assert zarrext.inventory(reopened).mask_counts == zarrext.inventory(expected).mask_counts


@pytest.mark.parametrize("name", list(BUILTIN_DECISIONS))
def test_every_builtin_is_taken_by_the_cli(run: Run, tmp_path: Path, name: str) -> None:
    conditional_array(tmp_path / "a.zarr", decision="never_apply")[:] = DATA
    code, out, err = run("recompress", tmp_path / "a.zarr", "--decision", name, "--json")
    assert code == 0, err
    assert np.array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[:], DATA)
