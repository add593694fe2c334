"""How a command fails: its exit codes, :class:`CliError`, an expected error said in one
line (the array named from the PATH the user gave), and a group job that skips the
arrays it must.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from zarrext._text import counted
from zarrext.errors import MalformedMetadataError
from zarrext.stores import StoreOpenError, is_obstore_error, store_error

__all__ = [
    "CliError",
    "describe",
    "EXIT_CODES_HELP",
    "ExitCode",
    "fail",
    "failure",
    "named_by_path",
    "one_line",
    "run_each",
    "unreachable_text",
]


class ExitCode(enum.IntEnum):
    """The exit codes of every command: one per kind of failure."""

    OK = 0
    FAILED = 1
    """The job cannot be done with what it found: not a Zarr store, a damaged chunk,
    an output that exists, a read-only store, nothing to do; the job refused."""
    USAGE = 2
    """The command line is wrong: an unknown option, a bad value, options that do
    not go together, a URL or --storage-options that make no store."""
    UNREACHABLE = 3
    """A store or service cannot be reached or refuses access: the network, the
    credentials, a missing bucket, an object store that does not answer within
    ``ZARREXT_STORE_TIMEOUT``, a Dask scheduler that does not answer."""
    INTERRUPTED = 130
    """Ctrl-C."""


EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 the job failed or refused (not a Zarr store, damaged data, "
    "an existing output, a read-only store); 2 usage (a bad option or value, options "
    "that conflict, a URL or --storage-options that make no store); 3 a store or "
    "service cannot be reached or refuses access (network, credentials, missing bucket, "
    "no answer within ZARREXT_STORE_TIMEOUT, Dask scheduler); 130 interrupted."
)
"""The epilog of ``zarrext --help``."""


class CliError(Exception):
    """An expected failure of a command: its message is the one line the user sees."""

    def __init__(self, message: str, code: int = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.code = int(code)


def fail(message: str, code: int = ExitCode.FAILED) -> NoReturn:
    """End the command with ``message`` on stderr and exit ``code`` (an :class:`ExitCode`)."""
    raise CliError(message, code)


def failure(error: BaseException, locations: Sequence[Any] = ()) -> tuple[str, int]:
    """The one line and the :class:`ExitCode` for an expected error of a command.

    ``locations`` are the stores the command names (PATH, --out): a remote store's
    error (obstore's, a remote file system's ``OSError``) is said naming the one it
    concerns, with what to do, and exits :attr:`ExitCode.UNREACHABLE`.
    """
    if isinstance(error, CliError):
        return str(error), error.code
    if isinstance(error, StoreOpenError):
        return one_line(error), ExitCode.USAGE
    remote = store_error(error, [str(x) for x in locations if x is not None])
    if remote is not None:
        return one_line(remote), ExitCode.UNREACHABLE
    if is_obstore_error(error):
        return unreachable_text("the store", error), ExitCode.UNREACHABLE
    return one_line(error) or type(error).__name__, ExitCode.FAILED


def one_line(error: BaseException) -> str:
    """The error and its notes (how far a job got) on one line."""
    parts = (str(error), *getattr(error, "__notes__", ()))
    return "; ".join(" ".join(p.split()) for p in parts if p)


def unreachable_text(location: str, error: BaseException) -> str:
    # obstore's errors and a remote file system's OSError are said by type
    # (zarrext.stores.store_error); other clients have their own (botocore's
    # NoCredentialsError, aiohttp's...): their message, without obstore's dump.
    known = store_error(error, [location]) if location != "the store" else None
    if known is not None:
        return one_line(known)
    said = one_line(error).split(" Debug source:")[0]
    return (
        f"{location}: cannot read the store ({type(error).__name__}: {said}); "
        "check the URL, --storage-options and credentials"
    )


def describe(array: Any) -> str:
    """How an array is named in messages: its path in the store, or the store."""
    return str(array.path or "/")


def run_each[R](
    arrays: Sequence[Any],
    job: Callable[[Any], R],
    *,
    path: Path | str,
    verb: str,
    on_interrupt: str = "",
) -> Iterator[tuple[Any, R]]:
    """Run ``job`` on each array of a group job, yielding ``(array, result)``.

    An array the job must skip (a ``ValueError`` or ``OSError``) is named in one
    line on stderr and the job goes on with the next; once every array was tried,
    the command fails if any was skipped. A single array's error ends the command
    at once, as its own. Ctrl-C notes where the job stopped and how far it got.

    Parameters
    ----------
    arrays : sequence of zarr.Array
    job : callable
        The work on one array; its result is yielded.
    path : Path or str
        The store as the user named it, for messages.
    verb : str
        What the job does, for messages ("compact", "recompress").
    on_interrupt : str
        Said after where Ctrl-C stopped the job (what the store looks like, how to finish).
    """
    skipped = done = 0
    for array in arrays:
        try:
            result = job(array)
        except KeyboardInterrupt as e:
            e.add_note(
                f"{verb} stopped in {describe(array)} after {counted(done, 'finished array')}"
                + (f"; {on_interrupt}" if on_interrupt else "")
            )
            raise
        except (ValueError, OSError) as e:
            if len(arrays) == 1:
                raise
            print(f"zarrext: skipped {describe(array)}: {one_line(e)}", file=sys.stderr)
            skipped += 1
            continue
        done += 1
        yield array, result
    if skipped:
        fail(f"{skipped} of {counted(len(arrays), 'array')} under {path} "
             f"{'was' if skipped == 1 else 'were'} skipped by {verb} (see above)")


def named_by_path(error: BaseException, path: Any) -> BaseException:
    """A chunk's decode error, or an unknown codec's, with its array named from the
    PATH the user gave (the library names it by its path in the store, ``'/'`` for
    the store's root)."""
    from zarrext.errors import ChunkDecodeError, CodecUnavailableError

    named: BaseException
    if isinstance(error, MalformedMetadataError) and error.store is None and isinstance(
        path, str
    ):
        named = error.named_in(path)
    elif isinstance(error, CodecUnavailableError) and error.store is None and isinstance(
        path, str
    ):
        named = CodecUnavailableError(error.reason, array=error.array, store=path,
                                      codec=error.codec)
    elif not isinstance(error, ChunkDecodeError) or not isinstance(path, str):
        return error
    else:
        inside = (error.array or "").strip("/")
        array = f"{path.rstrip('/')}/{inside}" if inside else path
        key = error.key
        if key is not None and inside and key.startswith(f"{inside}/"):
            key = key[len(inside) + 1 :]  # the key within the array just named
        named = ChunkDecodeError(error.reason, array=array, key=key, codec=error.codec,
                                 inner=error.inner)
    for note in getattr(error, "__notes__", ()):  # how far the job got, what it left
        named.add_note(note)
    return named
