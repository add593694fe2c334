"""How long-running library jobs report progress: a plain callback, no rich.

Jobs (:func:`zarrext.recompress`, :func:`zarrext.compact`, :func:`zarrext.expand`)
call ``progress(done, total)`` from the thread that called them; the CLI turns
the calls into a progress bar (``zarrext.cli.render.progress_bar``).

A job's ``progress`` parameter also takes ``True`` (a line on stderr as the job
goes), and ``False`` or ``None`` (silence): :func:`progress_callback` turns any of
them into a callback, or refuses anything else before the job starts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["ProgressCallback", "ProgressLike", "progress_callback"]

ProgressCallback = Callable[[int, int], None]
"""``progress(done, total)``: units of work finished so far, and how many there are."""

ProgressLike = ProgressCallback | bool | None
"""What a job's ``progress`` parameter takes: a callback, ``True``, ``False`` or ``None``."""


def _silent(done: int, total: int) -> None:
    """Reports nothing."""


def _to_stderr(label: str) -> ProgressCallback:
    def report(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        print(f"\r{label}: {done}/{total}", end=end, file=sys.stderr, flush=True)

    return report


def progress_callback(progress: ProgressLike, label: str) -> ProgressCallback:
    """The callback a job calls for ``progress``.

    Parameters
    ----------
    progress : callable, bool or None
        A ``progress(done, total)`` callback; ``True`` for a ``label: done/total``
        line on stderr, rewritten in place; ``False`` or ``None`` for nothing.
    label : str
        What the stderr line starts with (the job and the array).

    Raises
    ------
    TypeError
        For anything else, naming the value.
    """
    if progress is None or progress is False:
        return _silent
    if progress is True:
        return _to_stderr(label)
    if callable(progress) and not isinstance(progress, bool | int):
        return progress
    raise TypeError(
        f"progress must be a callable progress(done, total), True, False or None; "
        f"got {progress!r}"
    )
