"""A moto S3 server on loopback, for the tests (``tests/conftest.py``'s ``s3_server``)
and for ``benchmarks/bench_scale.py``.

A real HTTP server in its own process: s3fs, obstore, tensorstore and zarr talk to
it over HTTP exactly as to a real object store. Its conditional writes are atomic,
as S3's are (``tests/moto_atomic.py``).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def moto_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start moto's server mode on loopback: its endpoint URL and its process (which a
    test may stop and continue, SIGSTOP and SIGCONT, as a frozen server). Stopped on
    exit."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("moto_atomic.py")),
         "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # a hang guard, not a bound on the start: a loaded machine imports moto slowly
        deadline = time.monotonic() + 300
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGCONT)  # a stopped server ends only once continued
        server.terminate()
        server.wait(timeout=10)


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Start moto's server mode on loopback; its endpoint URL. Stopped on exit."""
    with moto_process() as (endpoint, _):
        yield endpoint
