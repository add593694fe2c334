"""Shared test fixtures and settings."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import secrets
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from tests.paths import ROOT

# Schemas and arrays written by other implementations (see tests/data/README.md).
DATA = ROOT / "tests" / "data"


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run ``zarrext ARGS`` as the console script does: (exit code, stdout, stderr)."""
    from zarrext.cli import main

    def invoke(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main([str(a) for a in args])
        out, err = capsys.readouterr()
        code = exited.value.code
        return (code if isinstance(code, int) else 1), out, err

    return invoke


def tree_digest(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes: equal before and after means untouched."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}



@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """An S3-compatible server (moto's server mode) on loopback; its endpoint URL.

    A real HTTP server in its own process, started once per test process and
    stopped at the end: s3fs, zarr's FsspecStore and zarrext talk to it over
    HTTP exactly as to a real object store.
    """
    from tests.moto_server import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def freezable_s3() -> Iterator[dict[str, Any]]:
    """A bucket on an S3 server of the test's own (moto on loopback), which the test
    can freeze: its URL, storage options, and ``frozen()``, a context manager during
    which the server's process is stopped (SIGSTOP: connections are accepted, nothing
    is answered) and after which it goes on (SIGCONT)."""
    import signal

    import s3fs

    from tests.moto_server import moto_process

    with moto_process() as (endpoint, server):
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
                   "client_kwargs": {"region_name": "eu-west-1"}}
        bucket = f"zarrext-{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(**options, skip_instance_cache=True).mkdir(bucket)

        @contextlib.contextmanager
        def frozen() -> Iterator[None]:
            server.send_signal(signal.SIGSTOP)
            try:
                yield
            finally:
                server.send_signal(signal.SIGCONT)

        yield {"url": f"s3://{bucket}", "options": options, "frozen": frozen}


@pytest.fixture
def s3(s3_server: str) -> dict[str, Any]:
    """A fresh bucket on the loopback S3 server: its URL and the storage options."""
    import s3fs

    options = {
        "endpoint_url": s3_server,
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "eu-west-1"},  # us-east-1 refuses a LocationConstraint
    }
    bucket = f"zarrext-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(**options, skip_instance_cache=True).mkdir(bucket)
    return {"url": f"s3://{bucket}", "options": options}


@dataclasses.dataclass
class Where:
    """Where a test's arrays live: a local folder or a bucket on the loopback S3 server.

    ``location(name)`` is the array's path or URL, ``options`` the storage options to
    pass with it (``None`` locally), ``stored(name)`` every object under the array as
    the store holds it (keys relative to the array, ``/``-separated, e.g. ``c/0/1``)
    and ``put(name, key, data)`` replaces one object (a damaged chunk, an edited
    ``zarr.json``).
    """

    kind: str
    root: str
    options: dict[str, Any] | None = None

    @property
    def local(self) -> bool:
        return self.kind == "local"

    def location(self, name: str) -> str:
        return f"{self.root}/{name}"

    @functools.cached_property
    def _fs(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**(self.options or {}), skip_instance_cache=True)

    def stored(self, name: str) -> dict[str, bytes]:
        if self.local:
            return {
                p.relative_to(Path(self.root, name)).as_posix(): p.read_bytes()
                for p in sorted(Path(self.root, name).rglob("*")) if p.is_file()
            }
        prefix = self.location(name)[len("s3://"):] + "/"
        fs = self._fs
        fs.invalidate_cache()  # the objects as they are now, not as last listed
        found = fs.find(prefix)
        return {k[len(prefix):]: v for k, v in sorted(fs.cat(found).items())} if found else {}

    def put(self, name: str, key: str, data: bytes) -> None:
        if self.local:
            path = Path(self.root, name, key)
            path.parent.mkdir(parents=True, exist_ok=True)  # a chunk no writer stored yet
            path.write_bytes(data)
        else:
            self._fs.pipe(f"{self.location(name)}/{key}", data)


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """The test once on local disk and once on the loopback S3 server (a fresh bucket,
    the server started only when an ``s3`` run needs it)."""
    if request.param == "local":
        return Where("local", str(tmp_path))
    s3 = request.getfixturevalue("s3")
    return Where("s3", s3["url"], s3["options"])


