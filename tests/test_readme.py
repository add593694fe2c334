"""README.md's examples run: each ``python`` block alone, and the whole file top to bottom."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, Run

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
# the conditional example, which makes ingest.zarr: the CLI examples work on it
MAKER = next(b for b in BLOCKS if 'create_array("ingest.zarr"' in b)
# every python and sh block, in the order a reader meets them
ALL_BLOCKS: list[tuple[str, str]] = re.findall(r"```(python|sh)\n(.*?)```", README, flags=re.S)
# Set-up's block builds the project's own venv and runs its test suite: `make` runs it, not us
SETUP = README[README.index("## Set-up") :].split("```sh\n", 1)[1].split("```", 1)[0]


# At scale's object-store example, which makes s3://my-bucket/temps.zarr: the cluster
# example works on it
S3_MAKER = next(b for b in BLOCKS if 'create_array("s3://my-bucket/temps.zarr"' in b)
README_S3 = "http://localhost:9000"  # the README's S3 server: the loopback one in tests


def on_server(code: str, server: str, bucket: str) -> str:
    """A block as run against the test's S3 server, in a bucket of its own."""
    return code.replace(README_S3, server).replace("my-bucket", bucket)


def fresh_bucket(server: str) -> str:
    import s3fs

    bucket = f"readme-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=server, skip_instance_cache=True).mkdir(bucket)
    return bucket


def prepared(
    code: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> str:
    """A block ready to run as a reader runs it: in the test's folder, after the
    blocks it works on (run here), against the test's S3 server in a bucket of its own."""
    monkeypatch.chdir(tmp_path)
    if '"ingest.zarr"' in code and code is not MAKER:  # works on the store the example made
        exec(compile(MAKER, "README.md", "exec"), {"__name__": "__main__"})
    if README_S3 in code:  # an S3 server, credentials in the environment, a bucket
        server = request.getfixturevalue("readme_folder")
        bucket = fresh_bucket(server)
        if "s3://my-bucket/temps.zarr" in code and code is not S3_MAKER:
            exec(compile(on_server(S3_MAKER, server, bucket), "README.md", "exec"),
                 {"__name__": "__main__"})
        code = on_server(code, server, bucket)
    return code


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(
    code: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    code = prepared(code, tmp_path, monkeypatch, request)
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs_as_a_script(
    code: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Each block saved as a file and run with ``python block.py``, as a reader may:
    a block that starts processes needs ``if __name__ == "__main__":`` for that."""
    code = prepared(code, tmp_path, monkeypatch, request)
    script = Path(tmp_path) / "block.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, script.name], capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_readme_has_the_two_setup_commands() -> None:
    assert "make demo" in SETUP
    assert "make test" in SETUP


def test_readme_runs_top_to_bottom_in_one_folder(run: Run, readme_folder: str) -> None:
    """Every python and sh block in order, in one folder, as a reader pasting them would."""
    import s3fs

    s3_server = readme_folder
    bucket = f"readme-{os.getpid()}"  # a bucket of its own on the session's server
    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
    fs.mkdir(bucket)
    uploaded = False
    blocks = [(kind, code) for kind, code in ALL_BLOCKS if code != SETUP]
    assert len(blocks) == len(ALL_BLOCKS) - 1
    ran = []
    for kind, code in blocks:
        if kind == "python":
            code = on_server(code, s3_server, bucket)
            exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
            ran.append(kind)
            continue
        for line in code.splitlines():
            command = shlex.split(line, comments=True)
            if not command:
                continue
            assert command[0] == "zarrext", line
            if any("s3://my-bucket/" in arg for arg in command) and not uploaded:
                # the README's reader copied ingest.zarr to a bucket: so do we, as it is now
                fs.put("ingest.zarr", f"{bucket}/", recursive=True)
                uploaded = True
            command = [
                a.replace("http://localhost:9000", s3_server).replace("my-bucket", bucket)
                for a in command
            ]
            code_, out, err = run(*command[1:])
            assert code_ == 0, (line, err)
            if "--json" in command:
                assert json.loads(out)
            ran.append(command[1])
    assert uploaded
    assert Path("ingest.zip").is_file()  # made by the README, used by `inspect ingest.zip`
    assert Path("grid.png").is_file()  # `inspect --plot grid` says and writes grid.png
    assert ran.count("python") == len(BLOCKS)
