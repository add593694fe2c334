"""Stores beyond local directories: S3 (a real server on loopback), zip archives, URLs.

The S3 tests talk HTTP to moto's server mode (``s3_server`` in tests/conftest.py),
through obstore (zarr's ``ObjectStore``) and s3fs (zarr's ``FsspecStore``), as they
would to a real object store.
"""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.storage import FsspecStore, LocalStore, MemoryStore, ObjectStore, ZipStore

import zarrext
from tests.cli.test_errors import one_line_error
from tests.conftest import Run
from zarrext.sharding import ShardLayoutError
from zarrext.stores import (
    DEFAULT_STORE_TIMEOUT,
    RemoteObjectStore,
    StoreAccessError,
    StoreOpenError,
    is_url,
    local_directory,
    obstore_options,
    open_store,
    parse_storage_options,
    remote_location,
    remote_store_at,
    writes_in_place,
)


def _fs(s3: dict[str, Any]) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**s3["options"], skip_instance_cache=True)


def _conditional_data() -> np.ndarray:
    rng = np.random.default_rng(3)
    data = np.repeat(np.arange(32, dtype="u2"), 32).reshape(32, 32)
    data[:16, :16] = rng.integers(0, 2**16, (16, 16), dtype="u2")  # one incompressible chunk
    return data


def _create_conditional(location: Any, **kwargs: Any) -> zarr.Array:
    kwargs.setdefault("decision", "compress_if_smaller")
    array = zarrext.create_array(
        location, shape=(32, 32), chunks=(16, 16), dtype="u2", serializer=BytesCodec(),
        compressors=[zarrext.ConditionalCodec([ZstdCodec()])], **kwargs,
    )
    array[:] = _conditional_data()
    return array


# -- locations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "url"),
    [
        ("s3://bucket/x.zarr", True),
        ("gs://b/x", True),
        ("file:///tmp/x", True),
        ("data/x.zarr", False),
        ("/abs/x.zip", False),
        ("C:/x", False),
    ],
    ids=["s3", "gs", "file", "relative", "zip", "drive"],
)
def test_is_url(location: str, url: bool) -> None:
    assert is_url(location) is url


def test_local_directory_is_never_a_mangled_url() -> None:
    assert local_directory("s3://bucket/x.zarr") is None
    assert local_directory("file:///tmp/x.zarr") == Path("/tmp/x.zarr")
    assert local_directory("a.zip") is None
    assert local_directory("a.zarr") == Path("a.zarr")


def test_open_store_kinds(tmp_path: Path, s3: dict[str, Any]) -> None:
    assert isinstance(open_store(tmp_path), LocalStore)
    assert open_store(tmp_path).read_only
    assert not open_store(f"file://{tmp_path}", mode="r+").read_only
    remote = open_store(f"{s3['url']}/x.zarr", mode="r+", storage_options=s3["options"])
    assert isinstance(remote, ObjectStore)
    assert writes_in_place(open_store(tmp_path, mode="r+"))
    assert not writes_in_place(remote)
    assert not writes_in_place(MemoryStore())
    assert isinstance(open_store(tmp_path / "new.zip", mode="w"), ZipStore)


def test_open_store_refusals(tmp_path: Path) -> None:
    with pytest.raises(StoreOpenError, match="are for URLs"):
        open_store(tmp_path, storage_options={"anon": True})
    archive = tmp_path / "a.zip"
    zipfile.ZipFile(archive, "w").close()
    with pytest.raises(StoreOpenError, match="zip archives are read-only"):
        open_store(archive, mode="r+")
    with pytest.raises(StoreOpenError, match="no file system for nosuchfs://"):
        open_store("nosuchfs://bucket/x")


@pytest.mark.parametrize(
    ("text", "message"),
    [("{bad", "not valid JSON"), ("[1]", "must be a JSON object")],
    ids=["malformed", "not-an-object"],
)
def test_parse_storage_options_refusals(text: str, message: str) -> None:
    with pytest.raises(StoreOpenError, match=message):
        parse_storage_options(text)
    assert parse_storage_options('{"anon": true}') == {"anon": True}
    assert parse_storage_options(None) is None


# -- the Python API on S3 ----------------------------------------------------------------


