"""Every code block of the documentation runs (README.md and the site's pages): each
``python`` block alone, as a script, and every block of every page top to bottom in
one folder, ``zarrext`` commands included; set-up blocks name real targets."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, Run
from tests.docs_text import ALL_BLOCKS, PYTHON, Block, is_setup, one_block

# the conditional example, which makes ingest.zarr: the CLI examples work on it
MAKER = one_block("python", 'create_array("ingest.zarr"').code
# the object-store example, which makes s3://my-bucket/temps.zarr: the cluster example
# works on it
S3_MAKER = one_block("python", 'create_array("s3://my-bucket/temps.zarr"').code
DOCS_S3 = "http://localhost:9000"  # the documentation's S3 server: the loopback one in tests


def on_server(code: str, server: str, bucket: str) -> str:
    """A block as run against the test's S3 server, in a bucket of its own."""
    return code.replace(DOCS_S3, server).replace("my-bucket", bucket)


def fresh_bucket(server: str) -> str:
    import s3fs

    bucket = f"docs-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=server, skip_instance_cache=True).mkdir(bucket)
    return bucket


def run_python(code: str, where: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "__main__"})


def prepared(block: Block, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch,
             request: pytest.FixtureRequest) -> str:
    """A block ready to run as a reader runs it: in the test's folder, after the
    blocks it works on (run here), against the test's S3 server in a bucket of its own."""
    code = block.code
    monkeypatch.chdir(tmp_path)
    if '"ingest.zarr"' in code and code != MAKER:  # works on the store the example made
        run_python(MAKER, "MAKER")
    if DOCS_S3 in code:  # an S3 server, credentials in the environment, a bucket
        server = request.getfixturevalue("readme_folder")
        bucket = fresh_bucket(server)
        if "s3://my-bucket/temps.zarr" in code and code != S3_MAKER:
            run_python(on_server(S3_MAKER, server, bucket), "S3_MAKER")
        code = on_server(code, server, bucket)
    return code


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    request: pytest.FixtureRequest) -> None:
    run_python(prepared(block, tmp_path, monkeypatch, request), block.id)


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_block_runs_as_a_script(block: Block, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch,
                                request: pytest.FixtureRequest) -> None:
    """Each block saved as a file and run with ``python block.py``, as a reader may:
    a block that starts processes needs ``if __name__ == "__main__":`` for that."""
    code = prepared(block, tmp_path, monkeypatch, request)
    script = tmp_path / "block.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, script.name], capture_output=True, text=True,
                          timeout=600)  # a hang guard, not a time limit on the work
    assert done.returncode == 0, done.stderr[-3000:]


SETUP = [b for b in ALL_BLOCKS if is_setup(b)]


@pytest.mark.parametrize("block", SETUP, ids=[b.id for b in SETUP])
def test_setup_blocks_name_real_targets_and_extras(block: Block) -> None:
    targets = {line.split(":")[0] for line in (ROOT / "Makefile").read_text().splitlines()
               if line and not line[0].isspace() and ":" in line}
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"])
    for line in block.code.splitlines():
        command = shlex.split(line, comments=True)
        if not command:
            continue
        if command[0] == "make":
            assert command[1] in targets, line
        else:
            assert command[:2] == ["pip", "install"], line
            requirement = command[2]
            assert requirement.startswith("zarrext"), line
            named = requirement.partition("[")[2].rstrip("]")
            assert set(filter(None, named.split(","))) <= extras, line


def test_readme_has_the_two_setup_commands() -> None:
    readme = next(b for b in SETUP if b.document == "README.md")
    assert "make demo" in readme.code
    assert "make test" in readme.code


def test_documentation_runs_top_to_bottom_in_one_folder(run: Run, readme_folder: str) -> None:
    """Every python and sh block in the reader's order, in one folder, as a reader
    pasting them would."""
    import s3fs

    s3_server = readme_folder
    bucket = f"docs-{os.getpid()}"  # a bucket of its own on the session's server
    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
    fs.mkdir(bucket)
    uploaded = False
    ran: list[str] = []
    for block in ALL_BLOCKS:
        if block.kind == "python":
            run_python(on_server(block.code, s3_server, bucket), block.id)
            ran.append("python")
            continue
        if block.kind != "sh" or is_setup(block):
            continue
        for line in block.code.splitlines():
            command = shlex.split(line, comments=True)
            if not command:
                continue
            assert command[0] == "zarrext", (block.id, line)
            if any("s3://my-bucket/" in arg for arg in command) and not uploaded:
                # the reader copied ingest.zarr to a bucket: so do we, as it is now
                fs.put("ingest.zarr", f"{bucket}/", recursive=True)
                uploaded = True
            command = [a.replace(DOCS_S3, s3_server).replace("my-bucket", bucket)
                       for a in command]
            code, out, err = run(*command[1:])
            assert code == 0, (block.id, line, err)
            if "--json" in command:
                assert json.loads(out)
            ran.append(command[1])
    assert uploaded
    assert Path("ingest.zip").is_file()  # made by the docs, used by `inspect ingest.zip`
    assert Path("grid.png").is_file()  # `inspect --plot grid` says and writes grid.png
    assert ran.count("python") == len(PYTHON)
