"""The options several commands share: PATH's help, ``--storage-options`` and
``--out-options``, ``--quiet``, ``--icechunk-branch`` and ``--icechunk-snapshot``.
"""

from __future__ import annotations

from typing import Any

import typer

from zarrext.cli.failures import ExitCode, fail
from zarrext.stores import StoreOpenError, local_path, parse_storage_options

__all__ = [
    "ICECHUNK_BRANCH",
    "ICECHUNK_SNAPSHOT",
    "ICECHUNK_SNAPSHOT_HELP",
    "icechunk_snapshot_option",
    "OUT_OPTIONS",
    "PATH_HELP",
    "QUIET_HELP",
    "SessionPath",
    "SNAPSHOT_WITH_DRY_RUN",
    "STORAGE_OPTIONS",
    "storage_options_of",
    "valid_storage_options",
]


PATH_HELP = "A Zarr array or group: a directory, a .zip archive, or a URL (s3://, gs://, ...)."


def valid_storage_options(text: str | None) -> str | None:
    # Checked while the command line is parsed: bad JSON is a usage error (exit 2),
    # reported before any store is opened.
    try:
        parse_storage_options(text)
    except StoreOpenError as e:
        raise typer.BadParameter(str(e).removeprefix("--storage-options ")) from None
    return text


STORAGE_OPTIONS = typer.Option(
    "--storage-options",
    help="JSON object of options for a URL's store (fsspec's names or obstore's), e.g. "
    '\'{"endpoint_url": "http://host:9000"}\' or \'{"anon": true}\'.',
    callback=valid_storage_options,
)
"""The ``--storage-options`` option every command taking a PATH has."""


OUT_OPTIONS = typer.Option(
    "--out-options", callback=valid_storage_options,
    help="JSON object of options for an --out URL's store (as --storage-options). "
    "Default: --storage-options when --out is a URL; with a local PATH, "
    "--storage-options are --out's alone.",
)
"""The ``--out-options`` option of the commands writing a copy (see :func:`storage_options_of`)."""


def storage_options_of(
    path: str, out: str | None, storage_options: str | None, out_storage_options: str | None
) -> tuple[str | None, str | None]:
    """The storage options of PATH and of --out: ``--storage-options`` are for the
    command's URLs (PATH's; --out's too, unless ``--out-options`` are given)."""
    in_repository = isinstance(path, SessionPath)  # --out is a path inside it
    path_is_url = not in_repository and local_path(path) is None
    out_is_url = not in_repository and out is not None and local_path(out) is None
    if out_storage_options is not None and not out_is_url:
        fail(f"--out-options are for an --out URL, and {out} is not one",
             ExitCode.USAGE)
    if not out_is_url:
        return storage_options, None  # PATH's (refused for a local PATH when it is opened)
    if out_storage_options is not None:
        return storage_options, out_storage_options
    return (storage_options if path_is_url else None), storage_options


def _named(value: str | None) -> str | None:
    # An empty name is no branch or snapshot (icechunk would read `main`): usage, exit 2.
    if value is not None and not value.strip():
        raise typer.BadParameter("an empty name; give a branch (e.g. main) or snapshot id")
    return value


ICECHUNK_BRANCH = typer.Option(
    "--icechunk-branch",
    metavar="BRANCH",
    callback=_named,
    help="PATH is an icechunk repository (a directory, s3:// or gs:// URL): read the tip of "
    "BRANCH; a job that writes runs in one session and commits one snapshot to BRANCH. "
    "A repository in a local directory is not safe for concurrent commits (icechunk's "
    "warning): a commit another writer makes meanwhile can be lost; keep the repository "
    "in s3:// or gs:// when anything else commits to BRANCH.",
)
"""``--icechunk-branch``: the commands taking it are decorated with :func:`in_icechunk`."""


ICECHUNK_SNAPSHOT_HELP = "PATH is an icechunk repository: read the snapshot ID."


SNAPSHOT_WITH_DRY_RUN = f"{ICECHUNK_SNAPSHOT_HELP} Only with --dry-run: snapshots never change."


def icechunk_snapshot_option(help: str = ICECHUNK_SNAPSHOT_HELP) -> Any:
    """``--icechunk-snapshot``: read an earlier snapshot of a repository; ``help``
    says when a command that can write takes it."""
    return typer.Option("--icechunk-snapshot", metavar="ID", callback=_named, help=help)


ICECHUNK_SNAPSHOT = icechunk_snapshot_option()
"""``--icechunk-snapshot`` on a command that only reads."""


class SessionPath(str):
    """PATH as the user gave it (for messages) and the icechunk session's store to open."""

    store: Any

    def __new__(cls, text: str, store: Any) -> SessionPath:
        made = super().__new__(cls, text)
        made.store = store
        return made


QUIET_HELP = (
    "Print nothing but errors (and the one warning about data safety: a job committing "
    "to an icechunk repository in a local directory)."
)
"""The help of every command's --quiet/-q."""
