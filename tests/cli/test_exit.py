"""The CLI, and scripts using zarrext's API, never abort at exit after talking to
an object store (issue 27.2).

obstore's tokio threads hand results to zarr's event loop from outside Python; if
one is still in Python (its wake-up ``send`` releases the GIL) when the interpreter
finalizes, CPython 3.12 ends it with ``pthread_exit`` and the process aborts
(SIGABRT, exit 134) after its output. ``zarrext._exit.settle_background_io`` waits
for those threads first: the CLI registers it, and zarrext registers it whenever
it hands a process an obstore-backed store. These tests run the real console entry
point and scripts in fresh processes against the loopback S3 server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import zarrext
from tests.paths import ROOT
from zarrext.stores import open_store

# The window made wide and certain: a thread Python did not start sleeps 0.3 s with
# the GIL released right after waking zarr's loop (as obstore's does inside its
# `send`), and finalization frees the GIL for 1 s (an object's __del__). Without
# the settle step, that thread asks for the GIL back while the interpreter
# finalizes, and the process aborts every time.
WIDENED_WINDOW = textwrap.dedent(
    """
    import asyncio.selector_events as selector_events
    import sys
    import threading
    import time

    from zarrext.cli import main

    _wake = selector_events.BaseSelectorEventLoop._write_to_self

    def _slow_wake(self):
        _wake(self)
        if threading.get_ident() not in {t.ident for t in threading.enumerate()}:
            time.sleep(0.3)

    selector_events.BaseSelectorEventLoop._write_to_self = _slow_wake


    class SlowFinalization:
        def __del__(self):
            time.sleep(1.0)


    slow = SlowFinalization()
    main(sys.argv[1:])
    """
)


def _environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PYTHONFAULTHANDLER": "1",  # an abort shows where it happened
    }


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=_environment(),
        timeout=120,
    )


@pytest.fixture
def s3_array(s3: dict[str, Any]) -> dict[str, Any]:
    """A small chunked array in a fresh bucket; the storage options as CLI JSON."""
    url = f"{s3['url']}/a.zarr"
    store = open_store(url, mode="w", storage_options=s3["options"])
    array = zarrext.create_array(store, shape=(16, 16), chunks=(4, 4), dtype="int32")
    array[:] = np.arange(256, dtype="int32").reshape(16, 16)
    return {"bucket": s3["url"], "url": url, "options": json.dumps(s3["options"])}


def _commands(s3_array: dict[str, Any]) -> list[tuple[list[str], int]]:
    """CLI runs that fail (a missing array) and succeed (info/inspect/check), with
    their exit codes."""
    so = ["--storage-options", s3_array["options"]]
    missing = f"{s3_array['bucket']}/nothere.zarr"
    return [
        (["-m", "zarrext", "info", missing, *so], 1),
        (["-m", "zarrext", "info", s3_array["url"], *so], 0),
        (["-m", "zarrext", "inspect", s3_array["url"], "--json", *so], 0),
        (["-m", "zarrext", "check", s3_array["url"], "--deep", *so], 0),
        (["-m", "zarrext", "inspect", missing, *so], 1),
    ]


def _assert_no_abort(runs: int, s3_array: dict[str, Any]) -> None:
    commands = _commands(s3_array)
    plan = [commands[i % len(commands)] for i in range(runs)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: (_run(job[0]), job), plan))
    aborted = [(job[0][2:4], done) for done, job in results if done.returncode < 0
               or done.returncode == 134]
    assert not aborted, (
        f"{len(aborted)} of {runs} runs aborted; first: {aborted[0][0]} "
        f"exit {aborted[0][1].returncode}: {aborted[0][1].stderr[-2000:]}"
    )
    for done, (command, code) in results:
        assert done.returncode == code, (command[2:4], done.stderr)
        if code == 1:
            assert done.stderr.count("\n") == 1, done.stderr  # the one line, nothing after


def test_no_abort_when_a_runtime_thread_is_in_python_at_exit(s3_array: dict[str, Any]) -> None:
    missing = f"{s3_array['bucket']}/nothere.zarr"
    for command, code in [
        (["info", missing, "--storage-options", s3_array["options"]], 1),
        (["info", s3_array["url"], "--storage-options", s3_array["options"]], 0),
    ]:
        done = _run(["-c", WIDENED_WINDOW, *command])
        assert done.returncode == code, done.stderr[-2000:]
        assert "Fatal Python error" not in done.stderr


def test_cli_on_s3_never_aborts(s3_array: dict[str, Any]) -> None:
    _assert_no_abort(10, s3_array)  # each command twice; the slow test runs 300


@pytest.mark.slow
def test_cli_on_s3_never_aborts_in_hundreds_of_runs(s3_array: dict[str, Any]) -> None:
    _assert_no_abort(300, s3_array)


def test_settle_waits_for_nothing_without_background_io(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With zarr's event loop running but idle and no foreign thread in Python,
    settling awaits no task and sleeps not once (counted, not timed)."""
    import asyncio
    from types import SimpleNamespace

    from zarrext import _exit

    zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), dtype="i4")[:] = 1
    assert _exit.running_io_loop() is not None  # the loop's part of settling runs too
    awaited: list[int] = []
    slept: list[float] = []

    async def wait(tasks: Any, timeout: float | None = None) -> Any:
        awaited.append(len(tasks))
        return await asyncio.wait(tasks, timeout=timeout)

    monkeypatch.setattr(_exit, "asyncio", SimpleNamespace(
        current_task=asyncio.current_task, all_tasks=asyncio.all_tasks, wait=wait,
        run_coroutine_threadsafe=asyncio.run_coroutine_threadsafe))
    monkeypatch.setattr(_exit, "time", SimpleNamespace(
        monotonic=time.monotonic, sleep=lambda seconds: slept.append(seconds)))
    # a test runner's own threads (pytest-xdist's) may be foreign ones: nothing new
    before = set(_exit.foreign_threads_in_python())
    _exit.settle_background_io(timeout=0.5)
    assert awaited == []
    if not before:
        assert slept == []  # nothing to wait for: not one pause
    assert set(_exit.foreign_threads_in_python()) <= before


REGISTERED_WHEN = textwrap.dedent(
    """
    import json
    import sys

    import zarr
    import zarrext
    from zarrext import _exit

    url, options, own = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "own"
    zarr.create_array(sys.argv[4], shape=(4,), chunks=(2,), dtype="int32")
    zarrext.open_array(sys.argv[4], mode="r")[:]
    print(_exit._settles_at_exit)  # a local array: the process is left as it is
    if own:
        from obstore.store import S3Store
        from zarr.storage import ObjectStore

        store = ObjectStore(S3Store.from_url(
            url, endpoint=options["endpoint_url"], region="us-east-1",
            client_options={"allow_http": True}), read_only=True)
        array = zarrext.open_array(store, mode="r")
    else:
        array = zarrext.open_array(url, storage_options=options, mode="r")
    print(int(array[:].sum()), _exit._settles_at_exit)
    """
)


@pytest.mark.parametrize("store", ["url", "own"])
def test_a_script_using_the_api_on_s3_settles_background_io_at_exit(
    s3_array: dict[str, Any], store: str, tmp_path: Path
) -> None:
    # settle_background_io (what keeps the CLI from aborting, tests above) runs at
    # the exit of a script that used zarrext's API on an obstore-backed store,
    # whether zarrext opened it from a URL or the script made it; not otherwise.
    done = _run(["-c", REGISTERED_WHEN, s3_array["url"], s3_array["options"], store,
                 str(tmp_path / "local.zarr")])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", str(sum(range(256))), "True"]
    assert "Fatal Python error" not in done.stderr