def test_readme_conditional_example_on_s3(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/cond.zarr"
    _create_conditional(url, storage_options=s3["options"])
    # plain zarr reads it back, through the entry points only
    back = zarr.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], _conditional_data())
    assert _fs(s3).exists(f"{url}/c/0/0")


@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
def test_in_place_layouts_refused_on_stores_that_cannot(
    s3: dict[str, Any], layout: str
) -> None:
    url = f"{s3['url']}/sharded.zarr"
    kwargs = {
        "shape": (16, 16), "chunks": (16, 16), "dtype": "i4", "compressors": None,
        "serializer": ShardingCodec(chunk_shape=(8, 8)),
    }
    with pytest.raises(ShardLayoutError, match="ObjectStore cannot do"):
        zarrext.create_array(url, storage_options=s3["options"], shard_layout=layout, **kwargs)
    assert not _fs(s3).exists(f"{url}/zarr.json")  # refused before anything was written
    with pytest.raises(ShardLayoutError, match="MemoryStore cannot do"):
        zarrext.create_array(MemoryStore(), shard_layout=layout, **kwargs)
    zarrext.create_array(url, storage_options=s3["options"], **kwargs)[:] = 3
    with pytest.raises(ShardLayoutError, match="writes inner chunks in place"):
        zarrext.open_array(url, storage_options=s3["options"], shard_layout=layout)
    # without a layout, whole shards are rewritten, as zarr-python does
    array = zarrext.open_array(url, storage_options=s3["options"])
    array[:8, :8] = 5
    assert int(zarr.open_array(url, storage_options=s3["options"])[0, 0]) == 5


# -- the command line on S3 ------------------------------------------------------------


def _options(s3: dict[str, Any]) -> str:
    return json.dumps(s3["options"])


