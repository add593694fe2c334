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
from zarrext.codecs.decisions import (
    BUILTIN_DECISIONS,
    CompressIfSmaller,
    DecisionError,
    builtin_choices,
    builtin_spelling,
    from_spelling,
    resolve_decision,
)

DATA = np.arange(256, dtype="i4").reshape(16, 16) // 7
SPELLINGS = [cls.example_spelling() for cls in BUILTIN_DECISIONS.values()]
PLAIN_NAMES = [name for name, cls in BUILTIN_DECISIONS.items() if not cls.parameters]


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


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("given", ["spelling", "object"])
def test_every_builtin_round_trips_through_the_record(
    tmp_path: Path, spelling: str, given: str
) -> None:
    decision = spelling if given == "spelling" else resolve_decision(spelling)
    canonical = from_spelling(spelling).spelling()
    created = conditional_array(tmp_path / "a.zarr", decision=decision)
    assert recorded(tmp_path / "a.zarr") == canonical  # for a name: the name alone
    reopened = zarrext.open_array(str(tmp_path / "a.zarr"))
    again = decision_of(reopened)
    assert type(again) is type(resolve_decision(spelling))
    assert repr(again) == repr(decision_of(created)) == f"<decision {canonical}>"
    reopened[:] = DATA
    expected = zarrext.create_array(
        str(tmp_path / "b.zarr"), shape=(16, 16), chunks=(8, 8), dtype="i4",
        serializer=BytesCodec(), compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        decision=spelling,
    )
    expected[:] = DATA
    assert zarrext.inventory(reopened).mask_counts == zarrext.inventory(expected).mask_counts


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_builtin_is_taken_by_the_cli(run: Run, tmp_path: Path, spelling: str) -> None:
    conditional_array(tmp_path / "a.zarr", decision="never_apply")[:] = DATA
    code, _, err = run("recompress", tmp_path / "a.zarr", "--decision", spelling, "--json")
    assert code == 0, err
    assert np.array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[:], DATA)


def test_convert_takes_a_decision_and_records_it(run: Run, tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "src.zarr"), shape=(16, 16), chunks=(8, 8), dtype="i4")[
        :
    ] = DATA
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "out.zarr",
                       "--decision", "never_apply", "--allow-larger", "--quiet")
    assert code == 0, err
    assert recorded(tmp_path / "out.zarr") == "never_apply"
    out = zarrext.open_array(str(tmp_path / "out.zarr"))
    assert decision_of(out) is resolve_decision("never_apply")
    assert zarrext.inventory(out).mask_counts == {0: 4}  # every chunk stored raw
    assert np.array_equal(out[:], DATA)


def test_convert_without_a_decision_records_compress_if_smaller(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "src.zarr"), shape=(16, 16), chunks=(8, 8), dtype="i4")[
        :
    ] = DATA
    zarrext.convert(str(tmp_path / "src.zarr"), str(tmp_path / "out.zarr"))
    assert recorded(tmp_path / "out.zarr") == "compress_if_smaller"


def test_convert_decision_wins_over_the_like_arrays(tmp_path: Path) -> None:
    conditional_array(tmp_path / "like.zarr", decision="smallest")
    zarr.create_array(str(tmp_path / "src.zarr"), shape=(16, 16), chunks=(8, 8), dtype="i4")[
        :
    ] = DATA
    zarrext.convert(str(tmp_path / "src.zarr"), str(tmp_path / "a.zarr"),
                    like=str(tmp_path / "like.zarr"))
    assert recorded(tmp_path / "a.zarr") == "smallest"
    zarrext.convert(str(tmp_path / "src.zarr"), str(tmp_path / "b.zarr"),
                    like=str(tmp_path / "like.zarr"), decision="spec_literal")
    assert recorded(tmp_path / "b.zarr") == "spec_literal"


def test_convert_refuses_an_unknown_decision_before_writing(run: Run, tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "src.zarr"), shape=(16, 16), chunks=(8, 8), dtype="i4")[
        :
    ] = DATA
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "out.zarr",
                       "--decision", "fastest")
    assert code == 2
    assert "'fastest' is unknown; choose one of compress_if_smaller" in " ".join(err.split())
    assert not (tmp_path / "out.zarr").exists()


def test_convert_help_lists_the_decisions(run: Run) -> None:
    code, out, _ = run("convert", "--help")
    assert code == 0
    help_text = " ".join(out.replace("│", " ").split())
    assert all(cls.usage() in help_text for cls in BUILTIN_DECISIONS.values())


@pytest.mark.parametrize(
    ("spelling", "match"),
    [
        ("fastest", "unknown decision 'fastest'; built-ins are compress_if_smaller, "),
        ("smallest(", "unknown decision 'smallest\\('"),
        ("os.system('x')", "unknown decision"),
        ("smallest(2)", "decision 'smallest\\(2\\)': too many .*; spell it smallest$"),
        ("never_apply(x=1)", "'never_apply\\(x=1\\)': .*'x'; spell it never_apply$"),
        ("smallest(x)", "the arguments must be literals"),
        ("smallest(**{})", "the arguments must be literals"),
        ("smallest\0", "unknown decision"),
    ],
)
def test_a_bad_spelling_is_refused_naming_it(spelling: str, match: str) -> None:
    with pytest.raises(DecisionError, match=match):
        from_spelling(spelling)
    assert builtin_spelling(spelling) is None


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_a_name_is_its_own_canonical_spelling(name: str) -> None:
    decision = from_spelling(f"  {name} ")
    assert type(decision) is BUILTIN_DECISIONS[name]
    assert decision.spelling() == builtin_spelling(decision) == builtin_spelling(name) == name
    assert builtin_spelling(f"{name}()") == name


def test_a_subclass_of_a_builtin_has_no_spelling() -> None:
    class Mine(CompressIfSmaller):
        pass

    assert builtin_spelling(Mine()) is None
    assert builtin_spelling(CompressIfSmaller()) == "compress_if_smaller"


@pytest.mark.parametrize(
    "cls", [c for c in BUILTIN_DECISIONS.values() if c.parameters], ids=lambda c: c.name
)
def test_a_parameterized_builtin_has_an_example_whose_canonical_spelling_is_stable(
    cls: Any,
) -> None:
    assert cls.example is not None
    canonical = from_spelling(cls.example).spelling()
    assert canonical.startswith(f"{cls.name}(")
    assert all(f"{p}=" in canonical for p in cls.parameters)
    assert from_spelling(canonical).spelling() == canonical
    assert cls.usage() in builtin_choices()
