"""``zarrext demo``: the main job runs end to end and its own checks hold."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from rich.cells import cell_len

from zarrext.demo import SECTIONS


def test_demo_runs_every_section_in_80_columns(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from zarrext.cli import main; main()", "demo", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "COLUMNS": "80", "PYTHONIOENCODING": "utf-8"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for section in SECTIONS:
        assert section in result.stdout
        assert (tmp_path / section).is_dir()
    # Sections print these words when one of their own checks fails.
    for word in ("DIFFERENT", "CHANGED", "MISSES"):
        assert word not in result.stdout
    assert "identical" in result.stdout  # the conditional plan read back
    assert "unchanged" in result.stdout  # zarr.json untouched by recompress
    # Every table fits the terminal: nothing cut short with an ellipsis, no line wider.
    assert "\u2026" not in result.stdout
    assert max(cell_len(line) for line in result.stdout.splitlines()) <= 80
    assert "recompress with decision compress_if_smaller" in result.stdout  # whole caption
    # Nothing on stderr: no warning a user would take for a fault of the demo
    assert result.stderr == ""
    # the directory given is kept, and the demo says so last (folded to 80 columns)
    assert "".join(result.stdout.split()).endswith(f"thestoresarekeptin{tmp_path}")


@pytest.mark.parametrize("given", [False, True], ids=["temporary", "given"])
def test_the_demo_names_no_directory_that_vanishes(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: bool
) -> None:
    """Without a directory the demo builds in a temporary one, removed at the end: it
    says so and prints no path (it printed the path, then deleted it); a directory
    given is printed and kept (issue 34.6)."""
    import zarrext.demo

    built: list[Path] = []

    def section(root: Path, console: object) -> None:
        (root / "x.zarr").mkdir()
        built.append(root)

    # one section that only leaves a store behind: the demo's own frame, quickly
    probe = types.ModuleType("zarrext.demo.probe")
    probe.run = section  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "zarrext.demo.probe", probe)
    monkeypatch.setattr(zarrext.demo, "SECTIONS", ("probe",))
    code, out, err = run("demo", *([tmp_path / "d"] if given else []))
    assert code == 0, err
    (root,) = built
    words = "".join(out.split())  # rich folds lines at the terminal's width
    if given:
        assert root == tmp_path / "d" / "probe"
        assert words.endswith(f"thestoresarekeptin{tmp_path / 'd'}")
        assert (root / "x.zarr").is_dir()
    else:
        assert not root.exists()  # removed at the end, as the output says
        assert "temporarydirectory,removedwhenthedemoends" in words
        assert "/" not in out  # no path: the only one would be gone