def test_info_inspect_recompress_check_on_s3(run: Run, s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/cond.zarr"
    _create_conditional(url, storage_options=s3["options"], decision="never_apply")
    so = ("--storage-options", _options(s3))

    code, out, err = run("info", url, "--json", *so)
    assert code == 0, err
    tree = json.loads(out)
    assert tree["store"] == url
    assert tree["shape"] == [32, 32]
    assert tree["stored_bytes"] > 0

    code, out, err = run("inspect", url, "--json", *so)
    assert code == 0, err
    (inv,) = json.loads(out)["arrays"]
    assert inv["mask_counts"] == {"0b0": 4}  # written with decision "never_apply"
    before = inv["stored_bytes"]

    code, out, err = run("recompress", url, "--json", *so)
    assert code == 0, err
    (report,) = json.loads(out)["arrays"]
    assert report["masks_after"] == {"0b0": 1, "0b1": 3}
    assert report["bytes_after"] < before
    back = zarr.open_array(url, mode="r", storage_options=s3["options"])
    np.testing.assert_array_equal(back[:], _conditional_data())

    code, out, err = run("check", url, "--deep", "--json", *so)
    assert code == 0, err
    assert json.loads(out)["ok"] is True


def _upload(local: Path, fs: s3fs.S3FileSystem, url: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.pipe(f"{url}/{path.relative_to(local).as_posix()}", path.read_bytes())


def _sharded_with_holes(path: Path) -> np.ndarray:
    """A fixed-slot shard after updates: spare copies and holes that compact removes."""
    array = zarrext.create_array(
        str(path), shape=(32, 32), chunks=(32, 32), dtype="i4", fill_value=0,
        compressors=None, shard_layout="fixed-slot",
        serializer=ShardingCodec(
            chunk_shape=(8, 8),
            codecs=[BytesCodec(), zarrext.ConditionalCodec([ZstdCodec()]), Crc32cCodec()],
        ),
        decision="compress_if_smaller",
    )
    data = np.arange(32 * 32, dtype="i4").reshape(32, 32) % 7
    array[:] = data
    array[:8, :8] = 1
    data[:8, :8] = 1
    return data


def test_compact_and_check_on_s3(run: Run, s3: dict[str, Any], tmp_path: Path) -> None:
    data = _sharded_with_holes(tmp_path / "a.zarr")
    url = f"{s3['url']}/a.zarr"
    fs = _fs(s3)
    _upload(tmp_path / "a.zarr", fs, url)
    so = ("--storage-options", _options(s3))
    before = fs.size(f"{url}/c/0/0")

    code, out, err = run("compact", url, *so)
    assert code == 0, err
    after = fs.size(f"{url}/c/0/0")
    assert after < before
    np.testing.assert_array_equal(
        zarr.open_array(url, mode="r", storage_options=s3["options"])[:], data
    )
    code, out, err = run("check", url, "--deep", *so)
    assert code == 0, err
    assert "every shard validates" in out

    # expanding makes no sense where nothing is written in place
    code, _, err = run("expand", url, *so)
    assert code == 1
    assert "expand makes room for in-place writes" in one_line_error(err)

    # a damaged object is found (no repair on an object store)
    raw = bytearray(fs.cat(f"{url}/c/0/0"))
    raw[-3] ^= 0xFF  # the index (at the end) no longer matches its crc32c
    fs.pipe(f"{url}/c/0/0", bytes(raw))
    code, out, err = run("check", url, "--json", *so)
    assert code == 1
    (finding,) = json.loads(out)["arrays"][0]["findings"]
    assert finding["key"] == "c/0/0"
    (problem,) = finding["problems"]
    assert (problem["kind"], problem["repairable"]) == ("index_checksum", False)
    assert problem["text"].startswith("index checksum error")
    code, _, err = run("check", url, "--repair", *so)
    assert code == 1
    assert "check --repair works on local directories" in one_line_error(err)
    # compact refuses the damaged object in one line and leaves it as it was
    code, _, err = run("compact", url, *so)
    assert code == 1
    assert "c/0/0: index does not decode" in one_line_error(err)
    assert fs.cat(f"{url}/c/0/0") == bytes(raw)


def test_quantize_s3_to_s3_never_over_what_exists(run: Run, s3: dict[str, Any]) -> None:
    source, out = f"{s3['url']}/t.zarr", f"{s3['url']}/q.zarr"
    values = np.linspace(-5, 30, 64 * 64, dtype="f4").reshape(64, 64)
    zarr.create_array(
        source, shape=(64, 64), chunks=(32, 32), dtype="f4", storage_options=s3["options"]
    )[:] = values
    so = ("--storage-options", _options(s3))
    code, stdout, err = run("quantize", source, "--max-abs-error", "0.01", "--out", out,
                            "--json", *so)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["worst_error"] <= 0.01
    back = zarr.open_array(out, mode="r", storage_options=s3["options"])[:]
    assert float(np.abs(back - values).max()) <= 0.01
    fs = _fs(s3)
    bucket = s3["url"].removeprefix("s3://")
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(bucket, refresh=True)) == [
        "q.zarr", "t.zarr"  # no temporary prefix left behind
    ]
    # an existing output is never replaced without --overwrite
    code, _, err = run("quantize", source, "--max-abs-error", "0.01", "--out", out, *so)
    assert code == 1
    assert "already exists" in one_line_error(err)
    # a prefix that holds something other than Zarr is never replaced
    fs.pipe(f"{s3['url']}/notes/readme.txt", b"keep me")
    code, _, err = run("quantize", source, "--max-abs-error", "0.01", "--out",
                       f"{s3['url']}/notes", "--overwrite", *so)
    assert code == 1
    assert "is not a Zarr array or group" in one_line_error(err)
    assert fs.cat(f"{s3['url']}/notes/readme.txt") == b"keep me"


def test_cli_url_errors_are_one_line(run: Run, s3: dict[str, Any]) -> None:
    so = ("--storage-options", _options(s3))
    code, _, err = run("info", f"{s3['url']}/missing.zarr", *so)
    assert code == 1
    assert "not a Zarr array or group" in one_line_error(err)
    code, _, err = run("inspect", "nosuchfs://bucket/x.zarr")
    assert code == 2  # a URL that makes no store is a usage error
    assert "no file system for nosuchfs://" in one_line_error(err)
    code, _, err = run("info", f"{s3['url']}/x.zarr", "--storage-options", "{bad")
    assert code == 2  # a usage error, as every malformed option
    assert "'--storage-options': is not valid JSON" in one_line_error(err)


# -- zip archives ----------------------------------------------------------------------


def _zipped(tmp_path: Path) -> Path:
    _create_conditional(str(tmp_path / "d.zarr"))
    archive = tmp_path / "d.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted((tmp_path / "d.zarr").rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(tmp_path / "d.zarr").as_posix())
    return archive


def test_zip_archives_read_and_written_whole(run: Run, tmp_path: Path) -> None:
    archive = _zipped(tmp_path)
    code, out, err = run("info", archive, "--json")
    assert code == 0, err
    assert json.loads(out)["shape"] == [32, 32]
    code, out, err = run("inspect", archive, "--json")
    assert code == 0, err
    assert json.loads(out)["arrays"][0]["stored_chunks"] == 4
    np.testing.assert_array_equal(zarrext.open_array(archive, mode="r")[:], _conditional_data())
    # jobs that rewrite the store refuse a zip, saying what to do
    for job in ("recompress", "compact"):
        code, _, err = run(job, archive)
        assert code == 1
        assert "zip archives are read-only for zarrext" in one_line_error(err)
    # a new zip is written whole, by a job that writes a new array
    values = np.linspace(0, 1, 256, dtype="f8").reshape(16, 16)
    zarr.create_array(str(tmp_path / "f.zarr"), shape=(16, 16), chunks=(8, 8), dtype="f8")[:] = (
        values
    )
    code, _, err = run("quantize", tmp_path / "f.zarr", "--max-abs-error", "0.001", "--out",
                       tmp_path / "q.zip")
    assert code == 0, err
    back = zarr.open_array(ZipStore(tmp_path / "q.zip", mode="r"), mode="r")[:]
    assert float(np.abs(back - values).max()) <= 0.001
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "d.zarr", "d.zip", "f.zarr", "q.zip"
    ]


