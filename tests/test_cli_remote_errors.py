"""Remote failures are one line naming the URL, and every kind of error has its exit
code (issue 26 item 4, issue 27 item 10)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.conftest import Run
from tests.test_cli_errors import one_line_error
from zarrext.stores import open_store


def _obstore_options(s3: dict[str, Any]) -> str:
    options = s3["options"]
    return json.dumps({"endpoint": options["endpoint_url"], "access_key_id": "testing",
                       "secret_access_key": "testing", "region": "eu-west-1"})


def _float_array(location: Any) -> None:
    zarr.create_array(location, shape=(40,), chunks=(10,), dtype="f4")[:] = np.linspace(
        0, 1, 40, dtype="f4"
    )


def test_quantize_into_a_missing_bucket_is_one_line(
    run: Run, s3: dict[str, Any], tmp_path: Path
) -> None:
    so = _obstore_options(s3)
    _float_array(open_store(f"{s3['url']}/a.zarr", mode="w",
                            storage_options=json.loads(so)))
    code, _, err = run("quantize", f"{s3['url']}/a.zarr", "--max-abs-error", "0.01",
                         "--out", "s3://nosuchbucket-zarrext/q.zarr", "--storage-options", so)
    line = one_line_error(err)
    assert code == 3
    assert "s3://nosuchbucket-zarrext/q.zarr: the bucket or container does not exist" in line
    assert "Debug source" not in line


def test_output_without_credentials_names_the_output(
    run: Run, s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws: obstore asks the metadata service
    _float_array(str(tmp_path / "a.zarr"))
    endpoint = json.dumps({"endpoint": s3["options"]["endpoint_url"], "region": "eu-west-1"})
    code, _, err = run("quantize", tmp_path / "a.zarr", "--max-abs-error", "0.01",
                       "--out", f"{s3['url']}/q.zarr", "--out-options", endpoint)
    line = one_line_error(err)
    assert code == 3
    assert f"{s3['url']}/q.zarr: no credentials found" in line


@pytest.mark.parametrize(("url", "said"), [
    ("abfs://container/a.zarr", "abfs://container/a.zarr: cannot open this URL as a store: "
     "the store's configuration is incomplete"),
    ("s3://", "s3://: cannot open this URL as a store: not a URL of an object store"),
])
def test_urls_that_make_no_store_are_one_usage_line(run: Run, url: str, said: str) -> None:
    code, _, err = run("info", url)
    assert code == 2
    assert said in one_line_error(err)


def test_refused_connection_names_where(run: Run) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"ftp://127.0.0.1:{port}/a.zarr"
    code, _, err = run("info", url)
    assert code == 3
    assert f"{url}: connection refused" in one_line_error(err)


def test_unknown_storage_option_is_named(run: Run, s3: dict[str, Any]) -> None:
    options = {"endpoint": s3["options"]["endpoint_url"], "bogus_key": 1}
    code, _, err = run("info", f"{s3['url']}/a.zarr", "--storage-options", json.dumps(options))
    line = one_line_error(err)
    assert code == 2
    assert "unknown storage option 'bogus_key'" in line
    assert "'endpoint'" not in line


def test_quantize_local_to_s3_takes_the_outputs_options(
    run: Run, s3: dict[str, Any], tmp_path: Path
) -> None:
    _float_array(str(tmp_path / "a.zarr"))
    so = json.dumps(s3["options"])
    for option, name in (("--out-options", "q1.zarr"), ("--storage-options", "q2.zarr")):
        code, _, err = run("quantize", tmp_path / "a.zarr", "--max-abs-error", "0.01",
                           "--out", f"{s3['url']}/{name}", option, so, "-q")
        assert code == 0, err
        copy = zarr.open_array(open_store(f"{s3['url']}/{name}", storage_options=s3["options"]))
        np.testing.assert_allclose(copy[:], zarr.open_array(str(tmp_path / "a.zarr"))[:],
                                   atol=0.01)
    code, _, err = run("quantize", tmp_path / "a.zarr", "--max-abs-error", "0.01",
                       "--out", tmp_path / "q.zarr", "--out-options", so)
    assert code == 2
    assert "--out-options are for an --out URL" in one_line_error(err)


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A loopback port that accepts connections and never answers: its address."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for s in accepted:
            s.close()
        server.close()


def test_silent_scheduler_times_out_with_one_line(
    run: Run, tmp_path: Path, silent_listener: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZARREXT_SCHEDULER_TIMEOUT", "1")
    _float_array(str(tmp_path / "a.zarr"))
    code, _, err = run("quantize", tmp_path / "a.zarr", "--max-abs-error", "0.01",
                       "--out", tmp_path / "q.zarr", "--scheduler", silent_listener)
    line = one_line_error(err)
    assert code == 3
    assert f"no dask scheduler answered at {silent_listener} within 1 s" in line
    assert not (tmp_path / "q.zarr").exists()


def test_help_lists_the_exit_codes(run: Run) -> None:
    code, out, _ = run("--help")
    text = " ".join(out.replace("│", " ").split())
    assert code == 0
    for said in ("Exit codes: 0 done; 1 the job failed", "2 usage", "3 a store or service",
                 "130 interrupted"):
        assert said in text


def test_exit_codes_by_kind(run: Run, tmp_path: Path) -> None:
    _float_array(str(tmp_path / "a.zarr"))
    (tmp_path / "plain").mkdir()
    cases = {
        ("info", tmp_path / "plain"): 1,  # not a Zarr store
        ("recompress", tmp_path / "a.zarr"): 1,  # no conditional codec to recompress
        ("check", tmp_path / "a.zarr", "--bogus"): 2,
        ("inspect", tmp_path / "a.zarr", "--storage-options", '{"anon": true}'): 2,
        ("recompress", "nosuchfs://b/a.zarr"): 2,
        ("info", "s3://"): 2,
    }
    for args, expected in cases.items():
        code, _, err = run(*args)
        assert code == expected, (args, err)
        one_line_error(err)


@pytest.mark.parametrize("option", ["--icechunk-branch", "--icechunk-snapshot"])
def test_empty_icechunk_name_is_refused(run: Run, tmp_path: Path, option: str) -> None:
    # issue 26 item 7: `--icechunk-branch ''` quietly read `main`
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    session = repo.writable_session("main")
    _float_array(session.store)
    session.commit("data")
    code, out, err = run("info", tmp_path / "r", option, "")
    assert code == 2
    assert "an empty name" in one_line_error(err)
    assert out == ""
