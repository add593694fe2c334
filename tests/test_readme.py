"""Every ``python`` code block in README.md runs and its assertions hold."""

from __future__ import annotations

import os
import re

import pytest

from tests.conftest import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(
    code: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})


def test_readme_has_the_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text
    assert "make test" in text
