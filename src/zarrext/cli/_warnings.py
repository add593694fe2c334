"""The warnings a command shows: one line each, in the CLI's words, once; with ``-q``
only the note on a data-safety risk (a commit to a local icechunk repository).

zarr-python, icechunk and zarrext's own modules warn through Python's ``warnings``;
printed as Python prints them, each is two lines naming a source file, some of them
about nothing the user can act on. While a command runs (:func:`shown_once`), this
module takes them over, for that command only (the library's filters are not
touched):

- a warning known to need nothing from the user (:data:`HARMLESS`) is dropped, the
  reason beside it;
- any other is one line, ``zarrext: warning: <message>``, printed once however
  many times it is raised (every array of a group may raise the same one), naming
  where it comes from when it is not zarrext's;
- with ``--quiet``/``-q`` none is printed: the command shows errors only, and the
  one note about the data's safety that icechunk itself warns of (a job committing
  to a repository in a local directory), which is never silenced.

icechunk's own warnings come from its Rust logger, not through ``warnings``: the
CLI says the one a user must act on itself (:func:`zarrext.cli.icechunk.in_icechunk`).
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["HARMLESS", "note", "shown_once", "warning_line", "wrapped"]

HARMLESS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "zarr",
        re.compile(r"Combining a `sharding_indexed` codec disables partial reads"),
        # Said by zarr whenever it opens an array whose sharding codec is followed by
        # other codecs, also to read it: it is about how the array was created, not
        # about what the command does (info and inspect show the codecs, and compact
        # says why such shards are left as they are).
        "a property of the array's codecs, said at every open",
    ),
    (
        "zarr",
        re.compile(r"Both zarr\.json \(Zarr format 3\) and \.z(array|group) \(Zarr format 2\)"),
        # `zarr migrate v3` (which zarrext's own error for format 2 stores tells users to
        # run) adds zarr.json beside the format 2 files and keeps them; zarr then reads
        # zarr.json, which is what zarrext works on.
        "the format 3 metadata is read, as zarrext needs",
    ),
    (
        "zarr",
        re.compile(r"Object at \S*\.zarrext-tmp-\S* is not recognized as a component"),
        # Said by zarr's group walk about a zarrext job's temporary output in the group
        # (a staging directory, no zarr.json at its root, so no member): one being
        # written, or one a killed job left, which `check` reports with its size.
        "a zarrext job's temporary output, no member of the group",
    ),
)
"""Warnings a command drops: (module prefix, message pattern, why they need nothing)."""

_PREFIX = "zarrext: warning: "


def _harmless(message: str, category: type[Warning]) -> bool:
    return any(
        _source(category) == source and pattern.search(message)
        for source, pattern, _ in HARMLESS
    )


def _source(category: type[Warning]) -> str:
    return (category.__module__ or "").split(".")[0]


def warning_line(message: Warning | str, category: type[Warning]) -> str:
    """The one line a warning is shown as."""
    text = " ".join(str(message).split())
    source = _source(category)
    if source in ("", "builtins", "zarrext"):
        return f"{_PREFIX}{text}"
    return f"{_PREFIX}{text} ({source} {category.__name__})"


def note(text: str, *, quiet: bool, stream: TextIO | None = None) -> None:
    """Say ``text`` as a warning line of the command's own, unless ``quiet``."""
    if not quiet:
        print(f"{_PREFIX}{' '.join(text.split())}", file=stream or sys.stderr)


@contextlib.contextmanager
def shown_once(quiet: bool) -> Iterator[None]:
    """Show the warnings raised in the ``with`` block as one line each, once (see the
    module docstring); ``quiet`` shows none."""
    said: set[str] = set()

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int,
        file: TextIO | None = None, line: str | None = None,
    ) -> None:
        if quiet or _harmless(str(message), category):
            return
        shown = warning_line(message, category)
        if shown not in said:
            said.add(shown)
            print(shown, file=sys.stderr)

    # The filters stay as they are (a warning ignored by default, or by -W, stays
    # ignored); catch_warnings restores showwarning at the end, and resets the "once
    # per location" registries, so each command shows its own warnings.
    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def wrapped(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` run inside :func:`shown_once`, quiet when its ``quiet`` argument is."""
    import functools

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        with shown_once(bool(kwargs.get("quiet"))):
            return command(*args, **kwargs)

    return run
