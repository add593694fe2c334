"""The CLI's warnings (``zarrext.cli._warnings``): what a user must act on, once, in
the CLI's words; nothing foreign; nothing at all with ``-q`` (issue 27.8, 26.2).

Run as the console script runs, in a new process: the test suite's own warning
filters (pyproject's ``filterwarnings``) do not apply there, and icechunk's Rust
logger writes to the process's stderr, which only a new process shows whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import ShardingCodec, ZstdCodec

import zarrext
from tests.conftest import ROOT
from zarrext.cli._warnings import shown_once
from zarrext.cli.icechunk import LOCAL_REPOSITORY_NOTE

icechunk = pytest.importorskip("icechunk")


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``zarrext ARGS`` in a new process: (exit code, stdout, stderr)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("ICECHUNK_LOG",)}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    environ.pop("PYTHONWARNINGS", None)
    environ.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "zarrext", *args], cwd=cwd, env=environ,
        capture_output=True, text=True, timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def sharded_then_zstd(path: Path) -> None:
    """An array whose sharding codec is followed by zstd: zarr warns at every open."""
    array = zarr.create_array(
        str(path), shape=(32, 32), chunks=(16, 16), dtype="f4",
        serializer=ShardingCodec(chunk_shape=(8, 8)), compressors=[ZstdCodec()],
    )
    array[:] = 1


def test_zarr_sharding_advice_is_not_shown(tmp_path: Path) -> None:
    sharded_then_zstd(tmp_path / "s.zarr")
    for command in ("info", "inspect"):
        code, out, err = cli(command, "s.zarr", cwd=tmp_path)
        assert code == 0, err
        assert err == "", command
        assert out.strip()


def test_a_store_migrated_with_zarr_migrate_opens_without_zarr_warning(tmp_path: Path) -> None:
    from zarr.metadata.migrate_v3 import migrate_v2_to_v3

    v2 = zarr.create_array(str(tmp_path / "m.zarr"), shape=(8,), chunks=(4,), dtype="f4",
                           zarr_format=2)
    v2[:] = 2
    migrate_v2_to_v3(input_store=str(tmp_path / "m.zarr"))  # zarr.json beside .zarray
    assert (tmp_path / "m.zarr" / ".zarray").exists()
    code, out, err = cli("info", "m.zarr", cwd=tmp_path)
    assert code == 0, err
    assert err == ""
    assert out.strip()


def test_quantize_to_s3_leaves_no_warning_about_its_marker(
    s3: dict[str, Any], tmp_path: Path
) -> None:
    import s3fs

    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("t", shape=(32, 32), chunks=(16, 16), dtype="f4")[:] = (
        np.random.default_rng(0).random((32, 32))
    )
    group.create_array("n", shape=(4,), chunks=(4,), dtype="i4")[:] = 1
    s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True).put(
        str(tmp_path / "g.zarr"), f"{s3['url']}/", recursive=True
    )
    options = json.dumps(s3["options"])
    code, _, err = cli(
        "quantize", f"{s3['url']}/g.zarr", "--max-abs-error", "0.01",
        "--out", f"{s3['url']}/q.zarr", "--storage-options", options, cwd=tmp_path,
    )
    assert code == 0, err
    assert ".zarrext-tmp-" not in err
    assert "Warning" not in err
    # the cause is gone, not only its message: the library raises no warning either
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zarrext.quantize.copy_group_quantized(
            f"{s3['url']}/g.zarr", f"{s3['url']}/q2.zarr", max_abs_error=0.01,
            storage_options=s3["options"],
        )
    assert [str(w.message) for w in caught if "zarrext-tmp" in str(w.message)] == []


@pytest.fixture
def local_repository(tmp_path: Path) -> Path:
    from zarrext.jobs.transactions import transaction

    path = tmp_path / "r.icechunk"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    with transaction(repo, "main", "ingest") as ingest:
        array = zarrext.create_array(
            ingest.store, shape=(32, 32), chunks=(16, 16), dtype="f4", fill_value=0,
            decision="never_apply", compressors=[zarrext.ConditionalCodec([ZstdCodec()])],
        )
        array[:] = 1
    return path


def test_a_job_committing_to_a_local_repository_says_it_is_unsafe_once(
    local_repository: Path, tmp_path: Path
) -> None:
    code, _, err = cli("recompress", "r.icechunk", "--icechunk-branch", "main", cwd=tmp_path)
    assert code == 0, err
    lines = err.splitlines()
    note = "zarrext: warning: " + LOCAL_REPOSITORY_NOTE.format(path="r.icechunk",
                                                               branch="main")
    assert lines[0] == note
    assert lines[1].startswith("zarrext: committed snapshot ")
    assert len(lines) == 2  # icechunk's own multi-line WARN output is not repeated
    assert "WARN" not in err


def test_quiet_shows_no_warning(local_repository: Path, tmp_path: Path) -> None:
    code, _, err = cli(
        "recompress", "-q", "r.icechunk", "--icechunk-branch", "main", cwd=tmp_path
    )
    assert code == 0, err
    # the one line -q keeps: icechunk's data-safety warning, in the CLI's words
    assert err.splitlines() == [
        "zarrext: warning: " + LOCAL_REPOSITORY_NOTE.format(path="r.icechunk", branch="main")
    ]
    sharded_then_zstd(tmp_path / "s.zarr")
    code, _, err = cli("compact", "-q", "s.zarr", cwd=tmp_path)
    assert code == 0, err
    assert err == ""


def test_reading_a_local_repository_says_nothing(
    local_repository: Path, tmp_path: Path
) -> None:
    # reading is safe on local storage: nothing to act on
    code, out, err = cli("info", "r.icechunk", "--icechunk-branch", "main", cwd=tmp_path)
    assert code == 0, err
    assert err == ""
    assert out.strip()


def test_icechunk_log_setting_still_wins(local_repository: Path, tmp_path: Path) -> None:
    # ICECHUNK_LOG is icechunk's own switch: a user who sets it sees icechunk's logs
    code, _, err = cli("info", "r.icechunk", "--icechunk-branch", "main", cwd=tmp_path,
                       env={"ICECHUNK_LOG": "warn"})
    assert code == 0, err
    assert "not safe for concurrent commits" in err


def test_commands_taking_a_branch_say_local_repositories_are_unsafe(run: Any) -> None:
    for command in ("recompress", "compact", "expand", "check", "info", "inspect", "quantize"):
        code, out, _ = run(command, "--help")
        assert code == 0
        text = " ".join(out.replace("│", " ").split())
        assert "not safe for concurrent commits" in text, command


def test_each_warning_is_one_line_once_and_none_when_quiet(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from zarr.errors import ZarrUserWarning

    class SomeLibraryWarning(UserWarning):
        pass

    SomeLibraryWarning.__module__ = "somelib.core"
    with shown_once(quiet=False):
        for _ in range(3):
            warnings.warn("first\nsecond line", SomeLibraryWarning, stacklevel=1)
        warnings.warn("Combining a `sharding_indexed` codec disables partial reads and "
                      "writes", ZarrUserWarning, stacklevel=1)
    assert capsys.readouterr().err == (
        "zarrext: warning: first second line (somelib SomeLibraryWarning)\n"
    )
    with shown_once(quiet=True):
        warnings.warn("anything", SomeLibraryWarning, stacklevel=1)
    assert capsys.readouterr().err == ""
