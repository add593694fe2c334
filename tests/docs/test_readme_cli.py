"""The command-line page's blocks run: every command exits 0, ``--json`` parses."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import Run
from tests.docs.test_examples import MAKER, one_block
from tests.docs_text import page

PAGE = page("docs/jobs/command-line.md")
SECTION = PAGE[PAGE.index("# Command line") :]


def _commands(section: str) -> list[list[str]]:
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


COMMANDS = _commands(SECTION)
URL_COMMANDS = _commands(PAGE[PAGE.index("## Object stores and zip archives") :])


def test_the_block_is_found() -> None:
    assert len(COMMANDS) >= 4
    assert all(c[0] == "zarrext" for c in COMMANDS)


def test_readme_cli_block_runs(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # the conditional example writes ingest.zarr, which the block works on
    exec(compile(MAKER, "README.md", "exec"), {"__name__": "__readme__"})
    for command in COMMANDS:
        code, out, err = run(*command[1:])
        assert code == 0, (command, err)
        assert err == "", (command, err)
        if "--json" in command:
            assert json.loads(out)
        else:
            assert out.strip()


def test_readme_object_store_block_runs(run: Run, readme_folder: str) -> None:
    import s3fs

    s3_server = readme_folder
    exec(compile(MAKER, "README.md", "exec"), {"__name__": "__readme__"})
    zipper = one_block("python", "make_archive").code  # the page makes ingest.zip
    exec(compile(zipper, "docs/jobs/command-line.md", "exec"), {"__name__": "__readme__"})
    fs = s3fs.S3FileSystem(
        endpoint_url=s3_server, client_kwargs={"region_name": "eu-west-1"},
        skip_instance_cache=True,
    )
    if not fs.exists("my-bucket"):
        fs.mkdir("my-bucket")
    fs.put("ingest.zarr", "my-bucket/", recursive=True)
    assert any("s3://" in arg for command in URL_COMMANDS for arg in command)
    for command in URL_COMMANDS:
        command = [a.replace("http://localhost:9000", s3_server) for a in command]
        code, out, err = run(*command[1:])
        assert code == 0, (command, err)
        if "--json" in command:
            assert json.loads(out)
        else:
            assert out.strip()
