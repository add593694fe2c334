"""The README's command-line block runs: every command exits 0, ``--json`` parses."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_cli_errors import Run, run  # noqa: F401  (fixture)
from tests.test_readme import BLOCKS

README = (ROOT / "README.md").read_text()
SECTION = README[README.index("## Command line") :]
COMMANDS = [
    shlex.split(line.split("#", 1)[0])
    for line in re.search(r"```sh\n(.*?)```", SECTION, flags=re.S).group(1).splitlines()  # type: ignore[union-attr]
    if line.strip()
]


def test_the_block_is_found() -> None:
    assert len(COMMANDS) >= 4
    assert all(c[0] == "zarrext" for c in COMMANDS)


def test_readme_cli_block_runs(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.chdir(tmp_path)
    # the conditional example writes ingest.zarr, which the block works on
    maker = next(b for b in BLOCKS if '"ingest.zarr"' in b)
    exec(compile(maker, "README.md", "exec"), {"__name__": "__readme__"})
    for command in COMMANDS:
        code, out, err = run(*command[1:])
        assert code == 0, (command, err)
        assert err == "", (command, err)
        if "--json" in command:
            assert json.loads(out)
        else:
            assert out.strip()