def test_cli_unreachable_store_and_missing_credentials_are_one_line(
    run: Run, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    options = {"endpoint_url": f"http://127.0.0.1:{closed}", "key": "a", "secret": "b",
               "config_kwargs": {"retries": {"max_attempts": 1}}}
    code, _, err = run("info", "s3://bucket/x.zarr", "--storage-options", json.dumps(options))
    assert code == 3  # a store that cannot be reached
    line = one_line_error(err)
    assert "cannot read the store (EndpointConnectionError" in line
    assert "check the URL, --storage-options and credentials" in line
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    anonymous = {"endpoint_url": s3["options"]["endpoint_url"], "skip_instance_cache": True}
    code, _, err = run("info", f"{s3['url']}/x.zarr", "--storage-options", json.dumps(anonymous))
    assert code == 3  # obstore, without credentials, asked the instance metadata service
    line = one_line_error(err)
    assert line.startswith(f"zarrext: error: {s3['url']}/x.zarr: no credentials found")
    assert "Debug source" not in line  # obstore's dump of its Rust error is cut
    assert "AWS_ACCESS_KEY_ID" in line
    # with a profile file (that obstore cannot read), the URL goes to fsspec, and
    # botocore says what is missing
    (tmp_path / "none").write_text("[default]\nregion = eu-west-1\n")
    code, _, err = run("info", f"{s3['url']}/x.zarr", "--storage-options", json.dumps(anonymous))
    assert code == 3
    assert "NoCredentialsError" in one_line_error(err)


# -- URLs through obstore, fsspec otherwise --------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "options", "config", "client"),
    [
        ("s3", {"endpoint_url": "http://h:9", "key": "k", "secret": "s", "token": "t",
                "client_kwargs": {"region_name": "eu-west-1"}},
         {"endpoint": "http://h:9", "access_key_id": "k", "secret_access_key": "s",
          "session_token": "t", "region": "eu-west-1"}, {"allow_http": True}),
        ("s3", {"anon": True, "skip_instance_cache": True}, {"skip_signature": True}, {}),
        ("s3", {"access_key_id": "k", "client_options": {"timeout": "5s"}},
         {"access_key_id": "k"}, {"timeout": "5s"}),
        ("gs", {"token": "anon"}, {"skip_signature": True}, {}),
        ("gs", {"token": "/keys/sa.json"}, {"service_account": "/keys/sa.json"}, {}),
        ("az", {"account_name": "a", "sas_token": "sig"},
         {"account_name": "a", "sas_key": "sig"}, {}),
        ("http", {}, {}, {"allow_http": True}),
        ("https", {}, {}, {}),
    ],
    ids=["s3-fsspec-keys", "s3-anon", "s3-obstore-keys", "gs-anon", "gs-service-account",
         "az-sas", "http", "https"],
)
def test_obstore_options_map_fsspec_names(
    scheme: str, options: dict[str, Any], config: dict[str, Any], client: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")  # no profile files are consulted
    mapped = obstore_options(scheme, options)
    assert mapped is not None
    assert (mapped.config, mapped.client_options) == (config, client)


@pytest.mark.parametrize(
    "options",
    [
        {"config_kwargs": {"retries": {"max_attempts": 1}}},
        {"client_kwargs": {"verify": False}},
        {"profile": "work"},
        {"requester_pays": True},
    ],
    ids=["botocore-config", "botocore-client", "profile", "requester-pays"],
)
def test_options_only_fsspec_knows_open_through_fsspec(options: dict[str, Any]) -> None:
    assert isinstance(open_store("s3://bucket/x.zarr", storage_options=options), FsspecStore)
    assert obstore_options("https", {"headers": {"Authorization": "x"}}) is None


def test_s3_opens_through_obstore_with_endpoint_and_credentials(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/obs.zarr"
    store = open_store(url, mode="w", storage_options=s3["options"])
    assert isinstance(store, ObjectStore)
    assert remote_location(store) == ("s3", f"{s3['url'].removeprefix('s3://')}/obs.zarr")
    _create_conditional(url, storage_options=s3["options"])
    # read back through s3fs (another client) and through obstore, exactly
    fsspec_store = FsspecStore(_fs(s3), path=url.removeprefix("s3://"), read_only=True)
    np.testing.assert_array_equal(zarr.open_array(fsspec_store, mode="r")[:], _conditional_data())
    np.testing.assert_array_equal(
        zarrext.open_array(url, mode="r", storage_options=s3["options"])[:], _conditional_data()
    )
    # a sibling prefix keeps the endpoint and credentials
    sibling = remote_store_at(store, f"{s3['url'].removeprefix('s3://')}/obs.zarr")
    assert zarr.open_array(sibling, mode="r").shape == (32, 32)
    with pytest.raises(StoreOpenError, match="is not in the bucket"):
        remote_store_at(store, "another-bucket/x")


def test_urls_obstore_lacks_or_options_it_lacks_go_to_fsspec(s3: dict[str, Any]) -> None:
    memory = open_store(f"memory://zarrext-{uuid.uuid4().hex[:8]}/x.zarr", mode="w")
    assert isinstance(memory, FsspecStore)
    botocore = {**s3["options"], "config_kwargs": {"retries": {"max_attempts": 2}}}
    url = f"{s3['url']}/fs.zarr"
    store = open_store(url, mode="w", storage_options=botocore)
    assert isinstance(store, FsspecStore)
    _create_conditional(url, storage_options=botocore)
    np.testing.assert_array_equal(
        zarrext.open_array(url, mode="r", storage_options=s3["options"])[:], _conditional_data()
    )
    with pytest.raises(StoreOpenError, match="cannot open this URL"):
        open_store(url, storage_options={"client_options": {"no_such_option": 1}})


def test_http_url_reads_through_obstore(tmp_path: Path) -> None:
    import functools
    import http.server
    import threading

    _create_conditional(str(tmp_path / "web.zarr"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/web.zarr"
            store = open_store(url)
            assert isinstance(store, ObjectStore)
            np.testing.assert_array_equal(
                zarrext.open_array(url, mode="r")[:], _conditional_data()
            )
        finally:
            server.shutdown()


def test_recompress_a_url_with_storage_options(s3: dict[str, Any]) -> None:
    url = f"{s3['url']}/rc.zarr"
    _create_conditional(url, storage_options=s3["options"], decision="never_apply")
    report = zarrext.recompress(url, "compress_if_smaller", storage_options=s3["options"])
    assert report.masks_before == {0: 4}
    assert report.masks_after == {0: 1, 1: 3}
    np.testing.assert_array_equal(
        zarr.open_array(url, mode="r", storage_options=s3["options"])[:], _conditional_data()
    )
    with pytest.raises(StoreOpenError, match="are for URLs"):
        zarrext.recompress("local.zarr", storage_options={"anon": True})


def test_read_masked_on_s3_is_exact_and_split(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import zarrext.pipeline.chunk_reads
    from zarrext.pipeline.optional_decode import decode_split_into

    url = f"{s3['url']}/opt.zarr"
    rng = np.random.default_rng(5)
    written = np.ma.MaskedArray(
        rng.random((40, 30)).astype("f4"), mask=rng.random((40, 30)) < 0.3
    )
    array = zarrext.create_array(
        url, storage_options=s3["options"], shape=(40, 30), chunks=(16, 16),
        dtype=zarrext.OptionalDType("float32"), fill_value=None,
    )
    array[:] = written
    split = []
    real = decode_split_into
    # patched where the pipeline's chunk reads look it up (their own import of the name)
    monkeypatch.setattr(
        zarrext.pipeline.chunk_reads, "decode_split_into",
        lambda *a, **k: split.append(1) or real(*a, **k),
    )
    got = zarrext.read_masked(zarrext.open_array(url, mode="r", storage_options=s3["options"]))
    assert len(split) == 6  # every chunk took the values-and-mask path
    assert np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(written))
    present = ~written.mask
    assert np.array_equal(got.data[present], written.data[present])
    part = zarrext.read_masked(
        zarrext.open_array(url, mode="r", storage_options=s3["options"]),
        (slice(3, 33), 7),
    )
    assert np.array_equal(np.ma.getmaskarray(part), written.mask[3:33, 7])


# -- errors of the Python API on object stores (issue 35 item 4) -------------------------


def test_api_errors_name_the_url_and_the_cause_with_obstores_chained(
    freezable_s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # an obstore GenericError with a multi-line debug dump, after 180.7 s; then, with the
    # bucket gone, "Object ... not found ... PUT 404". Not timed: that the requests'
    # timeouts add up to the bound is test_the_store_timeout_bounds_a_request_and_its_retries
    monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", "3")
    url, options = f"{freezable_s3['url']}/a.zarr", freezable_s3["options"]
    array = zarrext.create_array(url, storage_options=options, shape=(40,), chunks=(10,),
                                 dtype="f4")
    values = np.linspace(0, 1, 40, dtype="f4")
    with freezable_s3["frozen"](), pytest.raises(StoreAccessError) as raised:
        array[:] = values
    assert raised.value.cause == "timed out"
    assert raised.value.location == url
    assert str(raised.value).startswith(f"{url}: the request timed out (bound: 3 s")
    assert "\n" not in str(raised.value)
    assert type(raised.value.__cause__).__module__.startswith("obstore")  # chained
    _fs(freezable_s3).rm(freezable_s3["url"], recursive=True)  # the server goes on, bucketless
    bucket = freezable_s3["url"].removeprefix("s3://")
    for attempt in (lambda: array.__setitem__(slice(None), values),
                    lambda: zarrext.open_array(url, storage_options=options)):
        with pytest.raises(StoreAccessError) as raised:
            attempt()
        assert raised.value.cause == "missing bucket"
        assert str(raised.value).startswith(f"{url}: the bucket '{bucket}' does not exist")
        assert "not found" not in str(raised.value)
        assert isinstance(raised.value.__cause__, FileNotFoundError)  # obstore's 404


def test_the_store_timeout_applies_unless_the_options_set_obstores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "s3://bucket/x.zarr"
    plain = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}
    store = open_store(url, storage_options=plain)
    assert isinstance(store, RemoteObjectStore)
    assert (store.location, store.timeout) == (url, DEFAULT_STORE_TIMEOUT)
    monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", "7.5")
    assert open_store(url, storage_options=plain).timeout == 7.5
    own = open_store(url, storage_options={**plain, "client_options": {"timeout": "99s"}})
    assert own.timeout is None
    assert own.store.client_options["timeout"] == "99s"
    for bad in ("soon", "0", "-2", "nan"):
        monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", bad)
        with pytest.raises(StoreOpenError, match="ZARREXT_STORE_TIMEOUT"):
            open_store(url, storage_options=plain)


def _seconds(duration: Any) -> float:
    """obstore's duration (a ``timedelta``, or text such as ``"1s 500ms"``) in seconds."""
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"([\d.]+)\s*(ns|us|ms|s|m|h)\b", str(duration))
    assert parts, duration
    return sum(float(n) * units[unit] for n, unit in parts)


@pytest.mark.parametrize("bound", [0.5, 3, 7.5, 60, 600])
def test_the_store_timeout_bounds_a_request_and_its_retries(
    monkeypatch: pytest.MonkeyPatch, bound: float
) -> None:
    """A request that gets no answer fails within ZARREXT_STORE_TIMEOUT, retries
    included, by obstore's settings: no retry starts after its retry window (plus one
    pause), and that attempt ends after its own timeout; the connection's fits inside."""
    monkeypatch.setenv("ZARREXT_STORE_TIMEOUT", str(bound))
    store = open_store("s3://bucket/x.zarr", storage_options={
        "endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"})
    assert store.timeout == bound
    client, retry = store.store.client_options, store.store.retry_config
    attempt = _seconds(client["timeout"])
    window = _seconds(retry["retry_timeout"])
    pause = _seconds(retry["backoff"]["max_backoff"])
    assert attempt > 0
    assert _seconds(client["connect_timeout"]) <= attempt
    assert window + pause + attempt <= bound * (1 + 1e-9)


def test_a_remote_store_keeps_its_url_through_copies(s3: dict[str, Any]) -> None:
    import pickle

    from zarrext.jobs.store_refs import store_ref

    url = f"{s3['url']}/x.zarr"
    store = open_store(url, mode="r+", storage_options=s3["options"])
    assert isinstance(store, RemoteObjectStore)
    copies = [
        pickle.loads(pickle.dumps(store)),
        store.with_read_only(True),
        pickle.loads(pickle.dumps(store_ref(store))).open(),  # as a Dask worker reopens it
    ]
    for copy in copies:
        assert isinstance(copy, RemoteObjectStore)
        assert (copy.location, copy.timeout) == (url, store.timeout)
    sibling = remote_store_at(store, f"{s3['url'].removeprefix('s3://')}/y.zarr")
    assert isinstance(sibling, RemoteObjectStore)
    assert sibling.location == f"{s3['url']}/y.zarr"


def test_local_path_names_paths_file_urls_and_local_stores(tmp_path: Path) -> None:
    # one function for a location and a store-like (was three: stores, jobs/outputs, sharding)
    from zarrext.stores import local_path

    assert local_path(tmp_path / "a.zarr") == tmp_path / "a.zarr"
    assert local_path(f"file://{tmp_path}/a.zarr") == tmp_path / "a.zarr"
    assert local_path("s3://bucket/a.zarr") is None
    assert local_path(LocalStore(tmp_path)) == tmp_path
    with ZipStore(tmp_path / "a.zip", mode="w") as zipped:
        assert local_path(zipped) == tmp_path / "a.zip"
    assert local_path(MemoryStore()) is None


def test_every_name_of_the_stores_package_imports_from_it() -> None:
    # zarrext.stores is a package: its modules' public names stay importable from it
    import importlib
    import pkgutil

    import zarrext.stores as package

    assert {name for name in package.__all__ if not hasattr(package, name)} == set()
    for module in pkgutil.iter_modules(package.__path__):
        names = importlib.import_module(f"zarrext.stores.{module.name}").__all__
        assert set(names) <= set(package.__all__) | {
            "AZURE_SCHEMES", "GCS_SCHEMES", "HTTP_SCHEMES", "S3_SCHEMES", "BUCKET_MISSING",
            "error_words", "not_found_errors", "passed_through_errors", "bounded_options",
            "fsspec_takes",
        }, module.name


def test_a_location_opened_again_reuses_obstores_store_while_nothing_it_reads_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """obstore's store (its HTTP client and connections) is made once per URL, options,
    environment and process: the same again gets it back; a change in any gets a new one."""
    import os

    url = "s3://bucket/x.zarr"
    options = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}

    def client(url: str = url, **changes: Any) -> Any:
        store = open_store(url, storage_options={**options, **changes})
        assert isinstance(store, RemoteObjectStore)
        return store.store

    first = client()
    assert client() is first
    assert open_store(url, mode="r+", storage_options=options).store is first  # a writer too
    assert client("s3://bucket/y.zarr") is not first
    assert client(secret="other") is not first
    assert client(client_options={"timeout": "9s"}) is not first
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-new-token")
    renewed = client()
    assert renewed is not first
    assert client() is renewed
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)  # as in a forked child
    assert client() is not renewed
