"""Let background I/O finish calling into Python before the interpreter finalizes.

Why: obstore (zarr's ``ObjectStore``) runs requests on a Rust tokio runtime. When a
request completes, a tokio thread takes the GIL and hands the result to zarr's event
loop with ``loop.call_soon_threadsafe``, which writes a byte to the loop's wake-up
socket. That ``send`` releases the GIL; meanwhile the loop can already run the
callback, the command finish and the interpreter start finalizing. CPython 3.12 and
3.13 then end the tokio thread with ``pthread_exit`` when it asks for the GIL back,
and the forced unwind through Rust frames that must not unwind aborts the process
(SIGABRT, exit 134) after all output was written (CPython 3.14 hangs such threads
instead, gh-87135). The same holds for a request still in flight at exit.

:func:`settle_background_io` closes both windows before exit: it waits (bounded) for
the tasks on zarr's event loop, cancelling the ones that do not end, and then until
no thread that Python did not start is running Python code.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import sys
import threading
import time

from zarrext._zarr_compat import running_io_loop

__all__ = ["foreign_threads_in_python", "settle_at_exit", "settle_background_io"]


async def _finish_other_tasks(timeout: float) -> None:
    current = asyncio.current_task()
    others = {task for task in asyncio.all_tasks() if task is not current}
    if not others:
        return
    _, pending = await asyncio.wait(others, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=timeout)


def foreign_threads_in_python() -> list[int]:
    """Idents of threads Python did not start (a Rust runtime's, a C library's) that
    are running Python code now."""
    started = {
        thread.ident for thread in threading.enumerate()
        # a foreign thread that asked threading.current_thread() gets a dummy entry
        if not isinstance(thread, threading._DummyThread)
    }
    return [ident for ident in sys._current_frames() if ident not in started]


def settle_background_io(timeout: float = 2.0) -> None:
    """Wait, at most about ``2 * timeout`` seconds, until background I/O no longer
    calls into Python: first for the tasks on zarr's event loop (cancelled after
    ``timeout``), then for threads Python did not start to leave Python code.

    Call it from the main thread before the interpreter exits; it never raises.
    """
    loop = running_io_loop()
    if loop is not None:
        future = asyncio.run_coroutine_threadsafe(_finish_other_tasks(timeout), loop)
        try:
            future.result(timeout=2 * timeout + 1)
        except (concurrent.futures.TimeoutError, RuntimeError):
            future.cancel()
    deadline = time.monotonic() + timeout
    while foreign_threads_in_python() and time.monotonic() < deadline:
        time.sleep(0.001)  # releases the GIL: the thread gets it back and leaves


_settling = threading.Lock()
_settles_at_exit = False


def settle_at_exit() -> None:
    """Have :func:`settle_background_io` run when the interpreter exits (once per
    process, however often called): zarrext calls it whenever it gives a process
    an obstore-backed store, so that a script using zarrext's API on an object
    store is as safe from the abort at exit as the ``zarrext`` command. A process
    that never opens one is left as it is."""
    global _settles_at_exit
    with _settling:
        if not _settles_at_exit:
            atexit.register(settle_background_io)
            _settles_at_exit = True
