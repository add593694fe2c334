"""``--scheduler``: a Dask scheduler reached, or refused in one line, before any work.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import typer

from zarrext.cli.failures import ExitCode, fail

__all__ = [
    "check_scheduler",
    "dask_client",
    "SCHEDULER",
    "scheduler_timeout",
    "SCHEDULER_TIMEOUT_ENV",
]


def check_scheduler(address: str, timeout: float = 3.0) -> None:
    """Fail at once when nothing answers at a dask scheduler's ``address``."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls") or parts.hostname is None or parts.port is None:
        fail(f"--scheduler {address}: expected tcp://HOST:PORT", ExitCode.USAGE)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        fail(
            f"cannot reach the dask scheduler at {address}: {reason}; "
            "start it or leave out --scheduler",
            ExitCode.UNREACHABLE,
        )


def _handshake(address: str, timeout: float) -> None:
    """Open and close one Dask connection to ``address``, or raise ``TimeoutError``
    after ``timeout`` seconds: distributed's own ``connect(timeout=...)`` (and so its
    ``Client``) waits forever for a handshake that a listener that is no Dask
    scheduler never sends."""
    import asyncio

    from distributed.comm import connect

    async def once() -> None:
        comm = await connect(address, timeout=timeout)
        await comm.close()

    asyncio.run(asyncio.wait_for(once(), timeout))


SCHEDULER_TIMEOUT_ENV = "ZARREXT_SCHEDULER_TIMEOUT"
"""Seconds to wait for a Dask scheduler's answer (default 30)."""


def scheduler_timeout() -> float:
    """Seconds a command waits for the Dask scheduler to answer: ``$ZARREXT_SCHEDULER_TIMEOUT``
    or 30."""
    text = os.environ.get(SCHEDULER_TIMEOUT_ENV, "")
    try:
        seconds = float(text) if text else 30.0
    except ValueError:
        fail(f"{SCHEDULER_TIMEOUT_ENV}={text!r}: expected a number of seconds", ExitCode.USAGE)
    if not seconds > 0:
        fail(f"{SCHEDULER_TIMEOUT_ENV}={text!r}: expected a number of seconds > 0",
             ExitCode.USAGE)
    return seconds


SCHEDULER = typer.Option(
    help="Address of a dask.distributed scheduler (tcp://HOST:PORT) to run the job on; "
    "its workers reopen the store from the path or URL and --storage-options."
)


@contextlib.contextmanager
def dask_client(scheduler: str | None, command: str) -> Iterator[Any]:
    """A ``dask.distributed`` client of the scheduler at ``scheduler`` (None: no client),
    closed at the end; one line on stderr when dask is missing or nothing answers."""
    if scheduler is None:
        yield None
        return
    from zarrext._extras import needs

    with needs("dask", f"zarrext {command} --scheduler"):
        from dask.distributed import Client

    check_scheduler(scheduler)
    timeout = scheduler_timeout()
    try:
        _handshake(scheduler, timeout)
        client = Client(scheduler, timeout=f"{timeout}s")
    except (OSError, TimeoutError) as e:
        # the port is open, but what listens there is no Dask scheduler (or a busy one)
        fail(
            f"no dask scheduler answered at {scheduler} within {timeout:g} s "
            f"({type(e).__name__}); check the address, or leave out --scheduler "
            f"(set {SCHEDULER_TIMEOUT_ENV} to wait longer)",
            ExitCode.UNREACHABLE,
        )
    try:
        yield client
    finally:
        client.close()
