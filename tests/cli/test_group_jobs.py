"""Group jobs go on past arrays they must skip, say so, and exit non-zero at the end."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import zarr

from tests.cli.test_errors import conditional_array, one_line_error
from tests.conftest import Run
from zarrext.cli.failures import CliError, run_each


def _arrays(*paths: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(path=p) for p in paths]


def _job(array: SimpleNamespace) -> str:
    if array.path.startswith("bad"):
        raise ValueError(f"cannot do {array.path}\nat all")
    return array.path.upper()


def test_run_each_goes_on_and_fails_at_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    done = []

    def consume() -> None:
        for array, result in run_each(_arrays("a", "bad1", "bad2", "b"), _job,
                                      path="g.zarr", verb="compact"):
            done.append((array.path, result))

    with pytest.raises(CliError, match=r"^2 of 4 arrays under g.zarr were skipped by compact"):
        consume()
    assert done == [("a", "A"), ("b", "B")]  # the arrays after the skipped ones were done
    assert capsys.readouterr().err.splitlines() == [
        "zarrext: skipped bad1: cannot do bad1 at all",
        "zarrext: skipped bad2: cannot do bad2 at all",
    ]


def test_run_each_single_array_raises_its_own_error() -> None:
    with pytest.raises(ValueError, match="cannot do bad"):
        list(run_each(_arrays("bad"), _job, path="x.zarr", verb="compact"))


def test_run_each_no_failure_no_error() -> None:
    assert [r for _, r in run_each(_arrays("a", "b"), _job, path="g", verb="v")] == ["A", "B"]


def test_run_each_notes_where_ctrl_c_stopped() -> None:
    def job(array: SimpleNamespace) -> str:
        if array.path == "c":
            raise KeyboardInterrupt
        return array.path

    with pytest.raises(KeyboardInterrupt) as stopped:
        list(run_each(_arrays("a", "b", "c"), job, path="g", verb="expand", on_interrupt="rerun"))
    assert stopped.value.__notes__ == ["expand stopped in c after 2 finished arrays; rerun"]


def test_recompress_group_skips_an_array_and_reports_the_rest(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrext.jobs import recompression

    zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    for name in ("a", "b", "c"):
        conditional_array(tmp_path / "g.zarr" / name)
    real = recompression.recompress

    def failing_on_b(array: zarr.Array, *args: object, **kwargs: object) -> object:
        if array.path == "b":
            raise OSError("disk full")
        return real(array, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(recompression, "recompress", failing_on_b)
    code, out, err = run("recompress", tmp_path / "g.zarr", "--json")
    assert code == 1
    skipped, *rest = err.splitlines()
    assert skipped == "zarrext: skipped b: disk full"
    assert "1 of 3 arrays under" in one_line_error("\n".join(rest))
    document = json.loads(out)  # the arrays that were done, as one JSON document
    assert [a["path"] for a in document["arrays"]] == ["a", "c"]
