"""Remote failures are one line naming the URL, and every kind of error has its exit
code (issue 26 item 4, issue 27 item 10): a missing bucket, a frozen server, credentials
of each store, an unknown codec, icechunk repositories in S3 (issue 34 item 7, issue 35
item 4)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import zarrext
from tests.cli.test_errors import one_line_error
from tests.conftest import ROOT, Run, Where
from tests.moto_server import free_port
from zarrext.errors import CodecUnavailableError
from zarrext.stores import open_store


def _obstore_options(s3: dict[str, Any]) -> str:
    options = s3["options"]
    return json.dumps({"endpoint": options["endpoint_url"], "access_key_id": "testing",
                       "secret_access_key": "testing", "region": "eu-west-1"})


def _float_array(location: Any) -> None:
    zarr.create_array(location, shape=(40,), chunks=(10,), dtype="f4")[:] = np.linspace(
        0, 1, 40, dtype="f4"
    )


MISSING_BUCKET = "nosuchbucket-zarrext"


@pytest.mark.parametrize(
    "command",
    ["info", "inspect", "check", "recompress", "compact", "quantize-path", "quantize-out"],
)
def test_a_missing_bucket_is_named_by_every_command(
    run: Run, s3: dict[str, Any], command: str
) -> None:
    # the server answers NoSuchBucket; zarr reads a missing object as nothing, and
    # `info` said "not a Zarr array or group" (exit 1) where `quantize --out` said
    # the bucket was missing (exit 3)
    so = _obstore_options(s3)
    missing = f"s3://{MISSING_BUCKET}/x.zarr"
    if command == "quantize-out":
        _float_array(open_store(f"{s3['url']}/a.zarr", mode="w",
                                storage_options=json.loads(so)))
        args: tuple[Any, ...] = ("quantize", f"{s3['url']}/a.zarr", "--max-abs-error", "0.01",
                                 "--out", missing)
    elif command == "quantize-path":
        args = ("quantize", missing, "--max-abs-error", "0.01", "--out", f"{s3['url']}/q.zarr")
    else:
        args = (command, missing)
    code, _, err = run(*args, "--storage-options", so)
    line = one_line_error(err)
    assert code == 3
    assert f"{missing}: the bucket '{MISSING_BUCKET}' does not exist" in line
    assert "Debug source" not in line


TIMEOUT = 3  # ZARREXT_STORE_TIMEOUT in the tests of a frozen server, in seconds
# A guard against a hung command, far above the bound: no test times the commands
# (that the requests' timeouts add up to the bound is tests/stores/test_stores.py's
# test_the_store_timeout_bounds_a_request_and_its_retries). obstore's own retries
# failed a writer after 180.7 s, icechunk's own default waits without end: either
# fails the guard.
HANG_GUARD = 120


def test_a_frozen_server_fails_naming_the_bound(
    freezable_s3: dict[str, Any], tmp_path: Path
) -> None:
    _float_array(str(tmp_path / "a.zarr"))
    so = json.dumps(freezable_s3["options"])
    out = f"{freezable_s3['url']}/q.zarr"
    runs = [
        ("quantize", str(tmp_path / "a.zarr"), "--max-abs-error", "0.01", "--out", out,
         "--out-options", so),
        ("info", out, "--storage-options", so),
    ]
    with freezable_s3["frozen"]():
        for args in runs:
            code, _, err = _zarrext(*args, env=_environment(ZARREXT_STORE_TIMEOUT=str(TIMEOUT)))
            line = one_line_error(err)
            assert code == 3, line
            assert f"{out}: the request timed out (bound: {TIMEOUT} s, retries included)" in line
            assert "ZARREXT_STORE_TIMEOUT" in line


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf"])
def test_a_bad_store_timeout_is_a_usage_error(
    run: Run, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", value)
    code, _, err = run("info", f"{s3['url']}/x.zarr", "--storage-options", _obstore_options(s3))
    assert code == 2
    assert f"ZARREXT_STORE_TIMEOUT={value!r}: expected a number of seconds > 0" in (
        one_line_error(err)
    )


@pytest.fixture
def no_cloud_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials of any cloud: none in the environment, no files in HOME, and the
    instance metadata services (asked last) at a port nothing listens on."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "GOOGLE_", "AZURE_", "ICECHUNK_LOG")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", closed)  # the AWS SDK's
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", closed)  # obstore's
    monkeypatch.setenv("AZURE_MSI_ENDPOINT", f"{closed}/")
    monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", "10")


@pytest.mark.parametrize(
    ("url", "options", "own", "code"),
    [
        ("gs://zarrext-no-bucket/x.zarr", None,
         ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT"), 3),
        ("az://container/x.zarr", {"account_name": "zarrextnone"},
         ("AZURE_STORAGE_ACCOUNT_KEY", "sas_token"), 3),
        # no account: no store at all (a usage error), named with its credentials
        ("az://container/x.zarr", None, ("AZURE_STORAGE_ACCOUNT_NAME", "account_name"), 2),
    ],
    ids=["gs", "az", "az-no-account"],
)
def test_each_store_without_credentials_names_its_own_settings(
    run: Run, no_cloud_credentials: None, url: str, options: dict[str, Any] | None,
    own: tuple[str, ...], code: int,
) -> None:
    # a gs:// URL was told to set AWS_ACCESS_KEY_ID
    args = ("--storage-options", json.dumps(options)) if options else ()
    got, _, err = run("info", url, *args)
    line = one_line_error(err)
    assert got == code
    assert line.startswith(f"zarrext: error: {url}: ")
    for name in own:
        assert name in line
    assert "AWS_" not in line


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


# -- an unknown codec names the array ----------------------------------------------------


def _group_with_unknown_codec(where: Where) -> None:
    """Group ``g.zarr`` holding ``sub/a``, whose codecs end with 'frobnicate' (no
    implementation is installed), and ``b`` beside it, readable."""
    group = zarr.open_group(
        open_store(where.location("g.zarr"), mode="w", storage_options=where.options),
        mode="w",
    )
    group.create_group("sub").create_array("a", shape=(4,), chunks=(2,), dtype="f4")
    group.create_array("b", shape=(4,), chunks=(2,), dtype="f4")
    document = json.loads(where.stored("g.zarr")["sub/a/zarr.json"])
    document["codecs"].append({"name": "frobnicate"})
    where.put("g.zarr", "sub/a/zarr.json", json.dumps(document).encode())


@pytest.mark.parametrize("command", ["info", "inspect", "check", "quantize"])
def test_an_unknown_codec_names_the_array(
    run: Run, where: Where, tmp_path: Path, command: str
) -> None:
    # zarr's "An implementation for codec 'frobnicate' is not available" names no array
    _group_with_unknown_codec(where)
    group = where.location("g.zarr")
    options = () if where.local else ("--storage-options", json.dumps(where.options))
    for target in (group, f"{group}/sub/a"):  # the group walked, the array itself
        extra = ("--max-abs-error", "0.1", "--out", tmp_path / "q.zarr") if (
            command == "quantize") else ()
        code, _, err = run(command, target, *extra, *options)
        line = one_line_error(err)
        assert code == 1, line
        assert line.startswith(f"zarrext: error: {group}/sub/a: An implementation for codec "
                               "'frobnicate' is not available"), line


def test_the_library_names_the_array_of_an_unknown_codec(where: Where) -> None:
    from zarrext.jobs.node_info import node_info

    _group_with_unknown_codec(where)
    group = where.location("g.zarr")
    with pytest.raises(CodecUnavailableError) as raised:
        zarrext.open_array(f"{group}/sub/a", storage_options=where.options)
    assert str(raised.value).startswith(f"{group}/sub/a: An implementation for codec")
    assert raised.value.codec == "frobnicate"
    assert type(raised.value.__cause__).__name__ == "UnknownCodecError"  # zarr's, chained
    store = open_store(group, storage_options=where.options)
    with pytest.raises(zarr.errors.UnknownCodecError, match=r"^array 'sub/a': An impl"):
        node_info(zarr.open_group(store, mode="r"))  # a group's walk: the member found


# -- icechunk repositories in S3 -----------------------------------------------------------


def _zarrext(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``python -m zarrext ARGS`` in a process of its own (icechunk's Rust logger
    writes to the process's stderr, past Python's): exit code, stdout, stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "zarrext", *args], capture_output=True, text=True, env=env,
        timeout=HANG_GUARD,
    )
    return done.returncode, done.stdout, done.stderr


def _environment(**settings: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        **settings,
    }


def test_icechunk_on_s3_with_the_server_down_is_one_bounded_line(
    no_cloud_credentials: None,
) -> None:
    # exit 1 after 29 s of silence, 3-7 lines of the AWS SDK's log first
    pytest.importorskip("icechunk")
    options = json.dumps({"endpoint_url": f"http://127.0.0.1:{free_port()}",
                          "key": "a", "secret": "b"})  # no region: the SDK looks for one
    args = ("info", "s3://bucket/repo", "--icechunk-branch", "main",
            "--storage-options", options)
    code, out, err = _zarrext(*args, env=_environment(ZARREXT_STORE_TIMEOUT=str(TIMEOUT)))
    assert code == 3
    assert out == ""
    # Either cause, depending on a race: the SDK's search for a region times out within
    # the bound (most runs here), or ends first and the closed port refuses.
    timed_out = ("zarrext: error: s3://bucket/repo: cannot reach the icechunk repository: "
                 f"the request timed out (bound: {TIMEOUT} s")
    refused = ("zarrext: error: s3://bucket/repo: cannot reach the icechunk repository: "
               "connection refused; check the endpoint (host and port) and that the service runs")
    line = one_line_error(err)  # no log line of the SDK's search for a region
    assert line == refused or (line.startswith(timed_out) and "ZARREXT_STORE_TIMEOUT" in line)
    # the user's own ICECHUNK_LOG wins: the SDK's warnings the command lowers show again,
    # and the error is still the last line
    _, _, err = _zarrext(*args, env=_environment(
        ZARREXT_STORE_TIMEOUT=str(TIMEOUT), ICECHUNK_LOG="warn"))
    assert "aws_config" in err
    last = err.strip().splitlines()[-1]
    assert last == refused or (last.startswith(timed_out) and "ZARREXT_STORE_TIMEOUT" in last)


def test_icechunk_on_s3_without_credentials_is_one_line(
    no_cloud_credentials: None, s3_server: str
) -> None:
    pytest.importorskip("icechunk")
    options = json.dumps({"endpoint_url": s3_server})
    code, _, err = _zarrext(
        "info", "s3://bucket/repo", "--icechunk-branch", "main", "--storage-options",
        options, env=_environment(),
    )
    assert code == 3
    line = one_line_error(err)
    assert "cannot reach the icechunk repository: no credentials found" in line
    assert "AWS_ACCESS_KEY_ID" in line


def test_icechunk_in_a_missing_bucket_names_it(run: Run, s3: dict[str, Any]) -> None:
    pytest.importorskip("icechunk")
    url = f"s3://{MISSING_BUCKET}/repo"
    code, _, err = run("info", url, "--icechunk-branch", "main", "--storage-options",
                       json.dumps(s3["options"]))
    assert code == 3
    assert f"{url}: the bucket '{MISSING_BUCKET}' does not exist" in one_line_error(err)


def test_icechunk_on_a_frozen_server_fails_naming_the_bound(
    freezable_s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # icechunk's own default (the AWS SDK's) waits for a frozen server without end
    icechunk = pytest.importorskip("icechunk")
    from zarrext.jobs.transactions import open_repository, repository_storage

    url = f"{freezable_s3['url']}/repo"
    icechunk.Repository.create(repository_storage(url, freezable_s3["options"]))
    monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", str(TIMEOUT))
    # the bound is icechunk's on each operation, retries included
    opened = open_repository(url, storage_options=freezable_s3["options"])
    assert opened.config.storage.timeouts.operation_timeout_ms == TIMEOUT * 1000
    with freezable_s3["frozen"]():
        code, _, err = _zarrext(
            "info", url, "--icechunk-branch", "main", "--storage-options",
            json.dumps(freezable_s3["options"]),
            env=_environment(ZARREXT_STORE_TIMEOUT=str(TIMEOUT)))
    assert code == 3
    assert (f"{url}: cannot reach the icechunk repository: the request timed out "
            f"(bound: {TIMEOUT} s") in one_line_error(err)