@pytest.fixture
def readme_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_server: str) -> str:
    """Where a README reader runs the examples: the test's folder as the working
    directory, the loopback S3 server's credentials in the environment; its URL."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return s3_server


settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# CI: the examples pinned with @example (found failing once, they run in every
# profile), then one randomized pass whose seed the report header prints: each run
# explores examples no run has tried, and HYPOTHESIS_SEED=<seed> (with CI set) replays
# it exactly (no example database to replay from). A failure prints its arguments, to
# be pinned as an @example. As many examples as elsewhere: the run time is the same.
settings.register_profile(
    "ci", parent=settings.get_profile("default"), derandomize=False, database=None,
    print_blob=True,
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.hookimpl(tryfirst=True)  # before hypothesis' plugin reads --hypothesis-seed
def pytest_configure(config: pytest.Config) -> None:
    """In CI, the randomized pass's seed: HYPOTHESIS_SEED, else a fresh one, put in the
    environment so that pytest-xdist's workers (started later) take the same one."""
    if not os.environ.get("CI") or config.getoption("hypothesis_seed", None) is not None:
        return
    seed = os.environ.setdefault("HYPOTHESIS_SEED", str(secrets.randbelow(2**32)))
    config.option.hypothesis_seed = seed


def _seed_line(config: pytest.Config) -> str | None:
    seed = config.getoption("hypothesis_seed", None)
    if not os.environ.get("CI") or seed is None:
        return None
    return (f"hypothesis randomized pass, seed {seed} (replay: CI=1 HYPOTHESIS_SEED={seed}; "
            "pin a failing example with @example)")


def pytest_report_header(config: pytest.Config) -> str | None:
    return _seed_line(config)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    """The seed again at the end, where ``-q`` (make test) shows it too."""
    line = _seed_line(config)
    if line is not None:
        terminalreporter.write_line(line)


@pytest.fixture
def parallel_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk jobs of any size in several threads (small chunks take one by default),
    so that these tests' small arrays exercise the threads."""
    import zarrext.pipeline.codec_pipeline

    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "PARALLEL_READ_MIN_BYTES", 0)
    monkeypatch.setattr(zarrext.pipeline.codec_pipeline, "PARALLEL_WRITE_MIN_BYTES", 0)


@pytest.fixture(scope="module")
def gzip_without_a_clock() -> Iterator[None]:
    """numcodecs' gzip writes the time of the call into each stream's header (RFC
    1952's MTIME), so two encodings of the same bytes a second apart differ. For a
    module whose tests compare encodings made at different moments
    (``pytestmark = pytest.mark.usefixtures("gzip_without_a_clock")``): numcodecs'
    gzip (only it) writes 0 there, as ``gzip.compress(data, mtime=0)`` does."""
    import gzip
    from types import SimpleNamespace

    import numcodecs.gzip

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numcodecs.gzip, "_gzip",
                      SimpleNamespace(GzipFile=functools.partial(gzip.GzipFile, mtime=0)))
        yield


def conditional(*codecs: Any) -> Any:
    """A ``conditional`` codec of ``codecs`` (zstd level 1 when none are given)."""
    from zarr.codecs import ZstdCodec

    from zarrext import ConditionalCodec

    return ConditionalCodec(codecs=list(codecs) or [ZstdCodec(level=1)])


def chunk_files(root: Path) -> dict[Path, bytes]:
    """The chunk files of the array at ``root`` (default key encoding), by path."""
    return {p.relative_to(root): p.read_bytes() for p in (root / "c").rglob("*") if p.is_file()}


def on_batched_path(array: Any) -> Any:
    """``array`` with zarr-python's batched path: its zarrext pipeline without the
    synchronous transform (no codec threads, no scratch memory)."""
    from dataclasses import replace

    pipeline = array._async_array.codec_pipeline
    object.__setattr__(array._async_array, "codec_pipeline", replace(pipeline, transform=None))
    return array


@contextlib.contextmanager
def raises_chunk_error(cause: type[BaseException], match: str) -> Iterator[Any]:
    """A read that fails with zarrext's ``ChunkDecodeError`` (array, key and codec named)
    whose cause is the codec's own ``cause`` error, its message matching ``match``."""
    from zarrext.errors import ChunkDecodeError

    with pytest.raises(ChunkDecodeError, match=match) as raised:
        yield raised
    assert isinstance(raised.value.__cause__, cause), repr(raised.value.__cause__)


class CountingStore(WrapperStore[Any]):
    """A store that counts the requests per key and the most in flight at once."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.gets: Counter[str] = Counter()
        self.sets: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0

    async def _counted(self, coroutine: Any) -> Any:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)  # a latency, so that requests overlap visibly
            return await coroutine
        finally:
            self.in_flight -= 1

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.gets[key] += 1
        return await self._counted(self._store.get(key, prototype, byte_range))

    async def set(self, key: str, value: Buffer) -> None:
        self.sets[key] += 1
        await self._counted(self._store.set(key, value))
